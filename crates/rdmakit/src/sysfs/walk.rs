//! The walk over the device directories: device attributes, parent driver and PCI address,
//! ports, GIDs and every counter file, collecting per-file problems instead of failing.
//!
//! One [`Walk`] reads a whole snapshot with one path buffer and one read buffer, so a scrape
//! allocates little beyond the strings that end up in the model. Directory listings come from
//! `read_dir` alone (no stat per entry); a counter that turns out to be a directory or to
//! fail is reported through the error list with its device, port and path.

use crate::catalog::Catalog;
use crate::model::{
    classify, Counter, CounterKind, CounterSource, Device, ErrorOrigin, Gid, Port, SourceError,
    SourceErrorKind, Unit,
};
use crate::sysfs::file::{self, AttrReader, ReadFailure, READ_LIMIT};
use crate::sysfs::handles::{self, DeviceFiles, DirFiles, Lookup, OpenFiles};
use crate::sysfs::parse;
use crate::sysfs::ReadOptions;
use rustc_hash::FxHashMap;
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, MutexGuard};

/// A path built by appending and removing whole components, kept as bytes: cheaper than
/// `PathBuf::pop`, which re-parses components from the end on every call.
struct PathStack {
    bytes: Vec<u8>,
    marks: Vec<usize>,
}

impl PathStack {
    fn new(base: PathBuf) -> PathStack {
        let mut bytes = base.into_os_string().into_encoded_bytes();
        bytes.reserve(256);
        PathStack {
            bytes,
            marks: Vec::with_capacity(16),
        }
    }

    /// Append `/name`; undo with [`PathStack::pop`].
    fn push(&mut self, name: &str) {
        self.marks.push(self.bytes.len());
        if self.bytes.last() != Some(&b'/') {
            self.bytes.push(b'/');
        }
        self.bytes.extend_from_slice(name.as_bytes());
    }

    /// Remove the last pushed component.
    fn pop(&mut self) {
        if let Some(mark) = self.marks.pop() {
            self.bytes.truncate(mark);
        }
    }

    fn as_path(&self) -> &Path {
        Path::new(OsStr::from_bytes(&self.bytes))
    }

    /// The length of the path now.
    fn len(&self) -> usize {
        self.bytes.len()
    }

    /// The part of the path after the first `start` bytes, without its leading `/`
    /// (`None` if it is not UTF-8, which pushed names always are).
    fn tail(&self, start: usize) -> Option<&str> {
        let tail = std::str::from_utf8(self.bytes.get(start..)?).ok()?;
        Some(tail.strip_prefix('/').unwrap_or(tail))
    }
}

/// Where in the tree a file belongs, for error context.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    device: &'a str,
    port: Option<u32>,
}

/// The catalog families that describe one device's counters (from its driver or name).
#[derive(Clone, Copy, Default)]
struct Families {
    /// The embedded catalog (checked by its tests; `None` only if it failed to load, and
    /// then the file-name guess of [`classify`] stays).
    catalog: Option<&'static Catalog>,
    pma: Option<&'static str>,
    hw: Option<&'static str>,
}

impl Families {
    fn of(device: &str, driver: Option<&str>) -> Families {
        let Ok(catalog) = Catalog::embedded() else {
            return Families::default();
        };
        Families {
            catalog: Some(catalog),
            pma: catalog.family_of(CounterSource::Pma, device, driver),
            hw: catalog.family_of(CounterSource::Hw, device, driver),
        }
    }

    fn family(&self, source: CounterSource) -> Option<&'static str> {
        match source {
            CounterSource::Pma => self.pma,
            CounterSource::Hw | CounterSource::DeviceHw => self.hw,
        }
    }

    /// The kind and unit the catalog describes for the counter file `name` of `source`, else
    /// the file-name guess.
    fn kind_and_unit(&self, source: CounterSource, name: &str) -> (CounterKind, Unit) {
        match self.catalog {
            Some(catalog) => catalog.kind_and_unit(self.family(source), source, name),
            None => classify(name, source),
        }
    }
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

