//! The one histogram of the workspace: fixed upper bounds (`le`), an implicit `+Inf` bucket,
//! a sum and a count, shaped for the Prometheus exposition (`_bucket{le}` cumulative counts
//! ending with `+Inf`, `_sum`, `_count`).
//!
//! The probe engine (rdma-probe: latency and MR registration time, seconds), the eBPF tracer
//! (rdma-trace: MR registration latency in nanoseconds and size in bytes, power-of-two
//! bounds from [`Histogram::exponential`]) fill it, and rdmad encodes it as it is.
//!
//! Observing is a binary search over the bounds and two additions; no allocation.

/// A histogram over fixed, strictly increasing, finite upper bounds plus the `+Inf` bucket.
///
/// Invariant: there is one per-bucket count per bound and one more for `+Inf`, and
/// [`Histogram::count`] is their sum.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: Vec<f64>,
    /// Per-bucket (not cumulative) counts; the last one is the `+Inf` bucket.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

/// Why [`Histogram::from_buckets`] refused its parts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistogramError {
    /// A bound is not finite or not above the one before it.
    #[error("histogram bounds must be finite and strictly increasing")]
    Bounds,
    /// There is not exactly one count per bound plus one for `+Inf`.
    #[error("a histogram with {bounds} bounds has {want} bucket counts (with +Inf), not {got}")]
    Counts {
        /// Number of bounds.
        bounds: usize,
        /// Counts expected.
        want: usize,
        /// Counts given.
        got: usize,
    },
}

fn strictly_increasing_finite(bounds: impl IntoIterator<Item = f64>) -> Vec<f64> {
    let mut kept: Vec<f64> = Vec::new();
    for x in bounds {
        if x.is_finite() && kept.last().is_none_or(|last| x > *last) {
            kept.push(x);
        }
    }
    kept
}

impl Histogram {
    /// An empty histogram over `bounds`. Bounds must be finite and strictly increasing: a
    /// bound that is not (NaN, an infinity, one not above the bound kept before it) is
    /// dropped.
    pub fn new(bounds: &[f64]) -> Histogram {
        Histogram::with_bounds(strictly_increasing_finite(bounds.iter().copied()))
    }

    /// An empty histogram over `count` exponential bounds `start, start*factor,
    /// start*factor^2, ...` (Prometheus' exponential buckets). `exponential(1.0, 2.0, 65)`
    /// has the powers of two `1, 2, 4, ..., 2^64`. Bounds that would not be finite and
    /// strictly increasing (`start <= 0`, `factor <= 1`, an overflow) are dropped as in
    /// [`Histogram::new`].
    pub fn exponential(start: f64, factor: f64, count: usize) -> Histogram {
        let bounds = std::iter::successors(Some(start), |b| Some(b * factor))
            .take(count)
            .filter(|b| *b > 0.0);
        Histogram::with_bounds(strictly_increasing_finite(bounds))
    }

    fn with_bounds(bounds: Vec<f64>) -> Histogram {
        let n = bounds.len();
        Histogram {
            bounds,
            counts: vec![0; n + 1],
            sum: 0.0,
            count: 0,
        }
    }

    /// A histogram from its parts: the bounds, the per-bucket (not cumulative) counts, one
    /// per bound and a last one for `+Inf`, and the sum of the observations. The count is
    /// the counts' sum.
    pub fn from_buckets(
        bounds: &[f64],
        counts: &[u64],
        sum: f64,
    ) -> Result<Histogram, HistogramError> {
        if strictly_increasing_finite(bounds.iter().copied()).len() != bounds.len() {
            return Err(HistogramError::Bounds);
        }
        if counts.len() != bounds.len() + 1 {
            return Err(HistogramError::Counts {
                bounds: bounds.len(),
                want: bounds.len() + 1,
                got: counts.len(),
            });
        }
        Ok(Histogram {
            bounds: bounds.to_vec(),
            counts: counts.to_vec(),
            sum,
            count: counts.iter().fold(0u64, |a, c| a.saturating_add(*c)),
        })
    }

    /// Record one value. Values are counted in the first bucket whose bound is `>=` them
    /// (Prometheus' `le`: upper bounds inclusive), `+Inf` above the last bound. NaN and
    /// infinities are ignored.
    pub fn observe(&mut self, v: f64) {
        if !v.is_finite() {
            return;
        }
        let i = self.bounds.partition_point(|b| *b < v);
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    /// Per-bucket (not cumulative) `(le, count)` pairs, the last one with `le = +Inf`.
    pub fn buckets(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        self.bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.counts.iter().copied())
    }

