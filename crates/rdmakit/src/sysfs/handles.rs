//! Counter files kept open from one snapshot to the next, re-read with `pread` at offset 0.
//!
//! A daemon that reads every counter file on every scrape spends most of the scrape in
//! open(2) and close(2): the path lookup, a new `struct file`, its release. A sysfs
//! attribute re-read from offset 0 through a descriptor that stays open calls the driver's
//! `show` again and returns the current value (the kernel's sysfs documentation prescribes
//! exactly this, "seek to 0 and read again", for pollers), so keeping the descriptors and
//! issuing one `pread` per file gives the same fresh values for a third of the system calls.
//! Values are never cached, only descriptors.
//!
//! Safety nets, so that a kept descriptor never returns something a fresh open would not:
//! - every counter directory is still opened and listed on every snapshot; its identity
//!   (device and inode numbers) and its modification and change times must match the ones
//!   the descriptors were opened under, else they are all dropped: a device removed and
//!   added again under the same name has new directories, and a file replaced by another
//!   (rename over it, delete and create, as tools writing test trees do) changes its
//!   directory's times. A value written into the same file is seen anyway (`pread`);
//! - files no longer listed are dropped, new ones opened;
//! - a `pread` that fails drops the descriptor and the file is read the ordinary way, so
//!   errors are reported exactly as without this cache;
//! - directories not seen for two snapshots (devices gone, filtered) are dropped whole;
//! - at most `max` descriptors are kept; past that files are read the ordinary way.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rustix::fd::{AsFd, OwnedFd};

/// Descriptors of counter files, shared by the snapshots of one [`super::SysfsReader`].
#[derive(Debug)]
pub struct OpenFiles {
    max: usize,
    open: AtomicUsize,
    generation: AtomicU64,
    dirs: Mutex<HashMap<PathBuf, Arc<Mutex<DirFiles>>>>,
}

/// st_dev, st_ino, mtime and ctime (seconds, nanoseconds) of a directory.
type DirId = (u64, u64, i64, i64, i64, i64);

/// The kept descriptors of one counter directory.
#[derive(Debug, Default)]
pub(crate) struct DirFiles {
    /// Identity and times of the directory the descriptors were opened in.
    id: DirId,
    /// The last snapshot generation that visited this directory.
    seen: u64,
    files: HashMap<String, OwnedFd>,
}

impl OpenFiles {
    /// Keep at most `max` descriptors.
    pub fn new(max: usize) -> OpenFiles {
        OpenFiles {
            max,
            open: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            dirs: Mutex::new(HashMap::new()),
        }
    }

    /// Descriptors kept open now.
    pub fn len(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Whether no descriptor is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Start a snapshot: its generation number.
    pub(crate) fn begin(&self) -> u64 {
        self.generation.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// End the snapshot `generation`: drop directories not visited by it or the one before.
    pub(crate) fn end(&self, generation: u64) {
        let mut dirs = lock(&self.dirs);
        dirs.retain(|_, dir| {
            let dir = lock(dir);
            let keep = dir.seen + 1 >= generation;
            if !keep {
                self.open.fetch_sub(dir.files.len(), Ordering::Relaxed);
            }
            keep
        });
    }

    /// The kept descriptors of the directory at `path`, opened as `dir` now, for snapshot
    /// `generation`: emptied when `dir` is not the directory they were opened in, and
    /// trimmed to the `names` listed now (sorted).
    pub(crate) fn dir<S: AsRef<str>>(
        &self,
        path: &Path,
        dir: impl AsFd,
        generation: u64,
        names: &[S],
    ) -> Option<Arc<Mutex<DirFiles>>> {
        let stat = rustix::fs::fstat(dir).ok()?;
        #[allow(clippy::unnecessary_cast)] // the field types differ between targets
        let id = (
            stat.st_dev as u64,
            stat.st_ino as u64,
            stat.st_mtime as i64,
            stat.st_mtime_nsec as i64,
            stat.st_ctime as i64,
            stat.st_ctime_nsec as i64,
        );
        let entry = {
            let mut dirs = lock(&self.dirs);
            match dirs.get(path) {
                Some(entry) => Arc::clone(entry),
                None => {
                    let entry = Arc::new(Mutex::new(DirFiles {
                        id,
                        ..DirFiles::default()
                    }));
                    dirs.insert(path.to_path_buf(), Arc::clone(&entry));
                    entry
                }
            }
        };
        {
            let mut files = lock(&entry);
            files.seen = files.seen.max(generation);
            let before = files.files.len();
            if files.id != id {
                files.id = id;
                files.files.clear();
            } else {
                files.files.retain(|name, _| {
                    names
                        .binary_search_by(|n| n.as_ref().cmp(name.as_str()))
                        .is_ok()
                });
            }
            self.open
                .fetch_sub(before - files.files.len(), Ordering::Relaxed);
        }
        Some(entry)
    }

    /// Keep `fd` for `name` if there is room.
    pub(crate) fn keep(&self, files: &mut DirFiles, name: &str, fd: OwnedFd) {
        if self.open.load(Ordering::Relaxed) >= self.max {
            return;
        }
        if files.files.insert(name.to_owned(), fd).is_none() {
            self.open.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Forget the descriptor of `name` (it failed).
    pub(crate) fn forget(&self, files: &mut DirFiles, name: &str) {
        if files.files.remove(name).is_some() {
            self.open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl DirFiles {
    /// The kept descriptor of `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&OwnedFd> {
        self.files.get(name)
    }
}

/// Lock, ignoring poisoning: the maps stay consistent (a panic mid-update at worst leaves a
/// descriptor unaccounted, never a wrong value).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}
