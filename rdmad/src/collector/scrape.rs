//! What the collectors of one scrape read besides their own sources: the [`Scrape`].
//!
//! Every input is computed at most once per scrape, by the first collector that asks
//! (`OnceLock`), so an input no enabled collector reads costs nothing. No input is written by
//! a collector: each is what the kernel says, read by the framework the same way whichever
//! collector asks first, so collectors never wait for each other's output.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use rdmakit::model::{Snapshot, SourceError};
use rdmakit::nldev::{NlDevice, NldevClient, NldevError, PortHwCounters};
use rdmakit::sysfs::{DeviceFilter, ReadOptions, SysfsReader};

use super::{CollectorConfig, CollectorSpec};

use crate::metrics::{AddError, Declared, MetricSet, Value};

/// Which shared inputs of a scrape a collector reads ([`CollectorSpec::reads`]); the
/// framework reads each once for all the enabled collectors that declare it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reads {
    /// The sysfs snapshot ([`Scrape::sysfs_snapshot`]) with the GID tables of the ports, up
    /// to each port's netdev.
    pub sysfs_gids: bool,
    /// The sysfs snapshot with every counter file.
    pub sysfs_counters: bool,
    /// The port hw counters RDMA netlink serves ([`Scrape::netlink_port_hw`]): the collector
    /// exports them, so the sysfs snapshot leaves out the port `hw_counters/` of the devices
    /// netlink serves (one source per device, no series twice).
    pub netlink_port_hw: bool,
}

impl Reads {
    /// No shared input besides the deadline, the netlink socket and the sysfs device names.
    pub const NOTHING: Reads = Reads {
        sysfs_gids: false,
        sysfs_counters: false,
        netlink_port_hw: false,
    };
}

/// Whether a sysfs error path is inside a counter directory.
pub(crate) fn is_counter_path(path: &str) -> bool {
    path.split('/')
        .any(|part| part == "counters" || part == "hw_counters")
}

/// `rdma_sysfs_read_errors{collector,device}`: the files of the sysfs snapshot a collector
/// could not use, written by each collector of the snapshot with its own `collector` label.
pub const READ_ERRORS: Declared = Declared::gauge(
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
        out.add_declared_labels(
            &READ_ERRORS,
            &[("collector", collector), ("device", device.as_str())],
            Value::Int(n),
        )?;
    }
    Ok(())
}

/// How the inputs of every scrape are read: resolved once from the configuration and what the
/// enabled collectors declare ([`Reads`]).
#[derive(Debug, Clone)]
pub struct Inputs {
    /// `--path.sysfs`.
    root: PathBuf,
    /// The device filter.
    filter: DeviceFilter,
    /// The reader of the sysfs snapshot (device filter applied): GIDs up to the port's netdev
    /// and counters when an enabled collector reads them.
    reader: SysfsReader,
    /// What the enabled collectors read, together.
    reads: Reads,
}

impl Inputs {
    /// The inputs of the collectors `specs` (the enabled ones) with `config`.
    pub fn new<'a>(
        config: &CollectorConfig,
        specs: impl IntoIterator<Item = &'a CollectorSpec>,
    ) -> Inputs {
        let reads = specs.into_iter().fold(Reads::NOTHING, |all, s| Reads {
            sysfs_gids: all.sysfs_gids || s.reads.sysfs_gids,
            sysfs_counters: all.sysfs_counters || s.reads.sysfs_counters,
            netlink_port_hw: all.netlink_port_hw || s.reads.netlink_port_hw,
        });
        Inputs {
            root: config.sysfs.clone(),
            filter: config.filter.clone(),
            reader: config
                .reader(ReadOptions {
                    gids: reads.sysfs_gids,
                    counters: reads.sysfs_counters,
                })
                .with_netdev_only_gids()
                .with_open_files(std::sync::Arc::clone(&config.open_files)),
            reads,
        }
    }

    /// What the enabled collectors read, together.
    pub fn reads(&self) -> Reads {
        self.reads
    }
}

