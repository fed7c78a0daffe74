//! The walk over the device directories: device attributes, parent driver and PCI address,
//! ports, GIDs and every counter file, collecting per-file problems instead of failing.
//!
//! One [`Walk`] reads a whole snapshot with one path buffer and one read buffer, so a scrape
//! allocates little beyond the strings that end up in the model. Directory listings come from
//! `read_dir` alone (no stat per entry); a counter that turns out to be a directory or to
//! fail is reported through the error list with its device, port and path.

mod counters;
mod gids;
mod path;
mod read;

use crate::model::{CounterSource, Device, Port, SourceError};
use crate::sysfs::file::AttrReader;
use crate::sysfs::handles::{self, DeviceFiles, OpenFiles};
use crate::sysfs::parse;
use crate::sysfs::ReadOptions;
use counters::Families;
use path::PathStack;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::MutexGuard;

/// Where in the tree a file belongs, for error context.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    device: &'a str,
    port: Option<u32>,
}

/// What is kept of the device being read, locked for the time of its read.
pub(crate) struct KeptDevice<'a> {
    open_files: &'a OpenFiles,
    generation: u64,
    files: MutexGuard<'a, DeviceFiles>,
}

/// State of one snapshot read.
pub(crate) struct Walk<'r> {
    root: &'r Path,
    options: &'r ReadOptions,
    /// The current path; always restored by whoever pushed onto it.
    path: PathStack,
    attr: AttrReader,
    /// Find each port's netdev from `gid_attrs/ndevs/` alone (see
    /// [`crate::sysfs::SysfsReader::with_netdev_only_gids`]).
    netdev_only: bool,
    /// Descriptors kept between snapshots, and this snapshot's generation.
    open_files: Option<(&'r OpenFiles, u64)>,
    /// Where the current device directory's path ends in `path`.
    device_end: usize,
    /// The catalog families of the current device.
    families: Families,
    pub(crate) errors: Vec<SourceError>,
}

