//! How the walk reads: one attribute file, a directory listing, a symlink's target, through
//! kept descriptors when there are some, recording each problem with its place in the tree.

use super::{Ctx, KeptDevice, Walk};
use crate::model::{ErrorOrigin, SourceError, SourceErrorKind};
use crate::sysfs::file::{self, AttrReader, ReadFailure, READ_LIMIT};
use crate::sysfs::handles::{DirFiles, Lookup, OpenFiles};
use crate::sysfs::parse;
use rustc_hash::FxHashMap;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

/// Map an OS error to the model's error kinds.
pub(super) fn io_kind(err: &io::Error) -> SourceErrorKind {
    match err.kind() {
        io::ErrorKind::InvalidInput => SourceErrorKind::InvalidArgument,
        io::ErrorKind::IsADirectory => SourceErrorKind::IsDirectory,
        io::ErrorKind::PermissionDenied => SourceErrorKind::PermissionDenied,
        _ => SourceErrorKind::Io,
    }
}

impl<'r> Walk<'r> {
    /// Record a problem with the file at the current path.
    pub(super) fn record(&mut self, ctx: Ctx<'_>, kind: SourceErrorKind, detail: String) {
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

    pub(super) fn record_failure(&mut self, ctx: Ctx<'_>, failure: ReadFailure) {
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
    pub(super) fn lookup<'k>(&self, kept: Option<&'k mut KeptDevice<'_>>) -> Lookup<'k> {
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
    pub(super) fn attr_dir<'k>(
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
    pub(super) fn entries(
        &mut self,
        ctx: Ctx<'_>,
        kept: Option<&mut KeptDevice<'_>>,
    ) -> Option<Vec<String>> {
        match self.lookup(kept) {
            Lookup::Kept(dir) => Some(dir.names().to_vec()),
            Lookup::Absent => None,
            Lookup::Unavailable => self.list(ctx),
        }
    }

    /// A text attribute of the current directory; `None` when absent, empty or failing.
    /// `dir` is the current directory when it could be opened: the file is then read
    /// relative to it (or through its kept descriptor) instead of by its whole path.
    pub(super) fn text(
        &mut self,
        ctx: Ctx<'_>,
        dir: Option<&mut AttrDir<'_>>,
        file: &str,
    ) -> Option<String> {
        self.text_tolerating(ctx, dir, file, |_| false)
    }

    /// Like [`Walk::text`], where OS errors that `tolerated` accepts (a GID attribute's EINVAL
    /// for "no such attribute") are `None` without an error.
    pub(super) fn text_tolerating(
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
    pub(super) fn parsed<T>(
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
    pub(super) fn link_basename(
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
    pub(super) fn list(&mut self, ctx: Ctx<'_>) -> Option<Vec<String>> {
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
}

/// A directory whose attributes are read by name: by its descriptor, or through what is
/// kept of it between snapshots.
pub(super) enum AttrDir<'a> {
    Plain(BorrowedFd<'a>),
    Kept(&'a OpenFiles, &'a mut DirFiles),
}

impl AttrDir<'_> {
    /// Read the file `name` into `attr`; the length read. A kept directory whose listing
    /// does not show `name` answers [`ReadFailure::Missing`] without a system call.
    pub(super) fn read(&mut self, attr: &mut AttrReader, name: &str) -> Result<usize, ReadFailure> {
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
    pub(super) fn lists(&self, name: &str) -> Option<bool> {
        match self {
            AttrDir::Plain(_) => None,
            AttrDir::Kept(_, dir) => dir.lists(name),
        }
    }

    /// The directory's descriptor.
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        match self {
            AttrDir::Plain(fd) => *fd,
            AttrDir::Kept(_, dir) => dir.fd(),
        }
    }
}

/// Read the file `name` of `dir` into `attr`: through its kept descriptor when there is one
/// in `cache` (dropped if it fails, and the file read afresh), else by opening it (and
/// keeping the descriptor when there is a cache with room).
pub(super) fn read_in_dir(
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
pub(super) fn read_in_slot(
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
pub(super) fn is_no_attribute(err: &io::Error) -> bool {
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
}
