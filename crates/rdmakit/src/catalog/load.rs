//! Parsing and validating catalog files.
//!
//! A catalog file is TOML: `family` (equal to the file name), `description`, an optional
//! default `location`, optional `alias_prefixes`, and one `[[counter]]` table per counter
//! (the fields of [`CounterInfo`]; see `catalog/README.md`).
//!
//! Parsing happens in two steps so that every error can name the file and the counter: first
//! the file becomes a TOML table, then each `[[counter]]` entry is read on its own (unknown
//! fields rejected) and checked (non-empty text, values from the closed sets, widths, no
//! duplicates).

use super::model::{
    CounterInfo, Experiment, FamilyInfo, Kind, Lesson, Location, Overflow, Severity, Unit, WIDTHS,
};
use serde::Deserialize;
use std::collections::HashMap;

/// The longest `summary` accepted: it must fit one table row and one HELP line.
pub const MAX_SUMMARY_CHARS: usize = 100;

/// A catalog file that could not be loaded, with the file and (when known) the counter.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.describe())]
pub struct CatalogError {
    /// The file name (or directory for I/O errors on the directory itself).
    pub file: String,
    /// The counter's name, when the problem belongs to one counter.
    pub counter: Option<String>,
    /// What is wrong.
    pub kind: CatalogErrorKind,
}

/// What is wrong with a catalog file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogErrorKind {
    /// The file or directory could not be read.
    #[error("cannot read: {0}")]
    Io(#[source] std::io::Error),
    /// The file is not valid TOML.
    #[error("not valid TOML: {0}")]
    Syntax(String),
    /// A field the format does not know (a typo, or a field from a newer format).
    #[error("unknown field `{0}`")]
    UnknownField(String),
    /// A table or entry does not have the expected shape (missing field, wrong type).
    #[error("{0}")]
    Shape(String),
    /// A text field that must say something is empty.
    #[error("field `{0}` is empty")]
    EmptyText(&'static str),
    /// The one-line summary is too long or spans lines.
    #[error("field `summary` must be one line of at most {MAX_SUMMARY_CHARS} characters")]
    BadSummary,
    /// A value outside its closed set.
    #[error("field `{field}`: `{value}` is not one of: {}", allowed.join(", "))]
    InvalidValue {
        /// The field.
        field: &'static str,
        /// What the file says.
        value: String,
        /// What it may say.
        allowed: Vec<String>,
    },
    /// The file's `family` does not match its file name.
    #[error("`family = \"{declared}\"` does not match the file name `{expected}.toml`")]
    FamilyMismatch {
        /// What the file declares.
        declared: String,
        /// What its name says.
        expected: String,
    },
    /// The file declares no counters.
    #[error("no [[counter]] entries")]
    NoCounters,
    /// The same (driver, name) twice.
    #[error("duplicate counter (first defined in {first_file})")]
    Duplicate {
        /// Where the first definition is.
        first_file: String,
    },
}

impl CatalogError {
    fn describe(&self) -> String {
        match &self.counter {
            Some(counter) => format!("{}: counter `{}`: {}", self.file, counter, self.kind),
            None => format!("{}: {}", self.file, self.kind),
        }
    }

    pub(crate) fn file(file: &str, kind: CatalogErrorKind) -> Self {
        CatalogError {
            file: file.to_string(),
            counter: None,
            kind,
        }
    }

    fn counter(file: &str, counter: &str, kind: CatalogErrorKind) -> Self {
        CatalogError {
            file: file.to_string(),
            counter: Some(counter.to_string()),
            kind,
        }
    }
}

/// A file's top level, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    family: String,
    description: String,
    #[serde(default)]
    alias_prefixes: Vec<String>,
    #[serde(default)]
    location: Option<String>,
    #[serde(default)]
    names_from_firmware: bool,
    #[serde(default)]
    counter: Vec<toml::Value>,
}

/// One `[[counter]]` entry, as written. Closed-set fields stay strings here so the checks can
/// name the counter and the allowed values.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCounter {
    name: String,
    summary: String,
    #[serde(default)]
    location: Option<String>,
    unit: String,
    kind: String,
    width: i64,
    #[serde(default)]
    overflow: Option<String>,
    severity: String,
    meaning: String,
    #[serde(default)]
    causes: Vec<String>,
    #[serde(default)]
    next_steps: Vec<String>,
    #[serde(default)]
    experiment: Option<String>,
    #[serde(default)]
    lesson: Option<String>,
    #[serde(default)]
    kernels: Vec<String>,
    #[serde(default)]
    renamed_from: Option<String>,
    #[serde(default)]
    renamed_to: Option<String>,
    #[serde(default)]
    also_device: bool,
    #[serde(default)]
    source: Option<String>,
}

