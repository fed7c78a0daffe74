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
mod tests {
    use super::*;

    fn fixtures() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/sysfs")
    }

    fn temp_tree(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "rdmakit-sysfs-{tag}-{}-{:?}",
            std::process::id(),
            std::time::Instant::now()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn parallel_reads_equal_the_serial_read_devices_and_errors_in_order() {
        // The fixture trees, plus one with many devices of uneven size and broken files.
        let root = temp_tree("parallel");
        for d in 0..13 {
            let port = root.join(format!("class/infiniband/dev{d:02}/ports/1"));
            for c in 0..(d * 7) {
                write(
                    &port.join(format!("counters/c{c}")),
                    &format!("{}\n", c * d),
                );
            }
            if d % 3 == 0 {
                write(&port.join("hw_counters/bad"), "N/A\n");
                std::fs::create_dir_all(port.join("hw_counters/dir")).unwrap();
            }
            write(&port.join("state"), "4: ACTIVE\n");
        }
        let mut trees: Vec<PathBuf> = std::fs::read_dir(fixtures())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join("class").is_dir())
            .collect();
        trees.push(root.clone());
        for tree in &trees {
            let serial = SysfsReader::new(tree).with_threads(1).snapshot().unwrap();
            for threads in [2, 3, 8] {
                let parallel = SysfsReader::new(tree)
                    .with_threads(threads)
                    .snapshot()
                    .unwrap();
                assert_eq!(
                    serde_json::to_value(&parallel).unwrap(),
                    serde_json::to_value(&serial).unwrap(),
                    "{} with {threads} threads",
                    tree.display()
                );
            }
        }
        let snap = SysfsReader::new(&root).with_threads(3).snapshot().unwrap();
        assert_eq!(snap.devices.len(), 13);
        assert_eq!(snap.devices[12].ports[0].counters.len(), 12 * 7);
        // dev00, 03, 06, 09, 12: one N/A and one directory each, in device order.
        assert_eq!(snap.errors.len(), 10, "{:?}", snap.errors);
        let order: Vec<_> = snap.errors.iter().map(|e| e.device.clone()).collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn kept_descriptors_give_the_same_snapshots_as_fresh_opens() {
        let open_files = Arc::new(OpenFiles::new(100_000));
        let mut compared = 0;
        let mut kept_total = 0;
        for entry in std::fs::read_dir(fixtures()).unwrap().flatten() {
            if !entry.path().join("class").is_dir() {
                continue;
            }
            let fresh = SysfsReader::new(entry.path()).snapshot().unwrap();
            let kept = SysfsReader::new(entry.path()).with_open_files(Arc::clone(&open_files));
            for round in 0..3 {
                assert_eq!(
                    serde_json::to_value(kept.snapshot().unwrap()).unwrap(),
                    serde_json::to_value(&fresh).unwrap(),
                    "{:?}, snapshot {round}",
                    entry.path()
                );
            }
            compared += 1;
            kept_total += open_files.len();
        }
        assert!(compared >= 3);
        // Descriptors were kept (and used by rounds 1 and 2); trees read before the last one
        // were dropped two snapshots after their last visit.
        assert!(kept_total > 100, "{kept_total} kept");
    }

    #[test]
    fn kept_descriptors_see_new_values_replaced_files_and_removed_devices() {
        let root = temp_tree("kept");
        let counters = |dev: &str| root.join(format!("class/infiniband/{dev}/ports/1/counters"));
        write(&counters("rxe0").join("port_xmit_packets"), "1\n");
        write(&counters("rxe0").join("port_rcv_packets"), "2\n");
        write(&counters("rxe1").join("port_xmit_packets"), "3\n");
        let open_files = Arc::new(OpenFiles::new(100));
        let reader = SysfsReader::new(&root)
            .with_threads(1)
            .with_open_files(Arc::clone(&open_files));
        let value = |snap: &Snapshot, dev: usize, name: &str| {
            snap.devices[dev].ports[0]
                .counters
                .iter()
                .find(|c| *c.name == *name)
                .map(|c| c.value)
        };
        let snap = reader.snapshot().unwrap();
        assert_eq!(value(&snap, 0, "port_xmit_packets"), Some(1));
        assert_eq!(open_files.len(), 3);

        // Written in place (same inode): the kept descriptor reads the new value.
        std::fs::write(counters("rxe0").join("port_xmit_packets"), "10\n").unwrap();
        // Replaced by rename: a new inode, found through the directory's times.
        write(&counters("rxe0").join(".tmp"), "20\n");
        std::fs::rename(
            counters("rxe0").join(".tmp"),
            counters("rxe0").join("port_rcv_packets"),
        )
        .unwrap();
        let snap = reader.snapshot().unwrap();
        assert_eq!(value(&snap, 0, "port_xmit_packets"), Some(10));
        assert_eq!(value(&snap, 0, "port_rcv_packets"), Some(20));

        // A device deleted and created again under the same name.
        std::fs::remove_dir_all(root.join("class/infiniband/rxe1")).unwrap();
        let snap = reader.snapshot().unwrap();
        assert_eq!(snap.devices.len(), 1);
        write(&counters("rxe1").join("port_xmit_packets"), "30\n");
        let snap = reader.snapshot().unwrap();
        assert_eq!(value(&snap, 1, "port_xmit_packets"), Some(30));

        // A file that turns into garbage is reported like a fresh read reports it.
        std::fs::write(counters("rxe1").join("port_xmit_packets"), "garbage\n").unwrap();
        let snap = reader.snapshot().unwrap();
        assert_eq!(value(&snap, 1, "port_xmit_packets"), None);
        assert_eq!(snap.errors.len(), 1, "{:?}", snap.errors);

        // Devices gone for two snapshots leave no descriptor behind.
        std::fs::remove_dir_all(root.join("class/infiniband")).unwrap();
        std::fs::create_dir_all(root.join("class/infiniband")).unwrap();
        reader.snapshot().unwrap();
        reader.snapshot().unwrap();
        assert_eq!(open_files.len(), 0);
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// A device as real sysfs lays it out: the directory under `devices/`, a symlink to it
    /// in the class directory; one port with a PMA counter of value `value`.
    fn sysfs_device(root: &Path, name: &str, value: u64) {
        let dir = root.join(format!("devices/virtual/infiniband/{name}"));
        write(&dir.join("node_type"), "1: CA\n");
        write(&dir.join("ports/1/state"), "4: ACTIVE\n");
        write(
            &dir.join("ports/1/counters/port_xmit_packets"),
            &format!("{value}\n"),
        );
        write(&dir.join("ports/1/hw_counters/lifespan"), "10\n");
        std::fs::create_dir_all(root.join("class/infiniband")).unwrap();
        let link = root.join(format!("class/infiniband/{name}"));
        if link.symlink_metadata().is_err() {
            std::os::unix::fs::symlink(format!("../../devices/virtual/infiniband/{name}"), link)
                .unwrap();
        }
    }

    #[test]
    fn kept_descriptors_follow_devices_ports_and_files_replaced_between_two_snapshots() {
        // Every change below is made between two snapshots of a reader that keeps
        // descriptors; the very next snapshot must equal a fresh read, values and errors.
        let root = temp_tree("replaced");
        sysfs_device(&root, "rxe0", 1);
        sysfs_device(&root, "rxe1", 2);
        let open_files = Arc::new(OpenFiles::new(1000));
        let kept = SysfsReader::new(&root)
            .with_threads(1)
            .with_open_files(Arc::clone(&open_files));
        let same = |step: &str| {
            let fresh = SysfsReader::new(&root).snapshot().unwrap();
            let snap = kept.snapshot().unwrap();
            assert_eq!(
                serde_json::to_value(&snap).unwrap(),
                serde_json::to_value(&fresh).unwrap(),
                "{step}"
            );
            snap
        };
        let xmit = |snap: &Snapshot, dev: usize| {
            snap.devices[dev].ports[0]
                .counter(crate::model::CounterSource::Pma, "port_xmit_packets")
                .map(|c| c.value)
        };
        same("first read");
        let devices = root.join("devices/virtual/infiniband");

        // Re-registered as the kernel does it: directory and class symlink made anew.
        std::fs::remove_dir_all(devices.join("rxe0")).unwrap();
        std::fs::remove_file(root.join("class/infiniband/rxe0")).unwrap();
        sysfs_device(&root, "rxe0", 10);
        assert_eq!(xmit(&same("rxe0 made again"), 0), Some(10));

        // Deleted and made again behind the same symlink (an inode number may come back).
        std::fs::remove_dir_all(devices.join("rxe1")).unwrap();
        sysfs_device(&root, "rxe1", 20);
        assert_eq!(xmit(&same("rxe1 made again"), 1), Some(20));

        // Moved away (still open, still linked) and replaced by another directory.
        std::fs::rename(devices.join("rxe1"), root.join("rxe1.old")).unwrap();
        sysfs_device(&root, "rxe1", 21);
        assert_eq!(xmit(&same("rxe1 moved away"), 1), Some(21));

        // A port directory moved away and replaced, under an unchanged device.
        let port = devices.join("rxe0/ports/1");
        std::fs::rename(&port, devices.join("rxe0/port1.old")).unwrap();
        write(&port.join("counters/port_xmit_packets"), "30\n");
        assert_eq!(xmit(&same("port replaced"), 0), Some(30));

        // Files and directories the listings did not show appear: an attribute, a device
        // counter directory, a counter file, the parent device link.
        write(&port.join("sm_lid"), "0x1\n");
        write(&devices.join("rxe0/hw_counters/rx_pkts"), "7\n");
        write(&port.join("counters/port_rcv_packets"), "8\n");
        let snap = same("files added");
        assert_eq!(snap.devices[0].ports[0].sm_lid, Some(1));
        assert_eq!(snap.devices[0].hw_counters.len(), 1);
        assert_eq!(snap.devices[0].ports[0].counters.len(), 2);
        let pci = root.join("devices/pci0000:00/0000:00:03.0");
        write(&pci.join("numa_node"), "1\n");
        std::fs::create_dir_all(root.join("bus/pci/drivers/mlx5_core")).unwrap();
        std::os::unix::fs::symlink("../../../bus/pci/drivers/mlx5_core", pci.join("driver"))
            .unwrap();
        std::os::unix::fs::symlink(
            "../../../pci0000:00/0000:00:03.0",
            devices.join("rxe0/device"),
        )
        .unwrap();
        let snap = same("parent device linked");
        assert_eq!(snap.devices[0].driver.as_deref(), Some("mlx5_core"));
        assert_eq!(snap.devices[0].numa_node, Some(1));

        // And disappear again; a file turns into a directory (an error, as in a fresh read).
        std::fs::remove_file(port.join("sm_lid")).unwrap();
        std::fs::remove_dir_all(devices.join("rxe0/hw_counters")).unwrap();
        std::fs::remove_file(port.join("counters/port_rcv_packets")).unwrap();
        std::fs::create_dir(port.join("counters/port_rcv_packets")).unwrap();
        std::fs::remove_file(devices.join("rxe0/device")).unwrap();
        let snap = same("files removed");
        assert_eq!(snap.devices[0].ports[0].sm_lid, None);
        assert_eq!(snap.devices[0].driver, None);
        assert_eq!(snap.errors.len(), 1, "{:?}", snap.errors);

        // Values written in place are fresh on every snapshot.
        for round in 0..3 {
            std::fs::write(
                port.join("counters/port_xmit_packets"),
                format!("{round}\n"),
            )
            .unwrap();
            assert_eq!(xmit(&same("written in place"), 0), Some(round));
        }
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn kept_descriptors_follow_their_names_through_relisting() {
        let root = temp_tree("relist");
        let counters = root.join("class/infiniband/rxe0/ports/1/counters");
        for i in 0..3 {
            write(&counters.join(format!("c{i}")), &format!("{i}\n"));
        }
        let open_files = Arc::new(OpenFiles::new(100));
        let reader = SysfsReader::new(&root)
            .with_threads(1)
            .with_open_files(Arc::clone(&open_files));
        // Past two relistings of the unchanged directory: every value fresh, each file kept
        // once (no descriptor lost or counted twice).
        for round in 0..(2 * handles::RELIST + 2) {
            std::fs::write(counters.join("c1"), format!("{}\n", 100 + round)).unwrap();
            let snap = reader.snapshot().unwrap();
            let values: Vec<(String, u64)> = snap.devices[0].ports[0]
                .counters
                .iter()
                .map(|c| (c.name.to_string(), c.value))
                .collect();
            assert_eq!(
                values,
                [("c0", 0), ("c1", 100 + round), ("c2", 2)]
                    .map(|(n, v)| (n.to_string(), v))
                    .to_vec(),
                "round {round}"
            );
            assert_eq!(open_files.len(), 3, "round {round}");
        }
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn no_more_descriptors_than_the_budget() {
        let root = temp_tree("budget");
        for i in 0..10 {
            write(
                &root.join(format!("class/infiniband/d{i}/ports/1/counters/c")),
                &format!("{i}\n"),
            );
        }
        let open_files = Arc::new(OpenFiles::new(4));
        let reader = SysfsReader::new(&root).with_open_files(Arc::clone(&open_files));
        for _ in 0..3 {
            let snap = reader.snapshot().unwrap();
            let values: Vec<u64> = snap
                .devices
                .iter()
                .map(|d| d.ports[0].counters[0].value)
                .collect();
            assert_eq!(values, (0..10).collect::<Vec<u64>>());
            assert!(open_files.len() <= 4, "{}", open_files.len());
        }
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn netdev_only_finds_the_same_netdevs_as_the_full_gid_read() {
        let mut ethernet_ports = 0;
        for entry in std::fs::read_dir(fixtures()).unwrap().flatten() {
            if !entry.path().join("class").is_dir() {
                continue;
            }
            let full = SysfsReader::new(entry.path()).snapshot().unwrap();
            let fast = SysfsReader::new(entry.path())
                .with_netdev_only_gids()
                .snapshot()
                .unwrap();
            assert_eq!(full.devices.len(), fast.devices.len());
            for (a, b) in full.devices.iter().zip(&fast.devices) {
                for (pa, pb) in a.ports.iter().zip(&b.ports) {
                    assert_eq!(pa.netdev, pb.netdev, "{:?} {}", entry.path(), a.name);
                    assert!(pb.gids.is_empty(), "no GID is read");
                    ethernet_ports += usize::from(pa.netdev.is_some());
                }
            }
            // Netdev-only reads can only remove errors (GID files), never add any.
            assert!(fast.errors.len() <= full.errors.len(), "{:?}", fast.errors);
        }
        assert!(ethernet_ports >= 3, "fixtures with netdevs were compared");
    }

    #[test]
    fn netdev_only_stops_at_the_first_netdev_and_skips_unpopulated_entries() {
        let root = temp_tree("ndevs");
        let port = root.join("class/infiniband/rxe9/ports/1");
        write(&port.join("link_layer"), "Ethernet\n");
        // Entry 0 unpopulated (absent), entry 1 names the netdev, entry 2 is a directory:
        // reading it would be an error, so an error-free snapshot shows the walk stopped.
        write(&port.join("gid_attrs/ndevs/1"), "veth9\n");
        std::fs::create_dir_all(port.join("gid_attrs/ndevs/2")).unwrap();
        // A GID that is a directory: reading the GID table would record an error.
        std::fs::create_dir_all(port.join("gids/0")).unwrap();
        let snap = SysfsReader::new(&root)
            .with_netdev_only_gids()
            .snapshot()
            .unwrap();
        assert_eq!(snap.devices[0].ports[0].netdev.as_deref(), Some("veth9"));
        assert!(snap.errors.is_empty(), "{:?}", snap.errors);
        let full = SysfsReader::new(&root).snapshot().unwrap();
        assert!(!full.errors.is_empty(), "the full read does open gids/0");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn infiniband_ports_read_no_gid_attribute_in_netdev_only_mode() {
        let root = temp_tree("ib");
        let port = root.join("class/infiniband/mlx5_9/ports/1");
        write(&port.join("link_layer"), "InfiniBand\n");
        std::fs::create_dir_all(port.join("gid_attrs/ndevs/0")).unwrap();
        let snap = SysfsReader::new(&root)
            .with_netdev_only_gids()
            .snapshot()
            .unwrap();
        assert_eq!(snap.devices[0].ports[0].netdev, None);
        assert!(snap.errors.is_empty(), "{:?}", snap.errors);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn port_hw_counters_from_elsewhere_are_not_read_but_lifespan_is() {
        let root = temp_tree("elsewhere");
        for dev in ["rxe8", "rxe9"] {
            let port = root.join(format!("class/infiniband/{dev}/ports/1"));
            write(&port.join("hw_counters/lifespan"), "12\n");
            write(&port.join("hw_counters/sent_pkts"), "5\n");
            write(&port.join("counters/symbol_error"), "3\n");
            // A directory in hw_counters/: reading it would record an error.
            std::fs::create_dir_all(port.join("hw_counters/broken")).unwrap();
        }
        let snap = SysfsReader::new(&root)
            .snapshot_without_port_hw_counters(|d| d == "rxe9")
            .unwrap();
        let names = |d: usize| -> Vec<(CounterSourceName, String)> {
            snap.devices[d].ports[0]
                .counters
                .iter()
                .map(|c| (c.source.as_str(), c.name.to_string()))
                .collect()
        };
        assert_eq!(
            names(1),
            [("pma", "symbol_error".into()), ("hw", "lifespan".into())]
        );
        assert_eq!(
            names(0).len(),
            4 - 1,
            "rxe8 is read whole (broken is an error)"
        );
        assert_eq!(snap.errors.len(), 1, "{:?}", snap.errors);
        assert_eq!(snap.errors[0].device.as_deref(), Some("rxe8"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    type CounterSourceName = &'static str;
}
