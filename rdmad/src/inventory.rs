//! What rdmad can export, as data: `rdmad --print-metrics json`.
//!
//! Nothing here is a list of its own. The fixed families are the declarations the collectors
//! add samples through ([`crate::collector::CollectorSpec::metrics`] and
//! [`crate::collector::SCRAPE_METRICS`]); the counter families are the counter catalog's
//! entries run through the same naming ([`crate::names`]) and HELP ([`crate::help`]) code as
//! a scrape, with the catalog's kind and unit. Families that take their names from what the
//! kernel reports at run time (a driver file the catalog does not describe, a QP counter) are
//! listed as patterns. The dashboards generator (dashboards/gen.py) and
//! tests/dashboards-check read this instead of re-deriving metric names.
//!
//! JSON shape (`schema` 1):
//!
//! - `metrics`: one entry per exposed family, sorted by name: `name` (as in the text
//!   exposition: `_total` on counters, `_info` on info families), `type` (the `# TYPE`
//!   word), `help`, `series` (the sample names: a histogram's `_bucket`, `_sum`, `_count`),
//!   `collectors` (which collectors add it);
//! - `counters`: one entry per catalog counter that rdmad exports: `family`, `counter` (the
//!   file name), `location`, `metric` (its entry in `metrics`), `type`, `help`;
//! - `patterns`: `collector`, `pattern` for run-time names.

use std::collections::BTreeMap;

use rdmakit::catalog::{Catalog, CounterInfo, Location};
use rdmakit::model::{Counter, CounterSource};
use serde::Serialize;

use crate::collector::{SCRAPE_METRICS, TABLE};
use crate::metrics::Kind;
use crate::{help, names};

/// The schema version of the JSON.
pub const SCHEMA: u32 = 1;

/// Everything rdmad can export.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inventory {
    /// [`SCHEMA`].
    pub schema: u32,
    /// Exposed families, sorted by name.
    pub metrics: Vec<MetricDoc>,
    /// Catalog counters and their families.
    pub counters: Vec<CounterDoc>,
    /// Run-time names.
    pub patterns: Vec<PatternDoc>,
}

/// One exposed family.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricDoc {
    /// The name in the text exposition.
    pub name: String,
    /// `counter`, `gauge` or `histogram` (info families are gauges in the text format).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// HELP (for a counter family several catalog families share: the first one's).
    pub help: String,
    /// The names its samples have.
    pub series: Vec<String>,
    /// The collectors that add it (`scrape`: rdmad itself, for every scrape).
    pub collectors: Vec<&'static str>,
}

/// One catalog counter rdmad exports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CounterDoc {
    /// The catalog family (`ib_pma`, `mlx5`, ...).
    pub family: String,
    /// The sysfs file name.
    pub counter: String,
    /// Where the file is (`port_counters`, `port_hw_counters`, `device_hw_counters`).
    pub location: &'static str,
    /// The exposed family name.
    pub metric: String,
    /// Its `# TYPE`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Its HELP on a device of this family.
    pub help: String,
}

/// A family named at run time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PatternDoc {
    /// The collector.
    pub collector: &'static str,
    /// The name pattern.
    pub pattern: &'static str,
}

/// The sysfs source a catalog location is read from (`None`: rdmad does not read it).
fn source_of(location: Location) -> Option<CounterSource> {
    match location {
        Location::PortCounters => Some(CounterSource::Pma),
        Location::PortHwCounters => Some(CounterSource::Hw),
        Location::DeviceHwCounters => Some(CounterSource::DeviceHw),
        // Optional counters: only the netlink collector reads them, under the hw names.
        Location::PortNetlink => Some(CounterSource::Hw),
        // Not sysfs files: the netdev collector's curated families, named below.
        Location::PortCm | Location::Netdev => None,
    }
}

