//! Live checks of the lab itself, run INSIDE the lab VM booted with `--devices 2`
//! (`rdmactl lab test` always boots that way): the devices exist and are ACTIVE, two of
//! them pass real RDMA traffic over the veth pair, and rdmad sees them.
//!
//! No device is a failure, never a skip.

use live_tests::{perftest_between_veth_devices, rdma_json, rdmad_bin, sysfs_hw_counter};
use std::process::Command;

fn sysfs_state(dev: &str) -> String {
    let path = format!("/sys/class/infiniband/{dev}/ports/1/state");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e} (is rdma_rxe loaded and {dev} created?)"))
}

#[test]
fn rxe0_is_active_on_eth0() {
    assert!(
        sysfs_state("rxe0").contains("ACTIVE"),
        "rxe0 port 1 not ACTIVE"
    );
    let links = rdma_json(&["link", "show"]);
    let rxe0 = links
        .as_array()
        .and_then(|a| a.iter().find(|l| l["ifname"] == "rxe0"))
        .unwrap_or_else(|| panic!("no rxe0 in {links}"));
    assert_eq!(rxe0["state"], "ACTIVE");
    assert_eq!(rxe0["netdev"], "eth0");
}

#[test]
fn veth_pair_devices_pass_rdma_write_traffic() {
    for dev in ["rxe_a", "rxe_b"] {
        assert!(sysfs_state(dev).contains("ACTIVE"), "{dev} not ACTIVE");
    }
    let sent = || sysfs_hw_counter("rxe_b", 1, "sent_pkts");
    let sent_before = sent();
    // Server on rxe_a (10.1.0.1), client on rxe_b; both bounded by timeout(1).
    let run = perftest_between_veth_devices("ib_write_bw", &["-s", "4096", "-n", "200"]);
    let text = String::from_utf8_lossy(&run.client.stdout);
    assert!(
        run.success(),
        "ib_write_bw failed: {run:?}\n{text}{}",
        String::from_utf8_lossy(&run.client.stderr)
    );
    // 200 writes of 4096 bytes with a 1024-byte MTU: at least 200 packets left rxe_b.
    let sent_packets = sent() - sent_before;
    assert!(
        sent_packets >= 200,
        "rxe_b sent {sent_packets} packets for 200 writes"
    );
    // The result row: "#bytes #iterations BW peak BW average MsgRate" (absent when
    // perftest refused its report, see perftest_finished; the counters above still hold).
    if !run.client.status.success() {
        return;
    }
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("4096"))
        .unwrap_or_else(|| panic!("no result row in:\n{text}"));
    let cols: Vec<f64> = row
        .split_whitespace()
        .filter_map(|c| c.parse().ok())
        .collect();
    assert!(cols.len() >= 4, "bad row {row:?}");
    assert_eq!(cols[1] as u64, 200, "iterations in {row:?}");
    assert!(cols[3] > 0.0, "average bandwidth is zero in {row:?}");
}

#[test]
fn rdmad_once_sees_every_lab_device() {
    let bin = rdmad_bin();
    let out = Command::new(&bin)
        .arg("--once")
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", bin.display()));
    assert!(out.status.success(), "rdmad --once failed: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let devices = std::fs::read_dir("/sys/class/infiniband")
        .expect("/sys/class/infiniband exists in the lab")
        .count();
    assert!(devices >= 3, "expected rxe0, rxe_a, rxe_b; found {devices}");
    let info_lines = text
        .lines()
        .filter(|l| l.starts_with("rdma_device_info{"))
        .count();
    assert_eq!(
        info_lines, devices,
        "one rdma_device_info per device expected in:\n{text}"
    );
}

/// The lab's qemu user network is `restrict=on`: a TCP connect to an address outside the
/// lab (192.0.2.1, TEST-NET-1, documentation only) is answered inside qemu with a reset, so
/// it is refused at once, never sent from this machine nor left to time out.
#[test]
fn guest_cannot_reach_outside_through_its_user_network() {
    let outside: std::net::SocketAddr = "192.0.2.1:80".parse().unwrap();
    match std::net::TcpStream::connect_timeout(&outside, std::time::Duration::from_secs(10)) {
        Ok(_) => panic!("connected to {outside}: the lab's user network is not restricted"),
        Err(e) => assert_eq!(
            e.kind(),
            std::io::ErrorKind::ConnectionRefused,
            "connecting to {outside} failed with {e} (kind {:?}), not a refusal from qemu's restricted network",
            e.kind()
        ),
    }
}
