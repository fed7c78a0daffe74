//! The sysfs source: reads `<root>/class/infiniband` into a [`Snapshot`].
//!
//! The root is the `--path.sysfs` value (default `/sys`), so tests and benchmarks point it at
//! fixture trees. The reader lists devices, drops the ones the [`DeviceFilter`] rejects before
//! opening anything inside them, then reads device attributes, the parent's driver and PCI
//! address (from the `device` and `device/driver` symlinks), each port's state, rate, LIDs,
//! GIDs, and EVERY file in `ports/<n>/counters/`, `ports/<n>/hw_counters/` and the device-level
//! `hw_counters/`, whatever the driver. Problems with single files (EINVAL, `N/A (no PMA)`,
//! garbage, a directory where a file should be, permissions) land in
//! [`Snapshot::errors`] with device, port and path; they never stop the read and one bad device
//! never spoils the rest. Only an unreadable `class/infiniband` directory itself is an error;
//! a missing one means "no RDMA devices" (an empty snapshot).

mod file;
mod filter;
mod handles;
mod parse;
mod walk;

pub use file::READ_LIMIT;
pub use filter::DeviceFilter;
pub use handles::OpenFiles;

use crate::model::{Device, Snapshot, SourceError};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The default sysfs root.
pub const DEFAULT_ROOT: &str = "/sys";

/// One device of a parallel walk, with the errors found while reading it.
type Slot = Mutex<Option<(Device, Vec<SourceError>)>>;

/// The most devices a [`SysfsReader`] reads at once by default.
///
/// The default is the number of CPUs this process may use, at most this. Why: with
/// descriptors kept ([`OpenFiles`]), a snapshot is almost only `pread` system calls, each
/// running the attribute's `show` in the kernel, and those run in parallel on separate CPUs.
/// Measured on the 64-device synthetic tree (`scrape_breakdown 64 60`, 3,264 counter files)
/// on 2 CPUs, load 2.3: the serial `pread` floor 2.90 ms, 1 thread 4.77 ms, 2 threads
/// 2.99 ms, 4 threads 2.87 ms (before the walk kept its listings, quiet, load 0.3: floor
/// 3.46 ms, 7.48, 3.67 and 3.54 ms). A second thread on the second CPU takes the read to
/// its floor; threads beyond the CPUs gain nothing measurable (under load 5 to 7, 2 and 4
/// threads took 0.76x to 1.14x the time of 1) and cost a spawn each per snapshot, so there is
/// never more than one per CPU. The cap keeps a scrape on a large host from taking every
/// CPU for a read whose serial system calls are its floor.
pub const MAX_THREADS: usize = 4;

fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(MAX_THREADS)
}

/// Errors that stop a sysfs read (per-file problems go to [`Snapshot::errors`] instead).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SysfsError {
    /// `<root>/class/infiniband` exists but cannot be listed.
    #[error("cannot list RDMA devices in {path}")]
    ListDevices {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A device include/exclude pattern is not a valid regular expression.
    #[error("invalid device {which} pattern {pattern:?}")]
    InvalidFilter {
        /// `include` or `exclude`.
        which: &'static str,
        /// The pattern as given.
        pattern: String,
        /// Why it does not compile.
        #[source]
        source: Box<regex::Error>,
    },
}

/// What to read (everything by default).
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// Read the GID tables (`gids/` and `gid_attrs/`). Up to hundreds of files per port on
    /// real hardware; the port's netdev comes from them. Default: true.
    pub gids: bool,
    /// Read the counter directories (`counters/`, `hw_counters/`). An inventory that only
    /// needs devices and ports turns this off and opens no counter file. Default: true.
    pub counters: bool,
}

impl Default for ReadOptions {
    fn default() -> ReadOptions {
        ReadOptions {
            gids: true,
            counters: true,
        }
    }
}

