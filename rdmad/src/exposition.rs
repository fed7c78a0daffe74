//! One scrape: run every collector and encode the result in the Prometheus text format.
//!
//! Collection happens on every scrape (no cache), so a value is never older than the request.

use std::path::PathBuf;
use std::time::Instant;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The content type of the exposition (OpenMetrics text, which Prometheus reads).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Owns the exporter's configuration; cheap to share between requests.
pub struct Exporter {
    sysfs: PathBuf,
}

impl Exporter {
    /// An exporter reading devices under `sysfs`.
    pub fn new(sysfs: PathBuf) -> Self {
        Exporter { sysfs }
    }

    /// The RDMA device names present now.
    pub fn device_names(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.sysfs.join("class/infiniband"))
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().to_string())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Collect and encode one exposition.
    pub fn scrape(&self) -> String {
        let start = Instant::now();
        let mut registry = Registry::with_prefix("rdma");
        let build = Family::<Vec<(String, String)>, Gauge>::default();
        build
            .get_or_create(&vec![("version".into(), env!("CARGO_PKG_VERSION").into())])
            .set(1);
        registry.register(
            "exporter_build",
            "rdmad's version, as a label on a constant 1",
            build.clone(),
        );
        let devices = Gauge::<i64>::default();
        devices.set(self.device_names().len() as i64);
        registry.register(
            "devices",
            "RDMA devices present (entries under /sys/class/infiniband)",
            devices,
        );
        let duration = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        duration.set(start.elapsed().as_secs_f64());
        registry.register(
            "scrape_duration_seconds",
            "Time spent collecting this scrape",
            duration,
        );
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &registry);
        out
    }
}