/// Map an OS error to the model's error kinds.
fn io_kind(err: &io::Error) -> SourceErrorKind {
    match err.kind() {
        io::ErrorKind::InvalidInput => SourceErrorKind::InvalidArgument,
        io::ErrorKind::IsADirectory => SourceErrorKind::IsDirectory,
        io::ErrorKind::PermissionDenied => SourceErrorKind::PermissionDenied,
        _ => SourceErrorKind::Io,
    }
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

    /// Record a problem with the file at the current path.
    fn record(&mut self, ctx: Ctx<'_>, kind: SourceErrorKind, detail: String) {
        let path = self.path.as_path();
        let rel = path.strip_prefix(self.root).unwrap_or(path);
        self.errors.push(SourceError {
            origin: ErrorOrigin::Sysfs,
            device: Some(ctx.device.to_owned()),
            port: ctx.port,
            path: rel.display().to_string(),
            kind,
            detail,
        });
    }

    fn record_failure(&mut self, ctx: Ctx<'_>, failure: ReadFailure) {
        match failure {
            ReadFailure::Missing => {}
            ReadFailure::TooLarge => self.record(
                ctx,
                SourceErrorKind::TooLarge,
                format!("larger than {READ_LIMIT} bytes"),
            ),
            ReadFailure::Os(err) => self.record(ctx, io_kind(&err), err.to_string()),
        }
    }

    /// The kept directory at the current path ([`Lookup::Unavailable`] when nothing is kept).
    fn lookup<'k>(&self, kept: Option<&'k mut KeptDevice<'_>>) -> Lookup<'k> {
        let (Some(kept), Some(rel)) = (kept, self.path.tail(self.device_end)) else {
            return Lookup::Unavailable;
        };
        let KeptDevice {
            open_files,
            generation,
            files,
        } = kept;
        files.dir(open_files, rel, self.path.as_path(), *generation)
    }

    /// The current directory, to read attributes from by name: kept, else its descriptor
    /// (held in `plain`); `None` when it cannot be opened (its files are then read by path,
    /// which reports why).
    fn attr_dir<'k>(
        &self,
        kept: Option<&'k mut KeptDevice<'_>>,
        plain: &'k mut Option<OwnedFd>,
    ) -> Option<AttrDir<'k>> {
        let open_files = kept.as_ref().map(|k| k.open_files);
        match (open_files, self.lookup(kept)) {
            (Some(open_files), Lookup::Kept(dir)) => Some(AttrDir::Kept(open_files, dir)),
            _ => {
                *plain = file::open_dir_fd(self.path.as_path());
                plain.as_ref().map(|fd| AttrDir::Plain(fd.as_fd()))
            }
        }
    }

    /// The entries of the current directory: the kept listing, else listed now (`None`
    /// when it does not exist; recorded if listing fails).
    fn entries(&mut self, ctx: Ctx<'_>, kept: Option<&mut KeptDevice<'_>>) -> Option<Vec<String>> {
        match self.lookup(kept) {
            Lookup::Kept(dir) => Some(dir.names().to_vec()),
            Lookup::Absent => None,
            Lookup::Unavailable => self.list(ctx),
        }
    }

    /// A text attribute of the current directory; `None` when absent, empty or failing.
    /// `dir` is the current directory when it could be opened: the file is then read
    /// relative to it (or through its kept descriptor) instead of by its whole path.
    fn text(&mut self, ctx: Ctx<'_>, dir: Option<&mut AttrDir<'_>>, file: &str) -> Option<String> {
        self.text_tolerating(ctx, dir, file, |_| false)
    }

    /// Like [`Walk::text`], where OS errors that `tolerated` accepts (a GID attribute's EINVAL
    /// for "no such attribute") are `None` without an error.
    fn text_tolerating(
        &mut self,
        ctx: Ctx<'_>,
        dir: Option<&mut AttrDir<'_>>,
        file: &str,
        tolerated: fn(&io::Error) -> bool,
    ) -> Option<String> {
        self.path.push(file);
        let read = match dir {
            Some(dir) => dir.read(&mut self.attr, file).map(|n| self.attr.filled(n)),
            None => self.attr.read(self.path.as_path()),
        };
        let result = match read {
            Ok(bytes) => match std::str::from_utf8(parse::trim(bytes)) {
                Ok("") => Ok(None),
                Ok(text) => Ok(Some(text.to_owned())),
                Err(_) => Err((SourceErrorKind::Unparsable, parse::excerpt(bytes))),
            },
            Err(ReadFailure::Os(err)) if tolerated(&err) => Ok(None),
            Err(failure) => {
                self.record_failure(ctx, failure);
                Ok(None)
            }
        };
        let value = match result {
            Ok(value) => value,
            Err((kind, detail)) => {
                self.record(ctx, kind, detail);
                None
            }
        };
        self.path.pop();
        value
    }

    /// A text attribute run through `parse`; unparsable content is recorded.
    fn parsed<T>(
        &mut self,
        ctx: Ctx<'_>,
        dir: Option<&mut AttrDir<'_>>,
        file: &str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Option<T> {
        let text = self.text(ctx, dir, file)?;
        let value = parse(&text);
        if value.is_none() {
            self.path.push(file);
            self.record(
                ctx,
                SourceErrorKind::Unparsable,
                parse::excerpt(text.as_bytes()),
            );
            self.path.pop();
        }
        value
    }

    /// The basename of the symlink `name` in the current directory (`dir`, when it could be
    /// opened), if it is one.
    fn link_basename(
        &mut self,
        ctx: Ctx<'_>,
        dir: Option<&AttrDir<'_>>,
        name: &str,
    ) -> Option<String> {
        self.path.push(name);
        let result = match dir {
            Some(dir) if dir.lists(name) == Some(false) => Err(io::ErrorKind::NotFound.into()),
            Some(dir) => nix::fcntl::readlinkat(dir.fd(), name)
                .map(PathBuf::from)
                .map_err(io::Error::from),
            None => fs::read_link(self.path.as_path()),
        };
        let value = match result {
            Ok(target) => target
                .file_name()
                .and_then(|n| n.to_str())
                .map(str::to_owned),
            Err(err)
                if err.kind() == io::ErrorKind::NotFound
                    || err.kind() == io::ErrorKind::InvalidInput =>
            {
                // Absent, or not a symlink: nothing to report.
                None
            }
            Err(err) => {
                self.record(ctx, io_kind(&err), err.to_string());
                None
            }
        };
        self.path.pop();
        value
    }

    /// List the current directory; `None` when it does not exist (recorded if it fails).
    fn list(&mut self, ctx: Ctx<'_>) -> Option<Vec<String>> {
        match fs::read_dir(self.path.as_path()) {
            Ok(entries) => {
                let mut names = Vec::new();
                for entry in entries {
                    match entry {
                        Ok(entry) => {
                            if let Ok(name) = entry.file_name().into_string() {
                                names.push(name);
                            }
                        }
                        Err(err) => self.record(ctx, io_kind(&err), err.to_string()),
                    }
                }
                Some(names)
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => None,
            Err(err) => {
                self.record(ctx, io_kind(&err), err.to_string());
                None
            }
        }
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

    /// The populated GID entries of the current port directory.
    fn gids(&mut self, ctx: Ctx<'_>, mut kept: Option<&mut KeptDevice<'_>>) -> Vec<Gid> {
        self.path.push("gids");
        let mut gids = Vec::new();
        let Some(entries) = self.entries(ctx, kept.as_deref_mut()) else {
            self.path.pop();
            return gids;
        };
        let mut indices: Vec<(u32, String)> = entries
            .into_iter()
            .filter_map(|n| n.parse::<u32>().ok().map(|i| (i, n)))
            .collect();
        indices.sort_unstable();
        // Kept: read through the kept directory; else by path.
        let mut plain = None;
        let mut dir = match kept.as_deref_mut() {
            Some(kept) => self.attr_dir(Some(kept), &mut plain),
            None => None,
        };
        for (index, file) in &indices {
            self.path.push(file);
            let read = match dir.as_mut() {
                Some(dir) => dir.read(&mut self.attr, file).map(|n| self.attr.filled(n)),
                None => self.attr.read(self.path.as_path()),
            };
            let gid = match read {
                Ok(bytes) => match std::str::from_utf8(bytes).ok().and_then(parse::parse_gid) {
                    Some(gid) => Some(gid),
                    None => {
                        let detail = parse::excerpt(bytes);
                        self.record(ctx, SourceErrorKind::Unparsable, detail);
                        None
                    }
                },
                // Unused entries fail with EINVAL on real kernels: not a problem.
                Err(ReadFailure::Os(err)) if err.kind() == io::ErrorKind::InvalidInput => None,
                Err(failure) => {
                    self.record_failure(ctx, failure);
                    None
                }
            };
            self.path.pop();
            if let Some(gid) = gid.filter(|g| !g.is_unspecified()) {
                gids.push(Gid {
                    index: *index,
                    gid: gid.to_string(),
                    gid_type: None,
                    netdev: None,
                });
            }
        }
        self.path.pop();
        if gids.is_empty() {
            return gids;
        }
        self.path.push("gid_attrs");
        for gid in &mut gids {
            let file = gid.index.to_string();
            gid.gid_type = self.gid_attr(ctx, "types", &file, kept.as_deref_mut());
            gid.netdev = self.gid_attr(ctx, "ndevs", &file, kept.as_deref_mut());
        }
        self.path.pop();
        gids
    }

    /// The netdev of the lowest GID entry that has one, reading `gid_attrs/ndevs/<i>` in index
    /// order and stopping at the first name; the GIDs themselves are not read.
    fn first_netdev(
        &mut self,
        ctx: Ctx<'_>,
        mut kept: Option<&mut KeptDevice<'_>>,
    ) -> Option<String> {
        self.path.push("gid_attrs");
        self.path.push("ndevs");
        let mut found = None;
        if let Some(entries) = self.entries(ctx, kept.as_deref_mut()) {
            let mut indices: Vec<(u32, String)> = entries
                .into_iter()
                .filter_map(|n| n.parse::<u32>().ok().map(|i| (i, n)))
                .collect();
            indices.sort_unstable();
            let mut plain = None;
            let mut dir = match kept {
                Some(kept) => self.attr_dir(Some(kept), &mut plain),
                None => None,
            };
            for (_, file) in &indices {
                // Unpopulated entries, or entries without a netdev, are no error.
                let value = self.text_tolerating(ctx, dir.as_mut(), file, is_no_attribute);
                if value.is_some() {
                    found = value;
                    break;
                }
            }
        }
        self.path.pop();
        self.path.pop();
        found
    }

    /// `hw_counters/lifespan` of the current port directory, when it exists.
    fn lifespan_only(
        &mut self,
        ctx: Ctx<'_>,
        out: &mut Vec<Counter>,
        kept: Option<&mut KeptDevice<'_>>,
    ) {
        if !self.options.counters {
            return;
        }
        let source = CounterSource::Hw;
        self.path.push(source.dir_name());
        let open_files = kept.as_ref().map(|k| k.open_files);
        let read = match (open_files, self.lookup(kept)) {
            (_, Lookup::Absent) => Err(ReadFailure::Missing),
            (Some(open_files), Lookup::Kept(dir)) => {
                AttrDir::Kept(open_files, dir).read(&mut self.attr, "lifespan")
            }
            _ => {
                self.path.push("lifespan");
                let read = self.attr.read(self.path.as_path()).map(<[u8]>::len);
                self.path.pop();
                read
            }
        };
        let (kind, unit) = self.families.kind_and_unit(source, "lifespan");
        self.path.push("lifespan");
        match read.map(|n| self.attr.filled(n)) {
            Ok(bytes) => match parse::parse_u64(bytes) {
                Some(value) => out.push(Counter::described(
                    Arc::from("lifespan"),
                    source,
                    value,
                    kind,
                    unit,
                )),
                None => {
                    let detail = parse::excerpt(parse::trim(bytes));
                    self.record(ctx, SourceErrorKind::Unparsable, detail);
                }
            },
            Err(failure) => self.record_failure(ctx, failure),
        }
        self.path.pop();
        self.path.pop();
    }

    /// `gid_attrs/<dir>/<file>`: absent and EINVAL (no attribute, e.g. no netdev on
    /// InfiniBand) are `None` without an error.
    fn gid_attr(
        &mut self,
        ctx: Ctx<'_>,
        dir: &str,
        file: &str,
        kept: Option<&mut KeptDevice<'_>>,
    ) -> Option<String> {
        self.path.push(dir);
        let mut plain = None;
        let mut attr_dir = match kept {
            Some(kept) => self.attr_dir(Some(kept), &mut plain),
            None => None,
        };
        let value = self.text_tolerating(ctx, attr_dir.as_mut(), file, |err| {
            err.kind() == io::ErrorKind::InvalidInput
        });
        self.path.pop();
        value
    }

    /// Every file of the `source` counter directory under the current path, in name order,
    /// appended to `out`. The files are re-read through descriptors kept from the last
    /// snapshot, or opened relative to the directory's descriptor.
    fn counters(
        &mut self,
        ctx: Ctx<'_>,
        source: CounterSource,
        out: &mut Vec<Counter>,
        kept: Option<&mut KeptDevice<'_>>,
    ) {
        if !self.options.counters {
            return;
        }
        self.path.push(source.dir_name());
        let families = self.families;
        let open_files = kept.as_ref().map(|k| k.open_files);
        match (open_files, self.lookup(kept)) {
            (_, Lookup::Absent) => {}
            (Some(open_files), Lookup::Kept(dir)) => {
                let parts = dir.counters(source, families.family(source), |name| {
                    families.kind_and_unit(source, name)
                });
                out.reserve(parts.names.len());
                let files = parts.names.iter().zip(parts.slots.iter_mut());
                for ((name, slot), (shared, kind, unit)) in files.zip(parts.kinds) {
                    let read = read_in_slot(&mut self.attr, parts.dir, name, open_files, slot);
                    self.counter_file(ctx, source, shared, (*kind, *unit), read, out);
                }
            }
            _ => self.counters_unkept(ctx, source, out),
        }
        self.path.pop();
    }

    /// [`Walk::counters`] without kept descriptors; the current path is the directory.
    fn counters_unkept(&mut self, ctx: Ctx<'_>, source: CounterSource, out: &mut Vec<Counter>) {
        let (dir, mut names) = match file::open_dir(self.path.as_path()) {
            Ok(Some(listing)) => listing,
            Ok(None) => return,
            Err(err) => {
                self.record(ctx, io_kind(&err), err.to_string());
                return;
            }
        };
        let fd = dir.as_fd();
        // Sorted before reading, so counters and errors come out in a stable order.
        names.sort_unstable();
        out.reserve(names.len());
        for name in names {
            let read = read_in_dir(&mut self.attr, fd, &name, None);
            let kind_and_unit = self.families.kind_and_unit(source, &name);
            self.counter_file(ctx, source, &Arc::from(name), kind_and_unit, read, out);
        }
    }

    /// The outcome of reading the counter file `name` (its length in `self.attr`): a counter
    /// of the catalog's kind and unit in `out`, or an error recorded (absent files are
    /// neither).
    fn counter_file(
        &mut self,
        ctx: Ctx<'_>,
        source: CounterSource,
        name: &Arc<str>,
        (kind, unit): (CounterKind, Unit),
        read: Result<usize, ReadFailure>,
        out: &mut Vec<Counter>,
    ) {
        let problem = match read.map(|n| self.attr.filled(n)) {
            Ok(bytes) => match parse::parse_u64(bytes) {
                Some(value) => {
                    let name = Arc::clone(name);
                    out.push(Counter::described(name, source, value, kind, unit));
                    return;
                }
                None => {
                    let content = parse::trim(bytes);
                    let kind = if content.starts_with(b"N/A") {
                        SourceErrorKind::NotAvailable
                    } else {
                        SourceErrorKind::Unparsable
                    };
                    Some((kind, parse::excerpt(content)))
                }
            },
            Err(ReadFailure::Missing) => None,
            Err(ReadFailure::TooLarge) => Some((
                SourceErrorKind::TooLarge,
                format!("larger than {READ_LIMIT} bytes"),
            )),
            Err(ReadFailure::Os(err)) => Some((io_kind(&err), err.to_string())),
        };
        if let Some((kind, detail)) = problem {
            self.path.push(name);
            self.record(ctx, kind, detail);
            self.path.pop();
        }
    }
}

/// A directory whose attributes are read by name: by its descriptor, or through what is
/// kept of it between snapshots.
enum AttrDir<'a> {
    Plain(BorrowedFd<'a>),
    Kept(&'a OpenFiles, &'a mut DirFiles),
}

impl AttrDir<'_> {
    /// Read the file `name` into `attr`; the length read. A kept directory whose listing
    /// does not show `name` answers [`ReadFailure::Missing`] without a system call.
    fn read(&mut self, attr: &mut AttrReader, name: &str) -> Result<usize, ReadFailure> {
        match self {
            AttrDir::Plain(fd) => read_in_dir(attr, *fd, name, None),
            AttrDir::Kept(open_files, dir) => {
                if dir.lists(name) == Some(false) {
                    return Err(ReadFailure::Missing);
                }
                let (fd, files) = dir.by_name();
                read_in_dir(attr, fd, name, Some((open_files, files)))
            }
        }
    }

    /// Whether the kept listing shows `name` (`None`: not known).
    fn lists(&self, name: &str) -> Option<bool> {
        match self {
            AttrDir::Plain(_) => None,
            AttrDir::Kept(_, dir) => dir.lists(name),
        }
    }

    /// The directory's descriptor.
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            AttrDir::Plain(fd) => *fd,
            AttrDir::Kept(_, dir) => dir.fd(),
        }
    }
}

