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
//! - the kernel's standard statistics over ethtool netlink (`PAUSE_GET` with statistics,
//!   `STATS_GET` of eth-phy, eth-mac, eth-ctrl, rmon): into the curated families where they
//!   mean the same (`pause_frames{priority="global"}`, `crc_errors`, `symbol_errors`, where
//!   the standard value wins and the driver's statistic goes generic: no series is fed
//!   twice), and `rdma_netdev_mac_bytes_total{...,direction}`,
//!   `rdma_netdev_standard_frames_total{...,group,stat}` (rules: `rdmakit::ethtool::curated`);
//! - `rdma_netdev_fec_info{device,port,netdev,active,auto}` (value 1): the active FEC
//!   encoding (`None`, `RS`, `BaseR`, `LLRS`; empty when the driver does not say) where the
//!   driver answers `FEC_GET`;
//! - `rdma_netdev_standard_read_errors{device,port,netdev,request}`: 1 when that ethtool
//!   netlink request failed in this scrape (the netdev vanished, the kernel refused, a
//!   malformed reply), else 0. A driver without the operation (`EOPNOTSUPP`) is not an
//!   error: 0, and its series are absent. Each request costs only its own series.
//!
//! Netdevs come from the ports' GID attributes (`gid_attrs/ndevs/<i>`) and must exist under
//! `<sysfs>/class/net/`, so a `--path.sysfs` tree from another machine never makes rdmad
//! read this machine's netdevs of the same name. A bond (`class/net/<bond>/bonding/slaves`)
//! has no statistics of its own worth exporting: its slaves are read instead. Answers come
//! from the kernel (`SIOCETHTOOL`), or from `--path.ethtool-capture` when set.

use std::collections::HashMap;
use std::path::Path;

use rdmakit::catalog::{Catalog, Location};
use rdmakit::ethtool::standard::{self, Request, StandardStat};
use rdmakit::ethtool::{
    curated, CapturedEthtool, DriverStats, EthtoolError, EthtoolSource, KernelEthtool,
};
use rdmakit::sysfs::{ReadOptions, SysfsReader};

use super::{Collector, CollectorConfig, CollectorSpec, Reads, Scrape};
use crate::metrics::{Declared, MetricSet, Value};
use crate::options::{opt, Kind, Opt};
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
const STANDARD_READ_ERRORS: Declared = Declared::gauge(
    "rdma_netdev_standard_read_errors",
    "Whether an ethtool netlink request about the netdev failed in this scrape (1) or not (0; a driver without the operation is 0 and has no series)",
);
const FEC_INFO: Declared = Declared::info(
    "rdma_netdev_fec",
    "Active forward error correction of the netdev (ethtool --show-fec; value 1): None, RS, BaseR, LLRS, empty when the driver does not say",
);

/// The table row.
pub const SPEC: CollectorSpec = CollectorSpec {
    name: "netdev",
    help: "driver statistics (ethtool -S) of each RDMA port's netdev and bond slaves: pause frames, discards, link errors",
    default_enabled: true,
    metrics: &[
        INFO,
        ETHTOOL_STAT,
        STATS_DROPPED,
        READ_ERRORS,
        STANDARD_READ_ERRORS,
        FEC_INFO,
    ],
    catalog_counters: &[Location::Netdev],
    patterns: &[],
    options: OPTIONS,
    reads: Reads::NOTHING,
    build,
};

/// Its option: replaying an ethtool capture.
const OPTIONS: &[Opt] = &[opt(
    "path.ethtool-capture",
    Kind::Path,
    "DIR",
    "Read the netdev collector's ethtool answers from this directory (one subdirectory per \
     netdev with the raw ioctl buffers, as captured by rdmakit's KernelEthtool::capture) \
     instead of asking the kernel: for fixtures and for replaying a capture from another \
     machine together with its --path.sysfs tree.",
)];

fn build(config: &CollectorConfig) -> Box<dyn Collector> {
    let source: Box<dyn EthtoolSource> = match &config.ethtool_capture {
        Some(dir) => Box::new(CapturedEthtool::new(dir.clone())),
        None => Box::new(KernelEthtool),
    };
    Box::new(Netdev {
        // The scrape's sysfs snapshot when it reads the ports' netdevs for another
        // collector; otherwise a read of our own, without counters.
        own: config
            .reader(ReadOptions {
                gids: true,
                counters: false,
            })
            .with_netdev_only_gids(),
        sysfs: config.sysfs.clone(),
        source,
    })
}

