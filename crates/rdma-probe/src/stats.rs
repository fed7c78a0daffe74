//! perftest's latency statistics over one run's samples: t_min, t_max, t_typical (the
//! median), t_avg, t_stdev, 99% and 99.9% percentiles, all in microseconds.
//!
//! Differences from perftest's `print_report_lat`, on purpose: the standard deviation is
//! computed in floating point (perftest truncates each term to an `int`), and the percentile
//! index `ceil(n * p)` is clamped to the last sample (perftest can read one past the end for
//! small `n`). The median of an even count is the mean of the middle two, as in perftest.

/// Summary of one run, in microseconds (one-way latency for ping-pong operations: RTT/2).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LatencySummary {
    /// Number of samples.
    pub iterations: u64,
    /// Smallest sample.
    pub t_min_us: f64,
    /// Largest sample.
    pub t_max_us: f64,
    /// Median (perftest's t_typical).
    pub t_typical_us: f64,
    /// Mean.
    pub t_avg_us: f64,
    /// Population standard deviation.
    pub t_stdev_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p99_9_us: f64,
}

/// The median of a sorted slice (mean of the middle two for an even count); `None` if empty.
pub fn median_sorted(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// perftest's percentile of a sorted slice: element `ceil(n * p)`, clamped to the last one.
pub fn percentile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let idx = ((n as f64) * p).ceil() as usize;
    Some(sorted[idx.min(n - 1)])
}

impl LatencySummary {
    /// Summarise samples given in nanoseconds (sorted in place). `None` for no samples.
    pub fn from_ns(samples: &mut [f64]) -> Option<LatencySummary> {
        if samples.is_empty() || samples.iter().any(|s| !s.is_finite()) {
            return None;
        }
        samples.sort_by(f64::total_cmp);
        let n = samples.len() as f64;
        let avg = samples.iter().sum::<f64>() / n;
        let var = samples.iter().map(|s| (s - avg).powi(2)).sum::<f64>() / n;
        let us = |ns: f64| ns / 1000.0;
        Some(LatencySummary {
            iterations: samples.len() as u64,
            t_min_us: us(samples[0]),
            t_max_us: us(samples[samples.len() - 1]),
            t_typical_us: us(median_sorted(samples)?),
            t_avg_us: us(avg),
            t_stdev_us: us(var.sqrt()),
            p99_us: us(percentile_sorted(samples, 0.99)?),
            p99_9_us: us(percentile_sorted(samples, 0.999)?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median_sorted(&[]), None);
        assert_eq!(median_sorted(&[5.0]), Some(5.0));
        assert_eq!(median_sorted(&[1.0, 2.0, 10.0]), Some(2.0));
        assert_eq!(median_sorted(&[1.0, 2.0, 4.0, 10.0]), Some(3.0));
    }

    #[test]
    fn percentiles_use_perftests_index_and_never_read_past_the_end() {
        let v: Vec<f64> = (1..=1000).map(f64::from).collect();
        // ceil(1000 * 0.99) = 990 -> the 991st value.
        assert_eq!(percentile_sorted(&v, 0.99), Some(991.0));
        assert_eq!(percentile_sorted(&v, 0.999), Some(1000.0));
        let small = [1.0, 2.0, 3.0];
        assert_eq!(percentile_sorted(&small, 0.99), Some(3.0));
        assert_eq!(percentile_sorted(&small, 0.0), Some(1.0));
        assert_eq!(percentile_sorted(&[], 0.5), None);
    }

    #[test]
    fn summary_in_microseconds() {
        // 2,4,4,4,5,5,7,9 us: mean 5, population stdev 2, median 4.5.
        let mut ns: Vec<f64> = [9.0, 2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0]
            .iter()
            .map(|u| u * 1000.0)
            .collect();
        let s = LatencySummary::from_ns(&mut ns).unwrap();
        assert_eq!(s.iterations, 8);
        assert_eq!((s.t_min_us, s.t_max_us), (2.0, 9.0));
        assert_eq!(s.t_typical_us, 4.5);
        assert!((s.t_avg_us - 5.0).abs() < 1e-9);
        assert!((s.t_stdev_us - 2.0).abs() < 1e-9);
        assert_eq!((s.p99_us, s.p99_9_us), (9.0, 9.0));
        assert!(LatencySummary::from_ns(&mut []).is_none());
        assert!(LatencySummary::from_ns(&mut [1.0, f64::NAN]).is_none());
    }
}
