//! The one duration grammar of the command lines and the config file: `--probe.interval`,
//! `--scrape.timeout` (rdmad), `rdmactl top --interval`, `rdmactl counters --interval`.
//!
//! A number of seconds (`1`, `0.5`) or a number with a unit (`500ms`, `10s`, `2m`, `1h`),
//! within a range each option gives. The number is Rust's `f64` syntax (`1e3`, `.5`, `+2`),
//! blanks around it and the unit are ignored, units are lower case. Non-finite, negative and
//! overflowing numbers are refused with an error, never a panic.
//!
//! Every form the parsers it replaced took is accepted (rdmad's `--probe.interval`: seconds,
//! `ms`, `s`, `m`; `rdmactl top/counters`: plain `f64` seconds): see the tests.

use std::ops::RangeInclusive;
use std::time::Duration;

/// Why a duration did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not a number of seconds, nor a number with `ms`, `s`, `m` or `h`.
    #[error("`{0}` is not a duration (seconds: `1`, `0.5`; or `500ms`, `10s`, `2m`, `1h`)")]
    Syntax(String),
    /// A number too large for any duration (about 584 years and more).
    #[error("`{0}` is too long a duration")]
    TooLong(String),
    /// A duration outside the option's range.
    #[error("`{text}` is out of range ({min} to {max})")]
    Range {
        /// The text given.
        text: String,
        /// The smallest duration allowed, spelled.
        min: String,
        /// The largest duration allowed, spelled.
        max: String,
    },
}

/// Parses `text` (seconds, or with `ms`, `s`, `m`, `h`) to a duration within `range`.
pub fn parse(text: &str, range: RangeInclusive<Duration>) -> Result<Duration, DurationError> {
    let t = text.trim();
    let (number, seconds_per_step) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        // The unit the range errors spell a day with (`1ms to 24h`), so it is accepted too.
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    let seconds = number
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| DurationError::Syntax(text.to_owned()))?
        * seconds_per_step;
    // A finite number whose seconds overflow (with the unit) or do not fit a Duration.
    let duration = Duration::try_from_secs_f64(seconds)
        .map_err(|_| DurationError::TooLong(text.to_owned()))?;
    if range.contains(&duration) {
        Ok(duration)
    } else {
        Err(DurationError::Range {
            text: text.to_owned(),
            min: spell(*range.start()),
            max: spell(*range.end()),
        })
    }
}

/// A duration as the grammar writes it (`10ms`, `0.1s`, `24h` for a day and more: `no limit`
/// for [`Duration::MAX`]).
fn spell(d: Duration) -> String {
    if d == Duration::MAX {
        "no limit".to_owned()
    } else if d.as_secs() >= 3600 && d.as_secs().is_multiple_of(3600) && d.subsec_nanos() == 0 {
        format!("{}h", d.as_secs() / 3600)
    } else if d < Duration::from_secs(1) {
        format!("{}ms", d.as_secs_f64() * 1000.0)
    } else {
        format!("{}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests;
