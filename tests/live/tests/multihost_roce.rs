//! RoCE fabric faults on the multi-host lab, run on h1 of `rdmactl lab test --hosts N`
//! (N >= 3; tests/run boots 4): netem loss on one host's link and a link flap on another
//! show up in that host's counters (rxe hw_counters, the netdev's carrier_changes, rdmad's
//! scrape), not in the other hosts', and in `rdmactl doctor roce --json` on that host only
//! (the `retransmits` and `link-flaps` checks, from two readings `--interval` apart).
//!
//! The doctor runs in the background on the hosts with a long interval; the fault is
//! injected only once its first reading is taken (the process sleeps in nanosleep), so the
//! fault falls inside its window however slow the host is. Once the fault is over and the
//! counters the doctor reads have moved, SIGUSR1 ends its interval (the interval is only
//! the upper bound). Every fault is undone when the test ends, also when it fails.
#![forbid(unsafe_code)]

use live_tests::fabric::{
    addr, fault, hw_counters, lab_hosts, loss_deltas, on_host, spawn_on_host, wait_on_host, LinkUp,
    Netem,
};
use live_tests::{parse_exposition, perftest_pair_text_finished, perftest_text_finished};
use serde_json::Value;
use std::thread::JoinHandle;
use std::time::Duration;

fn netdev(host: &str) -> String {
    let nd = on_host(
        host,
        "cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0",
    )
    .ok(&format!("rxe0's netdev on {host}"))
    .trim()
    .to_string();
    assert!(!nd.is_empty(), "FAIL: rxe0 on {host} names no netdev");
    nd
}

/// (carrier_changes of rxe0's netdev, rxe0's link_downed) on `host`, from sysfs.
fn link_counters(host: &str) -> (u64, u64) {
    let nd = netdev(host);
    let out = on_host(
        host,
        &format!(
            "cat /sys/class/net/{nd}/carrier_changes /sys/class/infiniband/rxe0/ports/1/hw_counters/link_downed"
        ),
    )
    .ok(&format!("link counters on {host}"));
    let v: Vec<u64> = out
        .split_whitespace()
        .map(|w| {
            w.parse()
                .unwrap_or_else(|_| panic!("FAIL: link counters on {host}: {out}"))
        })
        .collect();
    assert_eq!(v.len(), 2, "FAIL: link counters on {host}: {out}");
    (v[0], v[1])
}

/// rxe0's link_downed as rdmad on `host` exports it (one scrape of port 9736).
fn rdmad_link_downed(host: &str) -> f64 {
    let body = on_host(host, "wget -q -O - http://127.0.0.1:9736/metrics")
        .ok(&format!("scraping rdmad on {host}"));
    let series = parse_exposition(&body).unwrap_or_else(|e| panic!("FAIL: rdmad on {host}: {e}"));
    *series
        .get(r#"rdma_port_hw_link_downed_total{device="rxe0",port="1"}"#)
        .unwrap_or_else(|| {
            panic!("FAIL: rdmad on {host} serves no rdma_port_hw_link_downed_total for rxe0")
        })
}

/// A `rdmactl doctor roce` running in the background on a host.
struct Doctor {
    host: &'static str,
    /// Its files' prefix on the host (`.pid`, `.json`, `.err`).
    tag: String,
    run: JoinHandle<live_tests::fabric::Remote>,
}

/// `rdmactl doctor roce rxe0 --json --interval SECS` started in the background on `host`;
/// returns once its first reading is taken (it sleeps in its interval, polling for
/// SIGUSR1 in short nanosleeps).
fn doctor_started(host: &'static str, secs: u32) -> Doctor {
    let tag = format!("/tmp/roce-doctor-{}", std::process::id());
    on_host(host, &format!("rm -f {tag}.pid")).ok("clearing the doctor's pid file");
    let run = spawn_on_host(
        host,
        &format!(
            "rdmactl doctor roce rxe0 --json --interval {secs} > {tag}.json 2> {tag}.err & \
             echo $! > {tag}.pid; wait $!; rc=$?; cat {tag}.json; cat {tag}.err >&2; \
             rm -f {tag}.json {tag}.err {tag}.pid; exit $rc"
        ),
    );
    // Asleep in its interval: the first reading is done.
    wait_on_host(
        host,
        &format!(
            "p=$(cat {tag}.pid 2>/dev/null) && [ -n \"$p\" ] && {{ grep -q nanosleep /proc/$p/wchan || \
             {{ read n rest < /proc/$p/syscall && {{ [ \"$n\" = 230 ] || [ \"$n\" = 35 ]; }}; }}; }}"
        ),
        Duration::from_secs(60),
        "rdmactl doctor roce asleep after its first reading",
    );
    Doctor { host, tag, run }
}

/// Ends the doctor's interval now (SIGUSR1; a doctor whose interval already ran out has
/// removed its pid file) and returns its JSON report (exit 0, or 4 when a check failed).
fn doctor_report(d: Doctor) -> Value {
    let Doctor { host, tag, run } = d;
    on_host(
        host,
        &format!("p=$(cat {tag}.pid 2>/dev/null) && [ -n \"$p\" ] && kill -USR1 $p; true"),
    )
    .ok(&format!("ending the interval of the doctor on {host}"));
    let r = run.join().expect("doctor thread");
    assert!(
        r.code == 0 || r.code == 4,
        "FAIL: rdmactl doctor roce on {host} exited {}:\n{}",
        r.code,
        r.output
    );
    let start = r
        .output
        .find('{')
        .unwrap_or_else(|| panic!("FAIL: doctor roce on {host} printed no JSON:\n{}", r.output));
    let end = r.output.rfind('}').unwrap_or(start);
    let report: Value = serde_json::from_str(&r.output[start..=end])
        .unwrap_or_else(|e| panic!("FAIL: doctor roce --json on {host}: {e}:\n{}", r.output));
    let secs = report["interval_seconds"].as_f64().unwrap_or_else(|| {
        panic!("FAIL: doctor roce on {host} reports no interval_seconds:\n{report:#}")
    });
    println!("doctor roce on {host}: interval {secs:.1} s");
    report
}

fn check<'a>(report: &'a Value, host: &str, id: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["id"] == id && c["target"] == "rxe0/1"))
        .unwrap_or_else(|| {
            panic!("FAIL: doctor roce on {host} has no {id} check for rxe0/1:\n{report:#}")
        })
}

