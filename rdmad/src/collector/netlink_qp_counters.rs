//! The `netlink_qp_counters` collector: bound QP counters (RDMA netlink `STAT_GET` with
//! `STAT_RES` = QP, what `rdma statistic qp show` prints), only where the administrator
//! turned QP counter mode on.
//!
//! - `rdma_qp_<name>_total{device,port,counter_id[,qp_type]}`: every counter of every bound
//!   counter; `qp_type` is there when the counter was allocated by QP type (auto mode
//!   `qp_type`). Names follow [`crate::names::qp_counter_metric`].
//! - `rdma_qp_counter_bound_qps{device,port,counter_id}`: how many QPs the counter counts.
//! - `rdma_qp_counter_mode{device,port,mode}` (value 1): the port's QP counter mode
//!   (`none`, `auto`, `manual`); absent when the port cannot say (no QP counter support), so
//!   "off" and "unsupported" differ.
//!
//! Per port, one mode query first: a port in mode `none` is skipped without dumping
//! anything, so a host where nobody enabled QP counters gets no series and pays one small
//! request per port. rdmad never changes the mode or binds a QP (no `STAT_SET` exists in
//! rdmakit). QP numbers, PIDs and process names are not exported (cardinality; they are in
//! `rdma statistic qp show`). A port that cannot answer (a driver without QP counters) is
//! skipped at debug level. Devices: the ones the filter keeps that exist under
//! `--path.sysfs`; no RDMA netlink means nothing to do.

use rdmakit::nldev::ids::counter_mode;
use rdmakit::nldev::BoundCounter;
use rdmakit::sysfs::DeviceFilter;

use super::{Collector, CollectorConfig, CollectorSpec, Reads, Scrape};
use crate::metrics::{Declared, MetricSet, Value};
use crate::names;

/// The families this collector adds (all of them: see [`CollectorSpec::metrics`]).
const QP_COUNTER_BOUND_QPS: Declared = Declared::gauge(
    "rdma_qp_counter_bound_qps",
    "QPs bound to the QP counter now",
);

const QP_COUNTER_MODE: Declared = Declared::gauge(
    "rdma_qp_counter_mode",
    "The port's QP counter mode (none, auto, manual) as rdma statistic qp mode says (value 1)",
);

/// The name of a QP counter mode (`enum rdma_nl_counter_mode`).
fn mode_name(mode: u32) -> String {
    match mode {
        counter_mode::NONE => "none".to_string(),
        counter_mode::AUTO => "auto".to_string(),
        counter_mode::MANUAL => "manual".to_string(),
        other => other.to_string(),
    }
}

/// The table row.
pub const SPEC: CollectorSpec = CollectorSpec {
    name: "netlink_qp_counters",
    help: "bound QP counters (rdma statistic qp show) as rdma_qp_<name>_total, only on ports where an administrator enabled QP counter mode",
    default_enabled: true,
    metrics: &[QP_COUNTER_BOUND_QPS, QP_COUNTER_MODE],
    catalog_counters: &[],
    patterns: &["rdma_qp_<counter>_total"],
    options: &[],
    reads: Reads::NOTHING,
    build,
};

fn build(config: &CollectorConfig) -> Box<dyn Collector> {
    Box::new(NetlinkQpCounters {
        filter: config.filter.clone(),
    })
}

struct NetlinkQpCounters {
    filter: DeviceFilter,
}

