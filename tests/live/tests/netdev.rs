//! Live test of rdmad's `netdev` collector, run INSIDE the Soft-RoCE lab VM: for the netdevs
//! under the lab's RDMA ports (eth0 under rxe0, veth0 and veth1 under rxe_a and rxe_b) every
//! driver statistic rdmad exports equals what `ethtool -S` prints, and the veth statistics
//! move with ib_write_bw traffic between rxe_a and rxe_b.
//!
//! Equality on a live system: the statistics may move between the two reads, so every value
//! rdmad exports must lie between an `ethtool -S` read just before and one just after the
//! scrape (the lab's virtio_net and veth statistics are all counters), and both must name
//! the same statistics. veth counts its receive statistics only on its NAPI path, which it
//! takes with GRO on and, for a sender with TSO on, only for GRO-forwardable packets, so the
//! traffic test turns GRO on and TSO off for the pair (and back afterwards).
//! No device or no ethtool is a failure, never a skip: the lab image has both.

use live_tests::{parse_exposition, perftest_between_veth_devices, rdmad_bin};
use std::collections::BTreeMap;
use std::process::Command;

/// (RDMA device, netdev) of the lab.
const PAIRS: [(&str, &str); 3] = [("rxe0", "eth0"), ("rxe_a", "veth0"), ("rxe_b", "veth1")];

