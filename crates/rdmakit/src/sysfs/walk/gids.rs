//! The GID table of a port: the populated entries with their types and netdevs, or only the
//! first netdev.

use super::read::{is_no_attribute, AttrDir};
use super::{Ctx, KeptDevice, Walk};
use crate::model::{Counter, CounterSource, Gid, SourceErrorKind};
use crate::sysfs::file::ReadFailure;
use crate::sysfs::handles::Lookup;
use crate::sysfs::parse;
use std::io;
use std::sync::Arc;

impl<'r> Walk<'r> {
    /// The populated GID entries of the current port directory.
    pub(super) fn gids(&mut self, ctx: Ctx<'_>, mut kept: Option<&mut KeptDevice<'_>>) -> Vec<Gid> {
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
    pub(super) fn first_netdev(
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
    pub(super) fn lifespan_only(
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
    pub(super) fn gid_attr(
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
}
