//! Collectors: one file each, behind the small [`Collector`] trait, listed in [`TABLE`].
//!
//! The table is the only list of collectors: it generates the `--collector.<name>` and
//! `--no-collector.<name>` flags, the `[collector]` keys of the config file and the `/` page.
//! On every scrape [`Collectors::scrape`] runs each enabled collector into its own
//! [`MetricSet`] and reports `rdma_scrape_collector_duration_seconds{collector}` and
//! `rdma_scrape_collector_success{collector}`. A collector that returns an error or panics
//! contributes only those two series (success 0); the scrape itself always succeeds.
//!
//! Collectors of one scrape run concurrently, one thread each (kept between scrapes, see
//! [`workers`]), until the scrape deadline (`--scrape.timeout`, see [`Collectors::scrape`]).
//! They are independent of each other: none reads what another wrote, none waits for
//! another, and their order in the table only orders the `/` page and `--help`. What several
//! of them read is an explicit input of the scrape, the [`Scrape`] each one gets: the
//! deadline, the one RDMA netlink socket (lent to one collector at a time, its receives
//! bounded by the deadline) with its one device dump, the device names of the sysfs tree, the
//! one sysfs snapshot (read once for every collector of it) and the port hw counters RDMA
//! netlink serves. Each is read at most once per scrape, by the first collector that asks, so
//! what no enabled collector reads costs nothing. A collector declares in its spec which of
//! the snapshot's parts it reads ([`Reads`]); from the enabled collectors' declarations the
//! framework decides once what the snapshot reads, and whether it leaves out the port hw
//! counters of the devices RDMA netlink serves (when an enabled collector exports those from
//! netlink: each device's port hw counters come from one source).
//!
//! To add a collector: write `src/collector/<name>.rs` with a `SPEC` (its `reads`: the shared
//! inputs it reads, [`Reads::NOTHING`] for none) and a type implementing
//! [`Collector::update`], add `pub mod <name>;` and its `SPEC` to [`TABLE`]; flags, env,
//! config key and the `/` page follow.

pub mod netdev;
pub mod netlink_counters;
pub mod netlink_owners;
pub mod netlink_qp_counters;
pub mod netlink_resources;
pub mod probes;
pub mod rdma_cgroup;
pub mod scrape;
pub mod sysfs_counters;
pub mod sysfs_info;
pub mod trace;
pub mod workers;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use rdmakit::sysfs::{DeviceFilter, OpenFiles, ReadOptions, SysfsReader};

use rdmakit::catalog::Location;

use crate::metrics::{Declared, MetricSet, Value};
pub use scrape::{Inputs, Netlink, NetlinkPortHw, NetlinkPortHwDevice, Reads, Scrape};
use workers::Workers;

/// One source of metrics.
pub trait Collector: Send + Sync {
    /// Add this scrape's metrics to `out`, reading the scrape's shared inputs from `scrape`.
    /// An error means the collector produced nothing usable this time (what it added is
    /// discarded).
    fn update(&self, scrape: &Scrape, out: &mut MetricSet) -> anyhow::Result<()>;
}

/// A collector failure whose reason the collector logged itself, once (a tracer that cannot
/// start): the scrape reports success 0 and logs it again only at debug level.
#[derive(Debug)]
pub struct Reported(pub String);

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Reported {}

/// What every collector may need, resolved once at startup from flags and the config file.
#[derive(Debug, Clone)]
pub struct CollectorConfig {
    /// The sysfs root (`--path.sysfs`).
    pub sysfs: PathBuf,
    /// Captured ethtool answers to read instead of the kernel's (`--path.ethtool-capture`).
    pub ethtool_capture: Option<PathBuf>,
    /// Devices to read (`--collector.device-include` / `--collector.device-exclude`).
    pub filter: DeviceFilter,
    /// The enabled collectors.
    pub enabled: Vec<&'static str>,
    /// The probe engine's results (`--probe.enable`; empty otherwise).
    pub probes: probes::ProbeSource,
    /// Counter files the sysfs collectors keep open between scrapes ([`sysfs_open_files`]).
    pub open_files: Arc<OpenFiles>,
    /// Where /proc is (`--path.procfs`).
    pub procfs: PathBuf,
    /// `netlink_owners`' settings (`--collector.netlink_owners.*`).
    pub owners: netlink_owners::OwnerSettings,
}

impl CollectorConfig {
    /// A configuration with every collector of the table enabled.
    pub fn new(sysfs: impl Into<PathBuf>, filter: DeviceFilter) -> CollectorConfig {
        CollectorConfig {
            sysfs: sysfs.into(),
            ethtool_capture: None,
            filter,
            enabled: TABLE.iter().map(|s| s.name).collect(),
            probes: probes::ProbeSource::default(),
            open_files: sysfs_open_files(),
            procfs: PathBuf::from("/proc"),
            owners: netlink_owners::OwnerSettings::default(),
        }
    }