/// `ethtool -S NETDEV` as name -> value.
fn ethtool_s(netdev: &str) -> BTreeMap<String, u64> {
    let out = Command::new("ethtool")
        .args(["-S", netdev])
        .output()
        .unwrap_or_else(|e| panic!("FAIL: cannot run ethtool (in the lab image): {e}"));
    assert!(
        out.status.success(),
        "FAIL: ethtool -S {netdev}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut stats = BTreeMap::new();
    for line in text
        .lines()
        .skip_while(|l| !l.starts_with("NIC statistics:"))
        .skip(1)
    {
        let (name, value) = line
            .trim()
            .rsplit_once(": ")
            .unwrap_or_else(|| panic!("FAIL: ethtool -S {netdev}: odd line {line:?}"));
        let value = value
            .parse::<u64>()
            .unwrap_or_else(|_| panic!("FAIL: ethtool -S {netdev}: odd value in {line:?}"));
        stats.insert(name.to_string(), value);
    }
    assert!(
        !stats.is_empty(),
        "FAIL: ethtool -S {netdev} printed no statistics:\n{text}"
    );
    stats
}

/// One `rdmad --once` with only the collectors this test needs.
fn rdmad_once() -> BTreeMap<String, f64> {
    let out = Command::new(rdmad_bin())
        .args([
            "--once",
            "--collector.disable-defaults",
            "--collector.sysfs_info",
            "--collector.netdev",
        ])
        .output()
        .unwrap_or_else(|e| panic!("FAIL: cannot run rdmad: {e}"));
    assert!(
        out.status.success(),
        "FAIL: rdmad --once: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_exposition(&String::from_utf8_lossy(&out.stdout)).expect("rdmad's exposition parses")
}

/// rdmad's `rdma_netdev_ethtool_stat` of one port's netdev: stat -> value.
fn rdmad_stats(
    series: &BTreeMap<String, f64>,
    device: &str,
    netdev: &str,
) -> BTreeMap<String, u64> {
    let prefix = format!(
        "rdma_netdev_ethtool_stat{{device=\"{device}\",port=\"1\",netdev=\"{netdev}\",stat=\""
    );
    series
        .iter()
        .filter_map(|(k, v)| {
            let stat = k.strip_prefix(&prefix)?.strip_suffix("\"}")?;
            Some((stat.to_string(), *v as u64))
        })
        .collect()
}

/// Scrape once between two `ethtool -S` reads of every lab netdev; check names and values.
fn scrape_between_ethtool_reads() -> BTreeMap<String, BTreeMap<String, u64>> {
    let before: Vec<_> = PAIRS.iter().map(|(_, n)| ethtool_s(n)).collect();
    let series = rdmad_once();
    let after: Vec<_> = PAIRS.iter().map(|(_, n)| ethtool_s(n)).collect();
    let mut out = BTreeMap::new();
    for (i, (device, netdev)) in PAIRS.iter().enumerate() {
        let errors = format!(
            "rdma_netdev_read_errors{{device=\"{device}\",port=\"1\",netdev=\"{netdev}\"}}"
        );
        assert_eq!(series.get(&errors), Some(&0.0), "FAIL: {errors}");
        let got = rdmad_stats(&series, device, netdev);
        let names: Vec<_> = got.keys().collect();
        let want: Vec<_> = before[i].keys().collect();
        assert_eq!(
            names, want,
            "FAIL: {netdev}: rdmad and ethtool -S name different statistics"
        );
        for (stat, value) in &got {
            let (lo, hi) = (before[i][stat], after[i][stat]);
            assert!(
                lo <= *value && *value <= hi,
                "FAIL: {netdev} {stat}: rdmad {value}, ethtool -S {lo} before and {hi} after"
            );
        }
        println!("{netdev}: {} statistics equal to ethtool -S", got.len());
        out.insert(netdev.to_string(), got);
    }
    let info = "rdma_netdev_info{device=\"rxe0\",port=\"1\",netdev=\"eth0\",driver=\"virtio_net\",bus_info=\"0000:00:02.0\",bond=\"\"}";
    assert_eq!(series.get(info), Some(&1.0), "FAIL: {info} missing");
    out
}

/// `rdma_qp_counter_mode{mode}` is what `rdma statistic qp mode` says (`auto off` is mode
/// `none` on rxe), and rxe, which has no optional counters, has no
/// `rdma_optional_counter_enabled` series (absent, not 0).
#[test]
fn counter_modes_match_rdma_statistic() {
    let out = Command::new(rdmad_bin())
        .args([
            "--once",
            "--collector.disable-defaults",
            "--collector.netlink_counters",
            "--collector.netlink_qp_counters",
        ])
        .output()
        .unwrap_or_else(|e| panic!("FAIL: cannot run rdmad: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let series = parse_exposition(&text).expect("rdmad's exposition parses");
    let mode = Command::new("rdma")
        .args(["statistic", "qp", "mode"])
        .output()
        .expect("FAIL: rdma (iproute2) runs");
    let mode = String::from_utf8_lossy(&mode.stdout).into_owned();
    for (device, _) in PAIRS {
        let line = mode
            .lines()
            .find(|l| l.starts_with(&format!("link {device}/1 ")))
            .unwrap_or_else(|| panic!("FAIL: rdma statistic qp mode lists no {device}/1:\n{mode}"));
        let want = if line.contains("auto off") {
            "none"
        } else if line.contains("auto on") {
            "auto"
        } else {
            "manual"
        };
        let key = format!("rdma_qp_counter_mode{{device=\"{device}\",port=\"1\",mode=\"{want}\"}}");
        assert_eq!(
            series.get(&key),
            Some(&1.0),
            "FAIL: {key} (rdma says {line:?}):\n{text}"
        );
        assert!(
            !text.contains(&format!(
                "rdma_optional_counter_enabled{{device=\"{device}\""
            )),
            "FAIL: rxe has no optional counters, yet:\n{text}"
        );
    }
}

#[test]
fn netdev_statistics_equal_ethtool() {
    scrape_between_ethtool_reads();
}

/// GRO on and TSO off for the veth pair while alive (veth then receives every packet
/// through NAPI and counts it).
struct VethGro;

impl VethGro {
    fn set(on: bool) {
        let (gro, tso) = if on { ("on", "off") } else { ("off", "on") };
        for netdev in ["veth0", "veth1"] {
            let out = Command::new("ethtool")
                .args(["-K", netdev, "gro", gro, "tso", tso])
                .output()
                .expect("ethtool runs");
            assert!(
                out.status.success(),
                "FAIL: ethtool -K {netdev} gro {gro} tso {tso}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    fn on() -> VethGro {
        VethGro::set(true);
        VethGro
    }
}

impl Drop for VethGro {
    fn drop(&mut self) {
        VethGro::set(false);
    }
}

#[test]
fn veth_statistics_move_with_ib_write_bw() {
    let _gro = VethGro::on();
    let before = scrape_between_ethtool_reads();
    let run = perftest_between_veth_devices("ib_write_bw", &["-n", "300", "-p", "18517"]);
    assert!(
        run.success(),
        "FAIL: ib_write_bw between rxe_a and rxe_b did not finish:\nclient: {}\nserver: {}",
        String::from_utf8_lossy(&run.client.stdout),
        String::from_utf8_lossy(&run.server.stdout)
    );
    let after = scrape_between_ethtool_reads();
    for netdev in ["veth0", "veth1"] {
        let stat = "rx_queue_0_xdp_packets";
        let (a, b) = (before[netdev][stat], after[netdev][stat]);
        // 300 WRITEs of 64 KiB in 1024-byte MTU frames one way, ACKs the other way.
        assert!(
            b > a,
            "FAIL: {netdev} {stat} did not move with ib_write_bw: {a} -> {b}"
        );
        println!("{netdev} {stat}: {a} -> {b} (+{})", b - a);
    }
}
