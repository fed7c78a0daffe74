//! Live, inside the lab: who holds RDMA objects. Two cgroups each run a holder process (this
//! test binary re-run as [`hold_objects_helper`]) with a known number of QPs and MRs on rxe0;
//! rdmad's `netlink_owners` counts per owner must equal `rdma -j res show qp|mr` for those
//! pids, labelled with the right cgroup; `rdmactl resources --by cgroup` agrees; with
//! `rdma.max` of one cgroup set to N objects, its holder's next create fails, `rdma_cgroup`
//! shows current == max, and `rdmactl doctor` names the cgroup (and the owner of its QPs
//! in ERR).
//!
//! The lab kernel (Debian 6.1) has the rdma cgroup controller; this test mounts cgroup v2 at
//! /sys/fs/cgroup if the lab did not, and fails (never skips) without the controller.

use live_tests::cgroup::{SlurmStepCgroup, TestCgroup};
use live_tests::{parse_exposition, rdma_json, rdmactl_bin, rdmad_bin, LAB_DEVICE};
use rdma_verbs::AccessFlags;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

/// The tests share the cgroup tree: one at a time.
static CGROUPS: Mutex<()> = Mutex::new(());

/// The cgroup v2 root with the rdma controller enabled for its children.
fn cgroup_root() -> PathBuf {
    let root = live_tests::cgroup::mounted_root();
    let controllers = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap();
    assert!(
        controllers.split_whitespace().any(|c| c == "rdma"),
        "FAIL: the lab kernel's cgroup v2 has no rdma controller (cgroup.controllers: {controllers:?})"
    );
    let subtree = root.join("cgroup.subtree_control");
    if !std::fs::read_to_string(&subtree)
        .unwrap()
        .split_whitespace()
        .any(|c| c == "rdma")
    {
        std::fs::write(&subtree, "+rdma").expect("FAIL: enabling +rdma in cgroup.subtree_control");
    }
    root
}

/// A fresh child cgroup `name` of the root, with the rdma controller's files.
fn fresh_cgroup(root: &Path, name: &str) -> TestCgroup {
    let cg = TestCgroup::new(root, name);
    assert!(
        cg.dir.join("rdma.max").exists(),
        "no rdma.max in {}",
        cg.dir.display()
    );
    cg
}

/// What a holder reported once it held its objects.
#[derive(Debug)]
struct Held {
    pid: u32,
    qps: u64,
    mrs: u64,
    failed: Option<String>,
}

/// A holder process: this test binary running [`hold_objects_helper`]; it lets go of its
/// objects and exits when dropped (its stdin closes).
struct Holder {
    child: Child,
    held: Held,
}

impl Drop for Holder {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        // Bounded: the holder exits when stdin closes; kill it if it does not.
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start a holder in `cgroup` with `qps` QPs (`err` of them moved to ERR) and `mrs` MRs;
/// `until_fail`: keep creating QPs until a create fails (at most `qps`).
fn hold(cgroup: &Path, qps: u64, mrs: u64, err: u64, until_fail: bool) -> Holder {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "hold_objects_helper",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("LIVE_HOLD_CGROUP", cgroup)
        .env("LIVE_HOLD_QPS", qps.to_string())
        .env("LIVE_HOLD_MRS", mrs.to_string())
        .env("LIVE_HOLD_ERR", err.to_string())
        .env("LIVE_HOLD_UNTIL_FAIL", if until_fail { "1" } else { "0" })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("FAIL: cannot start the holder");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // The harness may have printed "test NAME ... " on the same line first.
            if let Some((_, rest)) = line.split_once("HELD ") {
                let _ = tx.send(rest.to_string());
            }
        }
    });
    // Generous: a loaded TCG guest creates QPs slowly.
    let line = match rx.recv_timeout(Duration::from_secs(180)) {
        Ok(l) => l,
        Err(_) => {
            let _ = child.kill();
            let status = child.wait();
            panic!(
                "FAIL: the holder in {} never said HELD ({status:?})",
                cgroup.display()
            );
        }
    };
    let fields: BTreeMap<&str, &str> = line
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect();
    let num = |k: &str| -> u64 { fields[k].parse().unwrap() };
    let held = Held {
        pid: num("pid") as u32,
        qps: num("qps"),
        mrs: num("mrs"),
        failed: fields
            .get("failed")
            .filter(|f| **f != "-")
            .map(|f| f.replace('_', " ")),
    };
    Holder { child, held }
}

