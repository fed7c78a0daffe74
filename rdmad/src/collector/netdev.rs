//! The `netdev` collector: the driver statistics (`ethtool -S`) of the network device under
//! every RDMA port, and of the slaves of a bond under it.
//!
//! - curated families, one per entry of the catalog's `netdev` family (meaning, kind and unit
//!   come from `catalog/netdev.toml`; which driver statistic feeds which family is
//!   `rdmakit::ethtool::curated`): `rdma_netdev_pause_frames_total{device,port,netdev,
//!   direction,priority}`, `rdma_netdev_pause_duration_seconds_total{...}`,
//!   `rdma_netdev_discards_total{device,port,netdev,direction,reason}`,
//!   `rdma_netdev_crc_errors_total`, `rdma_netdev_symbol_errors_total`,
//!   `rdma_netdev_link_down_events_total` (`{device,port,netdev}`);
//! - every other driver statistic as `rdma_netdev_ethtool_stat{device,port,netdev,stat}`
//!   (the driver's own name in `stat`; a gauge, since ethtool does not say which are
//!   counters), at most [`MAX_STATS`] per netdev in the driver's order, the rest counted in
//!   `rdma_netdev_ethtool_stats_dropped{device,port,netdev}`;
//! - `rdma_netdev_info{device,port,netdev,driver,bus_info,bond}` (value 1): `bond` names the
//!   bond a slave belongs to (empty otherwise);
//! - `rdma_netdev_read_errors{device,port,netdev}`: 1 when the netdev's statistics could not
//!   be read in this scrape (it vanished, the driver refused, the answer was malformed), else
//!   0; the reason is logged at debug level. A failing netdev costs only its own series.
//!
//! Netdevs come from the ports' GID attributes (as `sysfs_info`) and must exist under
//! `<sysfs>/class/net/`, so a `--path.sysfs` tree from another machine never makes rdmad
//! read this machine's netdevs of the same name. A bond (`class/net/<bond>/bonding/slaves`)
//! has no statistics of its own worth exporting: its slaves are read instead. Answers come
//! from the kernel (`SIOCETHTOOL`), or from `--path.ethtool-capture` when set.

use std::collections::HashMap;
use std::path::Path;

use rdmakit::catalog::{Catalog, Location};
use rdmakit::ethtool::{
    curated, CapturedEthtool, DriverStats, EthtoolError, EthtoolSource, KernelEthtool,
};
use rdmakit::sysfs::ReadOptions;

use super::{Collector, CollectorConfig, CollectorSpec, Shared, SysfsSource};
use crate::metrics::{Declared, MetricSet, Value};
use crate::{help, names};

/// The most generic statistics exported per netdev (mlx5 with many channels has thousands
/// of per-queue ones; the driver's order puts the port-wide ones first).
pub const MAX_STATS: usize = 1024;

const INFO: Declared = Declared::info(
    "rdma_netdev",
    "The network device of an RDMA port (or a slave of its bond) and its driver (value 1)",
);
const ETHTOOL_STAT: Declared = Declared::gauge(
    "rdma_netdev_ethtool_stat",
    "A driver statistic of the port's netdev as ethtool -S names it (most are counters; the curated ones are exported as rdma_netdev_* families instead)",
);
const STATS_DROPPED: Declared = Declared::gauge(
    "rdma_netdev_ethtool_stats_dropped",
    "Driver statistics of the netdev not exported in this scrape (past the per-netdev cap, or a duplicate name)",
);
const READ_ERRORS: Declared = Declared::gauge(
    "rdma_netdev_read_errors",
    "Whether the netdev's driver statistics could not be read in this scrape (1) or could (0)",
);

/// The table row.
pub const SPEC: CollectorSpec = CollectorSpec {
    name: "netdev",
    help: "driver statistics (ethtool -S) of each RDMA port's netdev and bond slaves: pause frames, discards, link errors",
    default_enabled: true,
    metrics: &[INFO, ETHTOOL_STAT, STATS_DROPPED, READ_ERRORS],
    catalog_counters: &[Location::Netdev],
    patterns: &[],
    build,
};

fn build(config: &CollectorConfig) -> Box<dyn Collector> {
    let source: Box<dyn EthtoolSource> = match &config.ethtool_capture {
        Some(dir) => Box::new(CapturedEthtool::new(dir.clone())),
        None => Box::new(KernelEthtool),
    };
    Box::new(Netdev {
        // The scrape's shared sysfs read when sysfs_info is on (it reads the netdev names);
        // otherwise a read of our own, without counters.
        shared: config
            .is_enabled(super::sysfs_info::SPEC.name)
            .then(|| super::sysfs_source(config)),
        own: SysfsSource {
            reader: config
                .reader(ReadOptions {
                    gids: true,
                    counters: false,
                })
                .with_netdev_only_gids(),
        },
        sysfs: config.sysfs.clone(),
        source,
    })
}

struct Netdev {
    shared: Option<SysfsSource>,
    own: SysfsSource,
    sysfs: std::path::PathBuf,
    source: Box<dyn EthtoolSource>,
}

