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

/// `ethtool ARGS`: Ok(stdout) on success, Err(stderr) when ethtool reports a failure.
fn ethtool(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ethtool")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("FAIL: cannot run ethtool (in the lab image): {e}"));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(format!("{}{}", text(&out.stdout), text(&out.stderr)))
    }
}

/// The rdmad series of `family` for one port's netdev, with the labels after `netdev`.
fn rdmad_family(
    series: &BTreeMap<String, f64>,
    family: &str,
    device: &str,
    netdev: &str,
) -> BTreeMap<String, f64> {
    let prefix = format!("{family}{{device=\"{device}\",port=\"1\",netdev=\"{netdev}\"");
    series
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_string(), *v)))
        .collect()
}

/// The kernel's standard statistics and FEC state (ethtool netlink) as rdmad exports them
/// equal what Debian's ethtool prints for every lab netdev: pause statistics
/// (`ethtool --include-statistics -a`), the standard groups (`ethtool -S --all-groups`)
/// and the active FEC (`ethtool --show-fec`); where the driver has no such operation
/// (EOPNOTSUPP, virtio_net and veth have none) rdmad has no series and no error. Every
/// request rdmad made was answered (`rdma_netdev_standard_read_errors` 0), so the kernel
/// accepted its request encoding. The raw replies are printed (hex) for the record.
#[test]
fn standard_statistics_equal_ethtool() {
    let series = rdmad_once();
    for (device, netdev) in PAIRS {
        for request in rdmakit::ethtool::standard::Request::ALL {
            let key = format!(
                "rdma_netdev_standard_read_errors{{device=\"{device}\",port=\"1\",netdev=\"{netdev}\",request=\"{}\"}}",
                request.name()
            );
            assert_eq!(series.get(&key), Some(&0.0), "FAIL: {key}");
        }
        use rdmakit::ethtool::EthtoolSource;
        for (request, answer) in rdmakit::ethtool::KernelEthtool.standard_raw(netdev) {
            match answer {
                Ok(Some(bytes)) => {
                    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                    println!("{netdev} {}: {hex}", request.name());
                }
                other => panic!("FAIL: {netdev} {}: no reply: {other:?}", request.name()),
            }
        }

        // Pause statistics.
        let global = rdmad_family(&series, "rdma_netdev_pause_frames_total", device, netdev)
            .into_iter()
            .filter(|(k, _)| k.contains("priority=\"global\""))
            .collect::<BTreeMap<_, _>>();
        match ethtool(&["--include-statistics", "-a", netdev]) {
            Ok(text) => {
                for (direction, name) in [("tx", "tx_pause_frames"), ("rx", "rx_pause_frames")] {
                    let want = text.lines().find_map(|l| {
                        l.trim()
                            .strip_prefix(&format!("{name}: "))?
                            .parse::<f64>()
                            .ok()
                    });
                    let key = format!(",direction=\"{direction}\",priority=\"global\"}}");
                    assert_eq!(
                        global.get(&key).copied(),
                        want,
                        "FAIL: {netdev} {name}: ethtool says\n{text}"
                    );
                }
                println!("{netdev}: pause statistics equal ethtool: {global:?}");
            }
            Err(text) => {
                assert!(
                    text.contains("Operation not supported"),
                    "FAIL: ethtool -a {netdev}: {text}"
                );
                assert!(
                    global.is_empty(),
                    "FAIL: {netdev}: {global:?} without pause"
                );
                println!("{netdev}: no pause operation (EOPNOTSUPP), no series: {text:?}");
            }
        }

        // The standard groups: name -> value as ethtool prints them, and as rdmad exports.
        let text = ethtool(&["-S", netdev, "--all-groups"])
            .unwrap_or_else(|e| panic!("FAIL: ethtool -S {netdev} --all-groups: {e}"));
        let mut want = BTreeMap::new();
        for line in text.lines() {
            let Some((name, value)) = line.trim().rsplit_once(": ") else {
                continue;
            };
            for group in ["eth-phy", "eth-mac", "eth-ctrl", "rmon"] {
                if let (Some(stat), Ok(v)) = (
                    name.strip_prefix(group).and_then(|s| s.strip_prefix('-')),
                    value.parse::<f64>(),
                ) {
                    want.insert(format!("{group}/{stat}"), v);
                }
            }
        }
        let mut got = BTreeMap::new();
        for (k, v) in rdmad_family(&series, "rdma_netdev_standard_frames_total", device, netdev) {
            let group = k.split("group=\"").nth(1).and_then(|s| s.split('"').next());
            let stat = k.split("stat=\"").nth(1).and_then(|s| s.split('"').next());
            got.insert(format!("{}/{}", group.unwrap_or(""), stat.unwrap_or("")), v);
        }
        for (family, name) in [
            ("rdma_netdev_mac_bytes_total", "eth-mac/Octets"),
            (
                "rdma_netdev_crc_errors_total",
                "eth-mac/FrameCheckSequenceErrors",
            ),
            (
                "rdma_netdev_symbol_errors_total",
                "eth-phy/SymbolErrorDuringCarrier",
            ),
        ] {
            for (k, v) in rdmad_family(&series, family, device, netdev) {
                let name = match (name, k.contains("\"tx\"")) {
                    ("eth-mac/Octets", true) => "eth-mac/OctetsTransmittedOK".to_string(),
                    ("eth-mac/Octets", false) => "eth-mac/OctetsReceivedOK".to_string(),
                    (n, _) => n.to_string(),
                };
                got.insert(name, v);
            }
        }
        // Counters move between the reads: names must agree, values may only have grown.
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "FAIL: {netdev}: rdmad and ethtool -S --all-groups name different standard statistics:\n{text}"
        );
        for (k, v) in &got {
            assert!(
                *v <= want[k],
                "FAIL: {netdev} {k}: rdmad {v} > ethtool {}",
                want[k]
            );
        }
        println!(
            "{netdev}: {} standard statistics, as ethtool -S --all-groups ({} lines)",
            got.len(),
            text.lines().count()
        );

        // FEC.
        let fec = rdmad_family(&series, "rdma_netdev_fec_info", device, netdev);
        match ethtool(&["--show-fec", netdev]) {
            Ok(text) => {
                let active = text
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("Active FEC encoding: "))
                    .unwrap_or("")
                    .trim()
                    .to_string();
                assert!(
                    fec.keys()
                        .any(|k| k.contains(&format!("active=\"{active}\""))),
                    "FAIL: {netdev}: ethtool says {active:?}, rdmad {fec:?}"
                );
            }
            Err(text) => {
                assert!(
                    text.contains("Operation not supported"),
                    "FAIL: ethtool --show-fec {netdev}: {text}"
                );
                assert!(fec.is_empty(), "FAIL: {netdev}: {fec:?} without FEC");
                println!("{netdev}: no FEC operation (EOPNOTSUPP), no series: {text:?}");
            }
        }
    }
}