/// Read the file `name` of `dir` into `attr`: through its kept descriptor when there is one
/// in `cache` (dropped if it fails, and the file read afresh), else by opening it (and
/// keeping the descriptor when there is a cache with room).
fn read_in_dir(
    attr: &mut AttrReader,
    dir: BorrowedFd<'_>,
    name: &str,
    cache: Option<(&OpenFiles, &mut FxHashMap<String, OwnedFd>)>,
) -> Result<usize, ReadFailure> {
    let Some((open_files, files)) = cache else {
        let fd = file::open_at(dir, name)?;
        return attr.fill(&fd);
    };
    if let Some(fd) = files.get(name) {
        if let Ok(n) = attr.fill(fd) {
            return Ok(n);
        }
        open_files.forget(files, name);
    }
    let fd = file::open_at(dir, name)?;
    let n = attr.fill(&fd)?;
    open_files.keep(files, name, fd);
    Ok(n)
}

/// Read the listed file `name` of `dir` into `attr` through the descriptor in its `slot`
/// (dropped if it fails, and the file read afresh), else by opening it (and keeping the
/// descriptor in the slot when there is room).
fn read_in_slot(
    attr: &mut AttrReader,
    dir: BorrowedFd<'_>,
    name: &str,
    open_files: &OpenFiles,
    slot: &mut Option<OwnedFd>,
) -> Result<usize, ReadFailure> {
    if let Some(fd) = slot.as_ref() {
        if let Ok(n) = attr.fill(fd) {
            return Ok(n);
        }
        open_files.forget_slot(slot);
    }
    let fd = file::open_at(dir, name)?;
    let n = attr.fill(&fd)?;
    open_files.keep_slot(slot, fd);
    Ok(n)
}

