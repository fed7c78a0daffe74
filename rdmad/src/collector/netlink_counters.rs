//! The `netlink_counters` collector: port hw counters from RDMA netlink (`STAT_GET`, what
//! `rdma statistic show` prints) in place of reading `ports/<n>/hw_counters/` file by file.
//!
//! Same metric names, HELP and values as the sysfs files (`rdma_port_hw_<name>_total{device,port}`,
//! see [`crate::names`]), so dashboards do not care which source a device was read from. One
//! request per port returns every counter at once, read fresh by the driver. Optional
//! (dynamic) counters are in the answer only while enabled, so they are exported only while
//! enabled; rdmad never enables or disables anything.
//!
//! Which devices: those the device filter keeps that exist both in RDMA netlink and under
//! `--path.sysfs` (the sysfs tree decides the device set, as for every other collector).
//! When any port of a device fails (old kernel, a driver without `STAT_GET` support, a
//! device going away), the device is left to the sysfs snapshot, which then reads its
//! `hw_counters/` files: the fallback is per device and logged at debug level. The answers
//! are the scrape's ([`Scrape::netlink_port_hw`], asked once per scrape): the sysfs snapshot
//! leaves out the port hw counters of the devices they serve, because this collector
//! declares that it exports them ([`super::Reads::netlink_port_hw`]). No RDMA netlink in the kernel means nothing to do, not a failure.
//!
//! `rdma_optional_counter_enabled{device,port,counter}` (`STAT_GET_STATUS`, what `rdma
//! statistic show link DEV/PORT optional-counters` lists): 1 for each optional counter that is
//! on, 0 for each that is off; absent when the driver has none, so a counter that is
//! "disabled", "unsupported" and "zero" read differently.
//!
//! When `--path.sysfs` is a copy of another machine's tree, disable this collector: netlink
//! always reads the running kernel.

use rdmakit::catalog::{Catalog, Location};
use rdmakit::model::{Counter, CounterSource};
use rdmakit::nldev::PortHwCounters;
use rdmakit::sysfs::SysfsReader;
use std::path::PathBuf;

use super::{Collector, CollectorConfig, CollectorSpec, Reads, Scrape};
use crate::metrics::{Declared, MetricSet, Value};
use crate::{help, names};

/// The table row.
pub const SPEC: CollectorSpec = CollectorSpec {
    name: "netlink_counters",
    help: "port hw counters from RDMA netlink STAT_GET (as `rdma statistic show`) instead of sysfs hw_counters/ files; sysfs per device when netlink fails",
    default_enabled: true,
    metrics: &[OPTIONAL_ENABLED],
    catalog_counters: &[Location::PortHwCounters, Location::PortNetlink],
    patterns: &["rdma_port_hw_<counter>_total"],
    options: &[],
    reads: Reads {
        netlink_port_hw: true,
        ..Reads::NOTHING
    },
    build,
};

const OPTIONAL_ENABLED: Declared = Declared::gauge(
    "rdma_optional_counter_enabled",
    "Whether an optional (dynamic) hw counter of the port is enabled (1) or not (0); absent: the driver has no such counter",
);

fn build(config: &CollectorConfig) -> Box<dyn Collector> {
    Box::new(NetlinkCounters {
        sysfs: config.sysfs.clone(),
    })
}

struct NetlinkCounters {
    /// The sysfs root, for the devices' drivers.
    sysfs: PathBuf,
}

impl Collector for NetlinkCounters {
    fn update(&self, scrape: &Scrape, out: &mut MetricSet) -> anyhow::Result<()> {
        // Read by the scrape, once: the sysfs snapshot leaves out what it serves.
        let Some(hw) = scrape.netlink_port_hw()? else {
            return Ok(());
        };
        for device in &hw.devices {
            for status in &device.optional {
                export_optional(out, status)?;
            }
            if device.counters.is_empty() {
                continue;
            }
            // Kind, unit and HELP from the catalog family of the device's driver, as
            // the sysfs counters get it, so that both sources give one name.
            let driver = SysfsReader::new(&self.sysfs).device_driver(&device.name);
            for answer in &device.counters {
                export_port(out, answer, driver.as_deref())?;
            }
        }
        Ok(())
    }
}

