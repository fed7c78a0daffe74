//! The one duration grammar of the command lines and the config file: `--probe.interval`,
//! `--scrape.timeout` (rdmad), `rdmactl top --interval`, `rdmactl counters --interval`.
//!
//! A number of seconds (`1`, `0.5`) or a number with a unit (`500ms`, `10s`, `2m`), within a
//! range each option gives. Non-finite and negative numbers are refused.

use std::ops::RangeInclusive;
use std::time::Duration;

/// Why a duration did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not a number of seconds, nor a number with `ms`, `s` or `m`.
    #[error("`{0}` is not a duration (seconds: `1`, `0.5`; or `500ms`, `10s`, `2m`)")]
    Syntax(String),
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

/// Parses `text` (seconds, or with `ms`, `s`, `m`) to a duration within `range`.
pub fn parse(text: &str, range: RangeInclusive<Duration>) -> Result<Duration, DurationError> {
    let t = text.trim();
    let (number, seconds_per_step) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t, 1.0)
    };
    let duration = number
        .trim()
        .parse::<f64>()
        .ok()
        .map(|v| v * seconds_per_step)
        .filter(|s| s.is_finite() && *s >= 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| DurationError::Syntax(text.to_owned()))?;
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
mod tests {
    use super::*;

    const ANY: RangeInclusive<Duration> = Duration::ZERO..=Duration::MAX;

    #[test]
    fn seconds_or_a_unit() {
        assert_eq!(parse("1", ANY), Ok(Duration::from_secs(1)));
        assert_eq!(parse("0.5", ANY), Ok(Duration::from_millis(500)));
        assert_eq!(parse(" 250ms ", ANY), Ok(Duration::from_millis(250)));
        assert_eq!(parse("10s", ANY), Ok(Duration::from_secs(10)));
        assert_eq!(parse("2m", ANY), Ok(Duration::from_secs(120)));
        for bad in ["", "soon", "NaN", "inf", "-1", "1h", "ms", "1 m s"] {
            assert_eq!(
                parse(bad, ANY),
                Err(DurationError::Syntax(bad.to_owned())),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_range_is_the_options() {
        let range = Duration::from_millis(100)..=Duration::from_secs(3600);
        assert!(parse("0.1", range.clone()).is_ok());
        assert!(parse("3600", range.clone()).is_ok());
        let err = parse("0.05", range.clone()).unwrap_err();
        assert_eq!(err.to_string(), "`0.05` is out of range (100ms to 1h)");
        assert!(parse("61m", range).is_err());
    }
}