fn evidence(c: &Value) -> String {
    c["evidence"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default()
}

#[test]
fn a_netem_loss_on_h2_shows_in_h2_retransmits_and_its_doctor_only() {
    lab_hosts(3);
    // h2 and h3 write to h1 (ib_write_bw clients); loss on h2's egress drops h2's data
    // packets: h2 gets NAKs and retransmits, h1's responder sees them out of sequence, h3's
    // traffic is clean. A 1 s ACK timeout (-u 18) keeps a slow TCG host from retransmitting
    // on its own. The doctors on h2 and h3 read before the loss starts and again once the
    // traffic is over and its counters moved (at most 90 s later).
    let d2 = doctor_started("h2", 90);
    let d3 = doctor_started("h3", 90);
    let before: Vec<_> = ["h1", "h2", "h3"].iter().map(|h| hw_counters(h)).collect();
    let clear = Netem("h2");
    fault("netem h2 loss 5%");
    let args = |port: u16| format!("-d rxe0 -x 1 -s 4096 -n 400 -u 18 -p {port}");
    let mut servers = Vec::new();
    for port in [18630u16, 18631] {
        servers.push(spawn_on_host(
            "h1",
            &format!("timeout 240 ib_write_bw {}", args(port)),
        ));
    }
    for port in [18630u16, 18631] {
        wait_on_host(
            "h1",
            &format!("netstat -ltn | grep -q ':{port} '"),
            Duration::from_secs(60),
            &format!("ib_write_bw listening on {port}"),
        );
    }
    let c2 = spawn_on_host(
        "h2",
        &format!("timeout 240 ib_write_bw {} {}", args(18630), addr("h1")),
    );
    let c3 = spawn_on_host(
        "h3",
        &format!("timeout 240 ib_write_bw {} {}", args(18631), addr("h1")),
    );
    for (s, (host, c)) in servers.into_iter().zip([("h2", c2), ("h3", c3)]) {
        let c = c.join().expect("client thread");
        let s = s.join().expect("server thread");
        assert!(
            perftest_text_finished(Some(c.code), &c.output),
            "FAIL: ib_write_bw on {host}:\n{}",
            c.output
        );
        assert!(
            perftest_pair_text_finished(Some(c.code), &c.output, Some(s.code), &s.output),
            "FAIL: ib_write_bw server on h1 for {host}:\n{}",
            s.output
        );
    }
    let after: Vec<_> = ["h1", "h2", "h3"].iter().map(|h| hw_counters(h)).collect();
    drop(clear);
    let d: Vec<_> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| loss_deltas(b, a))
        .collect();
    println!(
        "loss counter deltas: h1 {:?}\n  h2 {:?}\n  h3 {:?}",
        d[0], d[1], d[2]
    );
    assert!(
        d[1]["rcvd_seq_err"] + d[1]["completer_retry_err"] > 0,
        "FAIL: 5% loss on h2's link moved none of h2's retransmit counters: {:?}",
        d[1]
    );
    assert!(
        d[0]["out_of_seq_request"] > 0,
        "FAIL: h1 saw no out-of-sequence request from h2: {:?}",
        d[0]
    );
    for (c, v) in &d[2] {
        assert_eq!(
            *v, 0,
            "FAIL: h3's {c} moved by {v} without loss on its link"
        );
    }

    let r2 = doctor_report(d2);
    let r3 = doctor_report(d3);
    let re2 = check(&r2, "h2", "retransmits");
    println!(
        "doctor roce on h2: retransmits {} ({}): {}",
        re2["verdict"],
        re2["finding"],
        evidence(re2)
    );
    assert_eq!(re2["verdict"], "warn", "FAIL: h2's doctor: {re2:#}");
    let ev = evidence(re2);
    assert!(
        ev.contains("hw_counters/rcvd_seq_err") || ev.contains("hw_counters/completer_retry_err"),
        "FAIL: h2's retransmits evidence names neither rcvd_seq_err nor completer_retry_err: {re2:#}"
    );
    assert_eq!(
        check(&r2, "h2", "link-flaps")["verdict"],
        "ok",
        "FAIL: loss is no link flap"
    );
    let re3 = check(&r3, "h3", "retransmits");
    println!(
        "doctor roce on h3: retransmits {} ({})",
        re3["verdict"], re3["finding"]
    );
    assert_eq!(
        re3["verdict"], "ok",
        "FAIL: h3's doctor without loss: {re3:#}"
    );
}

