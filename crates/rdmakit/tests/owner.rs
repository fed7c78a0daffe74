//! Owners of RDMA objects, read from /proc trees in the layouts of containerd, CRI-O and
//! Docker under both cgroup drivers (tests/data/proc-owners, see its README).
use rdma_procfs::file::FileError;
use rdmakit::owner::{read_owner, OwnerError, Runtime};
use std::path::PathBuf;

const UID: &str = "1b2c3d4e-5f60-4718-92a3-b4c5d6e7f809";
const CID: &str = "3f1c0e9a8b7d6c5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/proc-owners")
}

#[test]
fn every_runtime_and_cgroup_driver_gives_pod_and_container() {
    let cases = [
        (101, "ib_write_bw", Some(Runtime::Containerd)),
        (102, "ib_write_bw", None), // a bare id under a cgroupfs pod: containerd or Docker
        (103, "nccl-test", Some(Runtime::CriO)),
        (104, "nccl-test", Some(Runtime::CriO)),
        (105, "mpirun", Some(Runtime::Docker)),
        (106, "mpirun", None),
        (111, "kubelet-kind", Some(Runtime::Containerd)),
    ];
    for (pid, comm, runtime) in cases {
        let o = read_owner(&root(), pid).unwrap_or_else(|e| panic!("pid {pid}: {e}"));
        assert_eq!(o.comm, comm, "pid {pid}");
        assert_eq!(
            o.ids.pod_uid.as_deref(),
            Some(UID),
            "pid {pid}: {:?}",
            o.cgroup
        );
        assert_eq!(
            o.ids.container_id.as_deref(),
            Some(CID),
            "pid {pid}: {:?}",
            o.cgroup
        );
        assert_eq!(o.ids.runtime, runtime, "pid {pid}: {:?}", o.cgroup);
    }
}

#[test]
fn cgroup_v1_uses_the_rdma_controllers_path() {
    let o = read_owner(&root(), 106).unwrap();
    assert_eq!(
        o.cgroup.as_deref(),
        Some(format!("/kubepods/burstable/pod{UID}/{CID}").as_str())
    );
}

#[test]
fn docker_outside_kubernetes_has_a_container_and_no_pod() {
    for pid in [107, 108] {
        let o = read_owner(&root(), pid).unwrap();
        assert_eq!(o.ids.pod_uid, None, "pid {pid}");
        assert_eq!(o.ids.container_id.as_deref(), Some(CID), "pid {pid}");
        assert_eq!(o.ids.runtime, Some(Runtime::Docker), "pid {pid}");
    }
}

#[test]
fn conmon_belongs_to_the_pod_but_is_no_container() {
    let o = read_owner(&root(), 109).unwrap();
    assert_eq!(o.ids.pod_uid.as_deref(), Some(UID));
    assert_eq!(o.ids.container_id, None);
}

#[test]
fn a_host_process_has_a_cgroup_and_no_kubernetes_ids() {
    let o = read_owner(&root(), 110).unwrap();
    assert_eq!(o.comm, "rping");
    assert_eq!(
        o.cgroup.as_deref(),
        Some("/user.slice/user-0.slice/session-1.scope")
    );
    assert_eq!(o.ids, Default::default());
}

#[test]
fn a_gone_process_and_a_malformed_file_are_errors_that_say_so() {
    match read_owner(&root(), 999) {
        Err(OwnerError::Gone { pid: 999 }) => {}
        other => panic!("expected Gone, got {other:?}"),
    }
    match read_owner(&root(), 120) {
        Err(e @ OwnerError::File(FileError::Malformed { .. })) => {
            let text = e.to_string();
            assert!(
                text.contains("120/cgroup") && text.contains("line 1"),
                "{text}"
            );
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
}

#[test]
fn slurm_jobs_from_both_cgroup_plugins() {
    let cases = [
        (130, "3385", "0"),
        (131, "3385", "extern"),
        (132, "777", "0"),
        (133, "12", "batch"),
    ];
    for (pid, id, step) in cases {
        let o = read_owner(&root(), pid).unwrap_or_else(|e| panic!("pid {pid}: {e}"));
        let job = o
            .job
            .unwrap_or_else(|| panic!("pid {pid}: no job in {:?}", o.cgroup));
        assert_eq!(
            (job.id.as_str(), job.step.as_str()),
            (id, step),
            "pid {pid}"
        );
        assert_eq!(o.ids, Default::default(), "pid {pid}: no pod, no container");
    }
}

#[test]
fn slurm_v1_job_is_found_though_the_rdma_hierarchy_is_at_the_root() {
    // The owner's cgroup stays the rdma controller's (`/`); the job comes from the others.
    let o = read_owner(&root(), 132).unwrap();
    assert_eq!(o.cgroup.as_deref(), Some("/"));
    assert_eq!(o.job.map(|j| j.id).as_deref(), Some("777"));
}

#[test]
fn slurm_lookalikes_and_other_owners_have_no_job() {
    for pid in [101, 102, 106, 107, 108, 110, 134] {
        let o = read_owner(&root(), pid).unwrap();
        assert_eq!(o.job, None, "pid {pid}: {:?}", o.cgroup);
    }
    let o = read_owner(&root(), 134).unwrap();
    assert_eq!(
        o.cgroup.as_deref(),
        Some("/user.slice/user-1000.slice/job_1/x")
    );
}

#[test]
fn the_live_proc_of_this_test_reads() {
    // The real /proc: this process exists, has a name, and a cgroup path on Linux.
    let o = read_owner(std::path::Path::new("/proc"), std::process::id()).unwrap();
    assert!(!o.comm.is_empty());
    assert!(
        o.cgroup.as_deref().is_some_and(|c| c.starts_with('/')),
        "{o:?}"
    );
}
