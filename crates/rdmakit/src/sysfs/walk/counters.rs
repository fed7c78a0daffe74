//! The counter files of a port or a device, with the kind and unit the catalog gives them.

use super::read::{io_kind, read_in_dir, read_in_slot};
use super::{Ctx, KeptDevice, Walk};
use crate::catalog::Catalog;
use crate::model::{classify, Counter, CounterKind, CounterSource, SourceErrorKind, Unit};
use crate::sysfs::file::{self, ReadFailure, READ_LIMIT};
use crate::sysfs::handles::Lookup;
use crate::sysfs::parse;
use std::os::fd::AsFd;
use std::sync::Arc;

/// The catalog families that describe one device's counters (from its driver or name).
#[derive(Clone, Copy, Default)]
pub(super) struct Families {
    /// The embedded catalog (checked by its tests; `None` only if it failed to load, and
    /// then the file-name guess of [`classify`] stays).
    catalog: Option<&'static Catalog>,
    pma: Option<&'static str>,
    hw: Option<&'static str>,
}

impl Families {
    pub(super) fn of(device: &str, driver: Option<&str>) -> Families {
        let Ok(catalog) = Catalog::embedded() else {
            return Families::default();
        };
        Families {
            catalog: Some(catalog),
            pma: catalog.family_of(CounterSource::Pma, device, driver),
            hw: catalog.family_of(CounterSource::Hw, device, driver),
        }
    }

    pub(super) fn family(&self, source: CounterSource) -> Option<&'static str> {
        match source {
            CounterSource::Pma => self.pma,
            CounterSource::Hw | CounterSource::DeviceHw => self.hw,
        }
    }

    /// The kind and unit the catalog describes for the counter file `name` of `source`, else
    /// the file-name guess.
    pub(super) fn kind_and_unit(&self, source: CounterSource, name: &str) -> (CounterKind, Unit) {
        match self.catalog {
            Some(catalog) => catalog.kind_and_unit(self.family(source), source, name),
            None => classify(name, source),
        }
    }
}

impl<'r> Walk<'r> {
    /// Every file of the `source` counter directory under the current path, in name order,
    /// appended to `out`. The files are re-read through descriptors kept from the last
    /// snapshot, or opened relative to the directory's descriptor.
    pub(super) fn counters(
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
    pub(super) fn counters_unkept(
        &mut self,
        ctx: Ctx<'_>,
        source: CounterSource,
        out: &mut Vec<Counter>,
    ) {
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
    pub(super) fn counter_file(
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