/// Reads RDMA devices from a sysfs tree.
#[derive(Debug, Clone)]
pub struct SysfsReader {
    root: PathBuf,
    filter: DeviceFilter,
    options: ReadOptions,
    netdev_only: bool,
    /// Devices read at once (see [`SysfsReader::with_threads`]).
    threads: usize,
    /// Counter file descriptors kept between snapshots (see [`SysfsReader::with_open_files`]).
    open_files: Option<Arc<OpenFiles>>,
}

impl Default for SysfsReader {
    fn default() -> SysfsReader {
        SysfsReader::new(DEFAULT_ROOT)
    }
}

impl SysfsReader {
    /// A reader of the sysfs tree at `root` (the `--path.sysfs` value), keeping all devices.
    pub fn new(root: impl Into<PathBuf>) -> SysfsReader {
        SysfsReader {
            root: root.into(),
            filter: DeviceFilter::all(),
            options: ReadOptions::default(),
            netdev_only: false,
            threads: default_threads(),
            open_files: None,
        }
    }

    /// Keep counter files open between snapshots in `open_files` and re-read them with
    /// `pread` at offset 0: the same fresh values for a third of the system calls, for
    /// readers that snapshot again and again (the exporter). Readers sharing one
    /// [`OpenFiles`] share its descriptors. See the `handles` module for the safety nets.
    pub fn with_open_files(mut self, open_files: Arc<OpenFiles>) -> SysfsReader {
        self.open_files = Some(open_files);
        self
    }

    /// Read up to `threads` devices at once (at least 1). The default is the number of CPUs
    /// this process may use, at most [`MAX_THREADS`] (see there for the figures): a scrape of
    /// a host with many devices is mostly system calls, which run in parallel on separate
    /// CPUs.
    pub fn with_threads(mut self, threads: usize) -> SysfsReader {
        self.threads = threads.max(1);
        self
    }

    /// Only read the devices `filter` keeps.
    pub fn with_filter(mut self, filter: DeviceFilter) -> SysfsReader {
        self.filter = filter;
        self
    }

    /// Change what is read besides counters.
    pub fn with_options(mut self, options: ReadOptions) -> SysfsReader {
        self.options = options;
        self
    }

    /// Read only as much of each port's GID table as it takes to find the port's netdev,
    /// instead of the whole table (up to 1024 entries per RoCE port; ~290 ms per scrape for
    /// three rxe ports under emulation). With this on, [`Port::gids`](crate::model::Port::gids)
    /// stays empty and [`Port::netdev`](crate::model::Port::netdev) is filled the cheap way:
    /// `gid_attrs/ndevs/0`, `1`, ... are read in index order until one names a netdev (the
    /// first populated RoCE GID, index 0, has one, so that is usually one read); ports whose
    /// link layer is `InfiniBand` have no netdev and read nothing. Unpopulated entries
    /// (EINVAL, ENODATA, ENODEV) are skipped without an error. Only matters when
    /// [`ReadOptions::gids`] is on.
    pub fn with_netdev_only_gids(mut self) -> SysfsReader {
        self.netdev_only = true;
        self
    }

    /// The sysfs root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/class/infiniband`, where devices live.
    pub fn class_dir(&self) -> PathBuf {
        self.root.join("class").join("infiniband")
    }

    /// Names of all devices, sorted, before filtering; nothing inside a device is opened.
    /// Empty when the class directory does not exist.
    pub fn device_names(&self) -> Result<Vec<String>, SysfsError> {
        Ok(self
            .device_entries()?
            .into_iter()
            .map(|(name, _)| name)
            .collect())
    }

