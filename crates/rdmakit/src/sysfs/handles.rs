//! Sysfs files and directories kept open from one snapshot to the next, re-read with `pread`
//! at offset 0.
//!
//! A daemon that reads every counter file on every scrape spends most of the scrape in
//! open(2) and close(2): the path lookup, a new `struct file`, its release. A sysfs
//! attribute re-read from offset 0 through a descriptor that stays open calls the driver's
//! `show` again and returns the current value (the kernel's sysfs documentation prescribes
//! exactly this, "seek to 0 and read again", for pollers), so keeping the descriptors and
//! issuing one `pread` per file gives the same fresh values for a third of the system calls.
//! Values are never cached, only descriptors, listings and what follows from a file's name
//! alone (a counter's kind and unit).
//!
//! What is kept is grouped by device ([`DeviceFiles`]): each directory the walk reads below
//! `class/infiniband/<dev>` (the device directory itself, `ports/`, every port directory,
//! its counter directories, GID directories, the parent device's directory), by its path
//! relative to the device directory, with its descriptor, its listing (sorted) and the
//! descriptors of its files. Per snapshot a directory costs one `fstat` of its kept
//! descriptor (no path lookup), a file one `pread`, and a file or directory its parent's
//! listing does not show costs nothing.
//!
//! Safety nets, so that a kept descriptor never returns something a fresh open would not:
//! - a device's entry in the class directory, listed on every snapshot, must keep its inode
//!   number (`d_ino`, no stat): on real sysfs `class/infiniband/<dev>` is a symlink that is
//!   created anew when the device registers again, in a copied tree a directory made again
//!   has a new inode; else everything kept of the device is dropped;
//! - every kept directory is `fstat`ed through its descriptor on every snapshot: its
//!   identity (device and inode numbers) and its modification and change times must match
//!   the ones it was opened under and it must still be linked, else it and everything kept
//!   below it are dropped and opened and listed again: a directory removed (and maybe made
//!   again under the same name) is unlinked, and a file added, removed or replaced by
//!   another (rename over it, delete and create, as tools writing test trees do) changes its
//!   directory's times. A value written into the same file is seen anyway (`pread`);
//! - a directory is listed again every [`RELIST`] snapshots even when it looks unchanged
//!   (sysfs does not always update a directory's times), and files no longer listed are
//!   dropped;
//! - a `pread` that fails drops the descriptor and the file is read the ordinary way, so
//!   errors are reported exactly as without this cache (kernfs answers ENODEV on reads of a
//!   removed device's open attributes);
//! - devices not seen for two snapshots (gone, filtered), and directories of a device not
//!   visited for two snapshots (a port gone, counters read elsewhere), are dropped whole;
//! - at most `max` file descriptors are kept (plus one per directory); past that files are
//!   opened and closed on every snapshot.

use rustc_hash::FxHashMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::file;
use crate::model::{CounterKind, CounterSource, Unit};

/// A directory that looks unchanged is listed again after this many snapshots.
pub const RELIST: u64 = 16;

/// Descriptors of sysfs directories and files, shared by the snapshots of one
/// [`super::SysfsReader`] (or several).
#[derive(Debug)]
pub struct OpenFiles {
    max: usize,
    open: AtomicUsize,
    generation: AtomicU64,
    devices: Mutex<FxHashMap<String, Arc<Mutex<DeviceFiles>>>>,
}

/// st_dev, st_ino, mtime and ctime (seconds, nanoseconds) of a directory.
type DirId = (u64, u64, i64, i64, i64, i64);

/// What is kept of one device.
#[derive(Debug, Default)]
pub(crate) struct DeviceFiles {
    /// The inode number of the device's entry in the class directory.
    ino: u64,
    /// The last snapshot generation that visited this device.
    seen: u64,
    /// Its directories, by path relative to the device directory (`""` is the device
    /// directory itself, then `ports`, `ports/1`, `ports/1/counters`, `device`, ...).
    dirs: FxHashMap<String, DirFiles>,
}