/// The inputs of ONE scrape, created empty for every scrape so that concurrent scrapes never
/// see each other's reads.
#[derive(Debug)]
pub struct Scrape {
    inputs: std::sync::Arc<Inputs>,
    /// When the scrape's collectors must stop; `None`: no deadline.
    deadline: Option<Instant>,
    /// The sysfs snapshot, read by the first collector that asks.
    sysfs: OnceLock<Result<Snapshot, String>>,
    /// The device names of the sysfs tree, listed by the first collector that asks.
    sysfs_devices: OnceLock<Result<Vec<String>, String>>,
    /// The RDMA netlink socket, opened by the first collector that asks.
    netlink: Mutex<NetlinkState>,
    /// The port hw counters RDMA netlink serves, asked for by the first that needs them.
    netlink_port_hw: OnceLock<Result<Option<NetlinkPortHw>, String>>,
    /// Collectors that stopped at the deadline with partial output.
    timed_out: Mutex<BTreeSet<&'static str>>,
}

/// The scrape's RDMA netlink connection, as far as it got.
#[derive(Debug, Default)]
enum NetlinkState {
    /// Nobody asked yet.
    #[default]
    Unopened,
    /// Open; the device dump once somebody asked for it.
    Open {
        client: NldevClient,
        devices: Option<Vec<NlDevice>>,
    },
    /// The kernel has no RDMA netlink.
    Absent,
    /// Opening failed, with this message (every netlink collector fails with it).
    Failed(String),
}

/// This scrape's RDMA netlink socket, lent to one collector at a time ([`Scrape::netlink`]).
pub struct Netlink<'a> {
    client: &'a mut NldevClient,
    devices: &'a mut Option<Vec<NlDevice>>,
}

impl Netlink<'_> {
    /// The socket, for requests of the collector's own.
    pub fn client(&mut self) -> &mut NldevClient {
        self.client
    }

    /// The kernel's device list (`GET` dump), dumped once per scrape.
    pub fn devices(&mut self) -> anyhow::Result<Vec<NlDevice>> {
        if let Some(devices) = self.devices {
            return Ok(devices.clone());
        }
        let devices = self.client.devices().context("RDMA netlink device dump")?;
        *self.devices = Some(devices.clone());
        Ok(devices)
    }
}

/// What RDMA netlink says about the port hw counters of the scrape's devices: those the
/// device filter keeps that are both in RDMA netlink and under `--path.sysfs`.
#[derive(Debug, Default)]
pub struct NetlinkPortHw {
    /// Per device, in the kernel's order.
    pub devices: Vec<NetlinkPortHwDevice>,
}

/// One device of [`NetlinkPortHw`].
#[derive(Debug)]
pub struct NetlinkPortHwDevice {
    /// The device name.
    pub name: String,
    /// Each port's optional counters and whether they are on (`STAT_GET_STATUS`), for the
    /// ports that answered.
    pub optional: Vec<PortHwCounters>,
    /// Every port's counters (`STAT_GET`); empty when a port failed (an old kernel, a driver
    /// without `STAT_GET`, a device going away): its port hw counters are then read from
    /// sysfs.
    pub counters: Vec<PortHwCounters>,
}

impl NetlinkPortHw {
    /// Whether netlink serves the port hw counters of `device` in this scrape.
    pub fn serves(&self, device: &str) -> bool {
        self.devices
            .iter()
            .any(|d| d.name == device && !d.counters.is_empty())
    }
}

impl Scrape {
    /// The inputs of one scrape that ends at `deadline`.
    pub fn new(inputs: std::sync::Arc<Inputs>, deadline: Option<Instant>) -> Scrape {
        Scrape {
            inputs,
            deadline,
            sysfs: OnceLock::new(),
            sysfs_devices: OnceLock::new(),
            netlink: Mutex::new(NetlinkState::Unopened),
            netlink_port_hw: OnceLock::new(),
            timed_out: Mutex::new(BTreeSet::new()),
        }
    }

