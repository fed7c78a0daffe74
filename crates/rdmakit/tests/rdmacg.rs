//! The rdma cgroup controller read from a cgroup v2 fixture tree (tests/data/cgroup-rdma,
//! see its README).

use rdmakit::rdmacg::{has_controller, read_tree, Amount};
use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/cgroup-rdma")
}

#[test]
fn the_tree_gives_usage_and_limits_per_cgroup_and_device() {
    assert!(has_controller(&root()).unwrap());
    let tree = read_tree(&root(), 1000).unwrap();
    assert!(tree.errors.is_empty(), "{:?}", tree.errors);
    let paths: Vec<&str> = tree.cgroups.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/idle.slice",
            "/kubepods.slice",
            "/kubepods.slice/kubepods-pod1b2c3d4e_5f60_4718_92a3_b4c5d6e7f809.slice",
            "/lab.slice",
            "/lab.slice/job-a.scope",
            "/lab.slice/job-b.scope",
        ]
    );
    let job_b = tree
        .cgroups
        .iter()
        .find(|c| c.path.ends_with("job-b.scope"))
        .unwrap();
    let u = job_b.usage();
    let obj = u.iter().find(|u| u.resource == "hca_object").unwrap();
    assert_eq!((obj.current, obj.max), (8, Amount::Count(8)));
    assert!(obj.at_limit());
    let interesting: Vec<&str> = tree
        .cgroups
        .iter()
        .filter(|c| c.is_interesting())
        .map(|c| c.path.as_str())
        .collect();
    assert_eq!(interesting.len(), 3, "{interesting:?}");
    let pod = &tree.cgroups[2];
    let mlx = pod
        .usage()
        .into_iter()
        .find(|u| u.device == "mlx5_0" && u.resource == "hca_object")
        .unwrap();
    assert_eq!((mlx.current, mlx.max), (40, Amount::Count(1000)));
}

#[test]
fn the_walk_is_bounded_and_a_missing_controller_is_not_an_error() {
    let tree = read_tree(&root(), 2).unwrap();
    assert_eq!(tree.cgroups.len(), 2);
    assert_eq!(tree.skipped, 4);
    let sysfs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    assert!(!has_controller(&sysfs).unwrap());
    assert!(read_tree(&sysfs.join("nope"), 10).is_err());
}
