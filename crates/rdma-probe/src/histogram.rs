//! Cumulative histograms with fixed bucket bounds, shaped for the Prometheus exposition
//! (`_bucket{le}` cumulative counts including `+Inf`, `_sum`, `_count`).
//!
//! Bounds are in seconds. Observing is a binary search and two additions; no allocation.

/// Latency buckets, seconds: from hardware RoCE (1-5 us) through Soft-RoCE under emulation
/// (15-50 us) to retransmission territory (milliseconds).
pub const LATENCY_BUCKETS: &[f64] = &[
    1e-6, 2e-6, 5e-6, 10e-6, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 100e-3,
];

/// MR registration buckets, seconds.
pub const REGISTRATION_BUCKETS: &[f64] = &[1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0];

/// A histogram over fixed upper bounds (`le`), plus an implicit `+Inf` bucket.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: Vec<f64>,
    /// Per-bucket (not cumulative) counts; one more than `bounds` (the `+Inf` bucket).
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// An empty histogram. Bounds must be finite and strictly increasing (others are dropped).
    pub fn new(bounds: &[f64]) -> Self {
        let mut b: Vec<f64> = Vec::with_capacity(bounds.len());
        for &x in bounds {
            if x.is_finite() && b.last().is_none_or(|l| x > *l) {
                b.push(x);
            }
        }
        let n = b.len();
        Histogram {
            bounds: b,
            counts: vec![0; n + 1],
            sum: 0.0,
            count: 0,
        }
    }

    /// Record one value (seconds). Non-finite values are ignored.
    pub fn observe(&mut self, v: f64) {
        if !v.is_finite() {
            return;
        }
        // First bound >= v (Prometheus buckets are `le`: upper bound inclusive).
        let i = self.bounds.partition_point(|b| *b < v);
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    /// Cumulative `(le, count)` pairs, the last one with `le = +Inf` and `count = count()`.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut acc = 0;
        self.bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(&self.counts)
            .map(|(le, c)| {
                acc += c;
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
}

/// `le` label text as Prometheus clients print it: `1e-06`, `0.5`, `+Inf`.
pub fn le_label(le: f64) -> String {
    if le.is_infinite() {
        "+Inf".to_string()
    } else {
        format!("{le}")
    }
}

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

    #[test]
    fn buckets_are_cumulative_and_upper_bounds_inclusive() {
        let mut h = Histogram::new(&[1.0, 2.0, 5.0]);
        for v in [0.5, 1.0, 1.5, 2.0, 4.0, 9.0, f64::NAN] {
            h.observe(v);
        }
        assert_eq!(
            h.cumulative(),
            vec![(1.0, 2), (2.0, 4), (5.0, 5), (f64::INFINITY, 6)]
        );
        assert_eq!(h.count(), 6);
        assert!((h.sum() - 18.0).abs() < 1e-12);
    }

    #[test]
    fn bad_bounds_are_dropped_and_labels_print_like_prometheus() {
        let h = Histogram::new(&[2.0, 1.0, f64::NAN, 3.0, 3.0]);
        assert_eq!(h.bounds(), &[2.0, 3.0]);
        assert_eq!(le_label(1e-6), "0.000001");
        assert_eq!(le_label(f64::INFINITY), "+Inf");
        assert_eq!(le_label(0.5), "0.5");
        let json = serde_json::to_value(Histogram::new(&[1.0])).unwrap();
        assert_eq!(json["buckets"][1]["le"], "+Inf");
        assert_eq!(json["count"], 0);
    }

    #[test]
    fn the_latency_buckets_are_increasing() {
        let h = Histogram::new(LATENCY_BUCKETS);
        assert_eq!(h.bounds().len(), LATENCY_BUCKETS.len());
        let h = Histogram::new(REGISTRATION_BUCKETS);
        assert_eq!(h.bounds().len(), REGISTRATION_BUCKETS.len());
    }
}
