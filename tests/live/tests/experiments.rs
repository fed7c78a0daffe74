//! Live experiment tests, run INSIDE the Soft-RoCE lab VM: every `rdmactl experiment` runs
//! with `--json` through the real binary ($RDMACTL_BIN, default /opt/rdma/bin/rdmactl) and its
//! report is checked: completion statuses, errnos, the counter deltas that must move and
//! those that must not (the experiment's own declaration, plus the facts spelled out here),
//! and `rdma res` counts after cleanup equal to before. Ctrl-C must still clean up.
//!
//! Also live tests of the verbs calls added for the experiments (memory windows, forged
//! lkeys, RTR with a missing attribute, SQD, unvalidated registration).
//!
//! No device is a failure, never a skip. Tests share rxe0 and its counters, so each one holds
//! [`LAB`] for its whole run.
use live_tests::{rdmactl_bin, LAB_DEVICE};
use rdma_verbs::{
    AccessFlags, AsyncEventType, CompletionQueue, Context, GidType, QpState, QueuePair, RcLink,
    RemoteBuffer, RtrAttr, RtrParams, SendOp, Sge, VerbsError, WcStatus,
};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// One test at a time: counters and resource counts are device-wide.
static LAB: Mutex<()> = Mutex::new(());

fn lab() -> MutexGuard<'static, ()> {
    LAB.lock().unwrap_or_else(|p| p.into_inner())
}

/// What `rdmactl experiment run --all --json` did: its exit code, its JSON, its stderr, and
/// how long it took.
struct AllRun {
    code: Option<i32>,
    report: Value,
    stderr: String,
    secs: f64,
}

/// `rdmactl experiment run --all --json`, run once for the whole binary (by the first test
/// that needs it, under [`LAB`]): the per-experiment tests check their experiment's report
/// from it, since `--all` runs each with the options a single run has by default. Running
/// each again on its own doubled this binary's time (7 experiments, 46 s in the lab).
/// `experiment run NAME` itself is run by the tests with options (`--show-keys`, Ctrl-C).
fn all_run() -> &'static AllRun {
    static ALL: OnceLock<AllRun> = OnceLock::new();
    ALL.get_or_init(|| {
        let bin = rdmactl_bin();
        let t0 = Instant::now();
        let out = Command::new(&bin)
            .args(["experiment", "run", "--all", "--json", "--device", LAB_DEVICE])
            .output()
            .unwrap_or_else(|e| panic!("FAIL: cannot run {}: {e}", bin.display()));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!(
                "FAIL: `rdmactl experiment run --all --json` did not print JSON ({e}); exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
                out.status.code()
            )
        });
        AllRun {
            code: out.status.code(),
            report,
            stderr,
            secs: t0.elapsed().as_secs_f64(),
        }
    })
}

/// Experiment NAME's report from the `--all` run ([`all_run`]): it must be there and pass
/// [`check_common`] (completed, every expectation met, no surprise, nothing leaked).
fn experiment(name: &str) -> Value {
    let all = all_run();
    let report = all.report["experiments"]
        .as_array()
        .and_then(|v| v.iter().find(|r| r["name"] == name))
        .unwrap_or_else(|| {
            panic!(
                "FAIL: no {name} in `experiment run --all --json`:\n{}",
                all.report
            )
        })
        .clone();
    check_common(name, &report);
    report
}

fn surprises(r: &Value) -> Vec<String> {
    steps(r)
        .iter()
        .filter(|s| s["as_expected"] == Value::Bool(false))
        .map(|s| {
            format!(
                "{} {} {}: got {}/{}",
                s["n"], s["verb"], s["detail"], s["wc_status"], s["errno"]
            )
        })
        .collect()
}

fn steps(r: &Value) -> Vec<Value> {
    r["steps"].as_array().cloned().unwrap_or_default()
}

fn parts(r: &Value) -> Vec<Value> {
    r["parts"].as_array().cloned().unwrap_or_default()
}

fn part_steps(r: &Value, part: &str) -> Vec<Value> {
    steps(r).into_iter().filter(|s| s["part"] == part).collect()
}

/// The WC statuses polled in a part, in order.
fn statuses(r: &Value, part: &str) -> Vec<String> {
    part_steps(r, part)
        .iter()
        .filter_map(|s| s["wc_status"].as_str().map(str::to_string))
        .collect()
}