impl Collector for NetlinkQpCounters {
    fn update(&self, scrape: &Scrape, out: &mut MetricSet) -> anyhow::Result<()> {
        let in_sysfs = scrape.sysfs_device_names()?;
        scrape.netlink(|netlink| {
            for dev in netlink.devices()? {
                if !self.filter.keeps(&dev.name) || !in_sysfs.contains(&dev.name) {
                    continue;
                }
                let client = netlink.client();
                for port in 1..=dev.port_count.unwrap_or(1) {
                    let mode = match client.qp_counter_mode(dev.index, &dev.name, port) {
                        Ok(mode) => mode,
                        Err(e) => {
                            tracing::debug!(device = dev.name, port, "QP counter mode: {e}");
                            continue;
                        }
                    };
                    out.add_declared(
                        &QP_COUNTER_MODE,
                        vec![
                            ("device", dev.name.clone()),
                            ("port", port.to_string()),
                            ("mode", mode_name(mode.mode)),
                        ],
                        Value::Int(1),
                    )?;
                    if mode.mode == counter_mode::NONE {
                        continue;
                    }
                    match client.qp_counters(dev.index, &dev.name, port) {
                        Ok(bound) => {
                            for counter in &bound {
                                export_bound(out, counter, port)?;
                            }
                        }
                        Err(e) => tracing::debug!(device = dev.name, port, "QP counters: {e}"),
                    }
                }
            }
            Ok(())
        })?;
        Ok(())
    }
}

/// Export one bound counter of `port` (the port the dump was asked for, when the answer
/// does not say).
pub(crate) fn export_bound(
    out: &mut MetricSet,
    counter: &BoundCounter,
    port: u32,
) -> anyhow::Result<()> {
    let port = counter.port.unwrap_or(port).to_string();
    let id = counter.counter_id.to_string();
    let base = || {
        vec![
            ("device", counter.dev_name.clone()),
            ("port", port.clone()),
            ("counter_id", id.clone()),
        ]
    };
    for hw in &counter.counters {
        let Some(value) = hw.value else { continue };
        let Some(metric) = names::qp_counter_metric(&hw.name, value) else {
            continue;
        };
        let mut labels = base();
        if let Some(qp_type) = counter.qp_type {
            labels.push(("qp_type", qp_type.name().to_string()));
        }
        let name = hw.name.clone();
        if let Err(e) = out.add(
            &metric.name,
            metric.kind,
            || format!("QP counter {name}, summed over the QPs bound to the counter (rdma statistic qp show)"),
            labels,
            metric.value,
        ) {
            tracing::debug!(device = counter.dev_name, counter = hw.name, "{e}");
        }
    }
    out.add_declared(
        &QP_COUNTER_BOUND_QPS,
        base(),
        Value::Int(counter.lqpns.len() as u64),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Format;
    use rdmakit::nldev::{HwCounter, QpType};

    fn bound(id: u32, qp_type: Option<u8>, lqpns: Vec<u32>) -> BoundCounter {
        BoundCounter {
            dev_index: 1,
            dev_name: "mlx5_0".into(),
            port: None,
            counter_id: id,
            qp_type: qp_type.map(QpType),
            pid: Some(4242),
            kern_name: None,
            counters: vec![
                HwCounter {
                    name: "rx_write_requests".into(),
                    value: Some(12),
                    index: None,
                    enabled: None,
                },
                HwCounter {
                    name: "out_of_sequence".into(),
                    value: Some(3),
                    index: None,
                    enabled: None,
                },
            ],
            lqpns,
        }
    }

    #[test]
    fn bound_counters_become_rdma_qp_series() {
        let mut out = MetricSet::new();
        export_bound(&mut out, &bound(4, Some(2), vec![17, 18]), 1).unwrap();
        export_bound(&mut out, &bound(5, None, vec![19]), 1).unwrap();
        let text = out.encode(Format::Text);
        assert!(
            text.contains("rdma_qp_rx_write_requests_total{device=\"mlx5_0\",port=\"1\",counter_id=\"4\",qp_type=\"RC\"} 12\n"),
            "{text}"
        );
        assert!(text.contains(
            "rdma_qp_out_of_sequence_total{device=\"mlx5_0\",port=\"1\",counter_id=\"5\"} 3\n"
        ));
        assert!(text.contains(
            "rdma_qp_counter_bound_qps{device=\"mlx5_0\",port=\"1\",counter_id=\"4\"} 2\n"
        ));
        // Neither QP numbers nor the owner's PID become labels.
        assert!(!text.contains("4242") && !text.contains("\"17\""), "{text}");
    }
}