/// One netdev to read for one port.
struct Target {
    device: String,
    port: u32,
    netdev: String,
    bond: String,
}

/// The slaves of `netdev` if it is a bond (`class/net/<bond>/bonding/slaves`), else `None`.
fn bond_slaves(sysfs: &Path, netdev: &str) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(sysfs.join("class/net").join(netdev).join("bonding/slaves"))
        .ok()?;
    Some(text.split_whitespace().map(str::to_string).collect())
}

fn netdev_exists(sysfs: &Path, netdev: &str) -> bool {
    !netdev.is_empty() && !netdev.contains('/') && sysfs.join("class/net").join(netdev).exists()
}

impl Collector for Netdev {
    fn update(&self, out: &mut MetricSet) -> anyhow::Result<()> {
        self.update_shared(&Shared::default(), out)
    }

    fn update_shared(&self, shared: &Shared, out: &mut MetricSet) -> anyhow::Result<()> {
        let own;
        let snapshot = match &self.shared {
            Some(source) => shared.sysfs_snapshot(source)?,
            None => {
                own = self.own.reader.snapshot()?;
                &own
            }
        };
        let mut targets = Vec::new();
        for device in &snapshot.devices {
            for port in &device.ports {
                let Some(netdev) = port.netdev.clone() else {
                    continue;
                };
                let target = |netdev: String, bond: String| Target {
                    device: device.name.clone(),
                    port: port.num,
                    netdev,
                    bond,
                };
                match bond_slaves(&self.sysfs, &netdev) {
                    Some(slaves) => {
                        targets.extend(slaves.into_iter().map(|s| target(s, netdev.clone())))
                    }
                    None => targets.push(target(netdev, String::new())),
                }
            }
        }
        let catalog = Catalog::embedded().ok();
        // One read per netdev per scrape, whatever number of ports share it.
        let mut answers: HashMap<String, Result<DriverStats, EthtoolError>> = HashMap::new();
        for t in &targets {
            let answer = answers.entry(t.netdev.clone()).or_insert_with(|| {
                if netdev_exists(&self.sysfs, &t.netdev) {
                    self.source.driver_stats(&t.netdev)
                } else {
                    Err(EthtoolError::Os {
                        call: "GDRVINFO",
                        errno: nix::errno::Errno::ENODEV as i32,
                    })
                }
            });
            let base = || {
                vec![
                    ("device", t.device.clone()),
                    ("port", t.port.to_string()),
                    ("netdev", t.netdev.clone()),
                ]
            };
            let stats = match answer {
                Ok(stats) => stats,
                Err(e) => {
                    tracing::debug!(netdev = t.netdev, device = t.device, "{e}");
                    out.add_declared(&READ_ERRORS, base(), Value::Int(1))?;
                    continue;
                }
            };
            out.add_declared(&READ_ERRORS, base(), Value::Int(0))?;
            let mut info = base();
            info.extend([
                ("driver", stats.info.driver.clone()),
                ("bus_info", stats.info.bus_info.clone()),
                ("bond", t.bond.clone()),
            ]);
            out.add_declared(&INFO, info, Value::Int(1))?;
            let mut exported = 0usize;
            let mut dropped = 0u64;
            for (name, value) in &stats.stats {
                if let Some(c) = curated::curate(&stats.info.driver, name) {
                    let entry = catalog.and_then(|cat| cat.get("netdev", c.family.name()));
                    if let Some(info) = entry {
                        let (family, kind) = names::netdev_metric_name(info);
                        let mut labels = base();
                        labels.extend(c.family.labels().iter().copied().zip(c.labels));
                        let added = out.add(
                            &family,
                            kind,
                            || help::netdev_help(info),
                            labels,
                            names::netdev_metric_value(info, *value),
                        );
                        if added.is_err() {
                            dropped += 1;
                        }
                        continue;
                    }
                }
                if exported >= MAX_STATS {
                    dropped += 1;
                    continue;
                }
                let mut labels = base();
                labels.push(("stat", name.clone()));
                match out.add_declared(&ETHTOOL_STAT, labels, Value::Int(*value)) {
                    Ok(()) => exported += 1,
                    Err(_) => dropped += 1,
                }
            }
            out.add_declared(&STATS_DROPPED, base(), Value::Int(dropped))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Format;
    use rdmakit::sysfs::DeviceFilter;
    use std::path::PathBuf;

    #[test]
    fn a_tree_without_class_net_reads_no_host_netdev() {
        // The rxe fixture names eth0, which this machine may have too: never read it.
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs/rxe");
        let config = CollectorConfig::new(root, DeviceFilter::all());
        let mut out = MetricSet::new();
        build(&config).update(&mut out).expect("collects");
        let text = out.encode(Format::Text);
        assert!(
            text.contains(
                "rdma_netdev_read_errors{device=\"rxe0\",port=\"1\",netdev=\"eth0\"} 1\n"
            ),
            "{text}"
        );
        assert!(!text.contains("rdma_netdev_ethtool_stat{"), "{text}");
    }
}
