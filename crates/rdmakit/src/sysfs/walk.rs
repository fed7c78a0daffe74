//! The walk over the device directories: device attributes, parent driver and PCI address,
//! ports, GIDs and every counter file, collecting per-file problems instead of failing.
//!
//! One [`Walk`] reads a whole snapshot with one path buffer and one read buffer, so a scrape
//! allocates little beyond the strings that end up in the model. Directory listings come from
//! `read_dir` alone (no stat per entry); a counter that turns out to be a directory or to
//! fail is reported through the error list with its device, port and path.

use crate::catalog::Catalog;
use crate::model::{
    Counter, CounterSource, Device, ErrorOrigin, Gid, Port, SourceError, SourceErrorKind,
};
use crate::sysfs::file::{self, AttrReader, ReadFailure, READ_LIMIT};
use crate::sysfs::handles::{self, DirFiles, OpenFiles};
use crate::sysfs::parse;
use crate::sysfs::ReadOptions;
use rustc_hash::FxHashMap;
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

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
}

/// Where in the tree a file belongs, for error context.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    device: &'a str,
    port: Option<u32>,
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
    /// Counter file descriptors kept between snapshots, and this snapshot's generation.
    open_files: Option<(&'r OpenFiles, u64)>,
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
            errors: Vec::new(),
        }
    }

    /// Re-read counter files through descriptors kept in `open_files` (see
    /// [`crate::sysfs::handles`]); `generation` is this snapshot's.
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

    /// A text attribute of the current directory; `None` when absent, empty or failing.
    /// `dir` is the current directory's descriptor when it could be opened: the file is then
    /// opened relative to it instead of by its whole path.
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

    /// The basename of the symlink `name` in the current directory, if it is one.
    fn link_basename(&mut self, ctx: Ctx<'_>, name: &str) -> Option<String> {
        self.path.push(name);
        let result = fs::read_link(self.path.as_path());
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

    /// What is kept of the current directory, when this walk keeps descriptors and the
    /// directory can be `stat`ed.
    fn kept(&self) -> Option<Kept<'r>> {
        let (open_files, generation) = self.open_files?;
        let entry = open_files.entry(self.path.as_path(), generation)?;
        Some((open_files, generation, entry))
    }

    /// Read one device; the current path is the class directory. With `skip_port_hw`, the
    /// ports' `hw_counters/` directories are not read, except their `lifespan` file.
    pub(crate) fn device(&mut self, name: String, skip_port_hw: bool) -> Device {
        self.path.push(&name);
        let ctx = Ctx {
            device: &name,
            port: None,
        };
        // When the directory cannot be opened, every read below fails by path and says why.
        let kept = self.kept();
        let fd = match kept {
            Some(_) => None,
            None => file::open_dir_fd(self.path.as_path()),
        };
        let mut dir = AttrDir::new(self.path.as_path(), fd.as_ref(), kept.as_ref());
        let node_type = self.parsed(ctx, dir.as_mut(), "node_type", parse::parse_enumerated);
        let node_guid = self.text(ctx, dir.as_mut(), "node_guid");
        let sys_image_guid = self.text(ctx, dir.as_mut(), "sys_image_guid");
        let fw_ver = self.text(ctx, dir.as_mut(), "fw_ver");
        let hca_type = self.text(ctx, dir.as_mut(), "hca_type");
        let board_id = self.text(ctx, dir.as_mut(), "board_id");
        drop(dir);
        let parent = self.link_basename(ctx, "device");
        let driver = if parent.is_some() {
            self.path.push("device");
            let driver = self.link_basename(ctx, "driver");
            self.path.pop();
            driver
        } else {
            None
        };
        let pci_addr = parent.filter(|p| parse::is_pci_addr(p));
        // The PCI function's NUMA node and, for a VF, its PF (both absent is normal).
        let (numa_node, pf_pci_addr) = if pci_addr.is_some() {
            self.path.push("device");
            let numa = self
                .text_tolerating(ctx, None, "numa_node", |e| {
                    e.kind() == io::ErrorKind::NotFound
                })
                .and_then(|t| t.parse::<i64>().ok())
                .and_then(|n| u32::try_from(n).ok());
            let physfn = self.link_basename(ctx, "physfn");
            self.path.pop();
            (numa, physfn)
        } else {
            (None, None)
        };

        let mut ports = Vec::new();
        self.path.push("ports");
        if let Some(entries) = self.list(ctx) {
            let mut nums: Vec<(u32, String)> = entries
                .into_iter()
                .filter_map(|n| n.parse::<u32>().ok().map(|num| (num, n)))
                .collect();
            nums.sort_unstable();
            for (num, dir) in nums {
                ports.push(self.port(&name, num, &dir, skip_port_hw));
            }
        }
        self.path.pop();

        let mut hw_counters = Vec::new();
        self.counters(ctx, CounterSource::DeviceHw, &mut hw_counters);
        self.path.pop();
        let port_counters = ports.iter_mut().flat_map(|p| p.counters.iter_mut());
        describe_counters(
            &name,
            driver.as_deref(),
            port_counters.chain(&mut hw_counters),
        );

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
    fn port(&mut self, device: &str, num: u32, dir: &str, skip_hw: bool) -> Port {
        self.path.push(dir);
        let ctx = Ctx {
            device,
            port: Some(num),
        };
        let kept = self.kept();
        let fd = match kept {
            Some(_) => None,
            None => file::open_dir_fd(self.path.as_path()),
        };
        let mut dir = AttrDir::new(self.path.as_path(), fd.as_ref(), kept.as_ref());
        let state = self.parsed(ctx, dir.as_mut(), "state", parse::parse_enumerated);
        let phys_state = self.parsed(ctx, dir.as_mut(), "phys_state", parse::parse_enumerated);
        let rate = self
            .text(ctx, dir.as_mut(), "rate")
            .map(|text| parse::parse_rate(&text));
        let link_layer = self.text(ctx, dir.as_mut(), "link_layer");
        let lid = self.parsed(ctx, dir.as_mut(), "lid", parse::parse_lid);
        let sm_lid = self.parsed(ctx, dir.as_mut(), "sm_lid", parse::parse_lid);
        drop(dir);
        let (gids, netdev) = if !self.options.gids {
            (Vec::new(), None)
        } else if self.netdev_only {
            let netdev = if link_layer.as_deref() == Some("InfiniBand") {
                None
            } else {
                self.first_netdev(ctx)
            };
            (Vec::new(), netdev)
        } else {
            let gids = self.gids(ctx);
            let netdev = gids.iter().find_map(|g| g.netdev.clone());
            (gids, netdev)
        };
        let mut counters = Vec::new();
        self.counters(ctx, CounterSource::Pma, &mut counters);
        if skip_hw {
            self.lifespan_only(ctx, &mut counters);
        } else {
            self.counters(ctx, CounterSource::Hw, &mut counters);
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
    fn gids(&mut self, ctx: Ctx<'_>) -> Vec<Gid> {
        self.path.push("gids");
        let entries = self.list(ctx);
        let mut gids = Vec::new();
        let Some(entries) = entries else {
            self.path.pop();
            return gids;
        };
        let mut indices: Vec<(u32, String)> = entries
            .into_iter()
            .filter_map(|n| n.parse::<u32>().ok().map(|i| (i, n)))
            .collect();
        indices.sort_unstable();
        for (index, file) in &indices {
            self.path.push(file);
            let gid = match self.attr.read(self.path.as_path()) {
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
            gid.gid_type = self.gid_attr(ctx, "types", &file);
            gid.netdev = self.gid_attr(ctx, "ndevs", &file);
        }
        self.path.pop();
        gids
    }

    /// The netdev of the lowest GID entry that has one, reading `gid_attrs/ndevs/<i>` in index
    /// order and stopping at the first name; the GIDs themselves are not read.
    fn first_netdev(&mut self, ctx: Ctx<'_>) -> Option<String> {
        self.path.push("gid_attrs");
        self.path.push("ndevs");
        let entries = self.list(ctx);
        let mut found = None;
        if let Some(entries) = entries {
            let mut indices: Vec<(u32, String)> = entries
                .into_iter()
                .filter_map(|n| n.parse::<u32>().ok().map(|i| (i, n)))
                .collect();
            indices.sort_unstable();
            for (_, file) in &indices {
                // Unpopulated entries, or entries without a netdev, are no error.
                let value = self.text_tolerating(ctx, None, file, is_no_attribute);
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
    fn lifespan_only(&mut self, ctx: Ctx<'_>, out: &mut Vec<Counter>) {
        if !self.options.counters {
            return;
        }
        self.path.push(CounterSource::Hw.dir_name());
        self.path.push("lifespan");
        match self.attr.read(self.path.as_path()) {
            Ok(bytes) => match parse::parse_u64(bytes) {
                Some(value) => out.push(Counter::new("lifespan", CounterSource::Hw, value)),
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
    fn gid_attr(&mut self, ctx: Ctx<'_>, dir: &str, file: &str) -> Option<String> {
        self.path.push(dir);
        let value = self.text_tolerating(ctx, None, file, |err| {
            err.kind() == io::ErrorKind::InvalidInput
        });
        self.path.pop();
        value
    }

    /// Every file of the `source` counter directory under the current path, in name order,
    /// appended to `out`. The files are opened relative to the directory's descriptor, or
    /// re-read through descriptors kept from the last snapshot.
    fn counters(&mut self, ctx: Ctx<'_>, source: CounterSource, out: &mut Vec<Counter>) {
        if !self.options.counters {
            return;
        }
        self.path.push(source.dir_name());
        if let Some((open_files, generation, entry)) = self.kept() {
            let mut kept = handles::lock(&entry);
            // On failure, the ordinary read below reports why.
            if open_files
                .prepare(&mut kept, self.path.as_path(), generation, true)
                .is_ok()
            {
                let parts = kept.parts();
                if let Some(fd) = parts.dir {
                    out.reserve(parts.names.len());
                    for (name, slot) in parts.names.iter().zip(parts.slots.iter_mut()) {
                        let read = read_in_slot(&mut self.attr, fd, name, open_files, slot);
                        self.counter_file(ctx, source, name, read, out);
                    }
                    self.path.pop();
                    return;
                }
            }
        }
        let (dir, mut names) = match file::open_dir(self.path.as_path()) {
            Ok(Some(listing)) => listing,
            Ok(None) => {
                self.path.pop();
                return;
            }
            Err(err) => {
                self.record(ctx, io_kind(&err), err.to_string());
                self.path.pop();
                return;
            }
        };
        let fd = dir.as_fd();
        // Sorted before reading, so counters and errors come out in a stable order.
        names.sort_unstable();
        out.reserve(names.len());
        for name in &names {
            let read = read_in_dir(&mut self.attr, fd, name, None);
            self.counter_file(ctx, source, name, read, out);
        }
        self.path.pop();
    }

    /// The outcome of reading the counter file `name` (its length in `self.attr`): a counter
    /// in `out`, or an error recorded (absent files are neither).
    fn counter_file(
        &mut self,
        ctx: Ctx<'_>,
        source: CounterSource,
        name: &str,
        read: Result<usize, ReadFailure>,
        out: &mut Vec<Counter>,
    ) {
        let problem = match read.map(|n| self.attr.filled(n)) {
            Ok(bytes) => match parse::parse_u64(bytes) {
                Some(value) => {
                    out.push(Counter::new(name, source, value));
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

/// Gives the counters of one device the kind and unit the embedded catalog describes for
/// them (the family from the device's driver or name, `ib_pma` for the PMA files); counters
/// it does not describe keep the file-name guess of [`Counter::new`].
fn describe_counters<'c>(
    device: &str,
    driver: Option<&str>,
    counters: impl Iterator<Item = &'c mut Counter>,
) {
    // The embedded catalog is checked by its tests; if it ever failed to load, the guess stays.
    let Ok(catalog) = Catalog::embedded() else {
        return;
    };
    let pma = catalog.family_of(CounterSource::Pma, device, driver);
    let hw = catalog.family_of(CounterSource::Hw, device, driver);
    for counter in counters {
        let family = match counter.source {
            CounterSource::Pma => pma,
            CounterSource::Hw | CounterSource::DeviceHw => hw,
        };
        let (kind, unit) = catalog.kind_and_unit(family, counter.source, &counter.name);
        if (kind, unit) != (counter.kind, counter.unit) {
            counter.set_kind_and_unit(kind, unit);
        }
    }
}

/// What a walk keeps of one directory: the shared store, this snapshot's generation, the
/// directory's entry.
type Kept<'r> = (&'r OpenFiles, u64, Arc<Mutex<DirFiles>>);

/// A directory whose attributes are read by name: by its descriptor, or through what is
/// kept of it between snapshots.
enum AttrDir<'a> {
    Plain(BorrowedFd<'a>),
    Kept(&'a OpenFiles, MutexGuard<'a, DirFiles>),
}

impl<'a> AttrDir<'a> {
    /// `None` when the directory could not be opened (its files are then read by path,
    /// which reports why).
    fn new(
        path: &Path,
        fd: Option<&'a OwnedFd>,
        kept: Option<&'a Kept<'a>>,
    ) -> Option<AttrDir<'a>> {
        match kept {
            Some((open_files, generation, entry)) => {
                let mut dir = handles::lock(entry);
                open_files
                    .prepare(&mut dir, path, *generation, false)
                    .ok()?;
                Some(AttrDir::Kept(open_files, dir))
            }
            None => fd.map(|fd| AttrDir::Plain(fd.as_fd())),
        }
    }

    /// Read the file `name` into `attr`; the length read.
    fn read(&mut self, attr: &mut AttrReader, name: &str) -> Result<usize, ReadFailure> {
        match self {
            AttrDir::Plain(fd) => read_in_dir(attr, *fd, name, None),
            AttrDir::Kept(open_files, dir) => {
                let parts = dir.parts();
                match parts.dir {
                    Some(fd) => read_in_dir(attr, fd, name, Some((open_files, parts.files))),
                    None => Err(ReadFailure::Os(io::Error::other(
                        "directory descriptor missing",
                    ))),
                }
            }
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