/// The delta of a hw counter during a part (0 when it did not move).
fn delta(r: &Value, part: &str, counter: &str) -> u64 {
    let p = parts(r)
        .into_iter()
        .find(|p| p["name"] == part)
        .unwrap_or_else(|| panic!("no part {part} in {}", r["name"]));
    p["counters_moved"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"] == counter && c["source"] == "hw")
        .map(|c| c["delta"].as_u64().unwrap())
        .sum()
}

/// What every report must satisfy.
fn check_common(name: &str, r: &Value) {
    assert_eq!(r["schema"], "rdmactl.experiment/1");
    assert_eq!(r["name"], name);
    assert_eq!(r["device"], LAB_DEVICE);
    assert_eq!(r["family"], "rxe", "{name}: rxe0 is in the rxe family");
    assert_eq!(r["outcome"], "completed", "{name}: {}", r["error"]);
    assert!(r["lesson"]["chapter"].as_u64().unwrap() >= 1);
    // Resources after cleanup == before, measured through RDMA netlink.
    let res = &r["resources"];
    assert!(
        res["before"].is_object() && res["after"].is_object(),
        "{name}: resources not measured: {}",
        res["note"]
    );
    assert_eq!(res["before"], res["after"], "{name}: leaked resources");
    assert_eq!(res["equal"], true);
    assert!(res["before"]["qp"].as_u64().is_some(), "{name}: {res}");
    // Every declared counter expectation was checked (not n/a) and held.
    for p in parts(r) {
        for e in p["expectations"].as_array().unwrap() {
            assert_eq!(
                e["met"], true,
                "{name}/{}: {} must {} (delta {})",
                p["name"], e["counter"], e["expect"], e["delta"]
            );
        }
    }
    assert!(surprises(r).is_empty(), "{name}: {:?}", surprises(r));
    // Every hw counter of the device is in the whole-run table.
    let all = r["counters"]["all"].as_array().unwrap();
    for c in [
        "sent_pkts",
        "rcvd_pkts",
        "retry_exceeded_err",
        "send_rnr_err",
    ] {
        assert!(all.iter().any(|x| x["name"] == c), "{name}: {c} missing");
    }
    // Steps are numbered 1..n.
    for (i, s) in steps(r).iter().enumerate() {
        assert_eq!(s["n"].as_u64(), Some(i as u64 + 1));
    }
    // No key or address leaks without --show-keys.
    assert_masked(name, r);
}

/// Every value named like a key or address is "masked".
fn assert_masked(name: &str, r: &Value) {
    fn walk(name: &str, v: &Value, path: &str) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    let secret_name = [
                        "rkey",
                        "lkey",
                        "addr",
                        "reth_va",
                        "reth_rkey",
                        "index_bits",
                        "rkey_used",
                        "lkey_used",
                    ]
                    .contains(&k.as_str());
                    if secret_name && !x.is_boolean() {
                        assert_eq!(x, "masked", "{name}: {path}.{k} is not masked");
                    }
                    walk(name, x, &format!("{path}.{k}"));
                }
            }
            Value::Array(a) => a.iter().for_each(|x| walk(name, x, path)),
            _ => {}
        }
    }
    walk(name, r, "");
}

