//! Live exporter test, run INSIDE the Soft-RoCE lab VM (never on the host): rdmad serving
//! real rxe devices must report every hw counter file with the value sysfs shows, the port
//! info of rxe0, rxe_a and rxe_b, packet counters that grow under ib_write_bw traffic, and
//! resource counts equal to what `rdma resource show` prints.
//!
//! The expected metric names are derived here independently of rdmad's naming code
//! (`rdma_port_hw_<file>_total{device,port}`; `lifespan` in ms becomes
//! `rdma_port_hw_lifespan_seconds`), so a naming regression fails this test too.
//! No device is a failure, never a skip: the lab always boots with rxe0, rxe_a and rxe_b.
//!
//! Hot-plug: a device added (`rdma link add rxe9` on a fresh veth) appears in the next
//! scrape and in rdmad's log (`device rxe9 added`), and once deleted its series vanish from
//! the next scrape and the log says `device rxe9 removed`. The tests of this file take one
//! lock, so no other test sees rxe9 come and go.

use live_tests::{
    parse_exposition, perftest_pair_finished, rdmad_bin, Rdmad, RdmadOptions, Scrape,
};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{mpsc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Held by every test of this file: the hot-plug test changes the device set.
static DEVICES: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    DEVICES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

const CLASS: &str = "/sys/class/infiniband";
const LAB_DEVICES: [&str; 3] = ["rxe0", "rxe_a", "rxe_b"];

/// rdmad for these tests: quiet (`RDMAD_LOG=warn`), answering /healthz within 20 s.
const RDMAD: RdmadOptions = RdmadOptions {
    log_level: "warn",
    capture_log: false,
    startup: Duration::from_secs(20),
};

/// Every hw counter file of every port: (device, port, file) -> raw value.
fn read_hw_counters() -> BTreeMap<(String, String, String), u64> {
    let mut values = BTreeMap::new();
    let devices = std::fs::read_dir(CLASS).unwrap_or_else(|e| {
        panic!("FAIL: {CLASS}: {e}: no RDMA devices; the live suite must run in the lab")
    });
    for device in devices.flatten() {
        let dev = device.file_name().to_string_lossy().into_owned();
        let Ok(ports) = std::fs::read_dir(device.path().join("ports")) else {
            continue;
        };
        for port in ports.flatten() {
            let num = port.file_name().to_string_lossy().into_owned();
            let Ok(files) = std::fs::read_dir(port.path().join("hw_counters")) else {
                continue;
            };
            for file in files.flatten() {
                let name = file.file_name().to_string_lossy().into_owned();
                let text = std::fs::read_to_string(file.path())
                    .unwrap_or_else(|e| panic!("FAIL: read {}: {e}", file.path().display()));
                let value = text.trim().parse().unwrap_or_else(|_| {
                    panic!("FAIL: {}: not a number: {text:?}", file.path().display())
                });
                values.insert((dev.clone(), num.clone(), name), value);
            }
        }
    }
    values
}

/// The series rdmad must export for a hw counter file, and the value it must have.
fn expected(device: &str, port: &str, file: &str, raw: u64) -> (String, f64) {
    let labels = format!("{{device=\"{device}\",port=\"{port}\"}}");
    if file == "lifespan" {
        (
            format!("rdma_port_hw_lifespan_seconds{labels}"),
            raw as f64 / 1000.0,
        )
    } else {
        (format!("rdma_port_hw_{file}_total{labels}"), raw as f64)
    }
}

fn assert_lab_devices_present() {
    for device in LAB_DEVICES {
        assert!(
            Path::new(CLASS).join(device).exists(),
            "FAIL: {CLASS}/{device} missing: the lab must boot with --devices 2"
        );
    }
}

#[test]
fn port_info_for_every_lab_device() {
    let _devices = lock();
    assert_lab_devices_present();
    let rdmad = Rdmad::start_with(&[], RDMAD);
    let Scrape {
        headers,
        series,
        text,
    } = rdmad.scrape();
    assert!(
        headers.contains("content-type: text/plain; version=0.0.4"),
        "FAIL: wrong content type: {headers}"
    );
    for (device, netdev) in [("rxe0", "eth0"), ("rxe_a", "veth0"), ("rxe_b", "veth1")] {
        // Width and lane speed as sysfs prints them: `10 Gb/sec (1X QDR)`, `2.5 Gb/sec (1X)`.
        let rate = std::fs::read_to_string(format!("{CLASS}/{device}/ports/1/rate"))
            .unwrap_or_else(|e| panic!("FAIL: {device} rate: {e}"));
        let inside = rate
            .split_once('(')
            .and_then(|(_, r)| r.split_once(')'))
            .map(|(r, _)| r.to_string())
            .unwrap_or_default();
        let mut words = inside.split_whitespace();
        let (width, speed) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let info = format!(
            "rdma_port_info{{device=\"{device}\",port=\"1\",link_layer=\"Ethernet\",netdev=\"{netdev}\",state=\"ACTIVE\",phys_state=\"LinkUp\",link_width=\"{width}\",link_speed=\"{speed}\"}}"
        );
        assert_eq!(
            series.get(&info),
            Some(&1.0),
            "FAIL: {info} missing; rdma_port_info lines:\n{}",
            text.lines()
                .filter(|l| l.starts_with("rdma_port_info"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        let state = format!("rdma_port_state_id{{device=\"{device}\",port=\"1\"}}");
        assert_eq!(series.get(&state), Some(&4.0), "FAIL: {state}");
        let errors =
            format!("rdma_sysfs_read_errors{{collector=\"sysfs_counters\",device=\"{device}\"}}");
        assert_eq!(series.get(&errors), Some(&0.0), "FAIL: {errors}");
    }
    for collector in ["sysfs_info", "sysfs_counters"] {
        let success = format!("rdma_scrape_collector_success{{collector=\"{collector}\"}}");
        assert_eq!(series.get(&success), Some(&1.0), "FAIL: {success}");
    }
    assert!(
        text.contains("# HELP rdma_port_hw_sent_pkts_total RoCE packets"),
        "FAIL: HELP for sent_pkts does not come from the catalog"
    );
}

#[test]
fn every_hw_counter_file_has_a_series_with_its_value() {
    let _devices = lock();
    assert_lab_devices_present();
    let rdmad = Rdmad::start_with(&[], RDMAD);
    // Counters may move between the sysfs read and the scrape: compare only files that did
    // not change across the scrape, and retry until every file was stable once.
    let mut unchecked: Option<Vec<String>> = None;
    let mut checked = 0usize;
    for _attempt in 0..5 {
        let before = read_hw_counters();
        let series = rdmad.scrape().series;
        let after = read_hw_counters();
        assert!(
            before.len() >= 3 * 16,
            "FAIL: expected 16 hw counters on each of rxe0, rxe_a, rxe_b; found {}",
            before.len()
        );
        let mut moving = Vec::new();
        checked = 0;
        for ((device, port, file), raw) in &before {
            let (name, want) = expected(device, port, file, *raw);
            let got = series.get(&name).unwrap_or_else(|| {
                panic!("FAIL: no series {name} for {device}/ports/{port}/hw_counters/{file}")
            });
            if after.get(&(device.clone(), port.clone(), file.clone())) != Some(raw) {
                moving.push(name);
                continue;
            }
            assert_eq!(
                *got, want,
                "FAIL: {name} = {got}, sysfs says {want} (stable)"
            );
            checked += 1;
        }
        if moving.is_empty() {
            unchecked = None;
            break;
        }
        unchecked = Some(moving);
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(
        unchecked.is_none(),
        "FAIL: counters kept moving on an idle lab: {unchecked:?}"
    );
    assert!(checked >= 48, "FAIL: only {checked} files compared");
}

fn counter(series: &BTreeMap<String, f64>, device: &str, file: &str) -> f64 {
    let (name, _) = expected(device, "1", file, 0);
    *series
        .get(&name)
        .unwrap_or_else(|| panic!("FAIL: no series {name}"))
}

#[test]
fn packet_counters_grow_under_traffic() {
    let _devices = lock();
    assert_lab_devices_present();
    let rdmad = Rdmad::start_with(&[], RDMAD);
    // The same counters from the sysfs files instead of RDMA netlink: rdmad keeps those
    // files open between scrapes and re-reads them with pread, which must see new values.
    let from_sysfs = Rdmad::start_with(&["--no-collector.netlink_counters"], RDMAD);
    let before = rdmad.scrape().series;
    let before_sysfs = from_sysfs.scrape().series;
    let common = ["-x", "1", "-s", "4096", "-n", "200"];
    let server = Command::new("timeout")
        .args(["60", "ib_write_bw", "-d", "rxe_a"])
        .args(common)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("FAIL: cannot start ib_write_bw (server)");
    // Listening: a server that never does fails the client below.
    live_tests::tcp::wait_listening(18515, Duration::from_secs(30));
    let client = Command::new("timeout")
        .args(["60", "ib_write_bw", "-d", "rxe_b"])
        .args(common)
        .arg("10.1.0.1")
        .output()
        .expect("FAIL: cannot run ib_write_bw (client)");
    let server = server.wait_with_output().expect("server exits");
    assert!(
        perftest_pair_finished(&client, &server),
        "FAIL: ib_write_bw failed: client {} {}{}; server {} {}",
        client.status,
        String::from_utf8_lossy(&client.stdout),
        String::from_utf8_lossy(&client.stderr),
        server.status,
        String::from_utf8_lossy(&server.stdout)
    );
    let after = rdmad.scrape().series;
    let after_sysfs = from_sysfs.scrape().series;
    for (source, before, after) in [
        ("netlink", &before, &after),
        ("sysfs", &before_sysfs, &after_sysfs),
    ] {
        for device in ["rxe_a", "rxe_b"] {
            for file in ["sent_pkts", "rcvd_pkts"] {
                let (b, a) = (counter(before, device, file), counter(after, device, file));
                eprintln!("{source}: {device} {file}: {b} -> {a}");
                assert!(
                    a > b,
                    "FAIL: {device} {file} from {source} did not grow: {b} -> {a}"
                );
            }
        }
    }
    // Both sources count the same packets: the sysfs scrape came second, so it saw at least
    // as many.
    for device in ["rxe_a", "rxe_b"] {
        let (n, s) = (
            counter(&after, device, "sent_pkts"),
            counter(&after_sysfs, device, "sent_pkts"),
        );
        assert!(s >= n, "FAIL: {device} sent_pkts: sysfs {s} < netlink {n}");
    }
    // The client WROTE 200 x 4096 bytes: at least one packet per message left rxe_b.
    let sent = counter(&after, "rxe_b", "sent_pkts") - counter(&before, "rxe_b", "sent_pkts");
    assert!(
        sent >= 200.0,
        "FAIL: rxe_b sent only {sent} packets for 200 writes"
    );
}

#[test]
fn excluded_devices_are_not_exported() {
    let _devices = lock();
    assert_lab_devices_present();
    let out = Command::new(rdmad_bin())
        .args(["--once", "--collector.device-exclude=rxe_.*"])
        .output()
        .expect("FAIL: rdmad --once runs");
    assert!(out.status.success(), "FAIL: rdmad --once: {}", out.status);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("rdma_port_info{device=\"rxe0\""),
        "FAIL: rxe0 missing"
    );
    assert!(
        !text.contains("rxe_a") && !text.contains("rxe_b"),
        "FAIL: excluded devices exported"
    );
}

#[test]
fn resource_counts_match_rdma_resource_show() {
    let _devices = lock();
    assert_lab_devices_present();
    let rdmad = Rdmad::start_with(&[], RDMAD);
    let series = rdmad.scrape().series;
    let out = Command::new("rdma")
        .args(["resource", "show"])
        .output()
        .expect("FAIL: cannot run `rdma resource show`");
    assert!(
        out.status.success(),
        "FAIL: rdma resource show: {}",
        out.status
    );
    // "0: rxe0: pd 1 cq 1 qp 1 cm_id 0 mr 0 ctx 0 srq 0"
    let text = String::from_utf8_lossy(&out.stdout);
    let mut compared = 0;
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(device) = words.get(1).map(|d| d.trim_end_matches(':')) else {
            continue;
        };
        for pair in words[2..].chunks(2) {
            let [kind, count] = pair else { continue };
            let want: f64 = count
                .parse()
                .unwrap_or_else(|_| panic!("FAIL: odd `rdma resource show` line {line:?}"));
            let name = format!("rdma_resources{{device=\"{device}\",type=\"{kind}\"}}");
            assert_eq!(series.get(&name), Some(&want), "FAIL: {name} vs {line:?}");
            compared += 1;
        }
    }
    assert!(
        compared >= 3 * 7,
        "FAIL: compared only {compared} counts:\n{text}"
    );
    // Every lab device has at least the kernel's GSI QP.
    for device in LAB_DEVICES {
        let qp = format!("rdma_resources{{device=\"{device}\",type=\"qp\"}}");
        assert!(series.get(&qp).is_some_and(|v| *v >= 1.0), "FAIL: {qp}");
    }
}

/// Run a setup command; failure fails the test.
fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("FAIL: cannot run {args:?}: {e}"));
    assert!(
        out.status.success(),
        "FAIL: {args:?}: {} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// veth8/veth9 with rxe9 on veth8; removed on drop (whatever the test did).
struct HotplugDevice;

impl HotplugDevice {
    fn add() -> HotplugDevice {
        let guard = HotplugDevice;
        sh(&[
            "ip", "link", "add", "veth8", "type", "veth", "peer", "name", "veth9",
        ]);
        sh(&["ip", "link", "set", "veth8", "up"]);
        sh(&["ip", "link", "set", "veth9", "up"]);
        sh(&[
            "rdma", "link", "add", "rxe9", "type", "rxe", "netdev", "veth8",
        ]);
        guard
    }
}

impl Drop for HotplugDevice {
    fn drop(&mut self) {
        if Path::new(CLASS).join("rxe9").exists() {
            let _ = Command::new("rdma")
                .args(["link", "delete", "rxe9"])
                .status();
        }
        let _ = Command::new("ip").args(["link", "del", "veth8"]).status();
    }
}

/// Wait (up to 30 s: the monitor compares dumps every 2 s) for a log line containing `what`.
fn wait_for_log(log: &mpsc::Receiver<String>, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match log.recv_timeout(left) {
            Ok(line) if line.contains(what) => return,
            Ok(_) => {}
            Err(_) => panic!("FAIL: rdmad never logged {what:?}"),
        }
    }
}

fn rxe9_series(series: &BTreeMap<String, f64>) -> Vec<String> {
    series
        .keys()
        .filter(|k| k.contains("device=\"rxe9\""))
        .cloned()
        .collect()
}

#[test]
fn devices_added_and_deleted_at_run_time() {
    let _devices = lock();
    assert_lab_devices_present();
    assert!(
        !Path::new(CLASS).join("rxe9").exists(),
        "FAIL: rxe9 exists before the test"
    );
    let rdmad = Rdmad::start_with(
        &[],
        RdmadOptions {
            log_level: "info",
            capture_log: true,
            ..RDMAD
        },
    );
    let log = rdmad.log();
    let before = rdmad.scrape().series;
    assert!(rxe9_series(&before).is_empty());

    let hotplug = HotplugDevice::add();
    wait_for_log(log, "device rxe9 added");
    let with = rdmad.scrape().series;
    let added = rxe9_series(&with);
    for want in [
        "rdma_port_hw_sent_pkts_total{device=\"rxe9\",port=\"1\"}",
        "rdma_sysfs_read_errors{collector=\"sysfs_info\",device=\"rxe9\"}",
    ] {
        assert!(
            added.iter().any(|s| s == want),
            "FAIL: {want} missing: {added:?}"
        );
    }
    assert!(
        added.iter().any(|s| s.starts_with(
            "rdma_port_info{device=\"rxe9\",port=\"1\",link_layer=\"Ethernet\",netdev=\"veth8\""
        )),
        "FAIL: no rdma_port_info for rxe9 on veth8: {added:?}"
    );

    sh(&["rdma", "link", "delete", "rxe9"]);
    wait_for_log(log, "device rxe9 removed");
    let after = rdmad.scrape().series;
    assert_eq!(
        rxe9_series(&after),
        Vec::<String>::new(),
        "FAIL: series of the deleted rxe9 are still exported"
    );
    for collector in [
        "sysfs_info",
        "netlink_counters",
        "sysfs_counters",
        "netlink_resources",
    ] {
        let success = format!("rdma_scrape_collector_success{{collector=\"{collector}\"}}");
        assert_eq!(
            after.get(&success),
            Some(&1.0),
            "FAIL: {success} after the removal"
        );
    }
    // The other devices are still there.
    assert!(after.contains_key("rdma_port_hw_sent_pkts_total{device=\"rxe0\",port=\"1\"}"));
    drop(hotplug);
}

#[test]
fn netlink_and_sysfs_agree_and_no_qp_counters_without_counter_mode() {
    let _devices = lock();
    assert_lab_devices_present();
    // The same hw counters, once from netlink (default) and once from sysfs only.
    let netlink = Command::new(rdmad_bin())
        .args([
            "--once",
            "--collector.disable-defaults",
            "--collector.netlink_counters",
        ])
        .output()
        .expect("FAIL: rdmad --once runs");
    let sysfs = Command::new(rdmad_bin())
        .args([
            "--once",
            "--collector.disable-defaults",
            "--collector.sysfs_counters",
        ])
        .output()
        .expect("FAIL: rdmad --once runs");
    let names = |out: &std::process::Output| -> Vec<String> {
        parse_exposition(&String::from_utf8_lossy(&out.stdout))
            .unwrap_or_else(|e| panic!("FAIL: rdmad --once: {e}"))
            .into_keys()
            .filter(|k| k.starts_with("rdma_port_hw_") && !k.contains("lifespan"))
            .collect()
    };
    let (from_netlink, from_sysfs) = (names(&netlink), names(&sysfs));
    assert!(
        from_netlink.len() >= 3 * 15,
        "FAIL: netlink exported {} port hw counters: {from_netlink:?}",
        from_netlink.len()
    );
    assert_eq!(
        from_netlink, from_sysfs,
        "FAIL: netlink and sysfs export different series"
    );
    // rdmad never enables QP counter mode, and the lab does not: no rdma_qp_ series.
    let all = Command::new(rdmad_bin())
        .arg("--once")
        .output()
        .expect("FAIL: rdmad --once");
    let text = String::from_utf8_lossy(&all.stdout);
    // (rdma_qp_counter_mode{mode="none"} says so; it is the mode, not a QP counter.)
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("rdma_qp_") && !l.starts_with("rdma_qp_counter_mode{")),
        "FAIL: QP counters without counter mode"
    );
    assert!(text.contains("rdma_scrape_collector_success{collector=\"netlink_qp_counters\"} 1\n"));
}
