//! End-to-end tests of `rdmactl devices` and `rdmactl counters` on the fake sysfs trees in
//! `tests/fixtures/sysfs/`: the built binary runs with `--path.sysfs <fixture>` and its table,
//! JSON (the rdmakit Snapshot), stderr warnings, exit codes, watch-mode rates and Ctrl-C
//! handling are checked.

use rdmakit::model::CounterSource;
use rdmakit::Snapshot;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs")
}

fn rdmactl(args: &[&str], root: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rdmactl"))
        .args(args)
        .arg("--path.sysfs")
        .arg(root)
        .output()
        .expect("run rdmactl")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A scratch directory unique to this test process and `name`, removed first.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rdmactl-views-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn devices_table_for_every_fixture() {
    let cases: &[(&str, &[&str])] = &[
        (
            "mlx5-ib",
            &[
                "mlx5_0",
                "ACTIVE",
                "LinkUp",
                "100 Gb/sec (4X EDR)",
                "InfiniBand",
                "mlx5_core",
                "0000:3b:00.0",
            ],
        ),
        (
            "mlx5-roce",
            &[
                "mlx5_1",
                "DOWN",
                "Disabled",
                "Ethernet",
                "ens1f1np1",
                "0000:5e:00.1",
            ],
        ),
        ("rxe", &["rxe0", "2.5 Gb/sec (1X)", "Ethernet", "eth0"]),
        (
            "iwarp",
            &["cxgb4_0", "10 Gb/sec (4X)", "cxgb4", "0000:02:00.4"],
        ),
        ("bnxt-re", &["bnxt_re0", "bnxt_en", "ens2f0np0"]),
        ("efa", &["efa_0", "Unknown", "efa", "0000:00:06.0"]),
        ("hfi1", &["hfi1_0", "hfi1", "0000:05:00.0"]),
    ];
    for (fixture, expected) in cases {
        let out = rdmactl(&["devices"], &fixtures().join(fixture));
        assert!(out.status.success(), "{fixture}: {}", stderr(&out));
        let text = stdout(&out);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].starts_with("DEVICE") && lines[0].contains("PCI"),
            "{text}"
        );
        for needle in *expected {
            assert!(
                text.contains(needle),
                "{fixture}: {needle:?} missing in\n{text}"
            );
        }
        assert!(stderr(&out).is_empty(), "{fixture}: {}", stderr(&out));
    }
}

#[test]
fn devices_table_has_one_row_per_port() {
    let out = rdmactl(&["devices"], &fixtures().join("mlx5-roce"));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 3, "header + 2 ports:\n{text}");
    let rxe_row = stdout(&rdmactl(&["devices"], &fixtures().join("rxe")))
        .lines()
        .nth(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .expect("row");
    assert_eq!(
        rxe_row,
        "rxe0 1 ACTIVE LinkUp 2.5 Gb/sec (1X) Ethernet eth0 - -"
    );
}

#[test]
fn devices_json_is_the_snapshot_without_counters() {
    let out = rdmactl(&["devices", "--json"], &fixtures().join("filters"));
    assert!(out.status.success());
    let snapshot: Snapshot = serde_json::from_slice(&out.stdout).expect("Snapshot JSON");
    assert_eq!(snapshot.devices.len(), 2);
    assert!(snapshot
        .devices
        .iter()
        .all(|d| d.ports.iter().all(|p| p.counters.is_empty())));
    assert!(
        snapshot.errors.is_empty(),
        "the inventory opens no counter file, so the broken ones stay unread"
    );
    assert_eq!(
        snapshot.devices[0].pci_addr.as_deref(),
        Some("0000:3b:00.0")
    );
}