/// Turns a serde message into the most precise kind we can name.
fn shape_error(message: String) -> CatalogErrorKind {
    // serde's wording for deny_unknown_fields is stable: "unknown field `x`, expected ...".
    if let Some(rest) = message.split("unknown field `").nth(1) {
        if let Some(field) = rest.split('`').next() {
            return CatalogErrorKind::UnknownField(field.to_string());
        }
    }
    CatalogErrorKind::Shape(message)
}

fn closed<T: Copy>(
    field: &'static str,
    value: &str,
    parse: fn(&str) -> Option<T>,
    names: &[&str],
) -> Result<T, CatalogErrorKind> {
    parse(value).ok_or_else(|| CatalogErrorKind::InvalidValue {
        field,
        value: value.to_string(),
        allowed: names.iter().map(|s| s.to_string()).collect(),
    })
}

/// Text as one line: the files wrap long text, readers (HELP lines, JSON, the CLI's own
/// wrapping) want it flowed.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn non_empty(field: &'static str, text: &str) -> Result<(), CatalogErrorKind> {
    if text.trim().is_empty() {
        Err(CatalogErrorKind::EmptyText(field))
    } else {
        Ok(())
    }
}

/// The family a file must declare: its file name without directories and `.toml`.
fn family_from_file_name(file: &str) -> &str {
    let base = file.rsplit(['/', '\\']).next().unwrap_or(file);
    base.strip_suffix(".toml").unwrap_or(base)
}

/// Parses and checks one file. `file` is its name (used for messages and the family check).
pub(crate) fn parse_file(
    file: &str,
    text: &str,
) -> Result<(FamilyInfo, Vec<CounterInfo>), CatalogError> {
    let value: toml::Table = toml::from_str(text)
        .map_err(|e| CatalogError::file(file, CatalogErrorKind::Syntax(e.message().to_string())))?;
    let raw: RawFile = toml::Value::Table(value)
        .try_into()
        .map_err(|e: toml::de::Error| {
            CatalogError::file(file, shape_error(e.message().to_string()))
        })?;

    let expected = family_from_file_name(file);
    if raw.family != expected {
        return Err(CatalogError::file(
            file,
            CatalogErrorKind::FamilyMismatch {
                declared: raw.family,
                expected: expected.to_string(),
            },
        ));
    }
    non_empty("description", &raw.description).map_err(|k| CatalogError::file(file, k))?;
    for prefix in &raw.alias_prefixes {
        non_empty("alias_prefixes", prefix).map_err(|k| CatalogError::file(file, k))?;
    }
    let default_location = match &raw.location {
        Some(text) => Some(
            closed("location", text, Location::parse, Location::NAMES)
                .map_err(|k| CatalogError::file(file, k))?,
        ),
        None => None,
    };
    if raw.counter.is_empty() && !raw.names_from_firmware {
        return Err(CatalogError::file(file, CatalogErrorKind::NoCounters));
    }

    let mut out = Vec::with_capacity(raw.counter.len());
    for (index, entry) in raw.counter.into_iter().enumerate() {
        // Name the counter even when the entry does not parse, so the message points at it.
        let label = entry
            .get("name")
            .and_then(|n| n.as_str())
            .map(str::to_string)
            .unwrap_or_else(|| format!("#{} (no name)", index + 1));
        let raw_counter: RawCounter = entry.try_into().map_err(|e: toml::de::Error| {
            CatalogError::counter(file, &label, shape_error(e.message().to_string()))
        })?;
        let info = check_counter(file, &raw.family, default_location, raw_counter)
            .map_err(|k| CatalogError::counter(file, &label, k))?;
        out.push(info);
    }
    let family = FamilyInfo {
        name: raw.family,
        description: one_line(&raw.description),
        alias_prefixes: raw.alias_prefixes,
        names_from_firmware: raw.names_from_firmware,
        file: file.to_string(),
    };
    Ok((family, out))
}

