//! The `sysfs_counters` collector: EVERY counter file of every kept device, whatever the
//! driver.
//!
//! Names follow [`crate::names`]: IB PMA files (`ports/<n>/counters/`) become
//! `rdma_port_<name>_total{device,port}` (data in bytes), driver files
//! (`ports/<n>/hw_counters/`) `rdma_port_hw_<name>_total{device,port}`, device-level driver
//! files (`hw_counters/`) `rdma_device_hw_<name>_total{device}`; gauges drop `_total`. HELP
//! text comes from the counter catalog ([`crate::help`]).
//!
//! Files that cannot be read or parsed (EINVAL, `N/A (no PMA)`, garbage, a directory) and
//! files whose names cannot be exported (empty after sanitizing, or colliding with another
//! file's metric) are counted in `rdma_sysfs_read_errors{collector="sysfs_counters",device}`,
//! reported every scrape (0 when all is well), and logged at debug level with their path.
//! The device filter is applied by the sysfs reader before any file of a device is opened;
//! It exports the scrape's sysfs snapshot ([`Scrape::sysfs_snapshot`]): when an enabled
//! collector exports the port hw counters RDMA netlink serves, the snapshot leaves out the port
//! `hw_counters/` of the devices netlink serves in this scrape (all but their `lifespan`, the
//! sysfs cache period netlink does not report); every other device, and every device when no
//! such collector is enabled or netlink failed for it, is read whole from sysfs.

use std::sync::Mutex;

use rustc_hash::FxHashMap;

use rdmakit::model::{Counter, CounterKind, CounterSource, Unit};

use super::scrape::{is_counter_path, report_read_errors, READ_ERRORS};
use super::{Collector, CollectorConfig, CollectorSpec, Reads, Scrape};
use rdmakit::catalog::Location;

use crate::metrics::{Kind, MetricSet};
use crate::{help, names};

/// The table row.
pub const SPEC: CollectorSpec = CollectorSpec {
    name: "sysfs_counters",
    help: "every file of counters/ and hw_counters/ (port and device level) from sysfs",
    default_enabled: true,
    metrics: &[READ_ERRORS],
    catalog_counters: &[
        Location::PortCounters,
        Location::PortHwCounters,
        Location::DeviceHwCounters,
    ],
    patterns: &[
        "rdma_port_<file>_total",
        "rdma_port_hw_<file>_total",
        "rdma_device_hw_<file>_total",
    ],
    options: &[],
    reads: Reads {
        sysfs_counters: true,
        ..Reads::NOTHING
    },
    build,
};

fn build(_config: &CollectorConfig) -> Box<dyn Collector> {
    Box::new(SysfsCounters {
        names: Mutex::new(Names::default()),
    })
}

struct SysfsCounters {
    /// How each counter file is exported, kept across scrapes (see [`Names`]).
    names: Mutex<Names>,
}

/// The most counter names [`Names`] keeps: far more than any device has files (a few
/// hundred per driver), so only a tree whose file names keep changing ever clears it.
const MAX_NAMES: usize = 16_384;

/// How a counter file is exported: its family name, type and HELP. They depend on the
/// file's source, kind, unit, name and the device's catalog family only, so they are
/// computed once per file name and driver for the life of the daemon, not on every scrape
/// (64 devices of one driver share every name).
#[derive(Default)]
struct Names {
    /// By (source, kind, unit, catalog family), then file name; `None`: no usable name.
    by_key: FxHashMap<NameKey, FxHashMap<Box<str>, Option<Named>>>,
    len: usize,
}