    /// Cumulative `(le, count)` pairs, the last one with `le = +Inf` and the count
    /// [`Histogram::count`].
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut acc = 0u64;
        self.buckets()
            .map(|(le, c)| {
                acc = acc.saturating_add(c);
                (le, acc)
            })
            .collect()
    }

    /// Sum of all observed values.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// Number of observed values.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The upper bounds (without `+Inf`).
    pub fn bounds(&self) -> &[f64] {
        &self.bounds
    }

    /// The same observations with the bounds and the sum divided by `divisor`: a change of
    /// unit (nanoseconds to seconds: `1e9`). A `divisor` that is not finite and positive
    /// leaves the histogram as it is.
    pub fn divided_by(&self, divisor: f64) -> Histogram {
        if !(divisor.is_finite() && divisor > 0.0) {
            return self.clone();
        }
        Histogram {
            bounds: self.bounds.iter().map(|b| b / divisor).collect(),
            counts: self.counts.clone(),
            sum: self.sum / divisor,
            count: self.count,
        }
    }

    /// The same observations without the bounds above the highest non-empty bucket (their
    /// cumulative counts would all be the total): what a histogram with many bounds, such as
    /// the 65 powers of two, exports. An empty histogram keeps only `+Inf`.
    pub fn trimmed(&self) -> Histogram {
        let keep = match self.counts.iter().rposition(|c| *c > 0) {
            Some(last) => (last + 1).min(self.bounds.len()),
            None => 0,
        };
        let mut counts = self.counts[..keep].to_vec();
        counts.push(self.counts[keep..].iter().sum());
        Histogram {
            bounds: self.bounds[..keep].to_vec(),
            counts,
            sum: self.sum,
            count: self.count,
        }
    }
}

/// `le` label text as Prometheus clients print it: `0.000001`, `0.5`, `+Inf`.
pub fn le_label(le: f64) -> String {
    if le.is_infinite() {
        "+Inf".to_string()
    } else {
        format!("{le}")
    }
}

/// JSON: `{"buckets": [{"le": "0.001", "count": 3}, ..., {"le": "+Inf", "count": 5}],
/// "sum": ..., "count": 5}`, buckets cumulative as in the exposition.
impl serde::Serialize for Histogram {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        #[derive(serde::Serialize)]
        struct Bucket {
            le: String,
            count: u64,
        }
        let buckets: Vec<Bucket> = self
            .cumulative()
            .into_iter()
            .map(|(le, count)| Bucket {
                le: le_label(le),
                count,
            })
            .collect();
        let mut st = s.serialize_struct("Histogram", 3)?;
        st.serialize_field("buckets", &buckets)?;
        st.serialize_field("sum", &self.sum)?;
        st.serialize_field("count", &self.count)?;
        st.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INF: f64 = f64::INFINITY;

    #[test]
    fn upper_bounds_are_inclusive_and_above_the_last_is_inf() {
        let mut h = Histogram::new(&[1.0, 2.0, 5.0]);
        // On each edge, just above it, below the first bound, above the last, and NaN.
        for v in [
            0.5,
            1.0,
            1.000001,
            2.0,
            4.0,
            5.0,
            5.000001,
            9.0,
            f64::NAN,
            INF,
        ] {
            h.observe(v);
        }
        assert_eq!(
            h.buckets().collect::<Vec<_>>(),
            [(1.0, 2), (2.0, 2), (5.0, 2), (INF, 2)]
        );
        assert_eq!(h.cumulative(), [(1.0, 2), (2.0, 4), (5.0, 6), (INF, 8)]);
        assert_eq!(h.count(), 8, "NaN and +Inf are not observations");
        assert!((h.sum() - 27.500002).abs() < 1e-9, "{}", h.sum());
    }

    #[test]
    fn the_inf_bucket_always_exists_and_ends_with_the_count() {
        let mut h = Histogram::new(&[]);
        assert_eq!(h.cumulative(), [(INF, 0)]);
        h.observe(-3.0);
        h.observe(1e300);
        assert_eq!(h.cumulative(), [(INF, 2)]);
        assert_eq!((h.count(), h.sum()), (2, 1e300 - 3.0));
        let mut h = Histogram::new(&[10.0]);
        h.observe(11.0);
        assert_eq!(h.cumulative().last(), Some(&(INF, h.count())));
        assert_eq!(h.cumulative()[0], (10.0, 0));
    }

    #[test]
    fn bad_bounds_are_dropped() {
        let h = Histogram::new(&[2.0, 1.0, f64::NAN, 3.0, 3.0, INF, -INF]);
        assert_eq!(h.bounds(), &[2.0, 3.0]);
        assert_eq!(h.cumulative().len(), 3);
    }