fn check_counter(
    file: &str,
    family: &str,
    default_location: Option<Location>,
    raw: RawCounter,
) -> Result<CounterInfo, CatalogErrorKind> {
    non_empty("name", &raw.name)?;
    check_file_name("name", &raw.name)?;
    for old in [&raw.renamed_from, &raw.renamed_to].into_iter().flatten() {
        check_file_name("renamed_from/renamed_to", old)?;
    }
    for kernel in &raw.kernels {
        if !is_kernel_series(kernel) {
            return Err(CatalogErrorKind::InvalidValue {
                field: "kernels",
                value: kernel.clone(),
                allowed: vec!["kernel series like \"6.12\"".to_string()],
            });
        }
    }
    non_empty("summary", &raw.summary)?;
    if raw.summary.contains('\n') || raw.summary.chars().count() > MAX_SUMMARY_CHARS {
        return Err(CatalogErrorKind::BadSummary);
    }
    non_empty("meaning", &raw.meaning)?;
    for cause in &raw.causes {
        non_empty("causes", cause)?;
    }
    for step in &raw.next_steps {
        non_empty("next_steps", step)?;
    }
    if let Some(source) = &raw.source {
        non_empty("source", source)?;
    }

    let location = match (&raw.location, default_location) {
        (Some(text), _) => closed("location", text, Location::parse, Location::NAMES)?,
        (None, Some(location)) => location,
        (None, None) => {
            return Err(CatalogErrorKind::Shape(
                "missing field `location` (and the file sets no default)".to_string(),
            ))
        }
    };
    let unit = closed("unit", &raw.unit, Unit::parse_catalog, Unit::CATALOG_NAMES)?;
    let kind = closed("kind", &raw.kind, Kind::parse_catalog, Kind::CATALOG_NAMES)?;
    let severity = closed("severity", &raw.severity, Severity::parse, Severity::NAMES)?;
    let overflow = match &raw.overflow {
        Some(text) => closed("overflow", text, Overflow::parse, Overflow::NAMES)?,
        None => Overflow::Wrap,
    };
    let width = u8::try_from(raw.width)
        .ok()
        .filter(|w| WIDTHS.contains(w))
        .ok_or_else(|| CatalogErrorKind::InvalidValue {
            field: "width",
            value: raw.width.to_string(),
            allowed: WIDTHS.iter().map(|w| w.to_string()).collect(),
        })?;
    let experiment = match &raw.experiment {
        Some(text) => Some(closed(
            "experiment",
            text,
            Experiment::parse,
            Experiment::NAMES,
        )?),
        None => None,
    };
    let lesson = match &raw.lesson {
        Some(text) => Some(closed("lesson", text, Lesson::parse, Lesson::NAMES)?),
        None => None,
    };
    if kind == Kind::Gauge && overflow == Overflow::Saturate {
        return Err(CatalogErrorKind::InvalidValue {
            field: "overflow",
            value: overflow.to_string(),
            allowed: vec!["wrap (a gauge does not saturate)".to_string()],
        });
    }

    Ok(CounterInfo {
        driver: family.to_string(),
        name: raw.name,
        summary: one_line(&raw.summary),
        location,
        unit,
        kind,
        width,
        overflow,
        severity,
        meaning: one_line(&raw.meaning),
        causes: raw.causes.iter().map(|c| one_line(c)).collect(),
        next_steps: raw.next_steps.iter().map(|s| one_line(s)).collect(),
        experiment,
        lesson,
        kernels: raw.kernels,
        renamed_from: raw.renamed_from,
        renamed_to: raw.renamed_to,
        also_device: raw.also_device,
        source: raw.source.as_deref().map(one_line),
        file: file.to_string(),
    })
}

/// A sysfs file name as drivers write them: printable, no '/', no line breaks, no leading or
/// trailing space. Inner spaces (irdma's "RNR sent") and commas (hfi1's "SwLinkUp,32") are
/// real file names.
fn check_file_name(field: &'static str, name: &str) -> Result<(), CatalogErrorKind> {
    let bad = name.contains('/')
        || name.chars().any(|c| c.is_control())
        || name.trim() != name
        || name.contains("  ");
    if bad {
        return Err(CatalogErrorKind::InvalidValue {
            field,
            value: name.to_string(),
            allowed: vec![
                "a sysfs file name (no '/', no line breaks, single inner spaces only)".to_string(),
            ],
        });
    }
    Ok(())
}

/// "6.12", "7.2": a kernel series (major.minor).
fn is_kernel_series(text: &str) -> bool {
    let mut parts = text.split('.');
    let ok =
        |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    ok(parts.next()) && ok(parts.next()) && parts.next().is_none()
}

/// Parses every (file name, text) pair and rejects duplicate (driver, name) pairs.
pub(crate) fn parse_all<'a>(
    sources: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(Vec<FamilyInfo>, Vec<CounterInfo>), CatalogError> {
    let mut families: Vec<FamilyInfo> = Vec::new();
    let mut all: Vec<CounterInfo> = Vec::new();
    let mut seen: HashMap<(String, String), String> = HashMap::new();
    for (file, text) in sources {
        let (family, counters) = parse_file(file, text)?;
        families.push(family);
        for info in counters {
            let key = (info.driver.clone(), info.name.clone());
            if let Some(first_file) = seen.get(&key) {
                return Err(CatalogError::counter(
                    file,
                    &info.name,
                    CatalogErrorKind::Duplicate {
                        first_file: first_file.clone(),
                    },
                ));
            }
            seen.insert(key, file.to_string());
            all.push(info);
        }
    }
    Ok((families, all))
}
