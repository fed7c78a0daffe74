//! rdmad's command line end to end: flags, environment variables, config-file errors, usage
//! errors and their exit codes, `--help`.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{once, rdmad, run, stdout, tempdir, workspace};

/// Without the `bpf` feature `--collector.trace` is not a startup failure: the reason is
/// logged once, at startup, and the collector reports success 0 (no warning per scrape).
#[cfg(not(feature = "bpf"))]
#[test]
fn trace_collector_without_bpf_reports_failure_once_and_serves() {
    let dir = tempdir("trace");
    let out = run(rdmad()
        .args(["--once", "--collector.trace", "--path.sysfs"])
        .arg(&dir)
        .env("RDMAD_LOG", "info"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "rdmad --once failed: {stderr}");
    let text = stdout(&out);
    assert!(
        text.contains("rdma_scrape_collector_success{collector=\"trace\"} 0\n"),
        "{text}"
    );
    assert!(text.contains("rdma_scrape_collector_success{collector=\"sysfs_counters\"} 1\n"));
    assert!(!text.contains("rdma_trace_"), "{text}");
    assert_eq!(
        stderr.matches("built without BPF support").count(),
        1,
        "the reason once: {stderr}"
    );
    assert!(!stderr.contains("collector failed"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn no_devices_is_not_an_error() {
    let dir = tempdir("empty");
    let text = once(&dir, &[]);
    assert!(text.contains("rdma_scrape_collector_success{collector=\"sysfs_counters\"} 1\n"));
    assert!(!text.contains("rdma_device_info"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn excluded_devices_are_never_opened() {
    // bad0's only counter is a FIFO: opening it would block forever. With bad0 excluded the
    // scrape must finish, proving the filter runs before any counter file is opened.
    let dir = tempdir("filter");
    let good = dir.join("class/infiniband/good0/ports/1/hw_counters");
    let bad = dir.join("class/infiniband/bad0/ports/1/hw_counters");
    std::fs::create_dir_all(&good).unwrap();
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(good.join("sent_pkts"), "5\n").unwrap();
    let status = Command::new("mkfifo")
        .arg(bad.join("sent_pkts"))
        .status()
        .expect("mkfifo runs");
    assert!(status.success());
    let mut child = rdmad()
        .arg("--once")
        .arg("--path.sysfs")
        .arg(&dir)
        .arg("--collector.device-exclude=bad.*")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rdmad hung: the excluded device's FIFO was opened");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut text = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    assert!(
        text.contains("rdma_port_hw_sent_pkts_total{device=\"good0\",port=\"1\"} 5\n"),
        "{text}"
    );
    assert!(!text.contains("bad0"), "{text}");
    let include = once(&dir, &["--collector.device-include", "good0"]);
    assert!(!include.contains("bad0"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn env_vars_set_flags() {
    let root = workspace().join("tests/fixtures/sysfs/rxe");
    let out = run(rdmad()
        .arg("--once")
        .env("RDMAD_PATH_SYSFS", &root)
        .env("RDMAD_COLLECTOR_SYSFS_COUNTERS", "false"));
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(text.contains("rdma_port_info{device=\"rxe0\""), "{text}");
    assert!(!text.contains("rdma_port_hw_sent_pkts_total"));
    assert!(!text.contains("collector=\"sysfs_counters\""));
}

#[test]
fn config_errors_name_the_key_and_exit_1() {
    let dir = tempdir("config");
    let file = dir.join("rdmad.toml");
    std::fs::write(&file, "[collector]\nsysfs_infos = true\n").unwrap();
    let out = run(rdmad().arg("--once").arg("--config").arg(&file));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown key `collector.sysfs_infos`"), "{err}");
    assert!(err.contains(file.to_str().unwrap()), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn usage_errors_exit_2_and_bad_patterns_exit_1() {
    let out = run(rdmad().arg("--collector.nonexistent"));
    assert_eq!(out.status.code(), Some(2));
    let out = run(rdmad().args(["--once", "--collector.device-include", "mlx5_("]));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("device-include"));
}

/// Without the `verbs` feature `--probe.enable` is refused at startup (exit 1), with the
/// remedy; a secret file's content never appears in an error.
#[cfg(not(feature = "verbs"))]
#[test]
fn probe_enable_without_verbs_exits_1() {
    let out = run(rdmad().args(["--once", "--probe.enable"]));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("built without verbs support; cargo build-rdma"),
        "{err}"
    );
    let out = run(rdmad().arg("--once").env("RDMAD_PROBE_ENABLE", "true"));
    assert_eq!(
        out.status.code(),
        Some(1),
        "the env variable enables it too"
    );
    // Off (the default): no probe series, and the exposition is unchanged.
    let root = workspace().join("tests/fixtures/sysfs/mlx5-roce");
    let text = once(&root, &[]);
    assert!(!text.contains("rdma_probe_"));
    assert!(!text.contains("collector=\"probes\""));
}

/// A peer or listener without a secret file is a bad setting (exit 1), before anything starts.
#[test]
fn probe_peer_without_secret_exits_1() {
    let out = run(rdmad().args(["--once", "--probe.enable", "--probe.peer", "10.0.0.2:9737"]));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--probe.secret-file"), "{err}");
}

#[test]
fn help_lists_generated_collector_flags() {
    let out = run(rdmad().arg("--help"));
    assert!(out.status.success());
    let help = stdout(&out);
    for flag in [
        "--web.listen-address",
        "--path.sysfs",
        "--config",
        "--collector.device-include",
        "--collector.device-exclude",
        "--collector.sysfs_info",
        "--no-collector.sysfs_info",
        "--collector.sysfs_counters",
        "--no-collector.sysfs_counters",
        "RDMAD_COLLECTOR_SYSFS_COUNTERS",
    ] {
        assert!(help.contains(flag), "--help lacks {flag}:\n{help}");
    }
}