/// The counter a scrape builds for the catalog entry `info` (value 0), with the catalog's
/// kind and unit; `None` for locations rdmad does not read.
pub fn catalog_counter(info: &CounterInfo) -> Option<Counter> {
    let source = source_of(info.location)?;
    Some(Counter::described(
        info.name.clone().into(),
        source,
        0,
        info.kind,
        info.unit,
    ))
}

/// The sample names of a family exposed as `name`.
fn series(name: &str, kind: Kind) -> Vec<String> {
    match kind {
        Kind::Histogram => ["_bucket", "_sum", "_count"]
            .iter()
            .map(|s| format!("{name}{s}"))
            .collect(),
        Kind::Counter | Kind::Gauge | Kind::Info => vec![name.to_owned()],
    }
}

/// Build the inventory from the collector table and `catalog`.
pub fn inventory(catalog: &Catalog) -> Inventory {
    let mut metrics: BTreeMap<String, MetricDoc> = BTreeMap::new();
    let mut add = |family: &str, kind: Kind, help: String, collector: &'static str| {
        let name = kind.exposed_name(family);
        let entry = metrics.entry(name.clone()).or_insert_with(|| MetricDoc {
            series: series(&name, kind),
            name,
            kind: kind.type_name(),
            help,
            collectors: Vec::new(),
        });
        if !entry.collectors.contains(&collector) {
            entry.collectors.push(collector);
        }
    };
    let mut counters = Vec::new();
    let mut patterns = Vec::new();
    for spec in TABLE {
        for d in spec.metrics {
            add(d.name, d.kind, d.help.to_owned(), spec.name);
        }
        // A port counter that also exists at the device level is exported under both names.
        let device_copies: Vec<rdmakit::catalog::CounterInfo> = catalog
            .counters()
            .iter()
            .filter(|c| c.also_device && c.location == Location::PortHwCounters)
            .map(|c| rdmakit::catalog::CounterInfo {
                location: Location::DeviceHwCounters,
                ..c.clone()
            })
            .collect();
        for info in catalog.counters().iter().chain(device_copies.iter()) {
            if !spec.catalog_counters.contains(&info.location) {
                continue;
            }
            let (family, kind, help) = if info.location == Location::Netdev {
                let (family, kind) = names::netdev_metric_name(info);
                (family, kind, help::netdev_help(info))
            } else {
                let Some(counter) = catalog_counter(info) else {
                    continue;
                };
                let Some((family, kind)) = names::counter_metric_name(&counter) else {
                    continue;
                };
                let help = help::family_counter_help(Some(&info.driver), &counter);
                (family, kind, help)
            };
            add(&family, kind, help.clone(), spec.name);
            let metric = kind.exposed_name(&family);
            if !counters
                .iter()
                .any(|c: &CounterDoc| c.family == info.driver && c.counter == info.name)
            {
                counters.push(CounterDoc {
                    family: info.driver.clone(),
                    counter: info.name.clone(),
                    location: info.location.as_str(),
                    metric,
                    kind: kind.type_name(),
                    help,
                });
            }
        }
        for pattern in spec.patterns {
            patterns.push(PatternDoc {
                collector: spec.name,
                pattern,
            });
        }
    }
    for d in SCRAPE_METRICS
        .iter()
        .chain([&crate::responses::EXPORTER_RESPONSES])
    {
        add(d.name, d.kind, d.help.to_owned(), "scrape");
    }
    Inventory {
        schema: SCHEMA,
        metrics: metrics.into_values().collect(),
        counters,
        patterns,
    }
}