#[test]
fn b_link_flap_on_h3_shows_in_h3_link_counters_and_its_doctor_only() {
    let n = lab_hosts(3);
    let hosts: Vec<String> = (1..=n).map(|k| format!("h{k}")).collect();
    let d3 = doctor_started("h3", 60);
    let d2 = doctor_started("h2", 60);
    let before: Vec<(u64, u64)> = hosts.iter().map(|h| link_counters(h)).collect();
    let rdmad_before = rdmad_link_downed("h3");
    let guard = LinkUp("h3");
    fault("link h3 down");
    wait_on_host(
        "h3",
        "grep -q DOWN /sys/class/infiniband/rxe0/ports/1/state",
        Duration::from_secs(30),
        "rxe0 port 1 DOWN after link down",
    );
    std::mem::forget(guard);
    fault("link h3 up");
    wait_on_host(
        "h3",
        "grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state",
        Duration::from_secs(30),
        "rxe0 port 1 ACTIVE after link up",
    );
    let after: Vec<(u64, u64)> = hosts.iter().map(|h| link_counters(h)).collect();
    let rdmad_after = rdmad_link_downed("h3");
    for ((h, b), a) in hosts.iter().zip(&before).zip(&after) {
        println!(
            "{h}: carrier_changes +{}, link_downed +{}",
            a.0 - b.0,
            a.1 - b.1
        );
        if h == "h3" {
            assert!(
                a.0 >= b.0 + 2,
                "FAIL: h3's carrier_changes {} -> {}: no down and up",
                b.0,
                a.0
            );
            assert!(
                a.1 > b.1,
                "FAIL: h3's rxe0 link_downed did not move: {} -> {}",
                b.1,
                a.1
            );
        } else {
            assert_eq!(
                a, b,
                "FAIL: {h}'s link counters moved when h3's link flapped"
            );
        }
    }
    assert!(
        rdmad_after > rdmad_before,
        "FAIL: rdmad on h3: rdma_port_hw_link_downed_total {rdmad_before} -> {rdmad_after}"
    );

    let r3 = doctor_report(d3);
    let r2 = doctor_report(d2);
    let f3 = check(&r3, "h3", "link-flaps");
    println!(
        "doctor roce on h3: link-flaps {} ({}): {}",
        f3["verdict"],
        f3["finding"],
        evidence(f3)
    );
    assert_eq!(
        f3["verdict"], "warn",
        "FAIL: h3's doctor after a flap: {f3:#}"
    );
    let finding = f3["finding"].as_str().unwrap_or_default();
    assert!(
        finding.contains("carrier_changes +") && finding.contains("link_downed +"),
        "FAIL: h3's link-flaps finding names neither counter: {f3:#}"
    );
    let f2 = check(&r2, "h2", "link-flaps");
    assert_eq!(
        f2["verdict"], "ok",
        "FAIL: h2's doctor saw h3's flap: {f2:#}"
    );
}