    /// Names of all devices with the inode numbers of their class directory entries (from
    /// the listing, no stat), sorted by name.
    fn device_entries(&self) -> Result<Vec<(String, u64)>, SysfsError> {
        use std::os::unix::fs::DirEntryExt;
        let class_dir = self.class_dir();
        let entries = match std::fs::read_dir(&class_dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(SysfsError::ListDevices {
                    path: class_dir,
                    source,
                })
            }
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| SysfsError::ListDevices {
                path: class_dir.clone(),
                source,
            })?;
            if let Ok(name) = entry.file_name().into_string() {
                names.push((name, entry.ino()));
            }
        }
        names.sort_unstable();
        Ok(names)
    }

    /// The kernel driver of `device`'s parent (basename of `<device>/device/driver`, as in
    /// [`crate::model::Device::driver`]), without reading anything else; `None` when the
    /// device or the link is absent (rxe has no parent).
    pub fn device_driver(&self, device: &str) -> Option<String> {
        let link = self.class_dir().join(device).join("device").join("driver");
        let target = std::fs::read_link(link).ok()?;
        Some(target.file_name()?.to_string_lossy().into_owned())
    }

    /// Read every device the filter keeps.
    pub fn snapshot(&self) -> Result<Snapshot, SysfsError> {
        self.snapshot_without_port_hw_counters(|_| false)
    }

    /// Like [`SysfsReader::snapshot`], but the port `hw_counters/` directories of the devices
    /// for which `elsewhere(name)` is true are not listed or read, because another source
    /// (RDMA netlink `STAT_GET`) provided those counters. Only their `lifespan` file is read:
    /// it is the sysfs cache period, which no other source reports. PMA `counters/` and the
    /// device-level `hw_counters/` are read as usual.
    pub fn snapshot_without_port_hw_counters(
        &self,
        elsewhere: impl Fn(&str) -> bool + Sync,
    ) -> Result<Snapshot, SysfsError> {
        let names: Vec<(String, u64)> = self
            .device_entries()?
            .into_iter()
            .filter(|(name, _)| self.filter.keeps(name))
            .collect();
        let threads = self.threads.clamp(1, names.len().max(1));
        let open_files = self
            .open_files
            .as_deref()
            .map(|open_files| (open_files, open_files.begin()));
        let walk = || {
            walk::Walk::new(&self.root, &self.options, self.class_dir())
                .netdev_only(self.netdev_only)
                .open_files(open_files)
        };
        let end = || {
            if let Some((open_files, generation)) = open_files {
                open_files.end(generation);
            }
        };
        if threads == 1 {
            let mut walk = walk();
            let mut devices = Vec::with_capacity(names.len());
            for (name, ino) in names {
                let skip_port_hw = elsewhere(&name);
                devices.push(walk.device(name, ino, skip_port_hw));
            }
            end();
            return Ok(Snapshot {
                devices,
                errors: walk.errors,
            });
        }
        // Devices are independent: `threads` walkers (this thread and `threads - 1` scoped
        // ones) take the next unread device until none is left. Each result lands in its
        // device's slot, with the errors found while reading it, so devices and errors come
        // out in the same order as a serial walk.
        let next = AtomicUsize::new(0);
        let slots: Vec<Slot> = names.iter().map(|_| Mutex::new(None)).collect();
        let work = || {
            let mut walk = walk();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((name, ino)) = names.get(i) else {
                    break;
                };
                let device = walk.device(name.clone(), *ino, elsewhere(name));
                let errors = std::mem::take(&mut walk.errors);
                if let Ok(mut slot) = slots[i].lock() {
                    *slot = Some((device, errors));
                }
            }
        };
        std::thread::scope(|scope| {
            for _ in 1..threads {
                scope.spawn(work);
            }
            work();
        });
        end();
        let mut snapshot = Snapshot {
            devices: Vec::with_capacity(names.len()),
            errors: Vec::new(),
        };
        for slot in slots {
            let taken = match slot.into_inner() {
                Ok(taken) => taken,
                Err(poisoned) => poisoned.into_inner(),
            };
            if let Some((device, errors)) = taken {
                snapshot.devices.push(device);
                snapshot.errors.extend(errors);
            }
        }
        Ok(snapshot)
    }
}

#[cfg(test)]
mod tests;
