//! Live doctor test, run INSIDE the Soft-RoCE lab VM, through the real binary ($RDMACTL_BIN,
//! default /opt/rdma/bin/rdmactl): save `rdmactl counters --json`, provoke completion errors
//! on rxe0, save the counters again, and check that `rdmactl doctor --from A --to B --json`
//! names what happened.
//!
//! The errors come from `rdmactl experiment run qp-errors` (RNR retries exhausted, a wrong
//! rkey, transport retries exhausted, ...). An rdmactl without the `experiment` subcommand
//! (built without verbs) falls back to the course's C example /opt/rdma/examples/08_wc_errors,
//! which provokes only the RNR error and a remote access error: then only the RNR findings are
//! required, since rxe has no counter for remote access errors and no transport retry runs out.
//!
//! No device is a failure, never a skip.
use live_tests::{rdmactl_bin, LAB_DEVICE};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

const EXAMPLE: &str = "/opt/rdma/examples/08_wc_errors";

fn rdmactl(args: &[&str]) -> Output {
    let bin = rdmactl_bin();
    Command::new(&bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("FAIL: cannot run {} {}: {e}", bin.display(), args.join(" ")))
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `rdmactl counters --json` into `path`; the lab device must be in it.
fn save_counters(path: &Path) {
    let out = rdmactl(&["counters", "--json"]);
    assert!(
        out.status.success(),
        "FAIL: rdmactl counters --json: {}",
        text(&out)
    );
    let snap: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("FAIL: counters --json is not JSON ({e}): {}", text(&out)));
    let names: Vec<&str> = snap["devices"]
        .as_array()
        .map(|d| d.iter().filter_map(|d| d["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        names.contains(&LAB_DEVICE),
        "FAIL: no {LAB_DEVICE} in `rdmactl counters --json` (devices: {names:?}); the lab must \
         create it"
    );
    std::fs::write(path, &out.stdout).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// What provoked the errors, and whether a transport retry ran out on the way.
#[derive(Debug)]
struct Provoked {
    how: String,
    retry_exceeded: bool,
}

/// Does this rdmactl have `experiment run`? (Built without verbs, `experiment` has no `run`
/// and `experiment run --help` is a usage error.)
fn has_experiments() -> bool {
    rdmactl(&["experiment", "run", "--help"]).status.success()
}

fn provoke() -> Provoked {
    if has_experiments() {
        let out = rdmactl(&[
            "experiment",
            "run",
            "qp-errors",
            "--json",
            "--device",
            LAB_DEVICE,
        ]);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "FAIL: experiment run qp-errors --json is not JSON ({e}): {}",
                text(&out)
            )
        });
        assert_eq!(
            out.status.code(),
            Some(0),
            "FAIL: the qp-errors experiment did not do what it declares: {}",
            text(&out)
        );
        let retry_exceeded = report["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| s["wc_status"] == "RETRY_EXC_ERR");
        Provoked {
            how: "rdmactl experiment run qp-errors".into(),
            retry_exceeded,
        }
    } else {
        assert!(
            Path::new(EXAMPLE).is_file(),
            "FAIL: this rdmactl has no `experiment run` and {EXAMPLE} is missing"
        );
        let out = Command::new(EXAMPLE)
            .arg(LAB_DEVICE)
            .output()
            .unwrap_or_else(|e| panic!("FAIL: cannot run {EXAMPLE}: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "FAIL: {EXAMPLE}: {}", text(&out));
        assert!(
            stdout.contains("RNR_RETRY_EXC_ERR"),
            "FAIL: {EXAMPLE} did not report RNR_RETRY_EXC_ERR: {}",
            text(&out)
        );
        Provoked {
            how: EXAMPLE.into(),
            retry_exceeded: false,
        }
    }
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("live-doctor-{}-{name}", std::process::id()))
}

fn ids_on<'a>(diag: &'a Value, target: &str) -> Vec<&'a str> {
    diag["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["target"] == target)
        .filter_map(|f| f["id"].as_str())
        .collect()
}

/// (device/port, counter, delta) of every counter that moved.
fn moved(diag: &Value) -> Vec<(String, String, u64)> {
    diag["moved"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| {
            let target = match d["port"].as_u64() {
                Some(p) => format!("{}/{p}", d["device"].as_str().unwrap_or("?")),
                None => d["device"].as_str().unwrap_or("?").to_string(),
            };
            (
                target,
                d["name"].as_str().unwrap_or("?").to_string(),
                d["delta"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

#[test]
fn doctor_names_the_errors_an_experiment_provoked() {
    let (a, b) = (tmp("before.json"), tmp("after.json"));
    save_counters(&a);
    let t0 = Instant::now();
    let provoked = provoke();
    save_counters(&b);
    let secs = format!("{:.3}", t0.elapsed().as_secs_f64().max(0.001));
    let out = rdmactl(&[
        "doctor",
        "--from",
        a.to_str().unwrap(),
        "--to",
        b.to_str().unwrap(),
        "--seconds",
        &secs,
        "--json",
    ]);
    let _ = (std::fs::remove_file(&a), std::fs::remove_file(&b));
    assert!(out.status.success(), "FAIL: rdmactl doctor: {}", text(&out));
    let diag: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("FAIL: doctor --json is not JSON ({e}): {}", text(&out)));
    eprintln!(
        "doctor: errors provoked by {} (transport retries exhausted: {})",
        provoked.how, provoked.retry_exceeded
    );
    let target = format!("{LAB_DEVICE}/1");
    let ids = ids_on(&diag, &target);
    let moved = moved(&diag);
    let ctx = format!(
        "provoked by {}; findings on {target}: {ids:?}; moved: {moved:?}",
        provoked.how
    );

    // RNR: the responder had no receive posted and NAKed (send_rnr_err, rcvd_rnr_err); the
    // requester, allowed no RNR retry, gave up (retry_rnr_exceeded_err). Both QPs are on rxe0.
    assert!(ids.contains(&"rnr-retry-exhausted"), "{ctx}");
    assert!(ids.contains(&"rnr-naks"), "{ctx}");
    for name in ["retry_rnr_exceeded_err", "rcvd_rnr_err", "send_rnr_err"] {
        assert!(
            moved
                .iter()
                .any(|(t, n, d)| t == &target && n == name && *d >= 1),
            "{name} did not move on {target}; {ctx}"
        );
    }
    let rnr = diag["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "rnr-retry-exhausted" && f["target"] == target.as_str())
        .unwrap();
    assert_eq!(rnr["severity"], "error", "{rnr}");
    assert!(
        rnr["rate_per_second"].as_f64().is_some_and(|r| r > 0.0),
        "--seconds gives a rate: {rnr}"
    );
    // Errors rank first.
    assert_eq!(diag["findings"][0]["severity"], "error", "{ctx}");

    if provoked.retry_exceeded {
        assert!(ids.contains(&"transport-retry-exhausted"), "{ctx}");
        assert!(
            moved
                .iter()
                .any(|(t, n, d)| t == &target && n == "retry_exceeded_err" && *d >= 1),
            "retry_exceeded_err did not move on {target}; {ctx}"
        );
    } else {
        // 08_wc_errors exhausts no transport retry: the doctor must not invent one.
        assert!(!ids.contains(&"transport-retry-exhausted"), "{ctx}");
    }
}

/// The check `id` of `rdmactl doctor roce --json` on `target`.
fn roce_check<'a>(report: &'a Value, target: &str, id: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["target"] == target && c["id"] == id))
        .unwrap_or_else(|| panic!("FAIL: no check {id} on {target} in {report:#}"))
}

/// `rdmactl doctor roce rxe0` on real rxe: the MTU, GID and rdma_cm configfs checks give
/// verdicts from this VM's facts; the DCB, ECN and pause checks say plainly that the driver
/// does not tell (virtio_net under rxe has no DCB ops, no ECN switches, no pause counters);
/// the exit code is 4 exactly when a check fails. The rdma_cm configfs group it creates to
/// set a ToS is removed again, also on failure.
#[test]
fn doctor_roce_on_rxe_reports_what_rxe_cannot_tell() {
    let target = format!("{LAB_DEVICE}/1");
    let cm_root = Path::new("/sys/kernel/config/rdma_cm");
    if !cm_root.is_dir() {
        // configfs may not be mounted yet; rdma_cm (loaded with rdma_ucm) registers there.
        let _ = Command::new("mount")
            .args(["-t", "configfs", "none", "/sys/kernel/config"])
            .status();
    }
    assert!(
        cm_root.is_dir(),
        "FAIL: /sys/kernel/config/rdma_cm is missing (configfs not mounted or rdma_cm not loaded)"
    );
    struct Group(PathBuf);
    impl Drop for Group {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let group = Group(cm_root.join(LAB_DEVICE));
    let created = !group.0.exists();
    if created {
        std::fs::create_dir(&group.0).expect("FAIL: mkdir the rdma_cm configfs group");
    }
    let tos_file = group.0.join("ports/1/default_roce_tos");
    let old_tos = std::fs::read_to_string(&tos_file).expect("FAIL: read default_roce_tos");
    std::fs::write(&tos_file, "106").expect("FAIL: write default_roce_tos");
    let out = rdmactl(&["doctor", "roce", LAB_DEVICE, "--json", "--interval", "1"]);
    let _ = std::fs::write(&tos_file, old_tos.trim());
    if !created {
        std::mem::forget(group);
    } else {
        drop(group);
    }
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("FAIL: doctor roce --json is not JSON ({e}): {}", text(&out)));
    let worst = report["worst"].as_str().unwrap_or_default().to_string();
    assert_eq!(
        out.status.code(),
        Some(if worst == "fail" { 4 } else { 0 }),
        "FAIL: exit code vs worst verdict {worst}: {}",
        text(&out)
    );

    // MTU: the netdev's MTU as this VM has it, and a real verdict.
    let mtu = roce_check(&report, &target, "mtu");
    let netdev = mtu["netdev"].as_str().unwrap().to_string();
    let nd_mtu = std::fs::read_to_string(format!("/sys/class/net/{netdev}/mtu"))
        .expect("FAIL: netdev mtu")
        .trim()
        .to_string();
    assert_ne!(mtu["verdict"], "not available", "{mtu:#}");
    assert!(
        mtu["evidence"][0]
            .as_str()
            .unwrap()
            .contains(&format!("mtu = {nd_mtu}:")),
        "{mtu:#}"
    );
    // GIDs: rxe has RoCE v2 GIDs for its addresses.
    let v2 = std::fs::read_dir(format!(
        "/sys/class/infiniband/{LAB_DEVICE}/ports/1/gid_attrs/types"
    ))
    .expect("FAIL: gid types")
    .flatten()
    .filter(|e| std::fs::read_to_string(e.path()).is_ok_and(|t| t.trim() == "RoCE v2"))
    .count();
    assert!(v2 > 0, "FAIL: no RoCE v2 GID on {LAB_DEVICE}");
    assert_eq!(roce_check(&report, &target, "roce-v2-gid")["verdict"], "ok");
    // rdma_cm: the ToS written above, read back through configfs.
    let tos = roce_check(&report, &target, "cm-tos");
    assert_eq!(tos["verdict"], "ok", "{tos:#}");
    assert!(
        tos["evidence"][0]
            .as_str()
            .unwrap()
            .contains("= 106 (DSCP 26)"),
        "{tos:#}"
    );
    let mode = roce_check(&report, &target, "cm-roce-mode");
    assert!(
        mode["evidence"][0]
            .as_str()
            .unwrap()
            .contains("default_roce_mode = "),
        "{mode:#}"
    );
    // What rxe cannot tell.
    for id in ["pfc", "dscp-map", "trust", "tc-protected", "ecn"] {
        let c = roce_check(&report, &target, id);
        assert_eq!(c["verdict"], "not available", "{c:#}");
        assert!(
            c["finding"]
                .as_str()
                .unwrap()
                .contains("not available on this driver"),
            "{c:#}"
        );
    }
    eprintln!(
        "doctor roce on {target} ({netdev}, MTU {nd_mtu}): mtu {}, worst {worst}",
        mtu["verdict"]
    );
}