/// Name, kind and unit of each listed file of a counter directory, for one source and
/// catalog family.
type Kinds = (
    CounterSource,
    Option<&'static str>,
    Vec<(Arc<str>, CounterKind, Unit)>,
);

/// What is kept of one directory.
#[derive(Debug)]
pub(crate) struct DirFiles {
    /// Identity and times of the directory when it was opened.
    id: DirId,
    /// The last snapshot generation that checked `id`.
    checked: u64,
    /// The directory's descriptor.
    dir: OwnedFd,
    /// Its entries (sorted, without `.` and `..`) and the generation that listed them.
    names: Option<(Vec<String>, u64)>,
    /// Descriptors of its files read by name (attribute directories).
    files: FxHashMap<String, OwnedFd>,
    /// Descriptors of its listed files (counter directories), by index in `names`: a
    /// counter directory's files are read in listing order, so each is found by position,
    /// without hashing and comparing its name on every snapshot.
    slots: Vec<Option<OwnedFd>>,
    /// Kind and unit of each listed file (counter directories), by index in `names`.
    kinds: Option<Kinds>,
}

/// What [`DeviceFiles::dir`] found.
pub(crate) enum Lookup<'a> {
    /// The directory, checked and listed for this snapshot.
    Kept(&'a mut DirFiles),
    /// The listing of a kept ancestor does not show it: it does not exist.
    Absent,
    /// It could not be opened, listed or checked: the caller reads the ordinary way, which
    /// reports why.
    Unavailable,
}

fn dir_id(fd: BorrowedFd<'_>) -> nix::Result<(DirId, bool)> {
    let stat = nix::sys::stat::fstat(fd)?;
    #[allow(clippy::unnecessary_cast)] // the field types differ between targets
    let id = (
        stat.st_dev as u64,
        stat.st_ino as u64,
        stat.st_mtime as i64,
        stat.st_mtime_nsec as i64,
        stat.st_ctime as i64,
        stat.st_ctime_nsec as i64,
    );
    Ok((id, stat.st_nlink > 0))
}

