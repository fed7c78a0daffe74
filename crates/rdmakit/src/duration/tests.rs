use super::*;

const ANY: RangeInclusive<Duration> = Duration::ZERO..=Duration::MAX;
/// The ranges the callers give (rdmad's duration options, `rdmactl top --interval`,
/// `rdmactl counters --watch`).
const RDMAD: RangeInclusive<Duration> = Duration::from_millis(1)..=Duration::from_secs(86_400);
const TOP: RangeInclusive<Duration> = Duration::from_millis(100)..=Duration::from_secs(3600);
const COUNTERS: RangeInclusive<Duration> = Duration::from_millis(10)..=Duration::MAX;

fn ms(n: u64) -> Result<Duration, DurationError> {
    Ok(Duration::from_millis(n))
}

#[test]
fn seconds_or_a_unit() {
    assert_eq!(parse("1", ANY), ms(1000));
    assert_eq!(parse("0.5", ANY), ms(500));
    assert_eq!(parse(" 250ms ", ANY), ms(250));
    assert_eq!(parse("10s", ANY), ms(10_000));
    assert_eq!(parse("2m", ANY), ms(120_000));
    assert_eq!(parse("1h", ANY), ms(3_600_000));
    assert_eq!(parse("0.5h", ANY), ms(1_800_000));
    assert_eq!(parse("0", ANY), Ok(Duration::ZERO));
}

/// What rdmad's own parser took (`--probe.interval`, `--scrape.timeout`, the config file):
/// seconds, `ms`, `s`, `m`, blanks around the number, 1 ms to 24 h.
#[test]
fn every_form_rdmads_parser_took() {
    for (text, want) in [
        ("1", 1000),
        ("0.5", 500),
        ("500ms", 500),
        ("10s", 10_000),
        ("1m", 60_000),
        ("1.5m", 90_000),
        (" 10 s ", 10_000),
        ("2 ms", 2),
        ("1ms", 1),
        ("0.001", 1),
        ("1e3ms", 1000),
        ("86400", 86_400_000),
        ("1440m", 86_400_000),
        ("86400000ms", 86_400_000),
        ("24h", 86_400_000),
    ] {
        assert_eq!(parse(text, RDMAD), ms(want), "{text}");
    }
    // Sub-millisecond precision is kept (rdmad rounds to its milliseconds).
    assert_eq!(parse("1.4ms", RDMAD), Ok(Duration::from_micros(1400)));
    for out in ["0", "0.0005", "0.5ms", "86400.5", "1441m", "25h"] {
        assert!(
            matches!(parse(out, RDMAD), Err(DurationError::Range { .. })),
            "{out}"
        );
    }
}

/// What `rdmactl top --interval` and `rdmactl counters --watch` took: Rust's `f64` syntax in
/// seconds (0.1 s to 1 h for top, at least 0.01 s for counters).
#[test]
fn every_form_the_rdmactl_parsers_took() {
    for (text, want) in [
        ("1", 1000),
        ("0.1", 100),
        ("3600", 3_600_000),
        ("1e2", 100_000),
        ("1E2", 100_000),
        ("+1", 1000),
        (".5", 500),
        ("2.", 2000),
    ] {
        assert_eq!(parse(text, TOP), ms(want), "top {text}");
        assert_eq!(parse(text, COUNTERS), ms(want), "counters {text}");
    }
    assert_eq!(parse("0.01", COUNTERS), ms(10));
    assert_eq!(parse("1e6", COUNTERS), ms(1_000_000_000));
    for out in ["0.09", "3600.5", "1e4"] {
        assert!(
            matches!(parse(out, TOP), Err(DurationError::Range { .. })),
            "{out}"
        );
    }
    assert!(matches!(
        parse("0.009", COUNTERS),
        Err(DurationError::Range { .. })
    ));
}

#[test]
fn bad_input_is_a_syntax_error() {
    for bad in [
        "", " ", "soon", "NaN", "nan", "inf", "-inf", "infinity", "-1", "-0.5s", "ms", "s", "h",
        "1 m s", "1d", "1H", "1MS", "1us", "0x10", "1,5", "1_000", "5 5", "\u{663}",
    ] {
        assert_eq!(
            parse(bad, ANY),
            Err(DurationError::Syntax(bad.to_owned())),
            "{bad:?}"
        );
    }
    assert_eq!(
        parse("soon", ANY).unwrap_err().to_string(),
        "`soon` is not a duration (seconds: `1`, `0.5`; or `500ms`, `10s`, `2m`, `1h`)"
    );
}

#[test]
fn huge_numbers_are_an_error_not_a_panic() {
    for huge in [
        "1e20",
        "18446744073709551616",
        "99999999999999999999999999999s",
        "1e300",
        "1e308m",
        "1e308h",
        "1.7e308",
    ] {
        assert_eq!(
            parse(huge, COUNTERS),
            Err(DurationError::TooLong(huge.to_owned())),
            "{huge}"
        );
    }
    // Past f64's range the number is infinite: not a number of seconds.
    assert!(matches!(parse("1e400", ANY), Err(DurationError::Syntax(_))));
    assert_eq!(
        parse("1e20", ANY).unwrap_err().to_string(),
        "`1e20` is too long a duration"
    );
    // The longest that fits is accepted (u64::MAX seconds is about 584 billion years; f64
    // rounds 1e19 to itself, within Duration).
    assert!(parse("1e19", ANY).is_ok());
    // Tiny numbers round to the nanosecond, no underflow error.
    assert_eq!(parse("1e-300", ANY), Ok(Duration::ZERO));
    assert_eq!(parse("1e-9", ANY), Ok(Duration::from_nanos(1)));
}

#[test]
fn the_range_is_the_options() {
    assert!(parse("0.1", TOP).is_ok());
    assert!(parse("3600", TOP).is_ok());
    assert_eq!(
        parse("0.05", TOP).unwrap_err().to_string(),
        "`0.05` is out of range (100ms to 1h)"
    );
    assert!(parse("61m", TOP).is_err());
    assert_eq!(
        parse("0", RDMAD).unwrap_err().to_string(),
        "`0` is out of range (1ms to 24h)"
    );
    assert_eq!(
        parse("5ms", COUNTERS).unwrap_err().to_string(),
        "`5ms` is out of range (10ms to no limit)"
    );
}