    #[test]
    fn exponential_bounds() {
        let h = Histogram::exponential(1.0, 2.0, 65);
        assert_eq!(h.bounds().len(), 65);
        for (i, b) in h.bounds().iter().enumerate() {
            assert_eq!(*b, 2f64.powi(i as i32), "bound {i}");
        }
        // The top bound is 2^64, which is u64::MAX as f64: every u64 is below +Inf.
        assert_eq!(h.bounds()[64], u64::MAX as f64);
        assert_eq!(
            Histogram::exponential(1e-6, 10.0, 4).bounds().len(),
            4,
            "1us, 10us, 100us, 1ms"
        );
        let b = Histogram::exponential(1e-6, 10.0, 4);
        for (got, want) in b.bounds().iter().zip([1e-6, 1e-5, 1e-4, 1e-3]) {
            assert!((got - want).abs() <= want * 1e-12, "{got} vs {want}");
        }
        // Parameters that give no increasing bounds give none (or one), never a panic.
        assert_eq!(Histogram::exponential(1.0, 1.0, 5).bounds(), &[1.0]);
        assert_eq!(Histogram::exponential(1.0, 0.5, 5).bounds(), &[1.0]);
        assert!(Histogram::exponential(0.0, 2.0, 5).bounds().is_empty());
        assert!(Histogram::exponential(-1.0, 2.0, 5).bounds().is_empty());
        assert!(Histogram::exponential(1.0, 2.0, 0).bounds().is_empty());
        assert_eq!(Histogram::exponential(1.0, 2.0, 5000).bounds().len(), 1024);
    }

    #[test]
    fn powers_of_two_put_a_value_in_the_smallest_power_not_below_it() {
        let mut h = Histogram::exponential(1.0, 2.0, 65);
        for v in [0u64, 1, 2, 3, 4096, 4097, u64::MAX] {
            h.observe(v as f64);
        }
        let per: Vec<(f64, u64)> = h.buckets().filter(|(_, c)| *c > 0).collect();
        assert_eq!(
            per,
            [
                (1.0, 2),
                (2.0, 1),
                (4.0, 1),
                (4096.0, 1),
                (8192.0, 1),
                (2f64.powi(64), 1)
            ]
        );
        assert_eq!(h.cumulative().last(), Some(&(INF, 7)));
    }

    #[test]
    fn trimmed_stops_at_the_highest_non_empty_bucket() {
        let mut h = Histogram::exponential(1.0, 2.0, 65);
        for v in [1.0, 3.0, 4.0, 5.0] {
            h.observe(v);
        }
        assert_eq!(
            h.trimmed().cumulative(),
            [(1.0, 1), (2.0, 1), (4.0, 3), (8.0, 4), (INF, 4)]
        );
        assert_eq!((h.trimmed().count(), h.trimmed().sum()), (4, 13.0));
        let empty = Histogram::exponential(1.0, 2.0, 65).trimmed();
        assert_eq!(empty.cumulative(), [(INF, 0)]);
        // A value in +Inf keeps every bound.
        let mut h = Histogram::new(&[1.0, 2.0]);
        h.observe(3.0);
        assert_eq!(h.trimmed(), h);
    }

    #[test]
    fn divided_by_changes_the_unit_of_bounds_and_sum_only() {
        let mut h = Histogram::exponential(1.0, 2.0, 12);
        h.observe(1000.0);
        h.observe(3000.0);
        let s = h.divided_by(1e9);
        assert_eq!(s.bounds()[10], 1024.0 / 1e9);
        assert_eq!(s.sum(), 4000.0 / 1e9);
        assert_eq!(s.cumulative()[10].1, 1);
        assert_eq!(s.count(), 2);
        assert_eq!(h.divided_by(0.0), h);
        assert_eq!(h.divided_by(f64::NAN), h);
    }

    #[test]
    fn from_buckets_checks_its_parts() {
        let h = Histogram::from_buckets(&[1.0, 2.0], &[1, 2, 1], 9.5).unwrap();
        assert_eq!(h.cumulative(), [(1.0, 1), (2.0, 3), (INF, 4)]);
        assert_eq!((h.count(), h.sum()), (4, 9.5));
        assert_eq!(
            Histogram::from_buckets(&[2.0, 1.0], &[0, 0, 0], 0.0),
            Err(HistogramError::Bounds)
        );
        assert_eq!(
            Histogram::from_buckets(&[f64::NAN], &[0, 0], 0.0),
            Err(HistogramError::Bounds)
        );
        let e = Histogram::from_buckets(&[1.0], &[1], 1.0).unwrap_err();
        assert_eq!(
            e,
            HistogramError::Counts {
                bounds: 1,
                want: 2,
                got: 1
            }
        );
        assert_eq!(
            e.to_string(),
            "a histogram with 1 bounds has 2 bucket counts (with +Inf), not 1"
        );
    }

    #[test]
    fn labels_and_json_print_like_prometheus() {
        assert_eq!(le_label(1e-6), "0.000001");
        assert_eq!(le_label(INF), "+Inf");
        assert_eq!(le_label(0.5), "0.5");
        assert_eq!(le_label(4096.0), "4096");
        let mut h = Histogram::new(&[1.0]);
        h.observe(0.25);
        h.observe(7.0);
        let json = serde_json::to_value(&h).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "buckets": [{"le": "1", "count": 1}, {"le": "+Inf", "count": 2}],
                "sum": 7.25,
                "count": 2
            })
        );
    }
}
