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
