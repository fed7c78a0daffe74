//! Device include/exclude filters, applied to device names before anything of a device is read.
//!
//! Patterns are regular expressions (the `regex` crate syntax) matched against the WHOLE device
//! name, like node_exporter's `--collector.*.device-include/exclude` flags: `mlx5_.*` keeps
//! every mlx5 device, `mlx5_0|mlx5_1` exactly those two. A device is kept when it matches the
//! include pattern (if any) and does not match the exclude pattern (if any). Filtering happens
//! before any counter file of the device is opened: reading the counters of mlx5 functions that
//! firmware restricts fills dmesg with ACCESS_REG errors, so excluded devices are never touched.

use crate::sysfs::SysfsError;
use regex::Regex;

/// Which devices to read.
#[derive(Debug, Clone, Default)]
pub struct DeviceFilter {
    include: Option<Regex>,
    exclude: Option<Regex>,
}

impl DeviceFilter {
    /// Keep every device.
    pub fn all() -> DeviceFilter {
        DeviceFilter::default()
    }

    /// Build a filter from optional include and exclude regular expressions (whole-name match).
    pub fn new(include: Option<&str>, exclude: Option<&str>) -> Result<DeviceFilter, SysfsError> {
        Ok(DeviceFilter {
            include: include.map(|p| compile("include", p)).transpose()?,
            exclude: exclude.map(|p| compile("exclude", p)).transpose()?,
        })
    }

    /// Keep exactly the device called `name` (no pattern syntax).
    pub fn only(name: &str) -> DeviceFilter {
        let pattern = format!("^{}$", regex::escape(name));
        DeviceFilter {
            // An escaped literal always compiles; fall back to "keep nothing" rather than panic.
            include: Some(Regex::new(&pattern).unwrap_or_else(|_| never())),
            exclude: None,
        }
    }

    /// Whether the device `name` passes the filter.
    pub fn keeps(&self, name: &str) -> bool {
        self.include.as_ref().is_none_or(|re| re.is_match(name))
            && !self.exclude.as_ref().is_some_and(|re| re.is_match(name))
    }
}

fn compile(which: &'static str, pattern: &str) -> Result<Regex, SysfsError> {
    Regex::new(&format!("^(?:{pattern})$")).map_err(|source| SysfsError::InvalidFilter {
        which,
        pattern: pattern.to_owned(),
        source: Box::new(source),
    })
}

/// A regex that matches nothing (`[^\s\S]` is the empty character class).
fn never() -> Regex {
    match Regex::new(r"[^\s\S]") {
        Ok(re) => re,
        Err(_) => unreachable!("a constant pattern compiles"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_name_match() {
        let f = DeviceFilter::new(Some("mlx5_.*"), Some("mlx5_1")).expect("valid");
        assert!(f.keeps("mlx5_0"));
        assert!(!f.keeps("mlx5_1"));
        assert!(f.keeps("mlx5_10"));
        assert!(!f.keeps("rxe0"));
        let f = DeviceFilter::new(Some("mlx5_1"), None).expect("valid");
        assert!(!f.keeps("mlx5_10"), "include must match the whole name");
    }

    #[test]
    fn alternation_is_grouped() {
        let f = DeviceFilter::new(None, Some("rxe0|siw0")).expect("valid");
        assert!(!f.keeps("rxe0"));
        assert!(!f.keeps("siw0"));
        assert!(f.keeps("rxe01"));
    }

    #[test]
    fn only_is_literal() {
        let f = DeviceFilter::only("mlx5.0");
        assert!(f.keeps("mlx5.0"));
        assert!(!f.keeps("mlx5_0"));
    }

    #[test]
    fn bad_pattern_is_an_error() {
        let err = DeviceFilter::new(Some("mlx5_("), None).expect_err("invalid");
        assert!(err.to_string().contains("include"), "{err}");
    }

    #[test]
    fn default_keeps_all() {
        assert!(DeviceFilter::all().keeps("anything"));
    }
}
