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
mod parse;
mod walk;

pub use file::READ_LIMIT;
pub use filter::DeviceFilter;

use crate::model::Snapshot;
use std::io;
use std::path::{Path, PathBuf};

/// The default sysfs root.
pub const DEFAULT_ROOT: &str = "/sys";

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
        }
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
                names.push(name);
            }
        }
        names.sort_unstable();
        Ok(names)
    }

    /// Read every device the filter keeps.
    pub fn snapshot(&self) -> Result<Snapshot, SysfsError> {
        let names = self.device_names()?;
        let mut walk = walk::Walk::new(&self.root, &self.options, self.class_dir());
        let mut devices = Vec::with_capacity(names.len());
        for name in names {
            if self.filter.keeps(&name) {
                devices.push(walk.device(name));
            }
        }
        Ok(Snapshot {
            devices,
            errors: walk.errors,
        })
    }
}
