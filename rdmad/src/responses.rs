//! `/metrics` responses by content encoding: counted by the HTTP server once each response's
//! encoding is chosen, exported by the scrapes after it as
//! `rdma_exporter_metrics_responses_total{encoding}` (absent with `--once`: it answers no
//! request).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::metrics::{Declared, MetricSet, Value};

/// The family the server adds to every `/metrics` exposition (listed with the scrape's own
/// in the inventory).
pub const EXPORTER_RESPONSES: Declared = Declared::counter(
    "rdma_exporter_metrics_responses",
    "Responses to /metrics requests since rdmad started, by the content encoding of their body (gzip, zstd, identity); the scrape showing it is not yet counted (absent with --once)",
);

/// `/metrics` responses so far, by content encoding.
#[derive(Debug, Default)]
pub struct ResponseCounts {
    gzip: AtomicU64,
    zstd: AtomicU64,
    identity: AtomicU64,
}

impl ResponseCounts {
    /// Count one response whose `Content-Encoding` is `encoding` (`None`: identity). An
    /// encoding rdmad does not send is not counted.
    pub fn record(&self, encoding: Option<&str>) {
        let counter = match encoding {
            None | Some("identity") => &self.identity,
            Some("gzip") => &self.gzip,
            Some("zstd") => &self.zstd,
            Some(_) => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// (encoding, responses so far), every encoding rdmad sends.
    pub fn counts(&self) -> [(&'static str, u64); 3] {
        [
            ("gzip", self.gzip.load(Ordering::Relaxed)),
            ("zstd", self.zstd.load(Ordering::Relaxed)),
            ("identity", self.identity.load(Ordering::Relaxed)),
        ]
    }

    /// Add `rdma_exporter_metrics_responses_total{encoding}` to a scrape's metrics.
    pub fn export(&self, out: &mut MetricSet) {
        for (encoding, count) in self.counts() {
            let labels = vec![("encoding", encoding.to_string())];
            // Only written here, once per encoding: no duplicates.
            let _ = out.add_declared(&EXPORTER_RESPONSES, labels, Value::Int(count));
        }
    }
}

#[cfg(test)]
mod tests;