/// The holder: run only by [`hold`] (the environment says what to hold).
#[test]
#[ignore = "the holder process the other tests of this file start"]
fn hold_objects_helper() {
    let env = |k: &str| {
        std::env::var(k).unwrap_or_else(|_| {
            panic!("{k} unset: this is the holder of the owners tests, not a test of its own")
        })
    };
    let cgroup = PathBuf::from(env("LIVE_HOLD_CGROUP"));
    let (qps, mrs, err) = (
        env("LIVE_HOLD_QPS").parse::<u64>().unwrap(),
        env("LIVE_HOLD_MRS").parse::<u64>().unwrap(),
        env("LIVE_HOLD_ERR").parse::<u64>().unwrap(),
    );
    let until_fail = env("LIVE_HOLD_UNTIL_FAIL") == "1";
    // Join the cgroup before opening the device: every charge goes there.
    std::fs::write(cgroup.join("cgroup.procs"), std::process::id().to_string()).unwrap();
    let ctx = rdma_verbs::open(LAB_DEVICE).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let mut held_mrs = Vec::new();
    for _ in 0..mrs {
        held_mrs.push(pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap());
    }
    let mut held_qps = Vec::new();
    let mut failed = None;
    for _ in 0..qps {
        match pd.create_rc_qp(&cq, &cq, Default::default()) {
            Ok(qp) => held_qps.push(qp),
            Err(e) if until_fail => {
                failed = Some(e.to_string());
                break;
            }
            Err(e) => panic!("create QP {}: {e}", held_qps.len() + 1),
        }
    }
    // Every QP to INIT, as a program does before connecting (the dumps show no QP in
    // RESET), and `err` of them on to ERR (RESET -> ERR is refused by rxe).
    for (i, qp) in held_qps.iter().enumerate() {
        qp.to_init(1, AccessFlags::LOCAL_WRITE).unwrap();
        if (i as u64) < err {
            qp.to_error().unwrap();
        }
    }
    let failed = failed.map_or("-".to_string(), |f| f.replace(char::is_whitespace, "_"));
    // The kernel names the creating task, here this test thread: its tid, from
    // /proc/thread-self -> "<pid>/task/<tid>" (as `rdma res show` prints it).
    let tid = std::fs::read_link("/proc/thread-self").unwrap();
    let tid = tid.file_name().unwrap().to_string_lossy().into_owned();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "HELD pid={tid} qps={} mrs={} failed={failed}",
        held_qps.len(),
        held_mrs.len()
    )
    .unwrap();
    out.flush().unwrap();
    drop(out);
    // Hold until the test closes stdin.
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}

