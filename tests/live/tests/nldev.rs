//! Live nldev checks, run INSIDE the lab VM (`rdmactl lab test --only nldev`, booted with
//! rxe0, rxe_a and rxe_b): rdmakit's netlink client must agree with iproute2's `rdma -j` and
//! with sysfs, `rdmactl resources qp --json` with `rdma -j res show qp` while a test program
//! holds QPs, and `rdmactl monitor` must see `rdma link add/delete` (of rxe9 on a veth of its own: rxe
//! allows one device per netdev, and eth0 already carries rxe0).
//!
//! No device is a failure, never a skip. Tests take a global lock: they create QPs, traffic
//! and devices that would disturb each other's comparisons.

use live_tests::{perftest_finished, rdma_json, rdmactl_bin, rdmactl_json};
use rdmakit::nldev::{format_guid, NldevClient};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn client() -> NldevClient {
    NldevClient::open().unwrap_or_else(|e| panic!("FAIL: no RDMA netlink in the lab: {e}"))
}

/// Kill a helper process on drop so a failed assertion never leaves a server behind.
struct Reaper(Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn devices_equal_rdma_dev_show() {
    let _g = serial();
    let ours = client().devices().expect("GET dump");
    let theirs = rdma_json(&["dev", "show"]);
    let theirs = theirs.as_array().expect("array");
    assert!(
        ours.iter().any(|d| d.name == "rxe0"),
        "FAIL: no rxe0 via netlink: {ours:?}"
    );
    assert_eq!(ours.len(), theirs.len(), "{ours:?} vs {theirs:?}");
    for (o, t) in ours.iter().zip(theirs) {
        assert_eq!(Some(u64::from(o.index)), t["ifindex"].as_u64());
        assert_eq!(Some(o.name.as_str()), t["ifname"].as_str());
        assert_eq!(o.node_type.map(|n| n.name()), t["node_type"].as_str());
        assert_eq!(
            o.node_guid.map(format_guid).as_deref(),
            t["node_guid"].as_str()
        );
        assert_eq!(
            o.sys_image_guid.map(format_guid).as_deref(),
            t["sys_image_guid"].as_str()
        );
        assert_eq!(
            o.fw_version.as_deref().filter(|f| !f.is_empty()),
            t["fw"].as_str()
        );
    }
}

#[test]
fn ports_equal_rdma_link_show() {
    let _g = serial();
    let ours = client().all_ports().expect("PORT_GET dumps");
    let theirs = rdma_json(&["link", "show"]);
    let theirs = theirs.as_array().expect("array");
    assert!(
        ours.len() >= 3,
        "FAIL: expected rxe0, rxe_a, rxe_b ports: {ours:?}"
    );
    assert_eq!(ours.len(), theirs.len());
    for (o, t) in ours.iter().zip(theirs) {
        assert_eq!(Some(o.dev_name.as_str()), t["ifname"].as_str());
        assert_eq!(Some(u64::from(o.port)), t["port"].as_u64());
        assert_eq!(o.state.map(|s| s.name()), t["state"].as_str());
        assert_eq!(o.phys_state.map(|s| s.name()), t["physical_state"].as_str());
        assert_eq!(o.netdev.as_deref(), t["netdev"].as_str());
    }
}

/// `rdma -j statistic show` as (device, counter) -> value.
fn rdma_stats() -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for link in rdma_json(&["statistic", "show"]).as_array().expect("array") {
        let dev = link["ifname"].as_str().unwrap().to_string();
        for (k, v) in link.as_object().unwrap() {
            if let Some(v) = v.as_u64().filter(|_| k != "port") {
                out.insert((dev.clone(), k.clone()), v);
            }
        }
    }
    out
}

