//! cgroup v2 for live tests: the lab may boot without cgroup2 mounted at /sys/fs/cgroup, and
//! tests that put a process into a cgroup of their own need a fresh directory that is gone
//! again afterwards, also when the test fails.
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the lab's tests expect cgroup v2.
pub const ROOT: &str = "/sys/fs/cgroup";

/// The cgroup v2 root, mounted first if the lab has not (a failed mount fails the test).
pub fn mounted_root() -> PathBuf {
    let root = PathBuf::from(ROOT);
    if !root.join("cgroup.controllers").exists() {
        let out = Command::new("mount")
            .args(["-t", "cgroup2", "none", ROOT])
            .output()
            .expect("FAIL: cannot run mount");
        assert!(
            out.status.success(),
            "FAIL: mounting cgroup2 at {ROOT}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    root
}

/// A child cgroup of `root` made for one test: a stale one of the same name is removed
/// first; the directory is removed on drop (once its processes have exited).
pub struct TestCgroup {
    pub dir: PathBuf,
}

impl TestCgroup {
    pub fn new(root: &Path, name: &str) -> TestCgroup {
        let dir = root.join(name);
        if dir.exists() {
            std::fs::remove_dir(&dir)
                .unwrap_or_else(|e| panic!("FAIL: removing the old {}: {e}", dir.display()));
        }
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("FAIL: mkdir {}: {e}", dir.display()));
        TestCgroup { dir }
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The directories of a Slurm cgroup v2 step as slurmstepd lays them out (Slurm's "Control
/// Group v2 plugin" page: `system.slice/slurmstepd.scope/job_<id>/step_<step>/user/task_0`),
/// made with mkdir under the root; `task` is the leaf a test process joins. Removed leaf
/// first on drop (directories that existed before are left alone).
pub struct SlurmStepCgroup {
    made: Vec<PathBuf>,
    pub task: PathBuf,
}

impl SlurmStepCgroup {
    pub fn new(root: &Path, job: u32, step: &str) -> SlurmStepCgroup {
        let rel = format!("system.slice/slurmstepd.scope/job_{job}/step_{step}/user/task_0");
        let mut made = Vec::new();
        let mut dir = root.to_path_buf();
        for seg in rel.split('/') {
            dir.push(seg);
            if !dir.exists() {
                std::fs::create_dir(&dir)
                    .unwrap_or_else(|e| panic!("FAIL: mkdir {}: {e}", dir.display()));
                made.push(dir.clone());
            }
        }
        SlurmStepCgroup { made, task: dir }
    }

    /// The path `/proc/<pid>/cgroup` shows for a process in [`task`](Self::task).
    pub fn path(&self, root: &Path) -> String {
        format!("/{}", self.task.strip_prefix(root).unwrap().display())
    }
}

impl Drop for SlurmStepCgroup {
    fn drop(&mut self) {
        for dir in self.made.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}
