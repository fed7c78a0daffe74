use super::*;

#[test]
fn owners_are_read_under_the_proc_root() {
    let root =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/rdmakit/tests/data/proc-owners");
    // 101: containerd pod; 130: Slurm job 3385 step 0; 120: a malformed cgroup file.
    let pod = trace_owner(&root, 101).unwrap();
    assert!(pod.cgroup.contains("cri-containerd-"), "{pod:?}");
    assert_eq!(
        pod.pod_uid.as_deref(),
        Some("1b2c3d4e-5f60-4718-92a3-b4c5d6e7f809")
    );
    assert_eq!(
        trace_owner(&root, 130).unwrap().job,
        Some(("3385".into(), "0".into()))
    );
    assert_eq!(trace_owner(&root, 120), None);
}