#[test]
fn list_names_every_catalog_experiment_with_its_lesson() {
    let out = Command::new(rdmactl_bin())
        .args(["experiment", "list", "--json"])
        .output()
        .expect("run rdmactl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    // The one list of experiments, in its order (`wire` is rdmactl's tracer experiment).
    assert_eq!(names, rdmakit::catalog::Experiment::NAMES);
    assert_eq!(names.last(), Some(&"wire"));
    assert_eq!(v[2]["lesson"]["name"], "error-handling");
    // `wire` (the tracer's capture experiment) is listed last, with what it needs.
    assert_eq!(v[7]["lesson"]["name"], "security");
    assert!(v[7]["needs"].as_str().unwrap_or("").contains("--devices 2"));
}

#[test]
fn mr_registration_pins_times_and_refuses_remote_write_without_local_write() {
    let _g = lab();
    let r = experiment("mr-registration");
    let sizes = r["data"]["sizes"].as_array().unwrap();
    assert_eq!(sizes.len(), 6);
    let mut registered = 0;
    for row in sizes {
        if row["skipped"] == true {
            continue;
        }
        registered += 1;
        let bytes = row["bytes"].as_u64().unwrap();
        let before = row["vm_pin_kb_before"].as_u64().unwrap();
        let during = row["vm_pin_kb_registered"].as_u64().unwrap();
        let after = row["vm_pin_kb_after"].as_u64().unwrap();
        assert!(
            during >= before + bytes / 1024,
            "{bytes} B: VmPin {before} -> {during} kB"
        );
        assert_eq!(after, before, "{bytes} B: deregistration unpins");
        assert!(row["reg_us"].as_f64().unwrap() > 0.0);
    }
    // The lab VM has 2 GiB: everything up to 256 MiB fits.
    assert!(registered >= 5, "{sizes:?}");
    let gib = &sizes[5];
    assert_eq!(gib["bytes"], 1u64 << 30);
    // Bigger registrations cost more.
    assert!(sizes[4]["reg_us"].as_f64().unwrap() > sizes[0]["reg_us"].as_f64().unwrap());
    let access = part_steps(&r, "access");
    let refused: Vec<&Value> = access
        .iter()
        .filter(|s| s["errno"]["name"] == "EINVAL")
        .collect();
    assert_eq!(refused.len(), 2, "{access:?}");
    assert!(refused
        .iter()
        .all(|s| s["verb"] == "ibv_reg_mr" && s["errno"]["code"] == 22));
    assert!(access
        .iter()
        .any(|s| s["result"] == "ok" && s["verb"] == "ibv_reg_mr"));
    for part in ["sizes", "access", "rereg"] {
        assert_eq!(
            delta(&r, part, "sent_pkts"),
            0,
            "{part}: registration sends nothing"
        );
    }
}

#[test]
fn qp_states_walks_the_machine_and_refuses_shortcuts_with_einval() {
    let _g = lab();
    let r = experiment("qp-states");
    let states: Vec<String> = steps(&r)
        .iter()
        .filter(|s| s["verb"] == "ibv_query_qp" && s["detail"].as_str().unwrap().starts_with("A"))
        .filter_map(|s| s["values"]["state"].as_str().map(str::to_string))
        .collect();
    assert_eq!(&states[..4], ["RESET", "INIT", "RTR", "RTS"], "{states:?}");
    assert!(
        states.ends_with(&["RTS".into(), "ERR".into(), "RESET".into(), "INIT".into()]),
        "{states:?}"
    );
    let illegal = part_steps(&r, "illegal");
    let refused: Vec<&Value> = illegal
        .iter()
        .filter(|s| s["expected"] == "EINVAL")
        .collect();
    assert_eq!(refused.len(), 5, "2 skipped states + 3 missing attributes");
    for s in &refused {
        assert_eq!(s["errno"]["code"], 22, "{s}");
        assert_eq!(s["as_expected"], true);
    }
    assert!(illegal
        .iter()
        .any(|s| s["detail"].as_str().unwrap().contains("without IBV_QP_AV")));
    assert!(steps(&r).iter().any(|s| s["values"]["data_landed"] == true));
    let drain = parts(&r)
        .into_iter()
        .find(|p| p["name"] == "drain_and_reset")
        .unwrap();
    let sqd_event = steps(&r)
        .iter()
        .find(|s| s["verb"] == "ibv_get_async_event")
        .map(|s| s["values"]["event"].clone());
    assert_eq!(sqd_event, Some(Value::from("SQ_DRAINED")), "{drain}");
    assert_eq!(delta(&r, "walk", "sent_pkts"), 0);
    assert_eq!(delta(&r, "illegal", "sent_pkts"), 0);
    assert!(delta(&r, "traffic", "sent_pkts") > 0);
}

#[test]
fn qp_errors_produce_each_status_and_the_matching_counters() {
    let _g = lab();
    let r = experiment("qp-errors");
    assert_eq!(statuses(&r, "rnr"), ["RNR_RETRY_EXC_ERR"]);
    assert_eq!(statuses(&r, "rem_access"), ["REM_ACCESS_ERR"]);
    // The spec's statuses, or rxe's (Linux 6.1) with a finding that says so.
    let ids: Vec<String> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap().to_string())
        .collect();
    match statuses(&r, "loc_len").as_slice() {
        [a, b] if a == "LOC_LEN_ERR" && b == "REM_INV_REQ_ERR" => {}
        [a, _] if a == "LOC_QP_OP_ERR" => {
            assert!(
                ids.contains(&"loc_len_reported_as_loc_qp_op_err".into()),
                "{ids:?}"
            )
        }
        other => panic!("loc_len: {other:?}"),
    }
    match statuses(&r, "loc_prot").as_slice() {
        [a] if a == "LOC_PROT_ERR" => {}
        [a] if a == "LOC_QP_OP_ERR" => {
            assert!(
                ids.contains(&"loc_prot_reported_as_loc_qp_op_err".into()),
                "{ids:?}"
            )
        }
        other => panic!("loc_prot: {other:?}"),
    }
    assert_eq!(statuses(&r, "retry_exc"), ["RETRY_EXC_ERR"]);
    let flush = statuses(&r, "flush");
    assert!(
        flush.len() >= 2 && flush.iter().all(|s| s == "WR_FLUSH_ERR"),
        "{flush:?}"
    );
    // RNR: the RNR counters move, the transport retry counter does not.
    assert!(delta(&r, "rnr", "retry_rnr_exceeded_err") >= 1);
    assert!(delta(&r, "rnr", "send_rnr_err") >= 1);
    assert_eq!(delta(&r, "rnr", "retry_exceeded_err"), 0);
    // A dead peer: transport retries, not RNR.
    assert_eq!(delta(&r, "retry_exc", "retry_exceeded_err"), 1);
    assert!(delta(&r, "retry_exc", "completer_retry_err") >= 1);
    assert_eq!(delta(&r, "retry_exc", "retry_rnr_exceeded_err"), 0);
    // How long the retries took depends on the kernel's timer grain and on TCG: a figure.
    let ms = r["data"]["retry_exc_ms"].as_f64().unwrap();
    let _ = writeln!(
        std::io::stderr(),
        "figure: qp-errors RETRY_EXC_ERR after {ms:.1} ms (retry_cnt=2, timeout=12)"
    );
    // Access, length and protection errors move neither retry counter.
    for part in ["rem_access", "loc_len", "loc_prot", "flush"] {
        assert_eq!(delta(&r, part, "retry_exceeded_err"), 0, "{part}");
        assert_eq!(delta(&r, part, "retry_rnr_exceeded_err"), 0, "{part}");
    }
    // LOC_PROT_ERR: nothing left A.
    assert_eq!(delta(&r, "loc_prot", "rcvd_pkts"), 0);
    // The requesters end in ERR: every part that breaks a QP queries one, and finds ERR.
    for part in ["rnr", "rem_access", "loc_len", "loc_prot", "retry_exc"] {
        let queried: Vec<Value> = part_steps(&r, part)
            .into_iter()
            .filter(|s| s["verb"] == "ibv_query_qp" && s["expected"] == "ERR")
            .collect();
        assert!(!queried.is_empty(), "{part}: no QP state queried");
        assert!(
            queried.iter().all(|s| s["values"]["state"] == "ERR"),
            "{part}: {queried:?}"
        );
    }
    // rxe raises no async event for WC errors, and the report says so.
    let all_parts = parts(&r);
    let names: Vec<&str> = all_parts
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "rnr",
            "rem_access",
            "loc_len",
            "loc_prot",
            "retry_exc",
            "flush"
        ],
        "one part per error"
    );
    assert!(all_parts
        .iter()
        .all(|p| p["async_events"].as_array().unwrap().is_empty()));
    assert!(r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["id"] == "no_async_event_for_wc_errors"));
    // The explanations come from the catalog.
    let ex = r["explanations"].as_array().unwrap();
    assert!(ex
        .iter()
        .any(|e| e["counter"] == "retry_rnr_exceeded_err" && e["family"] == "rxe"));
}