    /// Whether the collector `name` is enabled.
    pub fn is_enabled(&self, name: &str) -> bool {
        self.enabled.contains(&name)
    }

    /// A sysfs reader with the device filter applied and the given options.
    pub fn reader(&self, options: ReadOptions) -> SysfsReader {
        SysfsReader::new(self.sysfs.clone())
            .with_filter(self.filter.clone())
            .with_options(options)
    }
}

/// The most counter files kept open between scrapes.
pub const MAX_OPEN_FILES: usize = 65_536;

/// The descriptor budget for counter files kept open between scrapes: the sysfs collectors
/// re-read them with `pread` (fresh values, a third of the system calls of open, read and
/// close; see `rdmakit::sysfs::OpenFiles`). Raises the soft `RLIMIT_NOFILE` to the hard one
/// first (systemd's default soft limit is 1024; the hard one 524288) and takes half of it, at
/// most [`MAX_OPEN_FILES`], leaving the rest to sockets and everything else; past the budget,
/// files are opened and closed on every scrape as without it.
pub fn sysfs_open_files() -> Arc<OpenFiles> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    // RLIM_INFINITY is the largest value, so "unlimited" compares as the highest limit.
    let (mut soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap_or((1024, 1024));
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        soft = hard;
    }
    let budget = usize::try_from(soft / 2)
        .unwrap_or(usize::MAX)
        .min(MAX_OPEN_FILES);
    tracing::debug!(budget, "counter files kept open between scrapes");
    Arc::new(OpenFiles::new(budget))
}

/// One row of [`TABLE`].
pub struct CollectorSpec {
    /// The name in flags, config keys and the `collector` label (`[a-z_]`).
    pub name: &'static str,
    /// One line for `--help` and the `/` page.
    pub help: &'static str,
    /// Whether it runs unless disabled.
    pub default_enabled: bool,
    /// Every family with a fixed name it adds (through [`MetricSet::add_declared`]).
    pub metrics: &'static [Declared],
    /// The catalog locations whose counters it exports, one family per catalog entry
    /// (named by [`crate::names`], HELP by [`crate::help`]).
    pub catalog_counters: &'static [Location],
    /// Families named at run time after what the kernel reports and the catalog does not
    /// describe, as patterns (`rdma_port_hw_<file>_total`).
    pub patterns: &'static [&'static str],
    /// Its own options (`--collector.<name>.*`, ...), declared beside it: they follow the
    /// general ones in `--help`, the config file and the README (see [`crate::options`]).
    pub options: &'static [crate::options::Opt],
    /// The shared inputs of the scrape it reads (what the sysfs snapshot reads for it).
    pub reads: Reads,
    /// Build it from the resolved configuration.
    pub build: fn(&CollectorConfig) -> Box<dyn Collector>,
}

/// The families [`Collectors::scrape`] adds for every collector and for rdmad itself.
pub const SCRAPE_METRICS: &[Declared] = &[
    COLLECTOR_DURATION,
    COLLECTOR_SUCCESS,
    COLLECTOR_TIMEOUT,
    EXPORTER_BUILD,
];

const COLLECTOR_DURATION: Declared = Declared::gauge(
    "rdma_scrape_collector_duration_seconds",
    "Time a collector took in this scrape",
);
const COLLECTOR_SUCCESS: Declared = Declared::gauge(
    "rdma_scrape_collector_success",
    "Whether a collector succeeded in this scrape (1) or failed (0)",
);
const COLLECTOR_TIMEOUT: Declared = Declared::gauge(
    "rdma_scrape_collector_timeout",
    "Whether a collector was still running at the scrape deadline (--scrape.timeout) and contributed only what it had (1), or finished (0)",
);
const EXPORTER_BUILD: Declared = Declared::info(
    "rdma_exporter_build",
    "The version of rdmad that produced these metrics",
);

/// Every collector rdmad has, in the order of `--help`, the `/` page and the merge of their
/// output (they run concurrently, independent of each other).
pub const TABLE: &[CollectorSpec] = &[
    netlink_counters::SPEC,
    sysfs_info::SPEC,
    sysfs_counters::SPEC,
    netlink_qp_counters::SPEC,
    netlink_resources::SPEC,
    netlink_owners::SPEC,
    rdma_cgroup::SPEC,
    netdev::SPEC,
    trace::SPEC,
    probes::SPEC,
];

/// The spec called `name`.
pub fn spec(name: &str) -> Option<&'static CollectorSpec> {
    TABLE.iter().find(|s| s.name == name)
}