/// EINVAL, ENODATA, ENODEV: what the kernel answers for a GID attribute of an unpopulated
/// entry, or of an entry without a netdev.
fn is_no_attribute(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::InvalidInput || matches!(err.raw_os_error(), Some(19) | Some(61))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_map_to_kinds() {
        // EINVAL (what real kernels return for counters a device cannot report), EISDIR, EACCES.
        let kind = |errno| io_kind(&io::Error::from_raw_os_error(errno));
        assert_eq!(kind(22), SourceErrorKind::InvalidArgument);
        assert_eq!(kind(21), SourceErrorKind::IsDirectory);
        assert_eq!(kind(13), SourceErrorKind::PermissionDenied);
        assert_eq!(kind(5), SourceErrorKind::Io);
    }

    #[test]
    fn path_stack_push_pop() {
        let mut p = PathStack::new(PathBuf::from("/sys/class/infiniband"));
        p.push("mlx5_0");
        p.push("ports");
        assert_eq!(p.as_path(), Path::new("/sys/class/infiniband/mlx5_0/ports"));
        p.pop();
        p.push("hw_counters");
        assert_eq!(
            p.as_path(),
            Path::new("/sys/class/infiniband/mlx5_0/hw_counters")
        );
        p.pop();
        p.pop();
        p.pop();
        assert_eq!(p.as_path(), Path::new("/sys/class/infiniband"));
        let mut root = PathStack::new(PathBuf::from("/"));
        root.push("sys");
        assert_eq!(root.as_path(), Path::new("/sys"));
    }
}