fn run_traffic() {
    let server = Command::new("timeout")
        .args(["60", "ib_write_bw", "-d", "rxe_a", "-x", "1", "-D", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start ib_write_bw server");
    let _server = Reaper(server);
    // Listening: a server that never does fails the client below.
    live_tests::tcp::wait_listening(18515, Duration::from_secs(30));
    let client = Command::new("timeout")
        .args([
            "60",
            "ib_write_bw",
            "-d",
            "rxe_b",
            "-x",
            "1",
            "-D",
            "2",
            "10.1.0.1",
        ])
        .output()
        .expect("run ib_write_bw client");
    assert!(
        perftest_finished(&client),
        "FAIL: ib_write_bw between rxe_b and rxe_a: {client:?}"
    );
}

#[test]
fn hw_counters_equal_rdma_statistic_show_and_sysfs_after_traffic() {
    let _g = serial();
    run_traffic();
    let mut nl = client();
    let before = rdma_stats();
    let mut ours = BTreeMap::new();
    let mut sysfs = BTreeMap::new();
    for port in nl.all_ports().expect("ports") {
        let c = nl
            .port_counters(port.dev_index, &port.dev_name, port.port)
            .expect("STAT_GET");
        assert!(!c.counters.is_empty(), "{}: no counters", port.dev_name);
        for counter in c.counters {
            let path = format!(
                "/sys/class/infiniband/{}/ports/{}/hw_counters/{}",
                port.dev_name, port.port, counter.name
            );
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            sysfs.insert(
                (port.dev_name.clone(), counter.name.clone()),
                text.trim().parse::<u64>().unwrap(),
            );
            ours.insert(
                (port.dev_name.clone(), counter.name.clone()),
                counter.value.expect("value"),
            );
        }
    }
    let after = rdma_stats();
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
    for (key, v) in &ours {
        let (lo, hi) = (before[key].min(after[key]), before[key].max(after[key]));
        assert!(
            lo <= *v && *v <= hi,
            "{key:?}: ours {v} outside rdma's [{lo}, {hi}]"
        );
        let s = sysfs[key];
        assert!(
            lo <= s && s <= hi,
            "{key:?}: sysfs {s} outside rdma's [{lo}, {hi}]"
        );
    }
    let moved = ours[&("rxe_a".to_string(), "rcvd_pkts".to_string())];
    assert!(
        moved > 100,
        "FAIL: traffic did not move rxe_a rcvd_pkts ({moved})"
    );
    assert!(ours[&("rxe_b".to_string(), "sent_pkts".to_string())] >= moved);
}

#[test]
fn counter_status_and_qp_mode_are_readable() {
    let _g = serial();
    let mut nl = client();
    let status = nl.counter_status(0, "rxe0", 1).expect("STAT_GET_STATUS");
    assert!(
        status.counters.iter().any(|c| c.name == "sent_pkts"),
        "{status:?}"
    );
    let mode = nl.qp_counter_mode(0, "rxe0", 1).expect("QP counter mode");
    assert_eq!(mode.mode, 0, "the lab never enables counters: {mode:?}");
    assert!(nl
        .qp_counters(0, "rxe0", 1)
        .expect("bound counters")
        .is_empty());
}

#[test]
fn resource_summary_equals_rdma_res_show() {
    let _g = serial();
    let ours = client().resource_summary().expect("RES_GET");
    let theirs = rdma_json(&["res", "show"]);
    let theirs = theirs.as_array().unwrap();
    assert_eq!(ours.len(), theirs.len());
    for (o, t) in ours.iter().zip(theirs) {
        assert_eq!(Some(o.dev_name.as_str()), t["ifname"].as_str());
        for (name, count) in &o.counts {
            assert_eq!(t[name].as_u64(), Some(*count), "{} {name}", o.dev_name);
        }
    }
}

/// Start `ibv_rc_pingpong` servers (they wait for a client, holding an RC QP in INIT) and
/// wait until their QPs are visible.
fn hold_qps() -> (Reaper, u32) {
    let child = Command::new("timeout")
        .args([
            "60",
            "ibv_rc_pingpong",
            "-d",
            "rxe_a",
            "-g",
            "1",
            "-p",
            "18600",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start ibv_rc_pingpong");
    let reaper = Reaper(child);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let qps = rdma_json(&["res", "show", "qp"]);
        if let Some(pid) = qps
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["comm"] == "ibv_rc_pingpong")
            .and_then(|q| q["pid"].as_u64())
        {
            return (reaper, pid as u32);
        }
        assert!(
            Instant::now() < deadline,
            "FAIL: ibv_rc_pingpong never created its QP: {qps}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn rdmactl_resources_qp_json_equals_rdma_res_show_qp() {
    let _g = serial();
    let (_server, pid) = hold_qps();
    let ours = rdmactl_json(&["resources", "qp"]);
    let theirs = rdma_json(&["res", "show", "qp"]);
    let (ours, theirs) = (ours.as_array().unwrap(), theirs.as_array().unwrap());
    assert!(
        theirs.len() >= 4,
        "expected GSI QPs and the pingpong QP: {theirs:?}"
    );
    assert_eq!(ours.len(), theirs.len(), "{ours:?}\n{theirs:?}");
    let pairs = [
        ("ifindex", "dev_index"),
        ("ifname", "dev_name"),
        ("port", "port"),
        ("lqpn", "lqpn"),
        ("rqpn", "rqpn"),
        ("type", "qp_type"),
        ("state", "state"),
        ("rq-psn", "rq_psn"),
        ("sq-psn", "sq_psn"),
        ("path-mig-state", "path_mig_state"),
        ("pdn", "pdn"),
        ("pid", "pid"),
        ("comm", "comm"),
    ];
    for (o, t) in ours.iter().zip(theirs) {
        assert_eq!(o["kind"], "qp");
        for (theirs_key, ours_key) in pairs {
            let tv = t.get(theirs_key).cloned().unwrap_or(Value::Null);
            assert_eq!(o[ours_key], tv, "{theirs_key}: ours {o} theirs {t}");
        }
    }
    let user: Vec<&Value> = ours.iter().filter(|q| q["pid"] == pid).collect();
    assert_eq!(user.len(), 1);
    assert_eq!(user[0]["state"], "INIT");
    assert_eq!(user[0]["qp_type"], "RC");

    let filtered = rdmactl_json(&["resources", "qp", "--pid", &pid.to_string()]);
    assert_eq!(filtered.as_array().unwrap().len(), 1, "{filtered}");

    // The pingpong server registered an MR: its keys never appear in our output.
    let mrs = rdmactl_json(&["resources", "mr"]);
    let theirs_mr = rdma_json(&["res", "show", "mr"]);
    assert_eq!(
        mrs.as_array().unwrap().len(),
        theirs_mr.as_array().unwrap().len()
    );
    let mine = mrs
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["pid"] == pid)
        .expect("pingpong MR");
    assert_eq!(mine["lkey"], "<hidden>");
    assert_eq!(mine["rkey"], "<hidden>");
    assert_eq!(mine["mrlen"], 4096);

    let table = Command::new(rdmactl_bin())
        .args(["resources", "qp"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.status.success() && text.contains("ibv_rc_pingpong") && text.contains("[ib_core]"),
        "{text}"
    );

    let summary = rdmactl_json(&["resources"]);
    let theirs = rdma_json(&["res", "show"]);
    for (o, t) in summary
        .as_array()
        .unwrap()
        .iter()
        .zip(theirs.as_array().unwrap())
    {
        assert_eq!(o["dev_name"], t["ifname"]);
        assert_eq!(o["counts"]["qp"], t["qp"]);
        assert_eq!(o["counts"]["mr"], t["mr"]);
    }
}

#[test]
fn rdmactl_monitor_sees_link_add_and_delete() {
    let _g = serial();
    let mut child = Command::new(rdmactl_bin())
        .args(["monitor", "--json", "--interval-ms", "100"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start rdmactl monitor");
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let _monitor = Reaper(child);
    // The monitor says on stderr when its first topology is taken.
    let mut banner = String::new();
    BufReader::new(stderr).read_line(&mut banner).unwrap();
    assert!(
        banner.contains("watching"),
        "monitor did not start: {banner:?}"
    );
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let rdma = |args: &[&str]| {
        let out = Command::new("rdma").args(args).output().unwrap();
        assert!(out.status.success(), "rdma {args:?}: {out:?}");
    };
    // rxe allows one device per netdev and eth0 has rxe0: give rxe9 a veth of its own.
    let ip = |args: &[&str]| {
        let out = Command::new("ip").args(args).output().unwrap();
        assert!(out.status.success(), "ip {args:?}: {out:?}");
    };
    let _ = Command::new("ip").args(["link", "del", "mon0"]).output();
    ip(&[
        "link", "add", "mon0", "type", "veth", "peer", "name", "mon1",
    ]);
    ip(&["link", "set", "mon0", "up"]);
    ip(&["link", "set", "mon1", "up"]);
    rdma(&["link", "add", "rxe9", "type", "rxe", "netdev", "mon0"]);
    let mut events: Vec<Value> = Vec::new();
    let wait_for = |events: &mut Vec<Value>, kind: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !events
            .iter()
            .any(|e| e["kind"] == kind && e["dev_name"] == "rxe9")
        {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => events.push(serde_json::from_str(&line).expect("JSON event")),
                Err(_) => panic!("FAIL: no {kind} event for rxe9; got {events:?}"),
            }
        }
    };
    wait_for(&mut events, "register");
    rdma(&["link", "delete", "rxe9"]);
    wait_for(&mut events, "unregister");
    let reg = events.iter().find(|e| e["kind"] == "register").unwrap();
    assert!(reg["dev_index"].as_u64().is_some());
    assert!(
        events.iter().any(|e| e["kind"] == "netdev_attach"
            && e["netdev"] == "mon0"
            && e["dev_name"] == "rxe9"),
        "{events:?}"
    );
    // The devices the test did not touch produced no events.
    assert!(events.iter().all(|e| e["dev_name"] == "rxe9"), "{events:?}");
    // rdma dev show no longer lists rxe9, and neither do we.
    assert!(client().devices().unwrap().iter().all(|d| d.name != "rxe9"));
    ip(&["link", "del", "mon0"]);
}
