//! The multi-host live suite: runs on h1 of `rdmactl lab test --hosts 3` (never on the
//! host, never on the single-VM lab). Real rxe devices on three VMs joined by the lab's
//! fabric; the other hosts are driven through the lab controller, faults too.
//!
//! Tests run one at a time in name order (`--test-threads=1`); each leaves the fabric as it
//! found it (netem cleared, link up, host restarted), the kill test last.
use live_tests::fabric::{
    addr, control, fault, hw_counters, lab_hosts, on_host, spawn_on_host, wait_on_host, LinkUp,
};
use live_tests::{parse_exposition, perftest_finished, perftest_pair_text_finished};
use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

const ME: &str = "h1";

/// Wait until a TCP port listens on `host` (a perftest or pingpong server is up).
fn wait_listening(host: &str, port: u16) {
    wait_on_host(
        host,
        &format!("netstat -ltn | grep -q ':{port} '"),
        Duration::from_secs(60),
        &format!("a server listening on port {port}"),
    );
}

/// Run a command here (on h1) and return (exit code, output).
fn here(cmd: &str, args: &[&str]) -> std::process::Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("FAIL: cannot run {cmd}: {e}"))
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_every_host_shows_its_own_gids_in_rdmactl_verbs() {
    let n = lab_hosts(3);
    assert_eq!(
        std::env::var("LAB_HOST").as_deref(),
        Ok(ME),
        "the suite runs on h1"
    );
    for k in 1..=n {
        let host = format!("h{k}");
        let out = on_host(&host, "rdmactl verbs --json").ok(&format!("rdmactl verbs on {host}"));
        let v: serde_json::Value = serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("FAIL: rdmactl verbs --json on {host}: {e}:\n{out}"));
        let dev = v["devices"]
            .as_array()
            .and_then(|d| d.iter().find(|d| d["name"] == "rxe0"))
            .unwrap_or_else(|| panic!("FAIL: no rxe0 on {host}:\n{out}"));
        let gids: Vec<String> = dev["ports"][0]["gids"]
            .as_array()
            .unwrap_or_else(|| panic!("FAIL: no GID table on {host}:\n{out}"))
            .iter()
            .filter_map(|g| g["gid"].as_str().map(String::from))
            .collect();
        let own = format!("::ffff:{}", addr(&host));
        assert!(
            gids.contains(&own),
            "FAIL: {host} lacks its GID {own}: {gids:?}"
        );
        for other in (1..=n).filter(|&o| o != k) {
            let theirs = format!("::ffff:10.2.0.{other}");
            assert!(
                !gids.contains(&theirs),
                "FAIL: {host} shows h{other}'s GID: {gids:?}"
            );
        }
        assert!(
            gids.iter().any(|g| g.starts_with("fe80::5054:ff:fe02:")),
            "FAIL: {host}'s link-local GID is not from its fabric NIC: {gids:?}"
        );
    }
}

/// `nslookup -type=TYPE NAME` on `host`, retried a few times: under TCG on a loaded
/// machine busybox's short resolver timeout can expire once. Fails the test when no try
/// got an answer from h1's dnsmasq.
fn nslookup(host: &str, qtype: &str, name: &str) -> String {
    let mut last = String::new();
    for _ in 0..5 {
        let r = on_host(host, &format!("nslookup -type={qtype} {name}"));
        if r.code == 0 {
            return r.output;
        }
        last = r.output;
        if last.contains("NXDOMAIN") {
            break;
        }
    }
    panic!("FAIL: nslookup -type={qtype} {name} on {host}:\n{last}");
}

/// Addresses in busybox nslookup's answer section (after the first `Name:` line).
fn answer_addresses(out: &str) -> BTreeSet<String> {
    out.lines()
        .skip_while(|l| !l.starts_with("Name:"))
        .filter_map(|l| l.strip_prefix("Address:"))
        .map(|a| a.trim().to_string())
        .collect()
}

#[test]
fn b_dns_answers_host_names_the_group_and_srv_records() {
    let n = lab_hosts(3);
    let all: BTreeSet<String> = (1..=n).map(|k| format!("10.2.0.{k}")).collect();
    // Asked from h2: the resolver (dnsmasq on h1) is reached across the fabric.
    let out = nslookup("h2", "A", "rdmad.lab");
    assert!(
        out.contains("10.2.0.1:53"),
        "FAIL: not answered by h1's dnsmasq:\n{out}"
    );
    assert_eq!(answer_addresses(&out), all, "FAIL: rdmad.lab:\n{out}");
    for k in 1..=n {
        let out = nslookup("h2", "A", &format!("h{k}.lab"));
        let want: BTreeSet<String> = [format!("10.2.0.{k}")].into();
        assert_eq!(answer_addresses(&out), want, "FAIL: h{k}.lab:\n{out}");
    }
    let out = nslookup("h3", "SRV", "_rdmad-probe._tcp.rdmad.lab");
    for k in 1..=n {
        let target = format!("9737 h{k}.lab");
        assert!(
            out.contains(&target),
            "FAIL: no SRV record for h{k}:\n{out}"
        );
    }
    let bad = on_host("h2", "nslookup -type=A nosuchhost.lab");
    assert!(
        bad.code != 0 && bad.output.contains("NXDOMAIN"),
        "FAIL: an unknown name did not get NXDOMAIN:\n{}",
        bad.output
    );
}