#[test]
fn show_keys_reveals_keys_only_when_asked() {
    let _g = lab();
    let out = Command::new(rdmactl_bin())
        .args([
            "experiment",
            "run",
            "qp-errors",
            "--json",
            "--show-keys",
            "--device",
            LAB_DEVICE,
        ])
        .output()
        .expect("run rdmactl");
    let r: Value = serde_json::from_slice(&out.stdout).expect("json");
    let used = steps(&r)
        .iter()
        .find_map(|s| s["values"]["rkey_used"].as_str().map(str::to_string))
        .expect("the wrong-rkey step");
    assert!(used.starts_with("0x") && used != "masked", "{used}");
}

#[test]
fn security_keys_rejects_every_abuse_and_reports_window_enforcement() {
    let _g = lab();
    let r = experiment("security-keys");
    assert_eq!(statuses(&r, "out_of_bounds"), ["REM_ACCESS_ERR"]);
    assert_eq!(statuses(&r, "no_remote_read"), ["REM_ACCESS_ERR"]);
    assert_eq!(statuses(&r, "other_pd"), ["REM_ACCESS_ERR"]);
    let g = &r["data"]["guess"];
    let tries = g["tries"].as_u64().unwrap();
    assert_eq!(
        tries,
        g["rejected"].as_u64().unwrap() + g["accepted"].as_u64().unwrap()
    );
    assert!(g["rejected"].as_u64().unwrap() >= tries - 1, "{g}");
    assert_eq!(statuses(&r, "guess").len() as u64, tries);
    // Window: bind OK, write inside OK, invalidate OK, write after REM_ACCESS_ERR, rebind OK.
    let mw = statuses(&r, "memory_window");
    assert_eq!(
        &mw[..5],
        ["SUCCESS", "SUCCESS", "SUCCESS", "REM_ACCESS_ERR", "SUCCESS"],
        "{mw:?}"
    );
    let enforced = r["data"]["memory_window"]["bounds_enforced"]
        .as_bool()
        .unwrap();
    let ids: Vec<&str> = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    // rxe checks only the MR's range: the write outside the window lands. Reported, not hidden.
    assert!(
        !enforced,
        "rxe started enforcing window bounds: update the lesson"
    );
    assert!(ids.contains(&"mw_bounds_not_enforced"), "{ids:?}");
    assert_eq!(r["data"]["memory_window"]["landed_outside_window"], true);
    assert_eq!(statuses(&r, "dereg"), ["SUCCESS", "REM_ACCESS_ERR"]);
    let wire = part_steps(&r, "wire");
    assert!(wire.iter().any(|s| s["values"]["reth_rkey"] == "masked"));
    for part in [
        "out_of_bounds",
        "no_remote_read",
        "other_pd",
        "guess",
        "memory_window",
        "dereg",
    ] {
        assert_eq!(delta(&r, part, "retry_exceeded_err"), 0, "{part}");
        assert_eq!(delta(&r, part, "send_rnr_err"), 0, "{part}");
    }
}