/// Export one port's `STAT_GET_STATUS` answer: enabled (1) or not (0) per optional counter.
pub(crate) fn export_optional(out: &mut MetricSet, status: &PortHwCounters) -> anyhow::Result<()> {
    for hw in &status.counters {
        let Some(enabled) = hw.enabled else { continue };
        let labels = vec![
            ("device", status.dev_name.clone()),
            ("port", status.port.to_string()),
            ("counter", hw.name.clone()),
        ];
        if let Err(e) = out.add_declared(&OPTIONAL_ENABLED, labels, Value::Int(u64::from(enabled)))
        {
            tracing::debug!(device = status.dev_name, counter = hw.name, "{e}");
        }
    }
    Ok(())
}

/// Export one port's `STAT_GET` answer under the sysfs names. Counters reported as disabled
/// are skipped (the kernel leaves them out anyway).
pub(crate) fn export_port(
    out: &mut MetricSet,
    answer: &PortHwCounters,
    driver: Option<&str>,
) -> anyhow::Result<()> {
    let catalog = Catalog::embedded().ok();
    let family = catalog.and_then(|c| c.family_of(CounterSource::Hw, &answer.dev_name, driver));
    for hw in &answer.counters {
        let (Some(value), false) = (hw.value, hw.enabled == Some(false)) else {
            continue;
        };
        // The catalog's kind and unit (the file-name guess for a counter it does not know).
        let counter = match catalog {
            Some(catalog) => {
                let (kind, unit) = catalog.kind_and_unit(family, CounterSource::Hw, &hw.name);
                Counter::described(
                    hw.name.as_str().into(),
                    CounterSource::Hw,
                    value,
                    kind,
                    unit,
                )
            }
            None => Counter::new(hw.name.clone(), CounterSource::Hw, value),
        };
        let Some(metric) = names::counter_metric(&counter) else {
            tracing::debug!(
                device = answer.dev_name,
                counter = hw.name,
                "no usable metric name"
            );
            continue;
        };
        let labels = vec![
            ("device", answer.dev_name.clone()),
            ("port", answer.port.to_string()),
        ];
        let added = out.add(
            &metric.name,
            metric.kind,
            || help::counter_help(&answer.dev_name, driver, &counter),
            labels,
            metric.value,
        );
        if let Err(e) = added {
            // Two counters sanitizing to one name: keep the first, as for the sysfs files.
            tracing::debug!(device = answer.dev_name, counter = hw.name, "{e}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Format;
    use rdmakit::nldev::HwCounter;

    fn hw(name: &str, value: Option<u64>, enabled: Option<bool>) -> HwCounter {
        HwCounter {
            name: name.into(),
            value,
            index: None,
            enabled,
        }
    }

    #[test]
    fn netlink_counters_get_the_sysfs_names_and_disabled_ones_are_skipped() {
        let answer = PortHwCounters {
            dev_index: 3,
            dev_name: "rxe_a".into(),
            port: 1,
            counters: vec![
                hw("sent_pkts", Some(41), None),
                hw("cc_rx_ce_pkts", Some(7), Some(true)),
                hw("cc_rx_cnp_pkts", Some(9), Some(false)),
                hw("RxDmaErr", Some(1), None),
            ],
        };
        let mut out = MetricSet::new();
        export_port(&mut out, &answer, None).unwrap();
        let text = out.encode(Format::Text);
        assert!(
            text.contains("rdma_port_hw_sent_pkts_total{device=\"rxe_a\",port=\"1\"} 41\n"),
            "{text}"
        );
        assert!(text.contains("rdma_port_hw_cc_rx_ce_pkts_total{device=\"rxe_a\",port=\"1\"} 7\n"));
        assert!(
            !text.contains("cc_rx_cnp_pkts"),
            "disabled optional counter exported"
        );
        assert!(text.contains("rdma_port_hw_rx_dma_err_total{"));
        assert!(
            text.contains("# HELP rdma_port_hw_sent_pkts_total RoCE packets"),
            "HELP from the catalog, as for sysfs: {text}"
        );
    }

    #[test]
    fn optional_counters_say_enabled_or_disabled() {
        let status = PortHwCounters {
            dev_index: 1,
            dev_name: "mlx5_0".into(),
            port: 1,
            counters: vec![
                hw("cc_rx_ce_pkts", None, Some(true)),
                hw("cc_rx_cnp_pkts", None, Some(false)),
                hw("mandatory", None, None),
            ],
        };
        let mut out = MetricSet::new();
        export_optional(&mut out, &status).unwrap();
        let text = out.encode(Format::Text);
        assert!(text.contains(
            "rdma_optional_counter_enabled{device=\"mlx5_0\",port=\"1\",counter=\"cc_rx_ce_pkts\"} 1\n"
        ));
        assert!(text.contains(
            "rdma_optional_counter_enabled{device=\"mlx5_0\",port=\"1\",counter=\"cc_rx_cnp_pkts\"} 0\n"
        ));
        assert!(!text.contains("mandatory"), "{text}");
    }

    #[test]
    fn kind_and_unit_come_from_the_catalog_family_of_the_driver() {
        // bnxt_re's db_fifo_register is a gauge in the catalog (the file name says nothing).
        let answer = |dev: &str| PortHwCounters {
            dev_index: 1,
            dev_name: dev.into(),
            port: 1,
            counters: vec![hw("db_fifo_register", Some(5), None)],
        };
        let mut out = MetricSet::new();
        export_port(&mut out, &answer("bnxt_re0"), None).unwrap();
        let text = out.encode(Format::Text);
        assert!(
            text.contains("# TYPE rdma_port_hw_db_fifo_register gauge\n"),
            "{text}"
        );
        // A renamed device is matched by its driver (HELP from the mlx5 entry).
        let renamed = PortHwCounters {
            counters: vec![hw("out_of_buffer", Some(2), None)],
            ..answer("rocep3s0f0")
        };
        let mut out = MetricSet::new();
        export_port(&mut out, &renamed, Some("mlx5_core")).unwrap();
        let text = out.encode(Format::Text);
        assert!(
            text.contains("# HELP rdma_port_hw_out_of_buffer_total ")
                && !text.contains("not described"),
            "{text}"
        );
        let mut out = MetricSet::new();
        export_port(&mut out, &answer("mlx5_0"), Some("mlx5_core")).unwrap();
        let text = out.encode(Format::Text);
        assert!(
            text.contains("# TYPE rdma_port_hw_db_fifo_register_total counter\n"),
            "not described for mlx5: the file-name guess\n{text}"
        );
    }

    #[test]
    fn without_rdma_netlink_nothing_is_exported_and_nothing_is_served() {
        // On the build host there is no RDMA netlink (or no device named like the fixture's).
        let config = CollectorConfig::new(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs/mlx5-ib"),
            DeviceFilter::all(),
        );
        let scrape = Scrape::of(&config, [&SPEC]);
        let mut out = MetricSet::new();
        let result = build(&config).update(&scrape, &mut out);
        if result.is_ok() {
            let served = scrape.netlink_port_hw().unwrap();
            assert!(!served.is_some_and(|hw| hw.serves("mlx5_0")));
            assert_eq!(out.names().count(), 0);
        }
    }

    #[test]
    fn a_device_netlink_does_not_serve_keeps_only_its_optional_counters() {
        use crate::collector::{NetlinkPortHw, NetlinkPortHwDevice};
        let config = CollectorConfig::new("/nonexistent", DeviceFilter::all());
        let answer = |dev: &str, counters| PortHwCounters {
            dev_index: 1,
            dev_name: dev.into(),
            port: 1,
            counters,
        };
        let hw = NetlinkPortHw {
            devices: vec![
                NetlinkPortHwDevice {
                    name: "rxe0".into(),
                    optional: vec![answer("rxe0", vec![hw("cc_rx_ce_pkts", None, Some(true))])],
                    counters: vec![answer("rxe0", vec![hw("sent_pkts", Some(41), None)])],
                },
                // A port failed STAT_GET: its counters are the sysfs snapshot's.
                NetlinkPortHwDevice {
                    name: "rxe1".into(),
                    optional: vec![answer("rxe1", vec![hw("cc_rx_ce_pkts", None, Some(false))])],
                    counters: Vec::new(),
                },
            ],
        };
        assert!(hw.serves("rxe0") && !hw.serves("rxe1"));
        let scrape = Scrape::of(&config, [&SPEC]).with_netlink_port_hw(hw);
        let mut out = MetricSet::new();
        build(&config).update(&scrape, &mut out).unwrap();
        let text = out.encode(Format::Text);
        assert!(
            text.contains("rdma_port_hw_sent_pkts_total{device=\"rxe0\",port=\"1\"} 41\n"),
            "{text}"
        );
        assert!(
            !text.contains("rdma_port_hw_sent_pkts_total{device=\"rxe1\""),
            "{text}"
        );
        for (dev, on) in [("rxe0", 1), ("rxe1", 0)] {
            let line = format!(
                "rdma_optional_counter_enabled{{device=\"{dev}\",port=\"1\",counter=\"cc_rx_ce_pkts\"}} {on}\n"
            );
            assert!(text.contains(&line), "{text}");
        }
    }

    use rdmakit::sysfs::DeviceFilter;
    use std::path::PathBuf;
}