#[test]
fn c_ib_write_bw_and_rping_between_h1_and_h3() {
    lab_hosts(3);
    let before = hw_counters("h3")["rcvd_pkts"];
    let server = spawn_on_host(
        "h3",
        "timeout 120 ib_write_bw -d rxe0 -x 1 -s 4096 -n 300 -p 18600",
    );
    wait_listening("h3", 18600);
    let client = here(
        "timeout",
        &[
            "120",
            "ib_write_bw",
            "-d",
            "rxe0",
            "-x",
            "1",
            "-s",
            "4096",
            "-n",
            "300",
            "-p",
            "18600",
            &addr("h3"),
        ],
    );
    let server = server.join().expect("server thread");
    println!("ib_write_bw h1 -> h3:\n{}", text(&client));
    assert!(
        perftest_finished(&client),
        "FAIL: ib_write_bw client on h1:\n{}",
        text(&client)
    );
    assert!(
        perftest_pair_text_finished(
            client.status.code(),
            &text(&client),
            Some(server.code),
            &server.output
        ),
        "FAIL: ib_write_bw server on h3:\n{}",
        server.output
    );
    let after = hw_counters("h3")["rcvd_pkts"];
    assert!(
        after >= before + 300,
        "FAIL: h3's rxe0 received {} packets for 300 writes of 4 KiB",
        after - before
    );

    let server = spawn_on_host(
        "h3",
        &format!("timeout 60 rping -s -a {} -C 10 -v", addr("h3")),
    );
    let mut last = String::new();
    let mut ok = false;
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(1500));
        let out = here(
            "timeout",
            &["30", "rping", "-c", "-a", &addr("h3"), "-C", "10", "-v"],
        );
        last = text(&out);
        if out.status.success() {
            ok = true;
            break;
        }
    }
    assert!(ok, "FAIL: rping h1 -> h3:\n{last}");
    assert_eq!(
        last.matches("ping data").count(),
        10,
        "FAIL: rping printed not 10 pings:\n{last}"
    );
    let server = server.join().expect("rping server thread");
    assert_eq!(
        server.code, 0,
        "FAIL: rping server on h3:\n{}",
        server.output
    );
}

fn port_state(host: &str) -> String {
    on_host(host, "cat /sys/class/infiniband/rxe0/ports/1/state")
        .ok(&format!("port state on {host}"))
        .trim()
        .to_string()
}

