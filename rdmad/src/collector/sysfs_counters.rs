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
//! GID tables are not read. The port `hw_counters/` of devices whose counters the
//! `netlink_counters` collector exported in this scrape are not read (only their `lifespan`,
//! the sysfs cache period netlink does not report); every other device, and every device when
//! netlink is off or failed for it, is read whole from sysfs.

use rustc_hash::FxHashMap;

use rdmakit::model::{CounterKind, CounterSource, Snapshot, SourceError, Unit};

use super::{Collector, CollectorConfig, CollectorSpec, Shared};
use rdmakit::catalog::Location;

use crate::metrics::{AddError, Declared, Kind, MetricSet, Value};
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
    build,
};

fn build(config: &CollectorConfig) -> Box<dyn Collector> {
    Box::new(SysfsCounters {
        // Shared with sysfs_info: one read per scrape.
        source: super::sysfs_source(config),
    })
}

struct SysfsCounters {
    source: super::SysfsSource,
}

impl Collector for SysfsCounters {
    fn update(&self, out: &mut MetricSet) -> anyhow::Result<()> {
        self.update_shared(&Shared::default(), out)
    }

    fn update_shared(&self, shared: &Shared, out: &mut MetricSet) -> anyhow::Result<()> {
        let snapshot = shared.sysfs_snapshot(&self.source)?;
        let mut unexported: Vec<(String, String)> = Vec::new();
        // Metric names depend on the source, file name, kind and unit only: computed once
        // per name, not once per device (64 devices of one driver share every name).
        type NameKey<'a> = (CounterSource, CounterKind, Unit, &'a str);
        let mut metric_names: FxHashMap<NameKey<'_>, Option<(String, Kind)>> = FxHashMap::default();
        for device in &snapshot.devices {
            let driver = device.driver.as_deref();
            let port_counters = device
                .ports
                .iter()
                .flat_map(|port| port.counters.iter().map(|c| (c, Some(port.num))));
            let device_counters = device.hw_counters.iter().map(|c| (c, None));
            for (counter, port) in port_counters.chain(device_counters) {
                let metric = metric_names
                    .entry((
                        counter.source,
                        counter.kind,
                        counter.unit,
                        counter.name.as_str(),
                    ))
                    .or_insert_with(|| names::counter_metric_name(counter));
                let Some((name, kind)) = metric else {
                    unexported.push((device.name.clone(), counter.name.clone()));
                    continue;
                };
                // Sized for both labels: no reallocation when the port is pushed.
                let mut labels = Vec::with_capacity(2);
                labels.push(("device", device.name.clone()));
                if let Some(port) = port {
                    labels.push(("port", port.to_string()));
                }
                let result = out.add(
                    name,
                    *kind,
                    || help::counter_help(&device.name, driver, counter),
                    labels,
                    names::counter_metric_value(counter),
                );
                // Two files that map to one name: keep the first, count the second.
                if result.is_err() {
                    unexported.push((device.name.clone(), counter.name.clone()));
                }
            }
        }
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

/// Whether a sysfs error path is inside a counter directory.
pub(crate) fn is_counter_path(path: &str) -> bool {
    path.split('/')
        .any(|part| part == "counters" || part == "hw_counters")
}

/// `rdma_sysfs_read_errors`, written by both sysfs collectors.
pub(crate) const READ_ERRORS: Declared = Declared::gauge(
    "rdma_sysfs_read_errors",
    "Files a collector could not read, parse or export for a device in this scrape",
);

/// Write `rdma_sysfs_read_errors{collector,device}` for every device of the snapshot (0 when
/// clean), counting the errors `relevant` selects (each logged at debug level) plus one per
/// entry of `more` (device names of files the collector could not export).
pub(crate) fn report_read_errors(
    out: &mut MetricSet,
    collector: &'static str,
    snapshot: &Snapshot,
    relevant: impl Fn(&SourceError) -> bool,
    more: &[&str],
) -> Result<(), AddError> {
    let mut counts: Vec<(String, u64)> = snapshot
        .devices
        .iter()
        .map(|d| (d.name.clone(), 0))
        .collect();
    let mut count = |device: &str| match counts.iter_mut().find(|(d, _)| d == device) {
        Some((_, n)) => *n += 1,
        None => counts.push((device.to_string(), 1)),
    };
    for error in snapshot.errors.iter().filter(|e| relevant(e)) {
        tracing::debug!(collector, "{error}");
        count(error.device.as_deref().unwrap_or_default());
    }
    for device in more {
        count(device);
    }
    for (device, n) in counts {
        out.add_declared(
            &READ_ERRORS,
            vec![("collector", collector.to_string()), ("device", device)],
            Value::Int(n),
        )?;
    }
    Ok(())
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
        build(&config).update(&mut out).expect("collects");
        out.encode(Format::Text)
    }

    #[test]
    fn port_hw_counters_exported_by_netlink_are_not_read_again() {
        let config = CollectorConfig::new(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs/rxe"),
            DeviceFilter::all(),
        );
        let shared = Shared::default();
        shared.set_netlink_hw_devices(["rxe0".to_string()].into());
        let mut out = MetricSet::new();
        build(&config)
            .update_shared(&shared, &mut out)
            .expect("collects");
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
    fn counter_paths() {
        assert!(is_counter_path("class/infiniband/x/ports/1/counters/a"));
        assert!(is_counter_path("class/infiniband/x/hw_counters/a"));
        assert!(!is_counter_path("class/infiniband/x/ports/1/state"));
    }
}
