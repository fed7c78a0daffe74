//! Live inventory checks, run INSIDE the lab VM (`rdmactl lab test` boots rxe0, rxe_a, rxe_b):
//! the CLI's views agree with rdma-core's `rdma` tool and with sysfs, and every counter the
//! live rxe devices expose is described in the counter catalog.
//!
//! - `rdmactl counters --json` == `rdma -j statistic show` == the sysfs files, after traffic;
//! - `rdmactl resources qp --json` == `rdma -j res show qp` while this process holds QPs in
//!   INIT, RTR and RTS (made with rdma-verbs);
//! - every hw_counters file of every lab device is in the catalog with a meaning.
//!
//! No device is a failure, never a skip.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use live_tests::{perftest_between_veth_devices, rdma_json, rdmactl_json, sysfs_hw_counter};
use rdma_verbs::{AccessFlags, Context, GidType, QpState, QueuePair, RtrParams, RtsParams};
use rdmakit::catalog::Catalog;
use rdmakit::doctor::family_of;
use rdmakit::model::CounterSource;
use serde_json::Value;

/// Traffic and QPs of one test must not show up in another's comparison.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn lab_devices() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .expect("FAIL: no /sys/class/infiniband: is rdma_rxe loaded? (run inside the lab)")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    names.sort();
    assert!(
        names.len() >= 3,
        "FAIL: expected rxe0, rxe_a and rxe_b, found {names:?}"
    );
    names
}

#[test]
fn every_live_counter_is_in_the_catalog_with_a_meaning() {
    let catalog = Catalog::embedded().expect("catalog");
    let mut checked = 0;
    for dev in lab_devices() {
        let dir = format!("/sys/class/infiniband/{dev}/ports/1/hw_counters");
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let family = family_of(catalog, CounterSource::Hw, None, &dev)
                .unwrap_or_else(|| panic!("no catalog family for device {dev}"));
            let info = catalog
                .get(&family, &name)
                .unwrap_or_else(|| panic!("{dev}: {name} is not in the {family} catalog"));
            assert!(
                !info.meaning.trim().is_empty(),
                "{family}/{name} has no meaning"
            );
            checked += 1;
        }
    }
    assert!(checked >= 48, "only {checked} counters seen");
}

/// Real traffic between rxe_b and rxe_a (ib_write_bw, both ends bounded by timeout).
fn traffic() {
    let run = perftest_between_veth_devices("ib_write_bw", &["-n", "300", "-p", "18710"]);
    assert!(run.success(), "ib_write_bw failed: {run:?}");
}

/// (device, port, counter) -> value, from `rdma -j statistic show`.
fn rdma_statistics() -> BTreeMap<(String, u64, String), u64> {
    let mut out = BTreeMap::new();
    for link in rdma_json(&["statistic", "show"]).as_array().expect("array") {
        let dev = link["ifname"].as_str().expect("ifname").to_string();
        let port = link["port"].as_u64().expect("port");
        for (k, v) in link.as_object().expect("object") {
            if let (Some(v), false) = (v.as_u64(), k == "port" || k == "ifindex") {
                out.insert((dev.clone(), port, k.clone()), v);
            }
        }
    }
    out
}

/// The same from `rdmactl counters --json` (driver counters only: `rdma statistic` has no
/// PMA counters, and rxe has none anyway).
fn rdmactl_counters() -> BTreeMap<(String, u64, String), u64> {
    let mut out = BTreeMap::new();
    let snap = rdmactl_json(&["counters"]);
    for dev in snap["devices"].as_array().expect("devices") {
        let name = dev["name"].as_str().expect("name").to_string();
        for port in dev["ports"].as_array().expect("ports") {
            let num = port["num"].as_u64().expect("num");
            for c in port["counters"].as_array().expect("counters") {
                // `lifespan` is the driver's cache period (a gauge), which the kernel's
                // netlink statistics leave out; every other driver counter must match.
                if c["source"] == "hw" && c["name"] != "lifespan" {
                    let key = (name.clone(), num, c["name"].as_str().unwrap().to_string());
                    out.insert(key, c["value"].as_u64().expect("value"));
                }
            }
        }
    }
    out
}

fn sysfs_counters(keys: &[(String, u64, String)]) -> BTreeMap<(String, u64, String), u64> {
    keys.iter()
        .map(|(d, p, n)| ((d.clone(), *p, n.clone()), sysfs_hw_counter(d, *p, n)))
        .collect()
}