    /// A scrape without deadline whose inputs are those of the collectors `specs` (one
    /// collector run on its own: tests, benchmarks).
    pub fn of<'a>(
        config: &CollectorConfig,
        specs: impl IntoIterator<Item = &'a CollectorSpec>,
    ) -> Scrape {
        Scrape::new(std::sync::Arc::new(Inputs::new(config, specs)), None)
    }

    /// When this scrape's collectors must stop, if it has a deadline (three quarters of
    /// `--scrape.timeout`: the rest is the margin for their output to reach the scrape).
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether the deadline has passed.
    pub fn past_deadline(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Record that collector `name` stopped at the deadline: what it added is exported and
    /// `rdma_scrape_collector_timeout{collector}` is 1.
    pub fn mark_timed_out(&self, name: &'static str) {
        if let Ok(mut set) = self.timed_out.lock() {
            set.insert(name);
        }
    }

    pub(super) fn timed_out(&self, name: &str) -> bool {
        self.timed_out
            .lock()
            .map(|set| set.contains(name))
            .unwrap_or(false)
    }

    /// Whether the sysfs snapshot has the ports' GIDs up to their netdevs (some enabled
    /// collector reads them).
    pub fn sysfs_snapshot_has_gids(&self) -> bool {
        self.inputs.reads.sysfs_gids
    }

    /// The sysfs snapshot of this scrape, read once whoever asks first: the device filter
    /// applied, GIDs and counters as the enabled collectors read them ([`Reads`]). The port
    /// hw counters of the devices RDMA netlink serves are left out when an enabled collector
    /// exports those ([`Reads::netlink_port_hw`]).
    pub fn sysfs_snapshot(&self) -> anyhow::Result<&Snapshot> {
        self.sysfs
            .get_or_init(|| {
                let served = if self.inputs.reads.netlink_port_hw {
                    // No answer from netlink (absent, failed): every device from sysfs.
                    self.netlink_port_hw().ok().flatten()
                } else {
                    None
                };
                self.inputs
                    .reader
                    .snapshot_without_port_hw_counters(|device| {
                        served.is_some_and(|hw| hw.serves(device))
                    })
                    .map_err(|e| format!("reading sysfs: {e}"))
            })
            .as_ref()
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// The device names of the sysfs tree (before any filter), listed once per scrape:
    /// netlink collectors only export devices sysfs shows, so that a `--path.sysfs` pointing
    /// elsewhere (a container's view, a test tree) does not mix in the host's.
    pub fn sysfs_device_names(&self) -> anyhow::Result<&[String]> {
        self.sysfs_devices
            .get_or_init(|| {
                SysfsReader::new(&self.inputs.root)
                    .device_names()
                    .map_err(|e| format!("listing sysfs devices: {e}"))
            })
            .as_ref()
            .map(Vec::as_slice)
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Run `f` with this scrape's RDMA netlink socket, opening it on first use: one socket
    /// per scrape for every netlink collector. `Ok(None)` when the kernel has no RDMA
    /// netlink (logged once per scrape at debug level); an error when opening failed.
    pub fn netlink<T>(
        &self,
        f: impl FnOnce(&mut Netlink<'_>) -> anyhow::Result<T>,
    ) -> anyhow::Result<Option<T>> {
        let mut state = self
            .netlink
            .lock()
            .map_err(|_| anyhow::anyhow!("RDMA netlink state poisoned by a panic"))?;
        if matches!(*state, NetlinkState::Unopened) {
            *state = match NldevClient::open() {
                Ok(client) => NetlinkState::Open {
                    client,
                    devices: None,
                },
                Err(e @ NldevError::NoRdma(_)) => {
                    tracing::debug!("{e}");
                    NetlinkState::Absent
                }
                Err(e) => NetlinkState::Failed(format!("opening RDMA netlink: {e}")),
            };
        }
        match &mut *state {
            NetlinkState::Open { client, devices } => {
                // Every receive ends by the deadline: a socket that never answers cannot
                // hold the scrape.
                if let Some(deadline) = self.deadline {
                    let left = deadline.saturating_duration_since(Instant::now());
                    client
                        .set_receive_timeout(Some(left.max(Duration::from_micros(1))))
                        .context("RDMA netlink receive timeout")?;
                }
                f(&mut Netlink { client, devices }).map(Some)
            }
            NetlinkState::Absent => Ok(None),
            NetlinkState::Failed(message) => Err(anyhow::anyhow!("{message}")),
            NetlinkState::Unopened => unreachable!("opened above"),
        }
    }

    /// The port hw counters RDMA netlink serves in this scrape (`STAT_GET`, what `rdma
    /// statistic show` prints, and `STAT_GET_STATUS`), asked once whoever asks first.
    /// `Ok(None)` when the kernel has no RDMA netlink. A device any of whose ports fails is
    /// left to sysfs (logged at debug level).
    pub fn netlink_port_hw(&self) -> anyhow::Result<Option<&NetlinkPortHw>> {
        self.netlink_port_hw
            .get_or_init(|| self.read_netlink_port_hw().map_err(|e| format!("{e:#}")))
            .as_ref()
            .map(Option::as_ref)
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    fn read_netlink_port_hw(&self) -> anyhow::Result<Option<NetlinkPortHw>> {
        let in_sysfs = self.sysfs_device_names()?;
        let filter = &self.inputs.filter;
        self.netlink(|netlink| {
            let mut hw = NetlinkPortHw::default();
            for dev in netlink.devices()? {
                if !filter.keeps(&dev.name) || !in_sysfs.contains(&dev.name) {
                    continue;
                }
                let client = netlink.client();
                let ports = match dev.port_count {
                    Some(n) => (1..=n).collect::<Vec<u32>>(),
                    None => match client.ports(&dev) {
                        Ok(ports) => ports.iter().map(|p| p.port).collect(),
                        Err(e) => {
                            tracing::debug!(device = dev.name, "netlink ports: {e}; using sysfs");
                            continue;
                        }
                    },
                };
                let mut optional = Vec::with_capacity(ports.len());
                for &port in &ports {
                    // Which optional counters exist and which are on; a driver without any
                    // answers with an error or an empty list.
                    match client.counter_status(dev.index, &dev.name, port) {
                        Ok(status) => optional.push(status),
                        Err(e) => {
                            tracing::debug!(device = dev.name, port, "optional counters: {e}")
                        }
                    }
                }
                let mut counters = Vec::with_capacity(ports.len());
                for port in ports {
                    match client.port_counters(dev.index, &dev.name, port) {
                        Ok(answer) => counters.push(answer),
                        Err(e) => {
                            tracing::debug!(
                                device = dev.name,
                                port,
                                "netlink STAT_GET: {e}; using sysfs"
                            );
                            counters.clear();
                            break;
                        }
                    }
                }
                hw.devices.push(NetlinkPortHwDevice {
                    name: dev.name,
                    optional,
                    counters,
                });
            }
            Ok(hw)
        })
    }
}

#[cfg(test)]
impl Scrape {
    /// A scrape without deadline whose inputs nobody reads (a collector that reads none).
    pub(crate) fn detached() -> Scrape {
        let config = CollectorConfig::new("/nonexistent", DeviceFilter::all());
        Scrape::of(&config, [])
    }

    /// Pretend RDMA netlink answered `hw` in this scrape, for an enabled collector that
    /// exports its port hw counters.
    pub(crate) fn with_netlink_port_hw(mut self, hw: NetlinkPortHw) -> Scrape {
        let mut inputs = (*self.inputs).clone();
        inputs.reads.netlink_port_hw = true;
        self.inputs = std::sync::Arc::new(inputs);
        let _ = self.netlink_port_hw.set(Ok(Some(hw)));
        self
    }
}

#[cfg(test)]
impl NetlinkPortHw {
    /// Answers serving the port hw counters of `devices` (port 1, no counter).
    pub(crate) fn serving(devices: &[&str]) -> NetlinkPortHw {
        NetlinkPortHw {
            devices: devices
                .iter()
                .map(|name| NetlinkPortHwDevice {
                    name: name.to_string(),
                    optional: Vec::new(),
                    counters: vec![PortHwCounters {
                        dev_index: 0,
                        dev_name: name.to_string(),
                        port: 1,
                        counters: Vec::new(),
                    }],
                })
                .collect(),
        }
    }
}
