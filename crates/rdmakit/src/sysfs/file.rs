//! Size-limited reads of single sysfs attributes, with one reusable buffer.
//!
//! An attribute is read with one read from offset 0 after its open: no stat, no second read
//! to see EOF (sysfs returns a whole attribute in the first read, at most one page). A file
//! that fills more than [`READ_LIMIT`] bytes is refused. Files of a directory are opened
//! relative to the directory's descriptor ([`open_directory`], [`open_at`]), so the kernel
//! does not walk the path from the root each time.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

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

    /// Read the open file `fd` from offset 0 (`pread`: a sysfs attribute runs its `show`
    /// again, so a descriptor kept open gives fresh values); the length read, the bytes in
    /// [`AttrReader::filled`].
    pub(crate) fn fill(&mut self, fd: impl AsFd) -> Result<usize, ReadFailure> {
        let n = loop {
            match nix::sys::uio::pread(&fd, &mut self.buf[..], 0) {
                Ok(n) => break n,
                Err(Errno::EINTR) => continue,
                Err(errno) => return Err(ReadFailure::Os(errno.into())),
            }
        };
        if n > READ_LIMIT {
            return Err(ReadFailure::TooLarge);
        }
        Ok(n)
    }

    /// The first `n` bytes of the last [`AttrReader::fill`].
    pub(crate) fn filled(&self, n: usize) -> &[u8] {
        &self.buf[..n]
    }
}

/// Open the file `name` of the directory `dir` for reading.
pub(crate) fn open_at(dir: BorrowedFd<'_>, name: &str) -> Result<OwnedFd, ReadFailure> {
    nix::fcntl::openat(dir, name, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty()).map_err(
        |errno| {
            if errno == Errno::ENOENT {
                ReadFailure::Missing
            } else {
                ReadFailure::Os(errno.into())
            }
        },
    )
}

/// Open the directory `path` for listing and for opening its files relative to it.
pub(crate) fn open_directory(path: &Path) -> nix::Result<OwnedFd> {
    nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// A second open file description of the directory `dir`, for listing it without moving the
/// position of `dir` itself.
pub(crate) fn reopen_dir(dir: BorrowedFd<'_>) -> nix::Result<Dir> {
    Dir::openat(
        dir,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
}

/// The descriptor of the directory `path`, or `None` when it cannot be opened (the caller
/// then reads by path and reports the failure per file).
pub(crate) fn open_dir_fd(path: &Path) -> Option<OwnedFd> {
    open_directory(path).ok()
}

/// Open the directory `path` and list its entries ([`dir_names`]). `Ok(None)` when it does
/// not exist. The returned [`Dir`] keeps the descriptor for [`open_at`] (`Dir::as_fd`).
pub(crate) fn open_dir(path: &Path) -> io::Result<Option<(Dir, Vec<String>)>> {
    let fd = match open_directory(path) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(None),
        Err(errno) => return Err(errno.into()),
    };
    let mut dir = Dir::from_fd(fd)?;
    let names = dir_names(&mut dir)?;
    Ok(Some((dir, names)))
}

/// The entries of `dir` from where it stands, without `.` and `..`, names that are not UTF-8
/// skipped, unsorted.
pub(crate) fn dir_names(dir: &mut Dir) -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in dir.iter() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if let Ok(name) = std::str::from_utf8(name) {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}
