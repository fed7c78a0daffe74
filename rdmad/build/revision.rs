//! The git revision rdmad is built from. Shared by `build.rs` (which bakes it into the binary)
//! and rdmad's unit tests (which check the fallback on a tree without git).
//!
//! Order: the `RDMAD_BUILD_REVISION` environment variable (a container build or a packager
//! that has no `.git` passes it), else `git rev-parse HEAD` in the source tree, else
//! [`UNKNOWN`] (a release tarball, or no git installed).

use std::path::{Path, PathBuf};
use std::process::Command;

/// What the revision is when nothing tells it.
pub const UNKNOWN: &str = "unknown";

/// The variable that overrides git.
pub const ENV: &str = "RDMAD_BUILD_REVISION";

/// A full or abbreviated commit id: 7 to 64 lowercase hex digits (SHA-1 or SHA-256 repos).
pub fn is_commit(s: &str) -> bool {
    (7..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        // A GIT_DIR from the environment would point at another repository.
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    Some(text.trim().to_string())
}

/// The revision of the tree at `dir`, and the git files whose change means a new one (empty
/// when git does not know `dir`). `env` is the value of [`ENV`], if set.
pub fn revision(dir: &Path, env: Option<&str>) -> (String, Vec<PathBuf>) {
    if let Some(value) = env.map(str::trim).filter(|v| !v.is_empty()) {
        let value = value.to_ascii_lowercase();
        return (
            if is_commit(&value) {
                value
            } else {
                UNKNOWN.to_string()
            },
            Vec::new(),
        );
    }
    let Some(head) = git(dir, &["rev-parse", "HEAD"]).filter(|h| is_commit(h)) else {
        return (UNKNOWN.to_string(), Vec::new());
    };
    // HEAD lives in the worktree's git dir; branch refs and packed-refs in the common one.
    let mut watch = Vec::new();
    if let Some(git_dir) = git(dir, &["rev-parse", "--absolute-git-dir"]) {
        watch.push(Path::new(&git_dir).join("HEAD"));
    }
    if let Some(common) = git(
        dir,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
    ) {
        let common = PathBuf::from(common);
        watch.push(common.join("packed-refs"));
        if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
            watch.push(common.join(branch));
        }
    }
    (head, watch)
}