impl OpenFiles {
    /// Keep at most `max` file descriptors.
    pub fn new(max: usize) -> OpenFiles {
        OpenFiles {
            max,
            open: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            devices: Mutex::new(FxHashMap::default()),
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

    /// End the snapshot `generation`: drop devices not visited by it or the one before.
    pub(crate) fn end(&self, generation: u64) {
        let mut devices = lock(&self.devices);
        devices.retain(|_, device| {
            let mut device = lock(device);
            let keep = device.seen + 1 >= generation;
            if !keep {
                self.release(device.dirs.drain().map(|(_, dir)| dir));
            }
            keep
        });
    }

    /// What is kept of the device `name`, whose class directory entry has the inode number
    /// `ino`, for snapshot `generation` (everything kept of it is dropped when `ino` changed).
    pub(crate) fn device(&self, name: &str, ino: u64, generation: u64) -> Arc<Mutex<DeviceFiles>> {
        let entry = {
            let mut devices = lock(&self.devices);
            match devices.get(name) {
                Some(entry) => Arc::clone(entry),
                None => {
                    let entry = Arc::new(Mutex::new(DeviceFiles {
                        ino,
                        ..DeviceFiles::default()
                    }));
                    devices.insert(name.to_owned(), Arc::clone(&entry));
                    entry
                }
            }
        };
        {
            let mut device = lock(&entry);
            device.seen = device.seen.max(generation);
            if device.ino != ino {
                self.release(device.dirs.drain().map(|(_, dir)| dir));
                device.ino = ino;
            }
        }
        entry
    }

    /// Account for the file descriptors of `dirs`, dropped.
    fn release(&self, dirs: impl Iterator<Item = DirFiles>) {
        let kept: usize = dirs.map(|dir| dir.kept()).sum();
        self.open.fetch_sub(kept, Ordering::Relaxed);
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
}

impl DeviceFiles {
    /// The kept directory `rel` (relative to the device directory; `path` is its whole
    /// path), checked with `fstat` and listed for snapshot `generation`; opened and listed
    /// when it is not kept yet, or no longer what it was (then it and everything kept below
    /// it are dropped first). [`Lookup::Absent`] when the listing of its nearest kept
    /// ancestor does not show it.
    pub(crate) fn dir(
        &mut self,
        open_files: &OpenFiles,
        rel: &str,
        path: &Path,
        generation: u64,
    ) -> Lookup<'_> {
        let fresh = match self.dirs.get_mut(rel) {
            Some(dir) if dir.checked >= generation => true,
            Some(dir) => match dir_id(dir.dir.as_fd()) {
                Ok((id, linked)) if linked && id == dir.id => {
                    dir.checked = generation;
                    true
                }
                _ => {
                    self.drop_from(open_files, rel);
                    false
                }
            },
            None => false,
        };
        if !fresh {
            if self.ancestor_lacks(rel, generation) {
                return Lookup::Absent;
            }
            let Ok(fd) = file::open_directory(path) else {
                return Lookup::Unavailable;
            };
            let Ok((id, _)) = dir_id(fd.as_fd()) else {
                return Lookup::Unavailable;
            };
            self.dirs.insert(
                rel.to_owned(),
                DirFiles {
                    id,
                    checked: generation,
                    dir: fd,
                    names: None,
                    files: FxHashMap::default(),
                    slots: Vec::new(),
                    kinds: None,
                },
            );
        }
        let Some(dir) = self.dirs.get_mut(rel) else {
            return Lookup::Unavailable;
        };
        match dir.list(open_files, generation) {
            Ok(()) => Lookup::Kept(dir),
            Err(_) => Lookup::Unavailable,
        }
    }

    /// Whether the nearest kept ancestor of `rel`, when snapshot `generation` checked it,
    /// has a listing without the next component of `rel`.
    fn ancestor_lacks(&self, rel: &str, generation: u64) -> bool {
        let mut end = rel.len();
        while end > 0 {
            let (parent, name) = match rel[..end].rfind('/') {
                Some(i) => (&rel[..i], &rel[i + 1..end]),
                None => ("", &rel[..end]),
            };
            if let Some(dir) = self.dirs.get(parent) {
                return dir.checked >= generation && dir.lists(name) == Some(false);
            }
            end = parent.len();
        }
        false
    }

    /// Drop the kept directory `rel` and every one below it.
    fn drop_from(&mut self, open_files: &OpenFiles, rel: &str) {
        let below = |key: &str| {
            rel.is_empty()
                || key == rel
                || (key.len() > rel.len()
                    && key.starts_with(rel)
                    && key.as_bytes()[rel.len()] == b'/')
        };
        let gone: Vec<String> = self.dirs.keys().filter(|k| below(k)).cloned().collect();
        open_files.release(gone.iter().filter_map(|k| self.dirs.remove(k)));
    }

    /// Drop the directories not visited by snapshot `generation` or the one before.
    pub(crate) fn end(&mut self, open_files: &OpenFiles, generation: u64) {
        if self.dirs.values().all(|dir| dir.checked + 1 >= generation) {
            return;
        }
        let gone: Vec<String> = self
            .dirs
            .iter()
            .filter(|(_, dir)| dir.checked + 1 < generation)
            .map(|(k, _)| k.clone())
            .collect();
        open_files.release(gone.iter().filter_map(|k| self.dirs.remove(k)));
    }
}

impl DirFiles {
    /// File descriptors kept of this directory.
    fn kept(&self) -> usize {
        self.files.len() + self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Make sure the listing is not older than [`RELIST`] snapshots; descriptors of files
    /// no longer listed are dropped.
    fn list(&mut self, open_files: &OpenFiles, generation: u64) -> io::Result<()> {
        let stale = match &self.names {
            None => true,
            Some((_, listed)) => listed + RELIST <= generation,
        };
        if !stale {
            return Ok(());
        }
        // A second open file description, so the kept one's position never moves.
        let mut names = file::dir_names(&mut file::reopen_dir(self.dir.as_fd())?)?;
        names.sort_unstable();
        let before = self.files.len();
        self.files
            .retain(|name, _| names.binary_search(name).is_ok());
        open_files
            .open
            .fetch_sub(before - self.files.len(), Ordering::Relaxed);
        // The listed files' descriptors follow their names to their new positions; those
        // of files no longer listed are dropped.
        let old_names = self.names.take().map(|(n, _)| n).unwrap_or_default();
        let old_slots = std::mem::take(&mut self.slots);
        if old_names == names {
            self.slots = old_slots;
        } else {
            let mut old: FxHashMap<String, OwnedFd> = old_names
                .into_iter()
                .zip(old_slots)
                .filter_map(|(name, slot)| slot.map(|fd| (name, fd)))
                .collect();
            self.slots = names.iter().map(|name| old.remove(name)).collect();
            open_files.open.fetch_sub(old.len(), Ordering::Relaxed);
            self.kinds = None;
        }
        self.slots.resize_with(names.len(), || None);
        self.names = Some((names, generation));
        Ok(())
    }

    /// Whether the listing shows `name` (`None` without a listing).
    pub(crate) fn lists(&self, name: &str) -> Option<bool> {
        let (names, _) = self.names.as_ref()?;
        Some(names.binary_search_by(|n| n.as_str().cmp(name)).is_ok())
    }

    /// The listing, sorted.
    pub(crate) fn names(&self) -> &[String] {
        self.names.as_ref().map_or(&[][..], |(n, _)| n.as_slice())
    }

    /// The directory's descriptor.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// The directory's descriptor and the descriptors of its files read by name.
    pub(crate) fn by_name(&mut self) -> (BorrowedFd<'_>, &mut FxHashMap<String, OwnedFd>) {
        (self.dir.as_fd(), &mut self.files)
    }

    /// Split borrows for reading the listed files as `source` counters of the catalog
    /// `family`: the descriptor, the listing, one descriptor slot and one kind and unit per
    /// listed name (`describe` gives those of a name; they are kept until the listing, the
    /// source or the family changes).
    pub(crate) fn counters(
        &mut self,
        source: CounterSource,
        family: Option<&'static str>,
        describe: impl Fn(&str) -> (CounterKind, Unit),
    ) -> CounterParts<'_> {
        let names = self.names.as_ref().map_or(&[][..], |(n, _)| n.as_slice());
        let current = matches!(&self.kinds,
            Some((s, f, kinds)) if *s == source && *f == family && kinds.len() == names.len());
        if !current {
            let kinds = names
                .iter()
                .map(|name| {
                    let (kind, unit) = describe(name);
                    (Arc::from(name.as_str()), kind, unit)
                })
                .collect();
            self.kinds = Some((source, family, kinds));
        }
        let kinds = self
            .kinds
            .as_ref()
            .map_or(&[][..], |(_, _, k)| k.as_slice());
        CounterParts {
            dir: self.dir.as_fd(),
            names,
            slots: &mut self.slots,
            kinds,
        }
    }
}

/// The parts of a counter directory's [`DirFiles`], borrowed apart.
pub(crate) struct CounterParts<'a> {
    /// The directory's descriptor.
    pub dir: BorrowedFd<'a>,
    /// Its listing, sorted.
    pub names: &'a [String],
    /// Descriptors of the listed files, `names[i]`'s in `slots[i]`.
    pub slots: &'a mut [Option<OwnedFd>],
    /// Name (shared with every counter read from it, so a snapshot allocates no name), kind
    /// and unit of the listed files, `names[i]`'s in `kinds[i]`.
    pub kinds: &'a [(Arc<str>, CounterKind, Unit)],
}

/// Lock, ignoring poisoning: the maps stay consistent (a panic mid-update at worst leaves a
/// descriptor unaccounted, never a wrong value).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}
