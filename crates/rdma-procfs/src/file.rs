//! Reading one small file under a root, and the error both sources give when that fails:
//! size-limited (a /proc cgroup file lists one line per hierarchy; an rdma.* file one line
//! per device), UTF-8 checked.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Why a file could not be read or understood.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// A file or directory could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A file did not have the expected format.
    #[error("{path}: {detail}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
}

impl FileError {
    /// An I/O error on `path`.
    pub(crate) fn io(path: &Path, source: std::io::Error) -> FileError {
        FileError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// `path` is not what it should be.
    pub(crate) fn malformed(path: &Path, detail: impl Into<String>) -> FileError {
        FileError::Malformed {
            path: path.to_path_buf(),
            detail: detail.into(),
        }
    }
}

/// The most bytes read of one file.
const READ_LIMIT: u64 = 64 * 1024;

/// The first 64 KiB of `path`, which must be UTF-8.
pub(crate) fn read_small(path: &Path) -> Result<String, FileError> {
    let mut bytes = Vec::new();
    fs::File::open(path)
        .map_err(|e| FileError::io(path, e))?
        .take(READ_LIMIT)
        .read_to_end(&mut bytes)
        .map_err(|e| FileError::io(path, e))?;
    String::from_utf8(bytes).map_err(|_| FileError::malformed(path, "not UTF-8"))
}