#[test]
fn counters_json_equals_rdma_statistic_and_sysfs_after_traffic() {
    let _g = serial();
    lab_devices();
    traffic();
    // Counters may still move right after traffic (ACKs, retransmits under TCG): compare
    // only a round where rdma's view did not change while we read ours and sysfs.
    for attempt in 1..=10 {
        let before = rdma_statistics();
        let ours = rdmactl_counters();
        let keys: Vec<_> = ours.keys().cloned().collect();
        let sysfs = sysfs_counters(&keys);
        let after = rdma_statistics();
        if before != after {
            std::thread::sleep(Duration::from_millis(300));
            continue;
        }
        assert_eq!(
            ours, after,
            "rdmactl counters --json vs rdma -j statistic show"
        );
        assert_eq!(sysfs, after, "sysfs vs rdma -j statistic show");
        let sent = ours[&("rxe_b".to_string(), 1, "sent_pkts".to_string())];
        assert!(sent >= 300, "traffic did not move rxe_b sent_pkts ({sent})");
        assert!(
            ours.len() >= 45,
            "only {} counters (3 devices x 15)",
            ours.len()
        );
        eprintln!("equal on attempt {attempt}: {} counters", ours.len());
        return;
    }
    panic!("counters never stood still long enough to compare");
}

fn access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
}

fn rtr(ctx: &Arc<Context>, qp: &QueuePair, peer: &QueuePair) {
    let gid = ctx.choose_gid(1, GidType::RoceV2).expect("choose_gid");
    let mtu = ctx.query_port(1).expect("query_port").active_mtu;
    qp.to_rtr(&RtrParams {
        remote: peer.endpoint(&gid, 0x100),
        port: 1,
        sgid_index: gid.index as u8,
        path_mtu: mtu,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
    })
    .expect("to_rtr");
}

#[test]
fn resources_qp_json_equals_rdma_res_show_qp_in_init_rtr_and_rts() {
    let _g = serial();
    lab_devices();
    let ctx = rdma_verbs::open("rxe0").expect("FAIL: cannot open rxe0");
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cq = ctx.create_cq(16).expect("create_cq");
    let make = || {
        let qp = pd.create_rc_qp(&cq, &cq, Default::default()).expect("qp");
        qp.to_init(1, access()).expect("to_init");
        qp
    };
    let (init, rtr_qp, rts_qp) = (make(), make(), make());
    rtr(&ctx, &rtr_qp, &rts_qp);
    rtr(&ctx, &rts_qp, &rtr_qp);
    rts_qp
        .to_rts(&RtsParams {
            psn: 0x100,
            ..RtsParams::default()
        })
        .expect("to_rts");
    assert_eq!(init.state().unwrap(), QpState::Init);
    assert_eq!(rtr_qp.state().unwrap(), QpState::Rtr);
    assert_eq!(rts_qp.state().unwrap(), QpState::Rts);

    let ours = rdmactl_json(&["resources", "qp"]);
    let theirs = rdma_json(&["res", "show", "qp"]);
    let (ours, theirs) = (ours.as_array().unwrap(), theirs.as_array().unwrap());
    assert_eq!(ours.len(), theirs.len(), "ours {ours:?}\ntheirs {theirs:?}");
    let pairs = [
        ("ifname", "dev_name"),
        ("port", "port"),
        ("lqpn", "lqpn"),
        ("rqpn", "rqpn"),
        ("type", "qp_type"),
        ("state", "state"),
        ("sq-psn", "sq_psn"),
        ("pid", "pid"),
        ("comm", "comm"),
    ];
    for (o, t) in ours.iter().zip(theirs) {
        for (tk, ok) in pairs {
            let tv = t.get(tk).cloned().unwrap_or(Value::Null);
            assert_eq!(o[ok], tv, "{tk}: ours {o}\ntheirs {t}");
        }
    }
    // The kernel records the *thread* that created a QP: `rdma res` prints its id, so
    // compare with this test thread's id (the last part of /proc/thread-self), not the pid.
    let tid: u64 = std::fs::read_link("/proc/thread-self")
        .expect("/proc/thread-self")
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .expect("a thread id");
    let mut states: Vec<String> = ours
        .iter()
        .filter(|q| q["pid"] == tid)
        .map(|q| q["state"].as_str().unwrap_or("?").to_string())
        .collect();
    states.sort();
    assert_eq!(
        states,
        ["INIT", "RTR", "RTS"],
        "this thread's QPs: {ours:?}"
    );
}