#[test]
fn one_sided_operations_complete_only_at_the_requester() {
    let _g = lab();
    let r = experiment("one-vs-two-sided");
    let ops = r["data"]["operations"].as_array().unwrap();
    let n = r["data"]["iterations"].as_u64().unwrap();
    let row = |op: &str| {
        ops.iter()
            .find(|o| o["op"] == op)
            .unwrap_or_else(|| panic!("{op}"))
    };
    for op in [
        "SEND/RECV",
        "RDMA_WRITE",
        "RDMA_WRITE_WITH_IMM",
        "RDMA_READ",
    ] {
        assert_eq!(row(op)["requester_completions"], n, "{op}");
        assert!(row(op)["first_error"].is_null(), "{op}");
        assert!(row(op)["latency_us_median"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(row("SEND/RECV")["target_completions"], n);
    assert_eq!(row("RDMA_WRITE_WITH_IMM")["target_completions"], n);
    assert_eq!(row("RDMA_WRITE")["target_completions"], 0);
    assert_eq!(row("RDMA_READ")["target_completions"], 0);
    // The target application spins for two-sided messages and sleeps through one-sided ones.
    // What that costs in CPU time is measured under TCG on shared cores: figures, not asserts
    // (the target completion counts above are the facts).
    for op in [
        "SEND/RECV",
        "RDMA_WRITE",
        "RDMA_WRITE_WITH_IMM",
        "RDMA_READ",
    ] {
        let cpu = row(op)["target_cpu_us_per_msg"].as_f64().unwrap();
        assert!(cpu >= 0.0, "{op}: {cpu}");
        let _ = writeln!(
            std::io::stderr(),
            "figure: one-vs-two-sided {op}: target CPU {cpu:.1} us per message"
        );
    }
    for part in ["send_recv", "write", "write_imm", "read"] {
        assert!(delta(&r, part, "sent_pkts") >= n, "{part}");
        assert_eq!(delta(&r, part, "retry_rnr_exceeded_err"), 0, "{part}");
    }
    // One-sided operations never consume a receive, so they can never meet an RNR.
    assert_eq!(delta(&r, "write", "send_rnr_err"), 0);
    assert_eq!(delta(&r, "read", "send_rnr_err"), 0);
}

#[test]
fn cq_events_sleep_where_busy_polling_spins() {
    let _g = lab();
    let r = experiment("cq-modes");
    let modes = r["data"]["modes"].as_array().unwrap();
    let m = |name: &str| modes.iter().find(|x| x["mode"] == name).unwrap();
    assert_eq!(m("busy_poll")["failures"], 0);
    assert_eq!(m("events")["failures"], 0);
    assert!(m("events")["wakeups"].as_u64().unwrap() > 0);
    assert_eq!(m("busy_poll")["wakeups"], 0);
    assert!(m("busy_poll")["empty_polls_per_msg"].as_f64().unwrap() > 0.0);
    // Sleeping in the kernel: the receiver never spins on an empty CQ.
    assert_eq!(m("events")["empty_polls_per_msg"], 0.0, "{modes:?}");
    // The CPU each mode burnt, measured under TCG on cores shared with the sender and rxe:
    // a figure (the claim's evidence in the report), not an assertion.
    for mode in ["busy_poll", "events"] {
        let _ = writeln!(
            std::io::stderr(),
            "figure: cq-modes {mode}: receiver CPU {}% of the wall time",
            m(mode)["cpu_share_of_wall"].as_f64().unwrap() * 100.0
        );
    }
}

#[test]
fn transports_reads_the_roce_v2_addressing_of_the_lab() {
    let _g = lab();
    let r = experiment("transports");
    let gids = r["data"]["gids"].as_array().unwrap();
    let v4 = gids
        .iter()
        .find(|g| g["ipv4_mapped"] == "10.0.2.15")
        .unwrap_or_else(|| panic!("no IPv4-mapped GID: {gids:?}"));
    assert_eq!(v4["gid"], "::ffff:10.0.2.15");
    assert_eq!(v4["gid_type"], "RoCE v2");
    assert_eq!(v4["index"], 1);
    let port = &r["data"]["port"];
    assert_eq!(port["link_layer"], "Ethernet");
    assert_eq!(port["lid"], 0);
    assert_eq!(port["sm_lid"], 0);
    assert_eq!(port["netdev"], "eth0");
    assert_eq!(port["netdev_mtu"], 1500);
    assert_eq!(port["active_mtu"], 1024);
    assert!(
        steps(&r).iter().any(|s| s["values"]["agree"] == true),
        "verbs and sysfs GIDs agree"
    );
    assert!(r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["id"] == "roce_v2_only"));
    assert_eq!(delta(&r, "addressing", "sent_pkts"), 0);
}

#[test]
fn ctrl_c_stops_an_experiment_and_cleanup_still_releases_everything() {
    let _g = lab();
    let mut child = Command::new(rdmactl_bin())
        .args([
            "experiment",
            "run",
            "mr-registration",
            "--device",
            LAB_DEVICE,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rdmactl");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    // Interrupt as soon as the first registration step is printed.
    for line in lines.by_ref() {
        let line = line.unwrap();
        let hit = line.contains("ibv_reg_mr");
        seen.push(line);
        if hit {
            let st = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status()
                .expect("kill");
            assert!(st.success());
            break;
        }
    }
    seen.extend(lines.map_while(Result::ok));
    let status = child.wait().unwrap();
    let text = seen.join("\n");
    assert_eq!(status.code(), Some(130), "{text}");
    assert!(text.contains("Outcome: Interrupted"), "{text}");
    assert!(text.contains("all released"), "{text}");
}

/// `--all` runs every experiment in one command. How long it takes (issue #6 wants under two
/// minutes under TCG) is printed as a figure for the log, never asserted: a timed assertion
/// would fail on a slow host without anything being wrong.
#[test]
fn all_experiments_run_in_one_command() {
    let _g = lab();
    let all = all_run();
    // Written to stderr directly, past the test harness' capture, so the CI log shows it.
    let _ = writeln!(
        std::io::stderr(),
        "figure: rdmactl experiment run --all took {:.1} s in the lab",
        all.secs
    );
    assert_eq!(all.code, Some(0), "{}", all.stderr);
    assert_eq!(all.report["experiments"].as_array().unwrap().len(), 7);
}

// ---- the verbs calls added for the experiments ----

fn open() -> Arc<Context> {
    rdma_verbs::open(LAB_DEVICE).unwrap_or_else(|e| {
        panic!("FAIL: cannot open {LAB_DEVICE} ({e}); run inside `rdmactl lab run`")
    })
}

fn full() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
}

fn rtr(ctx: &Context, peer: &QueuePair) -> RtrParams {
    let gid = ctx.choose_gid(1, GidType::RoceV2).unwrap();
    RtrParams {
        remote: peer.endpoint(&gid, 0),
        port: 1,
        sgid_index: gid.index as u8,
        path_mtu: ctx.query_port(1).unwrap().active_mtu,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 1,
    }
}

type Pair = (
    QueuePair,
    Arc<CompletionQueue>,
    QueuePair,
    Arc<CompletionQueue>,
);

fn pair(ctx: &Arc<Context>, pd: &Arc<rdma_verbs::ProtectionDomain>) -> Pair {
    let (ca, cb) = (ctx.create_cq(16).unwrap(), ctx.create_cq(16).unwrap());
    let a = pd.create_rc_qp(&ca, &ca, Default::default()).unwrap();
    let b = pd.create_rc_qp(&cb, &cb, Default::default()).unwrap();
    let gid = ctx.choose_gid(1, GidType::RoceV2).unwrap();
    RcLink {
        min_rnr_timer: 1,
        ..RcLink::new(1, ctx.query_port(1).unwrap().active_mtu, full())
    }
    .connect_pair((&a, &gid, 0), (&b, &gid, 0))
    .unwrap();
    (a, ca, b, cb)
}

fn one(cq: &CompletionQueue) -> WcStatus {
    let wc = cq.poll_until(1, Duration::from_secs(5)).unwrap();
    assert_eq!(wc.len(), 1, "no completion");
    wc[0].status
}

fn errno(e: &VerbsError) -> Option<i32> {
    use std::error::Error as _;
    let mut s = e.source();
    while let Some(x) = s {
        if let Some(io) = x.downcast_ref::<std::io::Error>() {
            return io.raw_os_error();
        }
        s = x.source();
    }
    None
}

#[test]
fn verbs_register_unvalidated_gets_the_kernels_einval() {
    let _g = lab();
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let e = pd
        .register_unvalidated(4096, AccessFlags::REMOTE_WRITE)
        .unwrap_err();
    assert!(
        matches!(
            e,
            VerbsError::Call {
                op: "ibv_reg_mr",
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(errno(&e), Some(22));
    // The validated path refuses before calling (no errno).
    let e = pd.register(4096, AccessFlags::REMOTE_WRITE).unwrap_err();
    assert!(matches!(e, VerbsError::InvalidArgument(_)));
    assert!(pd
        .register_unvalidated(4096, AccessFlags::REMOTE_READ)
        .is_ok());
}

#[test]
fn verbs_rtr_without_an_attribute_is_einval_and_the_qp_stays_in_init() {
    let _g = lab();
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let a = pd.create_rc_qp(&cq, &cq, Default::default()).unwrap();
    let b = pd.create_rc_qp(&cq, &cq, Default::default()).unwrap();
    a.to_init(1, full()).unwrap();
    for omit in RtrAttr::ALL {
        if omit == RtrAttr::MinRnrTimer || omit == RtrAttr::MaxDestRdAtomic {
            continue; // optional on some providers
        }
        let e = a.to_rtr_omitting(&rtr(&ctx, &b), &[omit]).unwrap_err();
        match &e {
            VerbsError::QpTransition {
                current, requested, ..
            } => {
                assert_eq!((*current, *requested), (QpState::Init, QpState::Rtr));
            }
            other => panic!("{omit:?}: {other}"),
        }
        assert_eq!(errno(&e), Some(22), "{omit:?}");
        assert_eq!(a.state().unwrap(), QpState::Init);
    }
    a.to_rtr_omitting(&rtr(&ctx, &b), &[]).unwrap();
    assert_eq!(a.state().unwrap(), QpState::Rtr);
}

#[test]
fn verbs_sqd_drains_with_an_event_and_resumes() {
    let _g = lab();
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let (a, _ca, _b, _cb) = pair(&ctx, &pd);
    while ctx.next_async_event(Duration::ZERO).unwrap().is_some() {}
    a.to_sqd().unwrap();
    let ev = ctx
        .next_async_event(Duration::from_secs(5))
        .unwrap()
        .expect("an event");
    assert_eq!(ev.event_type, AsyncEventType::SqDrained);
    assert_eq!(ev.element, rdma_verbs::EventElement::Qp(a.qp_num()));
    a.resume_from_sqd().unwrap();
    assert_eq!(a.state().unwrap(), QpState::Rts);
}

#[test]
fn verbs_forged_lkey_completes_with_loc_prot_err() {
    let _g = lab();
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let (a, ca, _b, _cb) = pair(&ctx, &pd);
    let src = pd.register(64, full()).unwrap();
    let dst = pd.register(64, full()).unwrap();
    let forged = src.lkey() ^ 0x5a;
    a.post_send_with_lkey(
        1,
        SendOp::Write {
            remote: dst.remote(),
            offset: 0,
        },
        &[Sge::whole(&src)],
        forged,
    )
    .unwrap();
    // The spec says LOC_PROT_ERR; rxe on Linux 6.1 reports LOC_QP_OP_ERR.
    let st = one(&ca);
    assert!(
        st == WcStatus::LocProtErr || st == WcStatus::LocQpOpErr,
        "{st:?}"
    );
}

#[test]
fn verbs_memory_window_bind_write_invalidate() {
    let _g = lab();
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let (a, ca, b, cb) = pair(&ctx, &pd);
    let mut src = pd.register(64, full()).unwrap();
    src.write(0, &[7; 64]).unwrap();
    let base = pd
        .register(
            4096,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::MW_BIND,
        )
        .unwrap();
    // A window must be on its MR's PD.
    let pd2 = ctx.alloc_pd().unwrap();
    assert!(matches!(
        pd2.alloc_mw(&base),
        Err(VerbsError::InvalidArgument(_))
    ));
    let mut mw = pd.alloc_mw(&base).unwrap();
    assert!(mw.remote().is_none());
    let before = mw.rkey();
    b.bind_mw(1, &mut mw, 0, 256, AccessFlags::REMOTE_WRITE)
        .unwrap();
    assert_eq!(one(&cb), WcStatus::Success);
    let w: RemoteBuffer = mw.remote().unwrap();
    assert_ne!(w.rkey, before, "a bind changes the key byte");
    assert_eq!(w.rkey >> 8, before >> 8, "but keeps the index");
    assert_eq!(w.len, 256);
    assert_ne!(w.rkey, base.rkey());
    a.post_send(
        2,
        SendOp::Write {
            remote: w,
            offset: 128,
        },
        &[Sge::whole(&src)],
    )
    .unwrap();
    assert_eq!(one(&ca), WcStatus::Success);
    assert_eq!(base.to_vec(128, 64).unwrap(), vec![7; 64]);
    // A window bigger than its MR is refused before posting.
    assert!(matches!(
        b.bind_mw(3, &mut mw, 4000, 256, AccessFlags::REMOTE_WRITE),
        Err(VerbsError::InvalidArgument(_))
    ));
    b.invalidate(4, w.rkey).unwrap();
    assert_eq!(one(&cb), WcStatus::Success);
    a.post_send(
        5,
        SendOp::Write {
            remote: w,
            offset: 0,
        },
        &[Sge::whole(&src)],
    )
    .unwrap();
    assert_eq!(one(&ca), WcStatus::RemAccessErr);
    drop((a, b));
    drop(mw);
    drop(base);
}
