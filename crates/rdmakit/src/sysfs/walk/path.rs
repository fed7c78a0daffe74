//! [`PathStack`]: the walk's one path buffer.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A path built by appending and removing whole components, kept as bytes: cheaper than
/// `PathBuf::pop`, which re-parses components from the end on every call.
pub(super) struct PathStack {
    bytes: Vec<u8>,
    marks: Vec<usize>,
}

impl PathStack {
    pub(super) fn new(base: PathBuf) -> PathStack {
        let mut bytes = base.into_os_string().into_encoded_bytes();
        bytes.reserve(256);
        PathStack {
            bytes,
            marks: Vec::with_capacity(16),
        }
    }

    /// Append `/name`; undo with [`PathStack::pop`].
    pub(super) fn push(&mut self, name: &str) {
        self.marks.push(self.bytes.len());
        if self.bytes.last() != Some(&b'/') {
            self.bytes.push(b'/');
        }
        self.bytes.extend_from_slice(name.as_bytes());
    }

    /// Remove the last pushed component.
    pub(super) fn pop(&mut self) {
        if let Some(mark) = self.marks.pop() {
            self.bytes.truncate(mark);
        }
    }

    pub(super) fn as_path(&self) -> &Path {
        Path::new(OsStr::from_bytes(&self.bytes))
    }

    /// The length of the path now.
    pub(super) fn len(&self) -> usize {
        self.bytes.len()
    }

    /// The part of the path after the first `start` bytes, without its leading `/`
    /// (`None` if it is not UTF-8, which pushed names always are).
    pub(super) fn tail(&self, start: usize) -> Option<&str> {
        let tail = std::str::from_utf8(self.bytes.get(start..)?).ok()?;
        Some(tail.strip_prefix('/').unwrap_or(tail))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_stack_push_pop() {
        let mut p = PathStack::new(PathBuf::from("/sys/class/infiniband"));
        p.push("mlx5_0");
        p.push("ports");
        assert_eq!(p.as_path(), Path::new("/sys/class/infiniband/mlx5_0/ports"));
        p.pop();
        p.push("hw_counters");
        assert_eq!(
            p.as_path(),
            Path::new("/sys/class/infiniband/mlx5_0/hw_counters")
        );
        p.pop();
        p.pop();
        p.pop();
        assert_eq!(p.as_path(), Path::new("/sys/class/infiniband"));
        let mut root = PathStack::new(PathBuf::from("/"));
        root.push("sys");
        assert_eq!(root.as_path(), Path::new("/sys"));
    }
}