/// rdma_port_state_id of rxe0 port 1 in one scrape of the host's rdmad (port 9736).
fn rdmad_port_state(host: &str) -> f64 {
    let body = on_host(host, "wget -q -O - http://127.0.0.1:9736/metrics")
        .ok(&format!("scraping rdmad on {host}"));
    let series = parse_exposition(&body).unwrap_or_else(|e| panic!("FAIL: rdmad on {host}: {e}"));
    *series
        .get(r#"rdma_port_state_id{device="rxe0",port="1"}"#)
        .unwrap_or_else(|| panic!("FAIL: rdmad on {host} serves no rdma_port_state_id for rxe0"))
}

#[test]
fn e_link_down_on_h3_shows_in_sysfs_and_in_one_rdmad_scrape() {
    lab_hosts(3);
    assert_eq!(port_state("h3"), "4: ACTIVE");
    assert_eq!(rdmad_port_state("h3"), 4.0);
    let guard = LinkUp("h3");
    fault("link h3 down");
    wait_on_host(
        "h3",
        "grep -q DOWN /sys/class/infiniband/rxe0/ports/1/state",
        Duration::from_secs(10),
        "rxe0 port 1 DOWN after link down",
    );
    assert_eq!(
        rdmad_port_state("h3"),
        1.0,
        "FAIL: rdmad's first scrape after DOWN"
    );
    let ping = here("ping", &["-c", "1", "-W", "2", &addr("h3")]);
    assert!(
        !ping.status.success(),
        "FAIL: h3 answered with its link down"
    );
    std::mem::forget(guard);
    fault("link h3 up");
    wait_on_host(
        "h3",
        "grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state",
        Duration::from_secs(10),
        "rxe0 port 1 ACTIVE after link up",
    );
    assert_eq!(
        rdmad_port_state("h3"),
        4.0,
        "FAIL: rdmad's first scrape after ACTIVE"
    );
}

/// Heals a partition when dropped.
struct Heal(&'static str, &'static str);

impl Drop for Heal {
    fn drop(&mut self) {
        let _ = control(&format!("fault heal {} {}", self.0, self.1));
    }
}

#[test]
fn f_partition_h1_h2_cuts_only_that_pair() {
    lab_hosts(3);
    let guard = Heal("h1", "h2");
    fault("partition h1 h2");
    let cut = here("ping", &["-c", "2", "-W", "2", &addr("h2")]);
    assert!(
        !cut.status.success(),
        "FAIL: h2 answered across the partition"
    );
    let other = here("ping", &["-c", "2", "-W", "5", &addr("h3")]);
    assert!(
        other.status.success(),
        "FAIL: h1 -> h3 broke: {}",
        text(&other)
    );
    on_host("h2", &format!("ping -c 2 -W 5 {}", addr("h3"))).ok("h2 -> h3 during the partition");
    drop(guard);
    let back = here("ping", &["-c", "2", "-W", "5", &addr("h2")]);
    assert!(
        back.status.success(),
        "FAIL: h1 -> h2 after heal: {}",
        text(&back)
    );
}

/// The shared secret of the peer probe handshake (lab only; at least 16 bytes).
const PROBE_SECRET: &str = "multihost-lab-secret-0123456789";

#[test]
fn g_kill_h3_ends_h1_rc_traffic_in_retry_exceeded_and_restart_rejoins() {
    lab_hosts(3);
    // RC traffic h1 -> h3 that notices a dead peer: rdmactl ping against rdmad's peer
    // listener on h3 (its QPs use retry_cnt 3). perftest and ibv_rc_pingpong use
    // retry_cnt 7, which rxe treats as "retry forever": they would never see the error.
    let listen = format!("{}:7100", addr("h3"));
    on_host(
        "h3",
        &format!(
            "echo {PROBE_SECRET} > /tmp/probe.secret; rdmad --web.listen-address=127.0.0.1:9801 --probe.enable --probe.interval 3600 --probe.mr-sizes 4K --probe.listen={listen} --probe.secret-file=/tmp/probe.secret > /tmp/rdmad-peer.log 2>&1 &"
        ),
    )
    .ok("starting rdmad's peer listener on h3");
    wait_listening("h3", 7100);
    std::fs::write("/tmp/probe.secret", format!("{PROBE_SECRET}\n")).expect("secret file");
    let before = hw_counters("h1")["retry_exceeded_err"];
    let client = Command::new("timeout")
        .args([
            "300",
            &live_tests::rdmactl_bin().to_string_lossy(),
            "ping",
            "--peer",
            &listen,
            "--secret-file",
            "/tmp/probe.secret",
            "--op",
            "write",
            "-c",
            "2000000",
            "--timeout",
            "280",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rdmactl ping on h1");
    // Let the RC traffic run, then pull the plug on h3.
    let sent = || live_tests::sysfs_hw_counter("rxe0", 1, "sent_pkts");
    let start = sent();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while sent() < start + 500 {
        assert!(
            std::time::Instant::now() < deadline,
            "FAIL: no RC traffic h1 -> h3"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    fault("kill h3");
    let out = client.wait_with_output().expect("waiting for rdmactl ping");
    let t = text(&out);
    println!("rdmactl ping to h3 after kill h3 ({}):\n{t}", out.status);
    assert!(
        !out.status.success(),
        "FAIL: the ping to a dead host succeeded"
    );
    assert!(
        t.contains("RETRY_EXC_ERR: work completion RETRY_EXC_ERR"),
        "FAIL: expected the RC traffic to end in RETRY_EXC_ERR:\n{t}"
    );
    let after = hw_counters("h1")["retry_exceeded_err"];
    assert!(
        after > before,
        "FAIL: h1's retry_exceeded_err did not move ({before} -> {after})"
    );

    fault("restart h3");
    assert_eq!(port_state("h3"), "4: ACTIVE");
    let st = control("status");
    assert!(
        st.contains("h3 Ready boot=2"),
        "FAIL: status after restart:\n{st}"
    );
    let ping = here("ping", &["-c", "2", "-W", "5", &addr("h3")]);
    assert!(
        ping.status.success(),
        "FAIL: h3 is not back on the fabric: {}",
        text(&ping)
    );
}
