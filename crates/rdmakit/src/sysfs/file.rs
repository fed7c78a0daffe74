//! Size-limited reads of single sysfs attributes, with one reusable buffer.
//!
//! An attribute is read with exactly open + one read + close: no stat, no second read to see
//! EOF (sysfs returns a whole attribute in the first read, at most one page). A file that
//! fills more than [`READ_LIMIT`] bytes is refused.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// The largest attribute accepted, in bytes (sysfs attributes are at most one 4 KiB page).
pub const READ_LIMIT: usize = 4096;

/// Why an attribute could not be read.
#[derive(Debug)]
pub(crate) enum ReadFailure {
    /// The file does not exist (optional attribute, or it vanished).
    Missing,
    /// The content is larger than [`READ_LIMIT`].
    TooLarge,
    /// open or read failed.
    Os(io::Error),
}

/// Reads attributes into one buffer that lives as long as the reader.
pub(crate) struct AttrReader {
    buf: Vec<u8>,
}

impl AttrReader {
    pub(crate) fn new() -> AttrReader {
        AttrReader {
            buf: vec![0; READ_LIMIT + 1],
        }
    }

    /// The raw content of `path` (not trimmed), borrowed until the next read.
    pub(crate) fn read(&mut self, path: &Path) -> Result<&[u8], ReadFailure> {
        let mut file = File::open(path).map_err(|err| {
            if err.kind() == io::ErrorKind::NotFound {
                ReadFailure::Missing
            } else {
                ReadFailure::Os(err)
            }
        })?;
        let n = loop {
            match file.read(&mut self.buf) {
                Ok(n) => break n,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(ReadFailure::Os(err)),
            }
        };
        if n > READ_LIMIT {
            return Err(ReadFailure::TooLarge);
        }
        Ok(&self.buf[..n])
    }
}
