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
//! Directories are kept the same way: their descriptor (files are opened relative to it)
//! and their listing. Per snapshot a directory costs one `stat` of its path, a file one
//! `pread`.
//!
//! Safety nets, so that a kept descriptor never returns something a fresh open would not:
//! - every directory is `stat`ed by its path on every snapshot; its identity (device and
//!   inode numbers) and its modification and change times must match the ones its
//!   descriptors were opened under, else they are all dropped and it is opened and listed
//!   again: a device removed and added again under the same name has new directories, and a
//!   file added, removed or replaced by another (rename over it, delete and create, as tools
//!   writing test trees do) changes its directory's times. A value written into the same
//!   file is seen anyway (`pread`);
//! - a directory is listed again every [`RELIST`] snapshots even when it looks unchanged
//!   (sysfs does not always update a directory's times), and files no longer listed are
//!   dropped;
//! - a `pread` that fails drops the descriptor and the file is read the ordinary way, so
//!   errors are reported exactly as without this cache;
//! - directories not seen for two snapshots (devices gone, filtered) are dropped whole;
//! - at most `max` file descriptors are kept (plus one per directory); past that files are
//!   opened and closed on every snapshot.

use rustc_hash::FxHashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::file;

/// A directory that looks unchanged is listed again after this many snapshots.
pub const RELIST: u64 = 16;

/// Descriptors of sysfs directories and files, shared by the snapshots of one
/// [`super::SysfsReader`].
#[derive(Debug)]
pub struct OpenFiles {
    max: usize,
    open: AtomicUsize,
    generation: AtomicU64,
    dirs: Mutex<FxHashMap<PathBuf, Arc<Mutex<DirFiles>>>>,
}

/// st_dev, st_ino, mtime and ctime (seconds, nanoseconds) of a directory.
type DirId = (u64, u64, i64, i64, i64, i64);

/// What is kept of one directory.
#[derive(Debug, Default)]
pub(crate) struct DirFiles {
    /// Identity and times of the directory everything below was opened in.
    id: DirId,
    /// The last snapshot generation that visited this directory.
    seen: u64,
    /// The directory's descriptor.
    dir: Option<OwnedFd>,
    /// Its entries (sorted, without `.` and `..`) and the generation that listed them.
    names: Option<(Vec<String>, u64)>,
    /// Descriptors of its files read by name (attribute directories).
    files: FxHashMap<String, OwnedFd>,
    /// Descriptors of its listed files (counter directories), by index in `names`: a
    /// counter directory's files are read in listing order, so each is found by position,
    /// without hashing and comparing its name on every snapshot.
    slots: Vec<Option<OwnedFd>>,
}

impl OpenFiles {
    /// Keep at most `max` file descriptors.
    pub fn new(max: usize) -> OpenFiles {
        OpenFiles {
            max,
            open: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            dirs: Mutex::new(FxHashMap::default()),
        }
    }