type NameKey = (CounterSource, CounterKind, Unit, Option<&'static str>);

struct Named {
    name: String,
    kind: Kind,
    help: String,
}

impl Names {
    /// How `counter` of a device of the catalog family `family` is exported.
    fn get(&mut self, family: Option<&'static str>, counter: &Counter) -> Option<&Named> {
        let key = (counter.source, counter.kind, counter.unit, family);
        let known = self
            .by_key
            .get(&key)
            .is_some_and(|files| files.contains_key(&*counter.name));
        if !known {
            // Devices and drivers come and go: the cache never grows without bound.
            if self.len >= MAX_NAMES {
                self.by_key.clear();
                self.len = 0;
            }
            let named = names::counter_metric_name(counter).map(|(name, kind)| Named {
                name,
                kind,
                help: help::family_counter_help(family, counter),
            });
            self.by_key
                .entry(key)
                .or_default()
                .insert((*counter.name).into(), named);
            self.len += 1;
        }
        self.by_key
            .get(&key)
            .and_then(|files| files.get(&*counter.name))
            .and_then(Option::as_ref)
    }
}

impl Collector for SysfsCounters {
    fn update(&self, scrape: &Scrape, out: &mut MetricSet) -> anyhow::Result<()> {
        let snapshot = scrape.sysfs_snapshot()?;
        let mut unexported: Vec<(String, String)> = Vec::new();
        // A panic elsewhere while holding it leaves only a cache behind: use it anyway.
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        for device in &snapshot.devices {
            let driver = device.driver.as_deref();
            let family = |source| help::counter_family(&device.name, driver, source);
            let families = [
                family(CounterSource::Pma),
                family(CounterSource::Hw),
                family(CounterSource::DeviceHw),
            ];
            let port_counters = device
                .ports
                .iter()
                .flat_map(|port| port.counters.iter().map(|c| (c, Some(port.num))));
            let device_counters = device.hw_counters.iter().map(|c| (c, None));
            let mut port_text = itoa::Buffer::new();
            for (counter, port) in port_counters.chain(device_counters) {
                let family = families[match counter.source {
                    CounterSource::Pma => 0,
                    CounterSource::Hw => 1,
                    CounterSource::DeviceHw => 2,
                }];
                let Some(named) = names.get(family, counter) else {
                    unexported.push((device.name.clone(), counter.name.to_string()));
                    continue;
                };
                let value = names::counter_metric_value(counter);
                let help = || named.help.clone();
                let result = match port {
                    Some(port) => out.add_labels(
                        &named.name,
                        named.kind,
                        help,
                        &[
                            ("device", device.name.as_str()),
                            ("port", port_text.format(port)),
                        ],
                        value,
                    ),
                    None => out.add_labels(
                        &named.name,
                        named.kind,
                        help,
                        &[("device", device.name.as_str())],
                        value,
                    ),
                };
                // Two files that map to one name: keep the first, count the second.
                if result.is_err() {
                    unexported.push((device.name.clone(), counter.name.to_string()));
                }
            }
        }
        drop(names);
        for (device, file) in &unexported {
            tracing::debug!(device, file, "counter file has no usable metric name");
        }
        let unexported: Vec<&str> = unexported.iter().map(|(d, _)| d.as_str()).collect();
        report_read_errors(
            out,
            SPEC.name,
            snapshot,
            |e| is_counter_path(&e.path),
            &unexported,
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Format;
    use rdmakit::sysfs::DeviceFilter;
    use std::path::PathBuf;

    fn scrape(fixture: &str, filter: DeviceFilter) -> String {
        let config = CollectorConfig::new(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/fixtures/sysfs")
                .join(fixture),
            filter,
        );
        let mut out = MetricSet::new();
        build(&config)
            .update(&Scrape::of(&config, [&SPEC]), &mut out)
            .expect("collects");
        out.encode(Format::Text)
    }

    #[test]
    fn port_hw_counters_exported_by_netlink_are_not_read_again() {
        let config = CollectorConfig::new(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs/rxe"),
            DeviceFilter::all(),
        );
        let scrape = Scrape::of(&config, [&SPEC])
            .with_netlink_port_hw(crate::collector::NetlinkPortHw::serving(&["rxe0"]));
        let mut out = MetricSet::new();
        build(&config).update(&scrape, &mut out).expect("collects");
        let text = out.encode(Format::Text);
        assert!(!text.contains("rdma_port_hw_sent_pkts_total"), "{text}");
        assert!(
            text.contains("rdma_port_hw_lifespan_seconds{device=\"rxe0\",port=\"1\"}"),
            "{text}"
        );
    }

    #[test]
    fn every_rxe_file_is_exported() {
        let text = scrape("rxe", DeviceFilter::all());
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/sysfs/rxe/class/infiniband/rxe0/ports/1/hw_counters");
        let mut files = 0;
        for entry in std::fs::read_dir(dir).expect("fixture exists") {
            let name = entry.unwrap().file_name().into_string().unwrap();
            files += 1;
            let metric = if name == "lifespan" {
                "rdma_port_hw_lifespan_seconds{".to_string()
            } else {
                format!("rdma_port_hw_{name}_total{{device=\"rxe0\",port=\"1\"}} ")
            };
            assert!(text.contains(&metric), "{name} missing:\n{text}");
        }
        assert_eq!(files, 16);
        assert!(text
            .contains("rdma_sysfs_read_errors{collector=\"sysfs_counters\",device=\"rxe0\"} 0\n"));
    }

    #[test]
    fn quirks_are_counted_not_fatal() {
        let text = scrape("quirks", DeviceFilter::all());
        // mlx5_0: VL15_dropped N/A, link_downed and port_rcv_errors garbage,
        // hw_counters/out_of_buffer a directory, hw_counters/oversized too large.
        assert!(
            text.contains(
                "rdma_sysfs_read_errors{collector=\"sysfs_counters\",device=\"mlx5_0\"} 5\n"
            ),
            "{text}"
        );
        assert!(text.contains("rdma_port_symbol_error_total{device=\"mlx5_0\",port=\"1\"}"));
        assert!(!text.contains("rdma_port_vl15_dropped_total{device=\"mlx5_0\""));
    }

    #[test]
    fn excluded_devices_are_absent() {
        let filter = DeviceFilter::new(None, Some("mlx5_1")).unwrap();
        let text = scrape("mlx5-roce", filter);
        assert!(text.contains("device=\"mlx5_0\""));
        assert!(!text.contains("device=\"mlx5_1\""), "{text}");
    }

    #[test]
    fn device_level_counters_and_odd_names() {
        let text = scrape("hfi1", DeviceFilter::all());
        assert!(
            text.contains("rdma_device_hw_rcv_overflow_total{device=\"hfi1_0\"}"),
            "{text}"
        );
        assert!(text.contains("# HELP rdma_device_hw_rcv_overflow_total Packets dropped"));
        assert!(text.contains("rdma_device_hw_lifespan_seconds{device=\"hfi1_0\"}"));
    }

    #[test]
    fn names_are_kept_across_scrapes_and_bounded() {
        let mut names = Names::default();
        for i in 0..MAX_NAMES + 10 {
            let counter = Counter::new(format!("file_{i}"), CounterSource::Hw, 1);
            let named = names.get(Some("rxe"), &counter).expect("a usable name");
            assert_eq!(named.name, format!("rdma_port_hw_file_{i}"));
            assert!(names.len <= MAX_NAMES, "{}", names.len);
        }
        let counter = Counter::new("sent_pkts", CounterSource::Hw, 1);
        let named = names.get(Some("rxe"), &counter).expect("a usable name");
        assert_eq!(named.help, help::counter_help("rxe0", None, &counter));
        assert_eq!(named.kind, Kind::Counter);
        // The same file of another catalog family has that family's HELP.
        let other = names.get(None, &counter).expect("a usable name");
        assert!(
            other.help.starts_with("Driver counter, not described"),
            "{}",
            other.help
        );
        assert!(names
            .get(None, &Counter::new("___", CounterSource::Hw, 1))
            .is_none());
    }

    #[test]
    fn a_scrape_with_names_kept_from_the_last_one_is_the_same() {
        let config = CollectorConfig::new(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs/quirks"),
            DeviceFilter::all(),
        );
        let collector = build(&config);
        let scrape = || {
            let mut out = MetricSet::new();
            collector
                .update(&Scrape::of(&config, [&SPEC]), &mut out)
                .expect("collects");
            out.encode(Format::Text)
        };
        let first = scrape();
        assert!(
            first.contains("# HELP rdma_port_symbol_error_total "),
            "{first}"
        );
        assert_eq!(first, scrape());
    }

    #[test]
    fn counter_paths() {
        assert!(is_counter_path("class/infiniband/x/ports/1/counters/a"));
        assert!(is_counter_path("class/infiniband/x/hw_counters/a"));
        assert!(!is_counter_path("class/infiniband/x/ports/1/state"));
    }
}
