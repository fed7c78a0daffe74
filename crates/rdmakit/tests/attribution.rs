//! Per-owner tallies of the captured nldev dumps (tests/data/nldev, Linux 6.1 rxe) with the
//! captured processes described from tests/data/proc-captured: the counts per device and
//! pid equal what `rdma -j res show` printed at the same moment, and the caps fold and
//! count instead of growing.

use netlink_packet_core::NetlinkPayload;
use rdmakit::attribution::{
    Grouping, OwnerKey, Tally, TallyOptions, KERNEL, KINDS, OTHER, UNKNOWN,
};
use rdmakit::nldev::message::split_messages;
use rdmakit::nldev::NldevMessage;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

const DEVICES: [&str; 3] = ["rxe0", "rxe_a", "rxe_b"];
const POD: &str = "1b2c3d4e-5f60-4718-92a3-b4c5d6e7f809";

fn messages(name: &str) -> Vec<NldevMessage> {
    let bytes = std::fs::read(data("nldev").join(name)).unwrap_or_default();
    split_messages(&bytes)
        .unwrap()
        .into_iter()
        .filter_map(|(_, m)| match m.payload {
            NetlinkPayload::InnerMessage(m) => Some(m),
            _ => None,
        })
        .collect()
}

fn tally(options: TallyOptions) -> Tally {
    let mut t = Tally::new(options);
    let mut fed = 0;
    for dev in DEVICES {
        for kind in KINDS {
            for m in messages(&format!("res_{}_{dev}.bin", kind.name())) {
                t.add_message(kind, &m).unwrap();
                fed += 1;
            }
        }
    }
    assert!(fed >= 10, "captures missing ({fed} messages)");
    t
}

fn options() -> TallyOptions {
    TallyOptions {
        proc_root: data("proc-captured"),
        pids: true,
        ..TallyOptions::default()
    }
}

fn json(name: &str) -> Vec<Value> {
    serde_json::from_str(&std::fs::read_to_string(data("nldev").join(name)).unwrap()).unwrap()
}

#[test]
fn per_pid_counts_equal_rdma_res_show() {
    let report = tally(options()).finish(256);
    assert_eq!(report.folded_owners, 0);
    assert!(report.unread.is_empty());
    // QPs and MRs per (device, pid) from `rdma -j res show qp|mr`; pid None = kernel.
    for kind in ["qp", "mr", "cm_id"] {
        let mut want: BTreeMap<(String, Option<u64>), u64> = BTreeMap::new();
        for o in json(&format!("rdma_res_show_{kind}.json")) {
            let dev = o["ifname"].as_str().unwrap().to_string();
            *want.entry((dev, o["pid"].as_u64())).or_default() += 1;
        }
        let mut got: BTreeMap<(String, Option<u64>), u64> = BTreeMap::new();
        for row in &report.rows {
            if let Some(n) = row.holdings.objects.get(kind) {
                let pid = row.owner.pid.map(u64::from);
                *got.entry((row.device.clone(), pid)).or_default() += n;
            }
        }
        assert_eq!(got, want, "{kind}");
    }
    // Every kind's total per device equals the resource summary (`rdma -j res show`).
    for dev in json("rdma_res_show.json") {
        let name = dev["ifname"].as_str().unwrap();
        for kind in KINDS {
            let got: u64 = report
                .rows
                .iter()
                .filter(|r| r.device == name)
                .filter_map(|r| r.holdings.objects.get(kind.name()))
                .sum();
            assert_eq!(
                Some(got),
                dev[kind.name()].as_u64(),
                "{name} {}",
                kind.name()
            );
        }
    }
}

#[test]
fn owners_carry_comm_cgroup_pod_and_qp_states() {
    let report = tally(TallyOptions {
        pids: false,
        ..options()
    })
    .finish(256);
    let row = |dev: &str, comm: &str| {
        report
            .rows
            .iter()
            .find(|r| r.device == dev && r.owner.comm == comm)
            .unwrap_or_else(|| panic!("{dev} {comm}: {:#?}", report.rows))
    };
    let a = row("rxe_a", "ibv_rc_pingpong");
    assert_eq!(a.owner.pod_uid, POD);
    assert_eq!(a.owner.container_id.len(), 64);
    assert!(a.owner.cgroup.starts_with("/kubepods.slice/"));
    assert_eq!(a.owner.pid, None, "no pids unless asked for");
    assert_eq!(a.holdings.qps.get(&("INIT".into(), "RC".into())), Some(&1));
    assert!(a.holdings.mr_bytes > 0);
    let b = row("rxe_b", "ibv_srq_pingpon");
    assert_eq!(b.owner.cgroup, "/lab.slice/job-b.scope");
    assert_eq!(b.owner.pod_uid, "");
    assert_eq!(b.holdings.objects.get("qp"), Some(&16));
    assert_eq!(b.holdings.qps.get(&("INIT".into(), "RC".into())), Some(&16));
    // The GSI QPs belong to the kernel; rping (pid 169) exited: unknown.
    for dev in DEVICES {
        let k = row(dev, KERNEL);
        assert_eq!(k.holdings.qps.get(&("RTS".into(), "GSI".into())), Some(&1));
        assert_eq!(k.owner.cgroup, "");
    }
    assert_eq!(
        row("rxe_a", UNKNOWN).holdings.objects.get("cm_id"),
        Some(&1)
    );
}

