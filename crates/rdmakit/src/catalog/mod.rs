//! The counter catalog: the one place a counter is described.
//!
//! The data lives in the repository's top-level `catalog/` directory, one TOML file per driver
//! family (`ib_pma`, `mlx5`, `mlx4`, `rxe`, `irdma`, `bnxt_re`, `efa`, `hfi1`, `cxgb4`, `hns`,
//! `erdma`, `mana`, `ionic`, `ib_cm`). The
//! files are embedded at compile time, so binaries need nothing at run time
//! ([`Catalog::embedded`]); tests and tools can load a directory instead
//! ([`Catalog::from_dir`]). Loading validates everything and names the file and counter at
//! fault ([`CatalogError`]).
//!
//! Faces use it for Prometheus HELP text, `rdmactl explain`, doctor rules and the course's
//! counter reference. Lookups go by (driver, name) and fall back to the name alone;
//! [`Catalog::closest`] offers "did you mean" suggestions.

mod distance;
mod load;
mod model;

pub use distance::{edit_distance, max_suggestion_distance};
pub use load::{CatalogError, CatalogErrorKind, MAX_SUMMARY_CHARS};
pub use model::{
    CounterInfo, Experiment, FamilyInfo, Kind, Lesson, Location, Overflow, Severity, Unit, WIDTHS,
};

use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;

use crate::model::{classify, CounterSource};

/// The catalog files compiled into the binary: (file name, contents).
pub const EMBEDDED_FILES: &[(&str, &str)] = &[
    (
        "ib_pma.toml",
        include_str!("../../../../catalog/ib_pma.toml"),
    ),
    ("mlx5.toml", include_str!("../../../../catalog/mlx5.toml")),
    ("rxe.toml", include_str!("../../../../catalog/rxe.toml")),
    ("ib_cm.toml", include_str!("../../../../catalog/ib_cm.toml")),
    ("irdma.toml", include_str!("../../../../catalog/irdma.toml")),
    (
        "bnxt_re.toml",
        include_str!("../../../../catalog/bnxt_re.toml"),
    ),
    ("efa.toml", include_str!("../../../../catalog/efa.toml")),
    ("hfi1.toml", include_str!("../../../../catalog/hfi1.toml")),
    ("cxgb4.toml", include_str!("../../../../catalog/cxgb4.toml")),
    ("mlx4.toml", include_str!("../../../../catalog/mlx4.toml")),
    ("hns.toml", include_str!("../../../../catalog/hns.toml")),
    ("erdma.toml", include_str!("../../../../catalog/erdma.toml")),
    ("mana.toml", include_str!("../../../../catalog/mana.toml")),
    ("ionic.toml", include_str!("../../../../catalog/ionic.toml")),
    (
        "netdev.toml",
        include_str!("../../../../catalog/netdev.toml"),
    ),
];

/// Files in the catalog directory that are not counter families (other data that lives
/// beside them): [`Catalog::from_dir`] skips them.
pub const NOT_FAMILY_FILES: &[&str] = &["rules.toml"];

/// What hfi1 appends to the file name of a 32-bit counter (chip.c `init_cntrs`).
pub const WIDTH_SUFFIX: &str = ",32";

/// A file name without hfi1's ",32" width suffix.
pub fn strip_width_suffix(name: &str) -> &str {
    name.strip_suffix(WIDTH_SUFFIX).unwrap_or(name)
}

/// All counters of all families, validated.
#[derive(Debug, Clone)]
pub struct Catalog {
    families: Vec<FamilyInfo>,
    counters: Vec<CounterInfo>,
    /// family -> counter name -> index in `counters`, exact spelling.
    exact: HashMap<String, HashMap<String, usize>>,
    /// family -> ASCII-lowercased counter name -> index of the first such entry.
    folded: HashMap<String, HashMap<String, usize>>,
}