struct Netdev {
    own: SysfsReader,
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
    fn update(&self, scrape: &Scrape, out: &mut MetricSet) -> anyhow::Result<()> {
        let own;
        let snapshot = if scrape.sysfs_snapshot_has_gids() {
            scrape.sysfs_snapshot()?
        } else {
            own = self.own.snapshot()?;
            &own
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
        let mut standards: HashMap<String, Standard> = HashMap::new();
        for t in &targets {
            let exists = netdev_exists(&self.sysfs, &t.netdev);
            let answer = answers.entry(t.netdev.clone()).or_insert_with(|| {
                if exists {
                    self.source.driver_stats(&t.netdev)
                } else {
                    Err(EthtoolError::Os {
                        call: "GDRVINFO",
                        errno: nix::errno::Errno::ENODEV as i32,
                    })
                }
            });
            let std_answer = standards
                .entry(t.netdev.clone())
                .or_insert_with(|| Standard::read(self.source.as_ref(), &t.netdev, exists));
            let base = || {
                vec![
                    ("device", t.device.clone()),
                    ("port", t.port.to_string()),
                    ("netdev", t.netdev.clone()),
                ]
            };
            // The standard statistics first: their series win over the driver's.
            for (request, failed) in &std_answer.requests {
                let mut labels = base();
                labels.push(("request", request.name().to_string()));
                out.add_declared(
                    &STANDARD_READ_ERRORS,
                    labels,
                    Value::Int(u64::from(*failed)),
                )?;
            }
            if let Some(fec) = &std_answer.fec {
                let mut labels = base();
                labels.extend([
                    ("active", fec.active.clone().unwrap_or_default()),
                    ("auto", fec.auto.map(|a| a.to_string()).unwrap_or_default()),
                ]);
                out.add_declared(&FEC_INFO, labels, Value::Int(1))?;
            }
            let mut taken: Vec<(curated::Family, Vec<String>)> = Vec::new();
            for stat in &std_answer.stats {
                let c = curated::curate_standard(stat);
                let Some(info) = catalog.and_then(|cat| cat.get("netdev", c.family.name())) else {
                    continue;
                };
                if taken.iter().any(|(f, l)| *f == c.family && *l == c.labels) {
                    continue;
                }
                let (family, kind) = names::netdev_metric_name(info);
                let mut labels = base();
                labels.extend(c.family.labels().iter().copied().zip(c.labels.clone()));
                let added = out.add(
                    &family,
                    kind,
                    || help::netdev_help(info),
                    labels,
                    names::netdev_metric_value(info, stat.value),
                );
                if added.is_ok() {
                    taken.push((c.family, c.labels));
                }
            }
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
                    // A series the standard statistics already fed: the driver's statistic
                    // goes generic, under its own name (never two values for one series).
                    let superseded = taken.iter().any(|(f, l)| *f == c.family && *l == c.labels);
                    if let (Some(info), false) = (entry, superseded) {
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

/// The ethtool netlink answers about one netdev, parsed.
struct Standard {
    /// Every request made and whether it failed (an unsupported operation is no failure).
    requests: Vec<(Request, bool)>,
    /// The standard statistics (pause, then the groups), in the kernel's order.
    stats: Vec<StandardStat>,
    /// The FEC state, when the driver answered.
    fec: Option<standard::FecState>,
}

impl Standard {
    fn read(source: &dyn EthtoolSource, netdev: &str, exists: bool) -> Standard {
        let mut this = Standard {
            requests: Vec::new(),
            stats: Vec::new(),
            fec: None,
        };
        let answers = if exists {
            source.standard_raw(netdev)
        } else {
            Request::ALL
                .iter()
                .map(|&r| {
                    let e = EthtoolError::Os {
                        call: r.name(),
                        errno: nix::errno::Errno::ENODEV as i32,
                    };
                    (r, Err(e))
                })
                .collect()
        };
        for (request, answer) in answers {
            let parsed = match answer {
                // Not captured: the request was never made.
                Ok(None) => continue,
                Err(e) => Err(e),
                Ok(Some(bytes)) => match request {
                    Request::Pause => standard::parse_pause(&bytes).map(|s| this.stats.extend(s)),
                    Request::Stats => standard::parse_stats(&bytes).map(|s| this.stats.extend(s)),
                    Request::Fec => standard::parse_fec(&bytes).map(|f| this.fec = Some(f)),
                },
            };
            let failed = match parsed {
                Ok(()) => false,
                Err(e) if e.is_unsupported() => false,
                Err(e) => {
                    tracing::debug!(netdev, request = request.name(), "{e}");
                    true
                }
            };
            this.requests.push((request, failed));
        }
        this
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
        build(&config)
            .update(&Scrape::of(&config, [&SPEC]), &mut out)
            .expect("collects");
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
