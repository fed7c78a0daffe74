//! `rdmactl doctor roce` end to end on the captured trees: the exit code (0 without a
//! failing check, 4 with one), `--json`, the device filter, and that a tree from another
//! machine without captures never asks this machine's kernel (DCB and ethtool facts are
//! then "not available").

use std::path::{Path, PathBuf};
use std::process::Command;

fn tree(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/roce-doctor")
        .join(name)
}

fn run(root: &Path, extra: &[&str]) -> (i32, serde_json::Value) {
    let mut args: Vec<String> = vec![
        "doctor".into(),
        "roce".into(),
        "--json".into(),
        "--path.sysfs".into(),
        root.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let out = Command::new(env!("CARGO_BIN_EXE_rdmactl"))
        .args(&args)
        .output()
        .expect("run rdmactl");
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {:?} stderr {:?}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().expect("exit code"), json)
}

fn captures(root: &Path) -> Vec<String> {
    let mut v = vec![
        "--path.ethtool-capture".to_string(),
        root.join("ethtool").display().to_string(),
        "--path.dcb-capture".to_string(),
        root.join("dcb").display().to_string(),
    ];
    if root.join("ethtool-after").is_dir() {
        v.push("--path.ethtool-capture-after".into());
        v.push(root.join("ethtool-after").display().to_string());
    }
    v
}

#[test]
fn exit_code_says_whether_a_check_failed() {
    let healthy = tree("healthy");
    let c = captures(&healthy);
    let (code, json) = run(&healthy, &c.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{json:#}");
    assert_eq!(json["worst"], "not available");

    let bad = tree("pfc-on-wrong-priority");
    let c = captures(&bad);
    let (code, json) = run(&bad, &c.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 4, "{json:#}");
    assert_eq!(json["checks"][0]["id"], "tc-protected");
    assert_eq!(json["checks"][0]["verdict"], "fail");
}

#[test]
fn a_foreign_tree_without_captures_reads_nothing_of_this_machine() {
    let root = tree("healthy");
    let (code, json) = run(&root, &[]);
    assert_eq!(code, 0, "{json:#}");
    for c in json["checks"].as_array().unwrap() {
        let id = c["id"].as_str().unwrap();
        if [
            "pfc",
            "dscp-map",
            "trust",
            "tc-protected",
            "pause",
            "discards",
        ]
        .contains(&id)
        {
            assert_eq!(c["verdict"], "not available", "{c:#}");
            assert!(
                c["finding"].as_str().unwrap().contains("not this machine"),
                "{c:#}"
            );
        }
    }
}

#[test]
fn unknown_device_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_rdmactl"))
        .args(["doctor", "roce", "nosuch0", "--path.sysfs"])
        .arg(tree("healthy"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nosuch0"));
}

/// The process `pid` sleeps (nanosleep or clock_nanosleep, x86_64 and aarch64 numbers).
fn asleep(pid: u32) -> bool {
    let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
    let syscall = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
    let nr = syscall.split_whitespace().next().unwrap_or("");
    wchan.contains("nanosleep") || ["35", "230", "101", "115"].contains(&nr)
}

#[test]
fn sigusr1_ends_the_interval_early_and_the_report_covers_the_time_waited() {
    let root = tree("healthy");
    let t0 = std::time::Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_rdmactl"))
        .args([
            "doctor",
            "roce",
            "--json",
            "--interval",
            "600",
            "--path.sysfs",
        ])
        .arg(&root)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run rdmactl");
    let pid = child.id();
    // Its first reading taken, it sleeps in the interval.
    let deadline = t0 + std::time::Duration::from_secs(120);
    while !asleep(pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "rdmactl doctor roce never slept"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let kill = Command::new("kill")
        .args(["-USR1", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(kill.success());
    let out = child.wait_with_output().expect("wait for rdmactl");
    let took = t0.elapsed();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        took.as_secs() < 300,
        "SIGUSR1 did not end the interval: {took:?}"
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let secs = json["interval_seconds"].as_f64().expect("interval_seconds");
    assert!(
        secs > 0.0 && secs <= took.as_secs_f64(),
        "interval_seconds {secs} for a run of {took:?}"
    );
}