    /// File descriptors kept open now (directories not counted).
    pub fn len(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Whether no file descriptor is kept.
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
                self.open.fetch_sub(dir.kept(), Ordering::Relaxed);
            }
            keep
        });
    }

    /// What is kept of the directory at `path`, for snapshot `generation`, after checking
    /// with `stat` that it is still the directory it was opened as (else everything kept of
    /// it is dropped). `None` when `stat` fails: the caller reads the ordinary way, which
    /// reports why.
    pub(crate) fn entry(&self, path: &Path, generation: u64) -> Option<Arc<Mutex<DirFiles>>> {
        let stat = nix::sys::stat::stat(path).ok()?;
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
            let mut dir = lock(&entry);
            dir.seen = dir.seen.max(generation);
            if dir.id != id {
                self.open.fetch_sub(dir.kept(), Ordering::Relaxed);
                *dir = DirFiles {
                    id,
                    seen: dir.seen,
                    ..DirFiles::default()
                };
            }
        }
        Some(entry)
    }

    /// Keep `fd` for `name` if there is room.
    pub(crate) fn keep(&self, files: &mut FxHashMap<String, OwnedFd>, name: &str, fd: OwnedFd) {
        if self.open.load(Ordering::Relaxed) >= self.max {
            return;
        }
        if files.insert(name.to_owned(), fd).is_none() {
            self.open.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Keep `fd` in the listed file's `slot` if there is room.
    pub(crate) fn keep_slot(&self, slot: &mut Option<OwnedFd>, fd: OwnedFd) {
        if self.open.load(Ordering::Relaxed) >= self.max {
            return;
        }
        if slot.replace(fd).is_none() {
            self.open.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Forget the descriptor in `slot` (it failed).
    pub(crate) fn forget_slot(&self, slot: &mut Option<OwnedFd>) {
        if slot.take().is_some() {
            self.open.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Forget the descriptor of `name` (it failed).
    pub(crate) fn forget(&self, files: &mut FxHashMap<String, OwnedFd>, name: &str) {
        if files.remove(name).is_some() {
            self.open.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Make sure `dir` has its descriptor (opened from `path`) and, with `list`, a listing
    /// not older than [`RELIST`] snapshots; files no longer listed are dropped.
    pub(crate) fn prepare(
        &self,
        dir: &mut DirFiles,
        path: &Path,
        generation: u64,
        list: bool,
    ) -> io::Result<()> {
        let fd = match dir.dir.take() {
            Some(fd) => fd,
            None => file::open_directory(path)?,
        };
        let fd = &*dir.dir.insert(fd);
        let stale = match &dir.names {
            None => true,
            Some((_, listed)) => listed + RELIST <= generation,
        };
        if list && stale {
            // A second open file description, so the kept one's position never moves.
            let mut names = file::dir_names(&mut file::reopen_dir(fd.as_fd())?)?;
            names.sort_unstable();
            let before = dir.files.len();
            dir.files
                .retain(|name, _| names.binary_search(name).is_ok());
            self.open
                .fetch_sub(before - dir.files.len(), Ordering::Relaxed);
            // The listed files' descriptors follow their names to their new positions;
            // those of files no longer listed are dropped.
            let old_names = dir.names.take().map(|(n, _)| n).unwrap_or_default();
            let old_slots = std::mem::take(&mut dir.slots);
            let mut old: FxHashMap<String, OwnedFd> = old_names
                .into_iter()
                .zip(old_slots)
                .filter_map(|(name, slot)| slot.map(|fd| (name, fd)))
                .collect();
            dir.slots = names.iter().map(|name| old.remove(name)).collect();
            self.open.fetch_sub(old.len(), Ordering::Relaxed);
            dir.names = Some((names, generation));
        }
        Ok(())
    }
}

impl DirFiles {
    /// File descriptors kept of this directory.
    fn kept(&self) -> usize {
        self.files.len() + self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Split borrows: the descriptor, the listing (after [`OpenFiles::prepare`] with `list`),
    /// the descriptors of files read by name and those of the listed files (one slot per
    /// name of the listing, in its order).
    pub(crate) fn parts(&mut self) -> DirParts<'_> {
        let names = self.names.as_ref().map_or(&[][..], |(n, _)| n.as_slice());
        // Only a listing fills `slots`, one per name; anything else has none.
        self.slots.resize_with(names.len(), || None);
        DirParts {
            dir: self.dir.as_ref().map(|fd| fd.as_fd()),
            names,
            files: &mut self.files,
            slots: &mut self.slots,
        }
    }
}

/// The parts of a [`DirFiles`], borrowed apart.
pub(crate) struct DirParts<'a> {
    /// The directory's descriptor.
    pub dir: Option<BorrowedFd<'a>>,
    /// Its listing, sorted.
    pub names: &'a [String],
    /// Descriptors of files read by name.
    pub files: &'a mut FxHashMap<String, OwnedFd>,
    /// Descriptors of the listed files, `names[i]`'s in `slots[i]`.
    pub slots: &'a mut [Option<OwnedFd>],
}

/// Lock, ignoring poisoning: the maps stay consistent (a panic mid-update at worst leaves a
/// descriptor unaccounted, never a wrong value).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}