/// A RoCE port's effective rate is its netdev's speed as `ethtool NETDEV` prints it (veth
/// says 10000Mb/s), and absent where ethtool says the speed is unknown (virtio_net).
#[test]
fn effective_rate_is_the_netdev_speed() {
    let series = rdmad_once();
    let mut known = 0;
    for (device, netdev) in PAIRS {
        let text = ethtool(&[netdev]).unwrap_or_else(|e| panic!("FAIL: ethtool {netdev}: {e}"));
        let speed = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("Speed: "))
            .unwrap_or_else(|| panic!("FAIL: ethtool {netdev} prints no Speed:\n{text}"));
        let key =
            format!("rdma_port_effective_rate_bytes_per_second{{device=\"{device}\",port=\"1\"}}");
        let got = series.get(&key).copied();
        match speed
            .strip_suffix("Mb/s")
            .and_then(|m| m.parse::<f64>().ok())
        {
            Some(mbps) => {
                assert_eq!(
                    got,
                    Some(mbps * 1e6 / 8.0),
                    "FAIL: {key}, ethtool says {speed}"
                );
                known += 1;
            }
            None => assert_eq!(got, None, "FAIL: {key}, ethtool says {speed}"),
        }
        println!("{netdev}: ethtool Speed: {speed}; rdmad {key} = {got:?}");
    }
    assert!(
        known > 0,
        "FAIL: no lab netdev reports a speed (veth should)"
    );
}