#[test]
fn owners_beyond_the_cap_fold_into_other_and_are_counted() {
    let full = tally(options()).finish(256);
    let owners: std::collections::BTreeSet<&OwnerKey> =
        full.rows.iter().map(|r| &r.owner).collect();
    assert!(owners.len() >= 3, "{owners:?}");
    let capped = tally(options()).finish(1);
    assert_eq!(capped.folded_owners, owners.len() as u64 - 1);
    // The one owner kept holds the most objects: ibv_srq_pingpong (16 QPs, ...).
    let kept: std::collections::BTreeSet<&str> = capped
        .rows
        .iter()
        .map(|r| r.owner.comm.as_str())
        .filter(|c| *c != OTHER)
        .collect();
    assert_eq!(kept.into_iter().collect::<Vec<_>>(), ["ibv_srq_pingpon"]);
    // Folding loses no object.
    let total = |r: &rdmakit::attribution::OwnerReport| -> u64 {
        r.rows.iter().map(|r| r.holdings.total()).sum()
    };
    assert_eq!(total(&capped), total(&full));
}

#[test]
fn objects_beyond_the_dump_cap_are_counted_not_read() {
    let report = tally(TallyOptions {
        max_objects: 4,
        ..options()
    })
    .finish(256);
    let qp_b: u64 = report
        .rows
        .iter()
        .filter(|r| r.device == "rxe_b")
        .filter_map(|r| r.holdings.objects.get("qp"))
        .sum();
    assert_eq!(qp_b, 4);
    let unread = report
        .unread
        .iter()
        .find(|u| u.device == "rxe_b" && u.kind == "qp")
        .expect("rxe_b qp overflow");
    assert_eq!(unread.count, 17 - 4);
    assert!(report.unread.iter().all(|u| u.count > 0));
}

#[test]
fn grouping_by_cgroup_and_pod_sums_over_devices() {
    let report = tally(options()).finish(256);
    let by_cg = report.grouped(Grouping::Cgroup);
    let job_b = by_cg
        .iter()
        .find(|(k, _)| k.cgroup == "/lab.slice/job-b.scope")
        .unwrap();
    assert_eq!(job_b.1.objects.get("qp"), Some(&16));
    let kernel = by_cg.iter().find(|(k, _)| k.comm == KERNEL).unwrap();
    assert_eq!(
        kernel.1.objects.get("qp"),
        Some(&3),
        "one GSI QP per device"
    );
    let by_pod = report.grouped(Grouping::Pod);
    let pod = by_pod.iter().find(|(k, _)| k.pod_uid == POD).unwrap();
    assert_eq!(pod.1.objects.get("qp"), Some(&1));
    // Most objects first.
    let totals: Vec<u64> = by_cg.iter().map(|(_, h)| h.total()).collect();
    assert!(totals.windows(2).all(|w| w[0] >= w[1]), "{totals:?}");
}

/// The captured processes, with `ibv_srq_pingpong` (pid 170) in step 0 of Slurm job 4242
/// (cgroup/v2 layout, `../proc-owners/130`'s shape) and `ibv_rc_pingpong` (168) in the
/// extern step of the same job: a copy of proc-captured with two cgroup files replaced.
fn slurm_proc_tree(name: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("rdmakit-{name}-{}", std::process::id()));
    for (pid, step) in [("168", "extern"), ("170", "0")] {
        let dir = root.join(pid);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(
            data("proc-captured").join(pid).join("comm"),
            dir.join("comm"),
        )
        .unwrap();
        std::fs::write(
            dir.join("cgroup"),
            format!("0::/system.slice/slurmstepd.scope/job_4242/step_{step}/user/task_0\n"),
        )
        .unwrap();
    }
    root
}

#[test]
fn slurm_jobs_label_owners_and_group_by_job() {
    let root = slurm_proc_tree("slurm-owners");
    let report = tally(TallyOptions {
        proc_root: root.clone(),
        ..options()
    })
    .finish(256);
    let srq = report
        .rows
        .iter()
        .find(|r| r.owner.pid == Some(170))
        .unwrap();
    assert_eq!(
        (srq.owner.job_id.as_str(), srq.owner.job_step.as_str()),
        ("4242", "0")
    );
    let rc = report
        .rows
        .iter()
        .find(|r| r.owner.pid == Some(168))
        .unwrap();
    assert_eq!(
        (rc.owner.job_id.as_str(), rc.owner.job_step.as_str()),
        ("4242", "extern")
    );
    let kernel = report.rows.iter().find(|r| r.owner.comm == KERNEL).unwrap();
    assert_eq!(kernel.owner.job_id, "");
    // By job: both steps' QPs (16 + 1) in one row; the kernel's outside any job.
    let by_job = report.grouped(Grouping::Job);
    let job = by_job.iter().find(|(k, _)| k.job_id == "4242").unwrap();
    assert_eq!(job.1.objects.get("qp"), Some(&17));
    assert_eq!(job.0.job_step, "", "a job row sums its steps");
    assert!(by_job.iter().any(|(k, _)| k.job_id.is_empty()));
    std::fs::remove_dir_all(&root).unwrap();
}