#[test]
fn no_devices_exits_3() {
    let root = scratch("empty");
    for cmd in ["devices", "counters"] {
        let out = rdmactl(&[cmd], &root);
        assert_eq!(out.status.code(), Some(3), "{cmd}");
        assert!(
            stderr(&out).contains("no RDMA devices under"),
            "{cmd}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn counters_table_shows_every_source_and_units() {
    let out = rdmactl(&["counters"], &fixtures().join("hfi1"));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.lines().any(|l| l.contains(" pma ")
        && l.contains("port_xmit_data")
        && l.contains("4-byte words = ")));
    assert!(text
        .lines()
        .any(|l| l.contains(" hw ") && l.contains("TxWait")));
    assert!(
        text.lines()
            .any(|l| l.contains("device_hw") && l.contains("DcRecvErr") && l.contains(" - ")),
        "device-level counters have no port:\n{text}"
    );
    assert!(text
        .lines()
        .any(|l| l.contains("lifespan") && l.contains("gauge, ms")));
}

#[test]
fn counters_json_nonzero_on_rxe() {
    let out = rdmactl(
        &["counters", "--json", "--nonzero"],
        &fixtures().join("rxe"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let s: Snapshot = serde_json::from_slice(&out.stdout).expect("Snapshot JSON");
    let port = s.devices[0].port(1).expect("port 1");
    assert!(!port.counters.is_empty());
    assert!(port.counters.iter().all(|c| c.value != 0));
    assert_eq!(
        port.counter(CounterSource::Hw, "sent_pkts")
            .map(|c| c.value),
        Some(1234)
    );
    let all = rdmactl(&["counters", "--json"], &fixtures().join("rxe"));
    let all: Snapshot = serde_json::from_slice(&all.stdout).expect("Snapshot JSON");
    assert_eq!(all.devices[0].ports[0].counters.len(), 16);
    assert!(
        all.devices[0].ports[0].counters.len() > port.counters.len(),
        "the fixture has zero counters that --nonzero hides"
    );
}

#[test]
fn counters_of_one_port() {
    let out = rdmactl(
        &["counters", "mlx5_1/1", "--json"],
        &fixtures().join("mlx5-roce"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let s: Snapshot = serde_json::from_slice(&out.stdout).expect("Snapshot JSON");
    let names: Vec<&str> = s.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["mlx5_1"]);
    assert_eq!(s.devices[0].ports.len(), 1);

    let out = rdmactl(&["counters", "mlx5_1/2"], &fixtures().join("mlx5-roce"));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("has no port 2"), "{}", stderr(&out));
    let out = rdmactl(&["counters", "mlx5_9"], &fixtures().join("mlx5-roce"));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("mlx5_0, mlx5_1"), "{}", stderr(&out));
    let out = rdmactl(&["counters", "mlx5_1/one"], &fixtures().join("mlx5-roce"));
    assert_eq!(out.status.code(), Some(2), "usage error");
}

#[test]
fn counters_of_one_device_never_read_the_others() {
    let root = fixtures().join("filters");
    let all = rdmactl(&["counters"], &root);
    assert!(all.status.success());
    assert!(
        stderr(&all).contains("4 sysfs file(s) could not be read"),
        "{}",
        stderr(&all)
    );
    let one = rdmactl(&["counters", "mlx5_0"], &root);
    assert!(one.status.success());
    assert!(
        stderr(&one).is_empty(),
        "mlx5_1's broken files must not be opened: {}",
        stderr(&one)
    );
    assert!(!stdout(&one).contains("mlx5_1"));
}

#[test]
fn counters_on_iwarp_warn_but_succeed() {
    let out = rdmactl(&["counters"], &fixtures().join("iwarp"));
    assert!(out.status.success());
    assert!(
        stderr(&out).contains("16 sysfs file(s)"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("N/A (no PMA)"));
    assert!(
        !stdout(&out).contains(" pma "),
        "N/A counters are not shown as 0"
    );
    assert!(stdout(&out).contains("ip4InSegs"));
}

/// Wait until watch mode reports (on stderr) that the first sample is taken and Ctrl-C is
/// handled; returns the child's remaining stderr reader.
fn wait_for_first_sample(child: &mut Child) -> BufReader<std::process::ChildStderr> {
    let mut err = BufReader::new(child.stderr.take().expect("piped stderr"));
    let mut line = String::new();
    err.read_line(&mut line).expect("status line");
    assert!(line.contains("Ctrl-C stops"), "{line}");
    err
}

/// Copy a fixture (keeping its relative symlinks) so a test can change counter values.
fn copy_fixture(name: &str, to: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(fixtures().join(name))
        .arg(to)
        .status()
        .expect("cp");
    assert!(status.success());
}

#[test]
fn watch_prints_rates_per_second() {
    let root = scratch("watch");
    copy_fixture("mlx5-ib", &root);
    let port = root.join("class/infiniband/mlx5_0/ports/1");
    let read = |rel: &str| -> u64 {
        std::fs::read_to_string(port.join(rel))
            .expect("read")
            .trim()
            .parse()
            .expect("number")
    };
    let rcv = read("counters/port_rcv_data");
    let ooo = read("hw_counters/out_of_sequence");
    let mut child = Command::new(env!("CARGO_BIN_EXE_rdmactl"))
        .args([
            "counters", "mlx5_0/1", "--watch", "1", "--count", "1", "--json",
        ])
        .arg("--path.sysfs")
        .arg(&root)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Change values between the first sample and the second one (1 s later).
    let mut err = wait_for_first_sample(&mut child);
    std::fs::write(
        port.join("counters/port_rcv_data"),
        format!("{}\n", rcv + 1000),
    )
    .expect("write");
    std::fs::write(
        port.join("hw_counters/out_of_sequence"),
        format!("{}\n", ooo + 50),
    )
    .expect("write");
    let out = child.wait_with_output().expect("wait");
    let mut rest = String::new();
    err.read_to_string(&mut rest).expect("stderr");
    let _ = std::fs::remove_dir_all(&root);
    assert!(out.status.success(), "{rest}");
    assert!(rest.is_empty(), "{rest}");
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON report per sample: {text}");
    let report: serde_json::Value = serde_json::from_str(lines[0]).expect("JSON line");
    let dt = report["interval_seconds"].as_f64().expect("interval");
    // The time between the two samples: at least the --watch interval (rdmactl sleeps it in
    // full after the first sample); how much longer depends on the machine, so it is a figure.
    assert!(dt >= 1.0, "interval {dt} is shorter than --watch 1");
    let _ = writeln!(
        std::io::stderr(),
        "figure: rdmactl counters --watch 1 sampled {dt:.3} s apart"
    );
    let rates = report["rates"].as_array().expect("rates");
    let find = |name: &str| {
        rates
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {text}"))
    };
    let data = find("port_rcv_data");
    assert_eq!(data["delta"], 1000);
    let per_second = data["per_second"].as_f64().expect("rate");
    assert!((per_second - 1000.0 / dt).abs() < 1e-6, "{per_second}");
    let bytes = data["bytes_per_second"].as_f64().expect("bytes rate");
    assert!((bytes - 4.0 * per_second).abs() < 1e-6, "x4: {bytes}");
    assert_eq!(find("out_of_sequence")["delta"], 50);
    assert_eq!(find("symbol_error")["delta"], 0);
    assert_eq!(find("lifespan")["kind"], "gauge");
    assert!(find("lifespan")["per_second"].is_null());
}

#[test]
fn watch_nonzero_shows_only_what_moved() {
    let out = rdmactl(
        &["counters", "--watch", "0.1", "--count", "1", "--nonzero"],
        &fixtures().join("rxe"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("PER_SEC"), "{text}");
    assert!(
        !text.contains("sent_pkts"),
        "nothing moved on a static tree: {text}"
    );
}

#[test]
fn watch_ends_cleanly_on_ctrl_c() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rdmactl"))
        .args(["counters", "--watch", "30"])
        .arg("--path.sysfs")
        .arg(fixtures().join("rxe"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut err = wait_for_first_sample(&mut child);
    let started = std::time::Instant::now();
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let out = child.wait_with_output().expect("wait");
    let mut rest = String::new();
    err.read_to_string(&mut rest).expect("stderr");
    assert_eq!(out.status.code(), Some(0), "{rest}");
    // The bound is the configured interval: waiting for it out would take 30 s from the
    // first sample, and `started` is later than that sample.
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(30),
        "stopped after {waited:?}: it waited for the 30 s interval instead of stopping"
    );
    let _ = writeln!(
        std::io::stderr(),
        "figure: rdmactl counters --watch stopped {:.3} s after SIGINT",
        waited.as_secs_f64()
    );
    assert!(rest.is_empty(), "no error on the way out: {rest}");
    assert!(out.stdout.is_empty(), "no report was due yet");
}