/// One `rdmad --once` with `args`, parsed.
fn rdmad_once(args: &[&str]) -> BTreeMap<String, f64> {
    let out = Command::new(rdmad_bin())
        .arg("--once")
        .args(args)
        .output()
        .expect("FAIL: cannot run rdmad");
    assert!(
        out.status.success(),
        "rdmad --once failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_exposition(&String::from_utf8_lossy(&out.stdout)).unwrap()
}

/// Sum of the series of `family` whose labels contain every `label="value"` of `having`.
fn sum(m: &BTreeMap<String, f64>, family: &str, having: &[String]) -> f64 {
    m.iter()
        .filter(|(k, _)| k.starts_with(&format!("{family}{{")))
        .filter(|(k, _)| having.iter().all(|h| k.contains(h.as_str())))
        .map(|(_, v)| *v)
        .sum()
}

/// Objects of `kind` per pid in `rdma -j res show KIND`.
fn rdma_count(kind: &str, pid: u32) -> u64 {
    let v = rdma_json(&["res", "show", kind]);
    v.as_array()
        .unwrap_or_else(|| panic!("rdma -j res show {kind}: not an array: {v}"))
        .iter()
        .filter(|o| o["pid"].as_u64() == Some(u64::from(pid)))
        .count() as u64
}

const OWNER_ARGS: &[&str] = &[
    "--collector.disable-defaults",
    "--collector.netlink_owners",
    "--collector.rdma_cgroup",
];

#[test]
fn per_owner_counts_equal_rdma_res_show_and_carry_the_cgroup() {
    let _one = CGROUPS.lock().unwrap_or_else(|e| e.into_inner());
    let root = cgroup_root();
    let a_cg = fresh_cgroup(&root, "live-owners-a");
    let a_dir = &a_cg.dir;
    let b_cg = fresh_cgroup(&root, "live-owners-b");
    let b_dir = &b_cg.dir;
    let a = hold(a_dir, 3, 2, 1, false);
    let b = hold(b_dir, 5, 1, 0, false);
    assert_eq!((a.held.qps, a.held.mrs), (3, 2));
    assert_eq!((b.held.qps, b.held.mrs), (5, 1));

    let m = rdmad_once(&[OWNER_ARGS, &["--collector.netlink_owners.pid"]].concat());
    for (h, cg) in [(&a, "/live-owners-a"), (&b, "/live-owners-b")] {
        let pid = h.held.pid;
        let who = vec![format!("pid=\"{pid}\""), format!("cgroup=\"{cg}\"")];
        for (kind, held) in [("qp", h.held.qps), ("mr", h.held.mrs)] {
            let want = rdma_count(kind, pid);
            assert_eq!(
                want,
                held,
                "rdma res show {kind} for pid {pid}: {}",
                rdma_json(&["res", "show", kind])
            );
            let mut labels = who.clone();
            labels.push(format!("type=\"{kind}\""));
            assert_eq!(
                sum(&m, "rdma_owner_objects", &labels),
                want as f64,
                "rdma_owner_objects {kind} of pid {pid} in {cg}:\n{m:#?}"
            );
        }
        // Every QP of the holder is in the QP-state series too, with its state.
        assert_eq!(sum(&m, "rdma_owner_qps", &who), h.held.qps as f64);
    }
    let a_err = vec![
        format!("pid=\"{}\"", a.held.pid),
        "state=\"ERR\"".to_string(),
    ];
    assert_eq!(sum(&m, "rdma_owner_qps", &a_err), 1.0, "one QP of A in ERR");

    // Without pids, the two holders (same comm) stay apart by cgroup.
    let m = rdmad_once(OWNER_ARGS);
    assert!(
        !m.keys().any(|k| k.contains("pid=")),
        "no pid label by default"
    );
    let qps_of = |cg: &str| {
        sum(
            &m,
            "rdma_owner_objects",
            &[format!("cgroup=\"{cg}\""), "type=\"qp\"".to_string()],
        )
    };
    assert_eq!(qps_of("/live-owners-a"), 3.0);
    assert_eq!(qps_of("/live-owners-b"), 5.0);

    // rdmactl resources --by cgroup agrees.
    let out = Command::new(rdmactl_bin())
        .args(["resources", "--by", "cgroup", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = |cg: &str| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["cgroup"] == cg)
            .unwrap_or_else(|| panic!("no row for {cg}: {rows}"))
            .clone()
    };
    assert_eq!(row("/live-owners-a")["objects"]["qp"], 3);
    assert_eq!(row("/live-owners-b")["objects"]["mr"], 1);

    // The doctor names the owner of the QP in ERR.
    let out = Command::new(rdmactl_bin())
        .args(["doctor", "--interval", "0.2"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text
        .lines()
        .find(|l| l.contains("QP(s) in ERR"))
        .unwrap_or_else(|| panic!("doctor names no QP in ERR:\n{text}"));
    assert!(line.contains("cgroup /live-owners-a"), "{line}");
    assert!(line.contains(&format!("pid {}", a.held.pid)), "{line}");
    drop((a, b));
}

#[test]
fn a_slurm_step_cgroup_names_the_job_in_series_resources_and_doctor() {
    let _one = CGROUPS.lock().unwrap_or_else(|e| e.into_inner());
    let root = live_tests::cgroup::mounted_root();
    // slurmstepd's cgroup v2 layout for step 0 of job 4242, made with mkdir.
    let step = SlurmStepCgroup::new(&root, 4242, "0");
    let h = hold(&step.task, 2, 1, 1, false);
    assert_eq!((h.held.qps, h.held.mrs), (2, 1));
    let path = step.path(&root);
    assert_eq!(
        path,
        "/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0"
    );

    let m = rdmad_once(&[OWNER_ARGS, &["--collector.netlink_owners.pid"]].concat());
    let ours = [
        format!("pid=\"{}\"", h.held.pid),
        format!("cgroup=\"{path}\""),
        "job_id=\"4242\"".to_string(),
        "job_step=\"0\"".to_string(),
    ];
    assert_eq!(
        sum(
            &m,
            "rdma_owner_objects",
            &[&ours[..], &["type=\"qp\"".to_string()]].concat()
        ),
        rdma_count("qp", h.held.pid) as f64,
        "rdma_owner_objects of the job's holder:\n{m:#?}"
    );
    assert_eq!(
        sum(
            &m,
            "rdma_owner_qps",
            &[&ours[..], &["state=\"ERR\"".to_string()]].concat()
        ),
        1.0
    );
    // The kernel's GSI QP is in no job.
    assert!(
        m.keys()
            .filter(|k| k.contains("comm=\"kernel\""))
            .all(|k| k.contains("job_id=\"\"")),
        "{m:#?}"
    );

    let out = Command::new(rdmactl_bin())
        .args(["resources", "--by", "job", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let job = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["job_id"] == "4242")
        .unwrap_or_else(|| panic!("no row for job 4242: {rows}"));
    assert_eq!(job["objects"]["qp"], 2, "{job}");
    assert_eq!(job["objects"]["mr"], 1, "{job}");

    let out = Command::new(rdmactl_bin())
        .args(["doctor", "--interval", "0.2"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("QP(s) in ERR") && l.contains(&format!("pid {}", h.held.pid)))
        .unwrap_or_else(|| panic!("doctor names no QP in ERR of the job's holder:\n{text}"));
    assert!(line.contains("Slurm job 4242 step 0"), "{line}");
    drop(h);
}

#[test]
fn rdma_max_stops_the_next_create_and_the_doctor_names_the_cgroup() {
    let _one = CGROUPS.lock().unwrap_or_else(|e| e.into_inner());
    let root = cgroup_root();
    let cg = fresh_cgroup(&root, "live-owners-limited");
    let dir = &cg.dir;
    const N: u64 = 6;
    std::fs::write(dir.join("rdma.max"), format!("{LAB_DEVICE} hca_object={N}")).unwrap();
    let h = hold(dir, 50, 0, 0, true);
    let failed = h.held.failed.clone().unwrap_or_else(|| {
        panic!(
            "the holder created {} QPs under hca_object={N} without a failure",
            h.held.qps
        )
    });
    assert!(
        h.held.qps < N,
        "{} QPs under a limit of {N} objects",
        h.held.qps
    );
    let current = std::fs::read_to_string(dir.join("rdma.current")).unwrap();
    assert!(
        current.contains(&format!("{LAB_DEVICE} hca_handle=1 hca_object={N}")),
        "rdma.current after the failed create ({failed}): {current:?}"
    );

    let m = rdmad_once(OWNER_ARGS);
    let labels = |f: &str| {
        format!("{f}{{cgroup=\"/live-owners-limited\",device=\"{LAB_DEVICE}\",resource=\"hca_object\"}}")
    };
    assert_eq!(
        m.get(&labels("rdma_cgroup_current")),
        Some(&(N as f64)),
        "{m:#?}"
    );
    assert_eq!(m.get(&labels("rdma_cgroup_max")), Some(&(N as f64)));
    let at_limit =
        format!("rdma_cgroups_at_limit{{device=\"{LAB_DEVICE}\",resource=\"hca_object\"}}");
    assert!(
        m.get(&at_limit).is_some_and(|v| *v >= 1.0),
        "{at_limit}: {m:#?}"
    );
    // The unlimited handle resource of the same cgroup is +Inf.
    let handle_max = format!(
        "rdma_cgroup_max{{cgroup=\"/live-owners-limited\",device=\"{LAB_DEVICE}\",resource=\"hca_handle\"}}"
    );
    assert_eq!(m.get(&handle_max), Some(&f64::INFINITY));

    let out = Command::new(rdmactl_bin())
        .args(["doctor", "--interval", "0.2"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(
            |l| l.contains("cgroup /live-owners-limited is at its RDMA limit")
                && l.contains(&format!("hca_object {N} of {N}"))
        ),
        "doctor does not name the cgroup at its limit:\n{text}"
    );
    drop(h);
}