/// The default `--scrape.timeout`: well under Prometheus' default scrape timeout (10 s).
pub const DEFAULT_SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// The enabled collectors, in table order.
pub struct Collectors {
    enabled: Vec<(&'static str, Arc<dyn Collector>)>,
    /// `--scrape.timeout` (`None`: no deadline).
    timeout: Option<Duration>,
    /// How the shared inputs of each scrape are read (what the enabled collectors read).
    inputs: Arc<Inputs>,
    /// The threads the collectors run on.
    workers: Workers,
}

/// What one collector's run gave.
type Outcome = std::thread::Result<anyhow::Result<MetricSet>>;

impl Collectors {
    /// Build the collectors whose names are in `enabled` (table order is kept).
    pub fn new(config: &CollectorConfig, enabled: &[&str]) -> Collectors {
        let specs = || TABLE.iter().filter(|s| enabled.contains(&s.name));
        Collectors {
            enabled: specs()
                .map(|s| (s.name, Arc::from((s.build)(config))))
                .collect(),
            inputs: Arc::new(Inputs::new(config, specs())),
            timeout: Some(DEFAULT_SCRAPE_TIMEOUT),
            workers: Workers::default(),
        }
    }

    /// Set the scrape deadline (`None`: wait for every collector however long it takes).
    pub fn with_timeout(mut self, timeout: Option<Duration>) -> Collectors {
        self.timeout = timeout;
        self
    }

    /// Names of the enabled collectors.
    pub fn names(&self) -> Vec<&'static str> {
        self.enabled.iter().map(|(n, _)| *n).collect()
    }

    /// Run every enabled collector once and return all metrics, including the scrape's own.
    ///
    /// The collectors run concurrently, one thread each (kept between scrapes, see
    /// [`Workers`]), and the scrape waits for them until the deadline (`--scrape.timeout`). A
    /// collector still running then is left behind: it contributes nothing, with
    /// `rdma_scrape_collector_timeout` 1 and success 0; the others' series are all there.
    /// Collectors that watch the deadline themselves ([`Scrape::past_deadline`]) stop early,
    /// keep what they have and say so ([`Scrape::mark_timed_out`]). Output is merged in table
    /// order whatever the order of finishing.
    pub fn scrape(&self) -> MetricSet {
        let start = Instant::now();
        let deadline = self.timeout.map(|t| start + t);
        // Collectors that watch the deadline see it a quarter early, so that what they
        // stop with reaches the scrape before it stops waiting.
        let soft = self.timeout.map(|t| start + t.mul_f64(0.75));
        let scrape = Arc::new(Scrape::new(Arc::clone(&self.inputs), soft));
        let (tx, rx) = mpsc::channel::<(usize, Outcome, f64)>();
        for (i, (name, collector)) in self.enabled.iter().enumerate() {
            let (collector, scrape, tx) = (Arc::clone(collector), Arc::clone(&scrape), tx.clone());
            let name: &'static str = name;
            let run = move || {
                let start = Instant::now();
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    let mut own = MetricSet::new();
                    collector.update(&scrape, &mut own).map(|()| own)
                }));
                let _ = tx.send((i, outcome, start.elapsed().as_secs_f64()));
            };
            if let Err(e) = self.workers.run(Box::new(run)) {
                tracing::warn!(collector = name, "cannot start a collector thread: {e}");
            }
        }
        drop(tx);
        let mut results: Vec<Option<(Outcome, f64)>> = self.enabled.iter().map(|_| None).collect();
        let mut left = self.enabled.len();
        while left > 0 {
            let got = match deadline {
                Some(d) => rx.recv_timeout(d.saturating_duration_since(Instant::now())),
                None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
            };
            match got {
                Ok((i, outcome, elapsed)) => {
                    results[i] = Some((outcome, elapsed));
                    left -= 1;
                }
                Err(_) => break,
            }
        }
        let mut all = MetricSet::new();
        for ((name, _), result) in self.enabled.iter().zip(results) {
            let (success, timed_out, elapsed) = match result {
                None => {
                    tracing::warn!(
                        collector = name,
                        "collector still running at the scrape deadline (--scrape.timeout); its series are left out"
                    );
                    (false, true, start.elapsed().as_secs_f64())
                }
                Some((outcome, elapsed)) => {
                    let success = match outcome {
                        Ok(Ok(own)) => {
                            for refused in all.merge(own) {
                                tracing::warn!(collector = name, "{refused}");
                            }
                            true
                        }
                        Ok(Err(e)) if e.is::<Reported>() => {
                            tracing::debug!(collector = name, "collector failed: {e:#}");
                            false
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
                    (success, scrape.timed_out(name), elapsed)
                }
            };
            let label = || vec![("collector", name.to_string())];
            // These families are only written here, once per collector: no duplicates.
            let _ = all.add_declared(&COLLECTOR_DURATION, label(), Value::Float(elapsed));
            let _ = all.add_declared(&COLLECTOR_SUCCESS, label(), Value::Int(u64::from(success)));
            let _ = all.add_declared(
                &COLLECTOR_TIMEOUT,
                label(),
                Value::Int(u64::from(timed_out)),
            );
        }
        let _ = all.add_declared(
            &EXPORTER_BUILD,
            vec![
                ("version", crate::build_info::VERSION.to_string()),
                ("revision", crate::build_info::REVISION.to_string()),
                ("features", crate::build_info::features()),
            ],
            Value::Int(1),
        );
        all
    }
}

#[cfg(test)]
mod tests;