/// The answer to [`Catalog::lookup`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// The requested driver describes this name, or no driver was requested and these
    /// families do (one entry per family).
    Found(Vec<&'a CounterInfo>),
    /// A driver was requested and does not describe this name, but other families do.
    OtherFamilies(Vec<&'a CounterInfo>),
    /// No family describes this name.
    NotFound,
}

impl Catalog {
    /// The catalog compiled into this binary. Parsed once; an error here means the embedded
    /// files are broken (the catalog tests catch that before a release).
    pub fn embedded() -> Result<&'static Catalog, &'static CatalogError> {
        static EMBEDDED: OnceLock<Result<Catalog, CatalogError>> = OnceLock::new();
        EMBEDDED
            .get_or_init(|| Catalog::from_sources(EMBEDDED_FILES.iter().copied()))
            .as_ref()
    }

    /// Loads every `*.toml` file of a directory (in file-name order), except the
    /// [`NOT_FAMILY_FILES`].
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Catalog, CatalogError> {
        let dir = dir.as_ref();
        let dir_label = dir.display().to_string();
        let entries = std::fs::read_dir(dir)
            .map_err(|e| CatalogError::file(&dir_label, CatalogErrorKind::Io(e)))?;
        let mut paths = Vec::new();
        for entry in entries {
            let entry =
                entry.map_err(|e| CatalogError::file(&dir_label, CatalogErrorKind::Io(e)))?;
            let path = entry.path();
            let skipped = path
                .file_name()
                .is_some_and(|n| NOT_FAMILY_FILES.iter().any(|s| n == *s));
            if path.extension().is_some_and(|ext| ext == "toml") && path.is_file() && !skipped {
                paths.push(path);
            }
        }
        paths.sort();
        let mut sources = Vec::with_capacity(paths.len());
        for path in &paths {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| path.display().to_string());
            let text = std::fs::read_to_string(path)
                .map_err(|e| CatalogError::file(&name, CatalogErrorKind::Io(e)))?;
            sources.push((name, text));
        }
        Catalog::from_sources(sources.iter().map(|(n, t)| (n.as_str(), t.as_str())))
    }

    /// Loads (file name, contents) pairs; the file name decides the family.
    pub fn from_sources<'a>(
        sources: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Catalog, CatalogError> {
        let (families, counters) = load::parse_all(sources)?;
        let mut exact: HashMap<String, HashMap<String, usize>> = HashMap::new();
        let mut folded: HashMap<String, HashMap<String, usize>> = HashMap::new();
        for (i, c) in counters.iter().enumerate() {
            exact
                .entry(c.driver.clone())
                .or_default()
                .insert(c.name.clone(), i);
            folded
                .entry(c.driver.clone())
                .or_default()
                .entry(c.name.to_ascii_lowercase())
                .or_insert(i);
        }
        Ok(Catalog {
            families,
            counters,
            exact,
            folded,
        })
    }

    /// Every counter, family by family in load order, counters in file order.
    pub fn counters(&self) -> &[CounterInfo] {
        &self.counters
    }

    /// The number of (driver, name) entries.
    pub fn len(&self) -> usize {
        self.counters.len()
    }

    /// True when the catalog holds no counter (never for a loaded catalog).
    pub fn is_empty(&self) -> bool {
        self.counters.is_empty()
    }

    /// The driver family names, in load order.
    pub fn families(&self) -> Vec<&str> {
        self.families.iter().map(|f| f.name.as_str()).collect()
    }

    /// What each family covers, in load order.
    pub fn family_infos(&self) -> &[FamilyInfo] {
        &self.families
    }

    /// The counters of one family (empty for an unknown family).
    pub fn family(&self, driver: &str) -> impl Iterator<Item = &CounterInfo> + '_ {
        let driver = driver.to_string();
        self.counters.iter().filter(move |c| c.driver == driver)
    }

    /// Maps what a user typed for `--driver` to a family: the family itself (`mlx5`), or a
    /// device name that starts with one (`mlx5_0`, `rxe0`, `bnxt_re1`). Longest match wins.
    pub fn family_for(&self, driver_or_device: &str) -> Option<&str> {
        let families = self.families();
        if let Some(exact) = families.iter().find(|f| **f == driver_or_device) {
            return Some(exact);
        }
        families
            .into_iter()
            .filter(|f| driver_or_device.starts_with(*f))
            .max_by_key(|f| f.len())
    }

    /// The entry for exactly this (driver, name); the name is matched exactly first, then
    /// without regard to ASCII case, then without one of the family's `alias_prefixes`
    /// (mlx5 representors show `vport_out_of_buffer` for `out_of_buffer`).
    pub fn get(&self, driver: &str, name: &str) -> Option<&CounterInfo> {
        self.get_direct(driver, name).or_else(|| {
            let family = self.families.iter().find(|f| f.name == driver)?;
            family
                .alias_prefixes
                .iter()
                .filter_map(|p| name.strip_prefix(p.as_str()))
                .find_map(|rest| self.get_direct(driver, rest))
        })
    }

    fn get_direct(&self, driver: &str, name: &str) -> Option<&CounterInfo> {
        self.get_spelled(driver, name).or_else(|| {
            // hfi1 appends ",32" to the file name of its 32-bit counters: "SwLinkUp" finds
            // "SwLinkUp,32" and the other way round.
            match name.strip_suffix(WIDTH_SUFFIX) {
                Some(bare) => self.get_spelled(driver, bare),
                None => self.get_spelled(driver, &format!("{name}{WIDTH_SUFFIX}")),
            }
        })
    }

    fn get_spelled(&self, driver: &str, name: &str) -> Option<&CounterInfo> {
        let index = self
            .exact
            .get(driver)
            .and_then(|names| names.get(name))
            .or_else(|| {
                self.folded
                    .get(driver)?
                    .get(name.to_ascii_lowercase().as_str())
            })?;
        self.counters.get(*index)
    }

    /// The family whose entries describe the counters of `source` on `device`: `ib_pma` for
    /// the PMA files (`ports/<n>/counters/`, the same on every device); for driver files the
    /// family of the parent's kernel driver (`mlx5_core` -> `mlx5`), else of the device name
    /// (`rxe0` -> `rxe`, `bnxt_re0` -> `bnxt_re`). `None` when no family matches.
    pub fn family_of(
        &self,
        source: CounterSource,
        device: &str,
        driver: Option<&str>,
    ) -> Option<&str> {
        match source {
            CounterSource::Pma => self
                .families
                .iter()
                .find(|f| f.name == "ib_pma")
                .map(|f| f.name.as_str()),
            CounterSource::Hw | CounterSource::DeviceHw => driver
                .and_then(|d| self.family_for(d))
                .or_else(|| self.family_for(device)),
        }
    }

    /// The kind and unit of the counter file `name` of `source` in `family`: the catalog's
    /// when it describes the counter, else the file-name rules of [`classify`].
    pub fn kind_and_unit(
        &self,
        family: Option<&str>,
        source: CounterSource,
        name: &str,
    ) -> (Kind, Unit) {
        match family.and_then(|f| self.get(f, name)) {
            Some(info) => (info.kind, info.unit),
            None => classify(name, source),
        }
    }

    /// Every family's entry for this name: exact spelling first; if none, ignoring case; if
    /// none, through the families' alias prefixes.
    pub fn by_name(&self, name: &str) -> Vec<&CounterInfo> {
        let bare = strip_width_suffix(name);
        let exact: Vec<&CounterInfo> = self
            .counters
            .iter()
            .filter(|c| c.name == name || strip_width_suffix(&c.name) == bare)
            .collect();
        if !exact.is_empty() {
            return exact;
        }
        let folded: Vec<&CounterInfo> = self
            .counters
            .iter()
            .filter(|c| c.name.eq_ignore_ascii_case(name))
            .collect();
        if !folded.is_empty() {
            return folded;
        }
        self.families
            .iter()
            .filter(|f| !f.alias_prefixes.is_empty())
            .filter_map(|f| self.get(&f.name, name))
            .collect()
    }

    /// Looks a name up for a driver (family or device name), falling back to the name alone.
    pub fn lookup(&self, driver: Option<&str>, name: &str) -> Lookup<'_> {
        if let Some(driver) = driver {
            let family = self.family_for(driver).unwrap_or(driver);
            if let Some(found) = self.get(family, name) {
                return Lookup::Found(vec![found]);
            }
            let others = self.by_name(name);
            return if others.is_empty() {
                Lookup::NotFound
            } else {
                Lookup::OtherFamilies(others)
            };
        }
        let found = self.by_name(name);
        if found.is_empty() {
            Lookup::NotFound
        } else {
            Lookup::Found(found)
        }
    }

    /// Up to `limit` distinct counter names close to `name` (edit distance, case ignored),
    /// nearest first, ties in alphabetical order. Names further than
    /// [`max_suggestion_distance`] are never suggested; an exact match is not a suggestion.
    pub fn closest(&self, name: &str, limit: usize) -> Vec<&str> {
        let max = max_suggestion_distance(name);
        let mut scored: Vec<(usize, &str)> = Vec::new();
        for c in &self.counters {
            if scored.iter().any(|(_, n)| *n == c.name) || c.name == name {
                continue;
            }
            let d = edit_distance(name, &c.name);
            if d <= max {
                scored.push((d, &c.name));
            }
        }
        scored.sort();
        scored.into_iter().take(limit).map(|(_, n)| n).collect()
    }
}