impl<'r> Walk<'r> {
    pub(crate) fn new(root: &'r Path, options: &'r ReadOptions, class_dir: PathBuf) -> Walk<'r> {
        Walk {
            root,
            options,
            path: PathStack::new(class_dir),
            attr: AttrReader::new(),
            netdev_only: false,
            open_files: None,
            device_end: 0,
            families: Families::default(),
            errors: Vec::new(),
        }
    }

    /// Read through descriptors kept in `open_files` (see [`crate::sysfs::handles`]);
    /// `generation` is this snapshot's.
    pub(crate) fn open_files(mut self, open_files: Option<(&'r OpenFiles, u64)>) -> Walk<'r> {
        self.open_files = open_files;
        self
    }

    /// Read GID tables only as far as the first netdev.
    pub(crate) fn netdev_only(mut self, on: bool) -> Walk<'r> {
        self.netdev_only = on;
        self
    }

    /// Read one device; the current path is the class directory. `ino` is the inode number
    /// of its entry there (what is kept of the device is dropped when it changes). With
    /// `skip_port_hw`, the ports' `hw_counters/` directories are not read, except their
    /// `lifespan` file.
    pub(crate) fn device(&mut self, name: String, ino: u64, skip_port_hw: bool) -> Device {
        self.path.push(&name);
        self.device_end = self.path.len();
        let entry = self.open_files.map(|(open_files, generation)| {
            (
                open_files,
                generation,
                open_files.device(&name, ino, generation),
            )
        });
        let mut kept = entry
            .as_ref()
            .map(|(open_files, generation, entry)| KeptDevice {
                open_files,
                generation: *generation,
                files: handles::lock(entry),
            });
        let ctx = Ctx {
            device: &name,
            port: None,
        };
        // When the directory cannot be opened, every read below fails by path and says why.
        let mut plain = None;
        let mut dir = self.attr_dir(kept.as_mut(), &mut plain);
        let node_type = self.parsed(ctx, dir.as_mut(), "node_type", parse::parse_enumerated);
        let node_guid = self.text(ctx, dir.as_mut(), "node_guid");
        let sys_image_guid = self.text(ctx, dir.as_mut(), "sys_image_guid");
        let fw_ver = self.text(ctx, dir.as_mut(), "fw_ver");
        let hca_type = self.text(ctx, dir.as_mut(), "hca_type");
        let board_id = self.text(ctx, dir.as_mut(), "board_id");
        let parent = self.link_basename(ctx, dir.as_ref(), "device");
        let pci_addr = parent
            .as_deref()
            .filter(|p| parse::is_pci_addr(p))
            .map(str::to_owned);
        let mut driver = None;
        // The PCI function's NUMA node and, for a VF, its PF (both absent is normal).
        let (mut numa_node, mut pf_pci_addr) = (None, None);
        if parent.is_some() {
            self.path.push("device");
            let mut plain = None;
            let mut dir = self.attr_dir(kept.as_mut(), &mut plain);
            driver = self.link_basename(ctx, dir.as_ref(), "driver");
            if pci_addr.is_some() {
                numa_node = self
                    .text_tolerating(ctx, dir.as_mut(), "numa_node", |e| {
                        e.kind() == io::ErrorKind::NotFound
                    })
                    .and_then(|t| t.parse::<i64>().ok())
                    .and_then(|n| u32::try_from(n).ok());
                pf_pci_addr = self.link_basename(ctx, dir.as_ref(), "physfn");
            }
            self.path.pop();
        }
        self.families = Families::of(&name, driver.as_deref());

        let mut ports = Vec::new();
        self.path.push("ports");
        if let Some(entries) = self.entries(ctx, kept.as_mut()) {
            let mut nums: Vec<(u32, String)> = entries
                .into_iter()
                .filter_map(|n| n.parse::<u32>().ok().map(|num| (num, n)))
                .collect();
            nums.sort_unstable();
            for (num, dir) in nums {
                ports.push(self.port(&name, num, &dir, skip_port_hw, kept.as_mut()));
            }
        }
        self.path.pop();

        let mut hw_counters = Vec::new();
        self.counters(
            ctx,
            CounterSource::DeviceHw,
            &mut hw_counters,
            kept.as_mut(),
        );
        self.path.pop();
        if let Some(kept) = kept.as_mut() {
            kept.files.end(kept.open_files, kept.generation);
        }

        Device {
            name,
            node_type,
            node_guid,
            sys_image_guid,
            fw_ver,
            hca_type,
            board_id,
            driver,
            pci_addr,
            numa_node,
            pf_pci_addr,
            ports,
            hw_counters,
        }
    }

    /// Read one port; the current path is `<dev>/ports`.
    fn port(
        &mut self,
        device: &str,
        num: u32,
        dir: &str,
        skip_hw: bool,
        mut kept: Option<&mut KeptDevice<'_>>,
    ) -> Port {
        self.path.push(dir);
        let ctx = Ctx {
            device,
            port: Some(num),
        };
        let mut plain = None;
        let mut dir = self.attr_dir(kept.as_deref_mut(), &mut plain);
        let state = self.parsed(ctx, dir.as_mut(), "state", parse::parse_enumerated);
        let phys_state = self.parsed(ctx, dir.as_mut(), "phys_state", parse::parse_enumerated);
        let rate = self
            .text(ctx, dir.as_mut(), "rate")
            .map(|text| parse::parse_rate(&text));
        let link_layer = self.text(ctx, dir.as_mut(), "link_layer");
        let lid = self.parsed(ctx, dir.as_mut(), "lid", parse::parse_lid);
        let sm_lid = self.parsed(ctx, dir.as_mut(), "sm_lid", parse::parse_lid);
        let (gids, netdev) = if !self.options.gids {
            (Vec::new(), None)
        } else if self.netdev_only {
            let netdev = if link_layer.as_deref() == Some("InfiniBand") {
                None
            } else {
                self.first_netdev(ctx, kept.as_deref_mut())
            };
            (Vec::new(), netdev)
        } else {
            let gids = self.gids(ctx, kept.as_deref_mut());
            let netdev = gids.iter().find_map(|g| g.netdev.clone());
            (gids, netdev)
        };
        let mut counters = Vec::new();
        self.counters(ctx, CounterSource::Pma, &mut counters, kept.as_deref_mut());
        if skip_hw {
            self.lifespan_only(ctx, &mut counters, kept.as_deref_mut());
        } else {
            self.counters(ctx, CounterSource::Hw, &mut counters, kept);
        }
        self.path.pop();
        Port {
            num,
            state,
            phys_state,
            rate,
            link_layer,
            lid,
            sm_lid,
            gids,
            netdev,
            counters,
        }
    }
}
