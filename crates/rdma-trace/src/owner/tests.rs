use super::*;
use crate::event::{parse_raw, RawEventBuilder};
use std::cell::RefCell;

fn ev_of(pid: u32) -> TraceEvent {
    let raw = RawEventBuilder {
        kind: 3,
        comm: "app".into(),
        dev: "rxe0".into(),
        from_state: 0xff,
        ..Default::default()
    }
    .bytes();
    let mut e = parse_raw(&raw, 0, &[]).unwrap();
    e.pid = pid;
    e
}

fn pod() -> Owner {
    Owner {
        cgroup: "/kubepods.slice/pod.slice/cri-containerd-1.scope".into(),
        pod_uid: Some("1b2c3d4e-5f60-4718-92a3-b4c5d6e7f809".into()),
        job: None,
    }
}

#[test]
fn the_resolver_is_asked_for_the_events_pid_and_its_owner_set() {
    let asked = RefCell::new(Vec::new());
    let mut e = ev_of(101);
    e.resolve_owner(|pid| {
        asked.borrow_mut().push(pid);
        Some(pod())
    });
    assert_eq!(asked.into_inner(), [101]);
    assert_eq!(e.cgroup.as_deref(), Some(pod().cgroup.as_str()));
    assert_eq!(e.pod_uid, pod().pod_uid);
    assert_eq!((e.job_id.as_deref(), e.job_step.as_deref()), (None, None));
    // The JSON an `rdmactl trace --json` line carries.
    let v: serde_json::Value = serde_json::to_value(&e).unwrap();
    assert_eq!(v["pod_uid"], "1b2c3d4e-5f60-4718-92a3-b4c5d6e7f809");
    assert!(v.get("job_id").is_none(), "{v}");
}

#[test]
fn a_slurm_job_sets_id_and_step() {
    let mut e = ev_of(131);
    e.set_owner(Owner {
        cgroup: "/system.slice/slurmstepd.scope/job_3385/step_extern/user/task_0".into(),
        pod_uid: None,
        job: Some(("3385".into(), "extern".into())),
    });
    let v: serde_json::Value = serde_json::to_value(&e).unwrap();
    assert_eq!(
        (v["job_id"].as_str(), v["job_step"].as_str()),
        (Some("3385"), Some("extern"))
    );
    assert!(v.get("pod_uid").is_none(), "{v}");
}

#[test]
fn pid_0_is_not_looked_up_and_an_unknown_owner_leaves_nothing() {
    let mut e = ev_of(0);
    e.resolve_owner(|pid| panic!("pid {pid} looked up"));
    assert_eq!(e.cgroup, None);
    let mut e = ev_of(4242);
    e.resolve_owner(|_| None);
    let v: serde_json::Value = serde_json::to_value(&e).unwrap();
    for field in ["cgroup", "pod_uid", "job_id", "job_step"] {
        assert!(v.get(field).is_none(), "{field}: {v}");
    }
    // The default resolver knows no one.
    let mut e = ev_of(101);
    e.resolve_owner(no_owners());
    assert_eq!(e.cgroup, None);
}
