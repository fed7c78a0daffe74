//! Collectors: one file each, behind the small [`Collector`] trait, listed in [`TABLE`].
//!
//! The table is the only list of collectors: it generates the `--collector.<name>` and
//! `--no-collector.<name>` flags, the `[collector]` keys of the config file and the `/` page.
//! On every scrape [`Collectors::scrape`] runs each enabled collector into its own
//! [`MetricSet`] and reports `rdma_scrape_collector_duration_seconds{collector}` and
//! `rdma_scrape_collector_success{collector}`. A collector that returns an error or panics
//! contributes only those two series (success 0); the scrape itself always succeeds.

pub mod netlink_resources;
pub mod sysfs_counters;
pub mod sysfs_info;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::Instant;

use rdmakit::sysfs::{DeviceFilter, ReadOptions, SysfsReader};

use crate::metrics::{Kind, MetricSet, Value};

/// One source of metrics.
pub trait Collector: Send + Sync {
    /// Add this scrape's metrics to `out`. An error means the collector produced nothing
    /// usable this time (what it added is discarded).
    fn update(&self, out: &mut MetricSet) -> anyhow::Result<()>;
}

/// What every collector may need, resolved once at startup from flags and the config file.
#[derive(Debug, Clone)]
pub struct CollectorConfig {
    /// The sysfs root (`--path.sysfs`).
    pub sysfs: PathBuf,
    /// Devices to read (`--collector.device-include` / `--collector.device-exclude`).
    pub filter: DeviceFilter,
}

impl CollectorConfig {
    /// A sysfs reader with the device filter applied and the given options.
    pub fn reader(&self, options: ReadOptions) -> SysfsReader {
        SysfsReader::new(self.sysfs.clone())
            .with_filter(self.filter.clone())
            .with_options(options)
    }
}

/// One row of [`TABLE`].
pub struct CollectorSpec {
    /// The name in flags, config keys and the `collector` label (`[a-z_]`).
    pub name: &'static str,
    /// One line for `--help` and the `/` page.
    pub help: &'static str,
    /// Whether it runs unless disabled.
    pub default_enabled: bool,
    /// Build it from the resolved configuration.
    pub build: fn(&CollectorConfig) -> Box<dyn Collector>,
}

/// Every collector rdmad has.
pub const TABLE: &[CollectorSpec] = &[
    sysfs_info::SPEC,
    sysfs_counters::SPEC,
    netlink_resources::SPEC,
];

/// The spec called `name`.
pub fn spec(name: &str) -> Option<&'static CollectorSpec> {
    TABLE.iter().find(|s| s.name == name)
}

/// The enabled collectors, in table order.
pub struct Collectors {
    enabled: Vec<(&'static str, Box<dyn Collector>)>,
}

impl Collectors {
    /// Build the collectors whose names are in `enabled` (table order is kept).
    pub fn new(config: &CollectorConfig, enabled: &[&str]) -> Collectors {
        Collectors {
            enabled: TABLE
                .iter()
                .filter(|s| enabled.contains(&s.name))
                .map(|s| (s.name, (s.build)(config)))
                .collect(),
        }
    }

    /// Names of the enabled collectors.
    pub fn names(&self) -> Vec<&'static str> {
        self.enabled.iter().map(|(n, _)| *n).collect()
    }

    /// Run every enabled collector once and return all metrics, including the scrape's own.
    pub fn scrape(&self) -> MetricSet {
        let mut all = MetricSet::new();
        for (name, collector) in &self.enabled {
            let start = Instant::now();
            let mut own = MetricSet::new();
            let outcome = catch_unwind(AssertUnwindSafe(|| collector.update(&mut own)));
            let elapsed = start.elapsed().as_secs_f64();
            let success = match outcome {
                Ok(Ok(())) => {
                    for refused in all.merge(own) {
                        tracing::warn!(collector = name, "{refused}");
                    }
                    true
                }
                Ok(Err(e)) => {
                    tracing::warn!(collector = name, "collector failed: {e:#}");
                    false
                }
                Err(_) => {
                    tracing::error!(collector = name, "collector panicked");
                    false
                }
            };
            let label = || vec![("collector", name.to_string())];
            // These two families are only written here, once per collector: no duplicates.
            let _ = all.add(
                "rdma_scrape_collector_duration_seconds",
                Kind::Gauge,
                || "Time a collector took in this scrape".into(),
                label(),
                Value::Float(elapsed),
            );
            let _ = all.add(
                "rdma_scrape_collector_success",
                Kind::Gauge,
                || "Whether a collector succeeded in this scrape (1) or failed (0)".into(),
                label(),
                Value::Int(u64::from(success)),
            );
        }
        let _ = all.add(
            "rdma_exporter_build",
            Kind::Info,
            || "The version of rdmad that produced these metrics".into(),
            vec![("version", env!("CARGO_PKG_VERSION").to_string())],
            Value::Int(1),
        );
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Format;

    struct Failing;
    impl Collector for Failing {
        fn update(&self, out: &mut MetricSet) -> anyhow::Result<()> {
            out.add(
                "rdma_partial",
                Kind::Gauge,
                String::new,
                vec![],
                Value::Int(1),
            )?;
            anyhow::bail!("boom")
        }
    }

    struct Panicking;
    impl Collector for Panicking {
        fn update(&self, _out: &mut MetricSet) -> anyhow::Result<()> {
            panic!("collector bug")
        }
    }

    struct Fine;
    impl Collector for Fine {
        fn update(&self, out: &mut MetricSet) -> anyhow::Result<()> {
            out.add(
                "rdma_fine",
                Kind::Gauge,
                || "ok".into(),
                vec![],
                Value::Int(2),
            )?;
            Ok(())
        }
    }

    #[test]
    fn failing_and_panicking_collectors_do_not_fail_the_scrape() {
        let collectors = Collectors {
            enabled: vec![
                ("failing", Box::new(Failing)),
                ("panicking", Box::new(Panicking)),
                ("fine", Box::new(Fine)),
            ],
        };
        let text = collectors.scrape().encode(Format::Text);
        assert!(text.contains("rdma_scrape_collector_success{collector=\"failing\"} 0\n"));
        assert!(text.contains("rdma_scrape_collector_success{collector=\"panicking\"} 0\n"));
        assert!(text.contains("rdma_scrape_collector_success{collector=\"fine\"} 1\n"));
        assert!(text.contains("rdma_fine 2\n"), "{text}");
        assert!(
            !text.contains("rdma_partial"),
            "a failed collector's output is dropped"
        );
        assert!(text.contains("rdma_exporter_build_info{version=\""));
    }

    #[test]
    fn table_names_are_unique_and_flag_safe() {
        for (i, s) in TABLE.iter().enumerate() {
            assert!(
                s.name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{}",
                s.name
            );
            assert!(TABLE[..i].iter().all(|o| o.name != s.name), "{}", s.name);
            assert!(spec(s.name).is_some());
        }
    }
}