/// The inventory of the embedded catalog as pretty JSON.
pub fn json() -> anyhow::Result<String> {
    let catalog = Catalog::embedded().map_err(|e| anyhow::anyhow!("the counter catalog: {e}"))?;
    let mut text = serde_json::to_string_pretty(&inventory(catalog))?;
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv() -> Inventory {
        inventory(Catalog::embedded().expect("catalog"))
    }

    fn metric<'a>(inv: &'a Inventory, name: &str) -> &'a MetricDoc {
        inv.metrics
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("{name} not in the inventory"))
    }

    #[test]
    fn fixed_families_of_every_collector_and_the_scrape() {
        let inv = inv();
        let runs = metric(&inv, "rdma_probe_runs_total");
        assert_eq!(
            (runs.kind, runs.collectors.as_slice()),
            ("counter", &["probes"][..])
        );
        let lat = metric(&inv, "rdma_probe_latency_seconds");
        assert_eq!(lat.kind, "histogram");
        assert_eq!(
            lat.series,
            [
                "rdma_probe_latency_seconds_bucket",
                "rdma_probe_latency_seconds_sum",
                "rdma_probe_latency_seconds_count"
            ]
        );
        assert_eq!(metric(&inv, "rdma_device_info").kind, "gauge");
        assert_eq!(
            metric(&inv, "rdma_resources").collectors,
            ["netlink_resources"]
        );
        assert_eq!(
            metric(&inv, "rdma_exporter_build_info").collectors,
            ["scrape"]
        );
        let errors = metric(&inv, "rdma_sysfs_read_errors");
        assert_eq!(errors.collectors, ["sysfs_info", "sysfs_counters"]);
        for spec in TABLE {
            assert!(
                inv.metrics
                    .iter()
                    .any(|m| m.collectors.contains(&spec.name)),
                "{} declares nothing",
                spec.name
            );
        }
    }

    #[test]
    fn every_family_a_scrape_of_the_fixture_trees_adds_is_in_the_inventory() {
        use crate::collector::{CollectorConfig, Collectors};
        use rdmakit::sysfs::DeviceFilter;

        let inv = inv();
        let fixtures =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs");
        let all: Vec<&str> = TABLE.iter().map(|s| s.name).collect();
        let mut families = 0;
        for entry in std::fs::read_dir(&fixtures).expect("the fixture trees") {
            let root = entry.unwrap().path();
            if !root.join("class").is_dir() {
                continue;
            }
            let config = CollectorConfig::new(&root, DeviceFilter::all());
            let set = Collectors::new(&config, &all).scrape();
            for name in set.names() {
                let kind = set.family(name).expect("listed").kind();
                let exposed = kind.exposed_name(name);
                assert!(
                    inv.metrics
                        .iter()
                        .any(|m| m.name == exposed && m.kind == kind.type_name()),
                    "{}: {exposed} ({}) is not in the inventory",
                    root.display(),
                    kind.type_name()
                );
                families += 1;
            }
        }
        assert!(families > 100, "only {families} families seen");
    }

    #[test]
    fn catalog_counters_carry_the_catalog_kind() {
        let inv = inv();
        let fifo = inv
            .counters
            .iter()
            .find(|c| c.family == "bnxt_re" && c.counter == "db_fifo_register")
            .expect("bnxt_re db_fifo_register");
        assert_eq!(fifo.metric, "rdma_port_hw_db_fifo_register");
        assert_eq!(fifo.kind, "gauge");
        let data = inv
            .counters
            .iter()
            .find(|c| c.family == "ib_pma" && c.counter == "port_xmit_data")
            .expect("ib_pma port_xmit_data");
        assert_eq!(data.metric, "rdma_port_xmit_data_bytes_total");
        assert!(data.help.contains("exported in bytes"), "{}", data.help);
        let netlink = metric(&inv, "rdma_port_hw_sent_pkts_total");
        assert_eq!(netlink.collectors, ["netlink_counters", "sysfs_counters"]);
        // Every catalog counter but the ib_cm ones (not read by rdmad) is there, once.
        let catalog = Catalog::embedded().unwrap();
        let read = catalog
            .counters()
            .iter()
            .filter(|c| c.location != Location::PortCm)
            .count();
        assert_eq!(inv.counters.len(), read);
        for c in &inv.counters {
            let m = metric(&inv, &c.metric);
            assert_eq!(m.kind, c.kind, "{}/{}", c.family, c.counter);
        }
    }
}
