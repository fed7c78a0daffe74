//! Collectors: one file each, behind the small [`Collector`] trait, listed in [`TABLE`].
//!
//! The table is the only list of collectors: it generates the `--collector.<name>` and
//! `--no-collector.<name>` flags, the `[collector]` keys of the config file and the `/` page.
//! On every scrape [`Collectors::scrape`] runs each enabled collector into its own
//! [`MetricSet`] and reports `rdma_scrape_collector_duration_seconds{collector}` and
//! `rdma_scrape_collector_success{collector}`. A collector that returns an error or panics
//! contributes only those two series (success 0); the scrape itself always succeeds.
//!
//! Collectors of one scrape run concurrently, one thread each (kept between scrapes), until the
//! scrape deadline (`--scrape.timeout`, see [`Collectors::scrape`]), and may pass facts to each
//! other through [`Shared`]: which devices' port hw counters `netlink_counters` already
//! exported (so that `sysfs_counters` does not read them again; the sysfs snapshot waits for
//! it), the one sysfs snapshot of the scrape, read once for `sysfs_info` and `sysfs_counters`
//! together, the device names of the sysfs tree, and the scrape's one RDMA netlink socket (lent
//! to one collector at a time, its receives bounded by the deadline) with its one device dump
//! ([`Shared::netlink`]). A collector that needs nothing from the others implements only
//! [`Collector::update`]. To add a collector: write `src/collector/<name>.rs` with a `SPEC`,
//! add `pub mod <name>;` and its `SPEC` to [`TABLE`]; flags, env, config key and the `/` page
//! follow.

pub mod netdev;
pub mod netlink_counters;
pub mod netlink_owners;
pub mod netlink_qp_counters;
pub mod netlink_resources;
pub mod probes;
pub mod rdma_cgroup;
pub mod sysfs_counters;
pub mod sysfs_info;
pub mod trace;

use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use rdmakit::model::Snapshot;
use rdmakit::nldev::{NlDevice, NldevClient, NldevError};
use rdmakit::sysfs::{DeviceFilter, OpenFiles, ReadOptions, SysfsReader};

use rdmakit::catalog::Location;

use crate::metrics::{Declared, MetricSet, Value};

/// One source of metrics.
pub trait Collector: Send + Sync {
    /// Add this scrape's metrics to `out`. An error means the collector produced nothing
    /// usable this time (what it added is discarded).
    fn update(&self, out: &mut MetricSet) -> anyhow::Result<()>;

    /// Like [`Collector::update`], seeing what earlier collectors of this scrape shared.
    /// Collectors that share nothing keep this default.
    fn update_shared(&self, shared: &Shared, out: &mut MetricSet) -> anyhow::Result<()> {
        let _ = shared;
        self.update(out)
    }
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

/// What the collectors of ONE scrape tell the ones after them (table order). Created empty
/// for every scrape, so concurrent scrapes never see each other's facts.
#[derive(Debug, Default)]
pub struct Shared {
    /// Devices whose port hw counters `netlink_counters` exported in this scrape (set only
    /// when that collector succeeded).
    netlink_hw_devices: Mutex<BTreeSet<String>>,
    /// The sysfs snapshot of this scrape (see [`sysfs_reader`]), read by the first sysfs
    /// collector that asks.
    sysfs: OnceLock<Result<Snapshot, String>>,
    /// The device names of the sysfs tree, listed by the first collector that asks.
    sysfs_devices: OnceLock<Result<Vec<String>, String>>,
    /// The RDMA netlink socket of this scrape, opened by the first collector that asks.
    netlink: Mutex<NetlinkState>,
    /// When the scrape must end (`--scrape.timeout`); `None`: no deadline.
    deadline: Option<Instant>,
    /// Whether `netlink_counters` is still running in this scrape: the sysfs snapshot,
    /// which skips what it exported, waits for it (collectors run concurrently). False by
    /// default (a collector run on its own waits for nothing).
    netlink_hw_pending: (Mutex<bool>, Condvar),
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

/// This scrape's RDMA netlink socket, lent to one collector at a time ([`Shared::netlink`]).
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

impl Shared {
    /// The facts of one scrape that ends at `deadline`; `netlink_hw_pending`: whether
    /// `netlink_counters` runs in it (the sysfs snapshot waits for it).
    pub fn new(deadline: Option<Instant>, netlink_hw_pending: bool) -> Shared {
        Shared {
            deadline,
            netlink_hw_pending: (Mutex::new(netlink_hw_pending), Condvar::new()),
            ..Shared::default()
        }
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

    fn timed_out(&self, name: &str) -> bool {
        self.timed_out
            .lock()
            .map(|set| set.contains(name))
            .unwrap_or(false)
    }

    /// `netlink_counters` has finished: the sysfs snapshot may be read.
    fn set_netlink_hw_ready(&self) {
        let (lock, cvar) = &self.netlink_hw_pending;
        if let Ok(mut pending) = lock.lock() {
            *pending = false;
        }
        cvar.notify_all();
    }

    /// Wait until `netlink_counters` has finished, at most until the deadline.
    fn wait_netlink_hw_ready(&self) {
        let (lock, cvar) = &self.netlink_hw_pending;
        let Ok(mut pending) = lock.lock() else {
            return;
        };
        while *pending {
            let wait = match self.deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left,
                    _ => return,
                },
                None => Duration::from_secs(3600),
            };
            match cvar.wait_timeout(pending, wait) {
                Ok((guard, _)) => pending = guard,
                Err(_) => return,
            }
        }
    }

    /// The sysfs snapshot of this scrape: read with `reader` by the first caller, the same
    /// for the others (every sysfs collector passes the reader of [`sysfs_reader`]). The port
    /// hw counters of devices netlink already exported are not read.
    pub fn sysfs_snapshot(&self, source: &SysfsSource) -> anyhow::Result<&Snapshot> {
        self.sysfs
            .get_or_init(|| {
                self.wait_netlink_hw_ready();
                source
                    .reader
                    .snapshot_without_port_hw_counters(|device| self.netlink_hw_device(device))
                    .map_err(|e| format!("reading sysfs: {e}"))
            })
            .as_ref()
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// The device names of the sysfs tree at `root` (before any filter), listed once per
    /// scrape: netlink collectors only export devices sysfs shows, so that a `--path.sysfs`
    /// pointing elsewhere (a container's view, a test tree) does not mix in the host's.
    pub fn sysfs_device_names(&self, root: &Path) -> anyhow::Result<&[String]> {
        self.sysfs_devices
            .get_or_init(|| {
                SysfsReader::new(root)
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

    /// Record that the port hw counters of `devices` are exported already.
    pub fn set_netlink_hw_devices(&self, devices: BTreeSet<String>) {
        if let Ok(mut set) = self.netlink_hw_devices.lock() {
            *set = devices;
        }
    }

    /// Whether the port hw counters of `device` are exported already.
    pub fn netlink_hw_device(&self, device: &str) -> bool {
        self.netlink_hw_devices
            .lock()
            .map(|set| set.contains(device))
            .unwrap_or(false)
    }
}

/// What every collector may need, resolved once at startup from flags and the config file.
#[derive(Debug, Clone)]
pub struct CollectorConfig {
    /// The sysfs root (`--path.sysfs`).
    pub sysfs: PathBuf,
    /// Captured ethtool answers to read instead of the kernel's (`--path.ethtool-capture`).
    pub ethtool_capture: Option<PathBuf>,
    /// Devices to read (`--collector.device-include` / `--collector.device-exclude`).
    pub filter: DeviceFilter,
    /// The enabled collectors (so that the sysfs collectors can share one read).
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

/// The sysfs reader of `sysfs_info` and `sysfs_counters` (device filter applied).
#[derive(Debug, Clone)]
pub struct SysfsSource {
    pub(crate) reader: SysfsReader,
}

/// The one sysfs source of `sysfs_info` and `sysfs_counters`: what either of the enabled
/// ones needs, so that a scrape reads sysfs once ([`Shared::sysfs_snapshot`]). GIDs only up
/// to the port's netdev (`sysfs_info`), counters when `sysfs_counters` is on.
pub(crate) fn sysfs_source(config: &CollectorConfig) -> SysfsSource {
    SysfsSource {
        reader: config
            .reader(ReadOptions {
                gids: config.is_enabled(sysfs_info::SPEC.name),
                counters: config.is_enabled(sysfs_counters::SPEC.name),
            })
            .with_netdev_only_gids()
            .with_open_files(Arc::clone(&config.open_files)),
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
    /// Build it from the resolved configuration.
    pub build: fn(&CollectorConfig) -> Box<dyn Collector>,
}

/// The families [`Collectors::scrape`] adds for every collector and for rdmad itself.
pub const SCRAPE_METRICS: &[Declared] = &[
    COLLECTOR_DURATION,
    COLLECTOR_SUCCESS,
    COLLECTOR_TIMEOUT,
    EXPORTER_BUILD,
    EXPORTER_RESPONSES,
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

const EXPORTER_RESPONSES: Declared = Declared::counter(
    "rdma_exporter_metrics_responses",
    "Responses to /metrics requests since rdmad started, by the content encoding of their body (gzip, zstd, identity); the scrape showing it is not yet counted (absent with --once)",
);

/// `/metrics` responses by content encoding, counted by the server once each response's
/// encoding is chosen and exported by the scrapes after it as
/// `rdma_exporter_metrics_responses_total{encoding}` (see [`Collectors::with_responses`]).
#[derive(Debug, Default)]
pub struct ResponseCounts {
    gzip: AtomicU64,
    zstd: AtomicU64,
    identity: AtomicU64,
}

impl ResponseCounts {
    /// Count one response whose `Content-Encoding` is `encoding` (`None`: identity). An
    /// encoding rdmad does not send is not counted.
    pub fn record(&self, encoding: Option<&str>) {
        let counter = match encoding {
            None | Some("identity") => &self.identity,
            Some("gzip") => &self.gzip,
            Some("zstd") => &self.zstd,
            Some(_) => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// (encoding, responses so far), every encoding rdmad sends.
    pub fn counts(&self) -> [(&'static str, u64); 3] {
        [
            ("gzip", self.gzip.load(Ordering::Relaxed)),
            ("zstd", self.zstd.load(Ordering::Relaxed)),
            ("identity", self.identity.load(Ordering::Relaxed)),
        ]
    }
}

/// Every collector rdmad has, in the order they run. `netlink_counters` comes before the
/// sysfs collectors, which skip the port hw counters netlink already exported.
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
    /// The server's `/metrics` responses (`None` with `--once`: there are none).
    responses: Option<Arc<ResponseCounts>>,
    /// The threads the collectors run on.
    workers: Workers,
}

/// Work for a [`Workers`] thread.
type Job = Box<dyn FnOnce() + Send>;

/// Threads that run collectors, kept between scrapes: starting eight threads a scrape and
/// tearing them down again cost more than most collectors take. Each job goes to an idle
/// thread, or to a new one when none is idle, so a collector stuck past the deadline (a
/// hung driver) keeps its thread and delays no other: the same as a thread per collector
/// per scrape. A thread idle for [`WORKER_IDLE_EXIT`], or beyond [`MAX_IDLE_WORKERS`] idle
/// ones, ends; all end when the collectors are dropped.
#[derive(Default)]
struct Workers {
    shared: Arc<(Mutex<WorkQueue>, Condvar)>,
}

#[derive(Default)]
struct WorkQueue {
    jobs: std::collections::VecDeque<Job>,
    /// Threads waiting for a job, minus the jobs queued for them.
    idle: usize,
    closed: bool,
}

/// How long a collector thread waits for the next scrape before it ends.
const WORKER_IDLE_EXIT: Duration = Duration::from_secs(120);

/// At most this many collector threads wait between scrapes.
const MAX_IDLE_WORKERS: usize = 32;

impl Workers {
    /// Run `job` on an idle thread, or on a new one.
    fn run(&self, job: Job) -> std::io::Result<()> {
        {
            let (queue, wake) = &*self.shared;
            let mut queue = lock(queue);
            if queue.idle > 0 {
                queue.idle -= 1;
                queue.jobs.push_back(job);
                wake.notify_one();
                return Ok(());
            }
        }
        let shared = Arc::clone(&self.shared);
        std::thread::Builder::new()
            .name("collector".into())
            .spawn(move || Workers::serve(&shared, job))
            .map(drop)
    }

    /// A thread's life: its first job, then what the queue gives it until it is idle too
    /// long, too many are idle or the collectors are gone.
    fn serve(shared: &(Mutex<WorkQueue>, Condvar), first: Job) {
        let (queue, wake) = shared;
        let mut job = first;
        loop {
            // Jobs catch their own panics (see `Collectors::scrape`).
            job();
            let mut guard = lock(queue);
            if guard.closed || guard.idle >= MAX_IDLE_WORKERS {
                return;
            }
            guard.idle += 1;
            let (mut guard, _) = wake
                .wait_timeout_while(guard, WORKER_IDLE_EXIT, |q| q.jobs.is_empty() && !q.closed)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match guard.jobs.pop_front() {
                // Its `idle` share was taken by the caller that queued it.
                Some(next) => job = next,
                None => {
                    guard.idle -= 1;
                    return;
                }
            }
        }
    }
}

/// Lock, ignoring poisoning: jobs catch their panics, and the queue stays consistent.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Drop for Workers {
    fn drop(&mut self) {
        let (queue, wake) = &*self.shared;
        lock(queue).closed = true;
        wake.notify_all();
    }
}

/// What one collector's run gave.
type Outcome = std::thread::Result<anyhow::Result<MetricSet>>;

impl Collectors {
    /// Build the collectors whose names are in `enabled` (table order is kept).
    pub fn new(config: &CollectorConfig, enabled: &[&str]) -> Collectors {
        Collectors {
            enabled: TABLE
                .iter()
                .filter(|s| enabled.contains(&s.name))
                .map(|s| (s.name, Arc::from((s.build)(config))))
                .collect(),
            timeout: Some(DEFAULT_SCRAPE_TIMEOUT),
            responses: None,
            workers: Workers::default(),
        }
    }

    /// Export `responses` with every scrape (the server counts into it).
    pub fn with_responses(mut self, responses: Arc<ResponseCounts>) -> Collectors {
        self.responses = Some(responses);
        self
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
    /// `Workers`), and the scrape waits for them until the deadline (`--scrape.timeout`). A
    /// collector still running then is left behind: it contributes nothing, with
    /// `rdma_scrape_collector_timeout` 1 and success 0; the others' series are all there.
    /// Collectors that watch the deadline themselves ([`Shared::past_deadline`]) stop early,
    /// keep what they have and say so ([`Shared::mark_timed_out`]). Output is merged in table
    /// order whatever the order of finishing.
    pub fn scrape(&self) -> MetricSet {
        let start = Instant::now();
        let deadline = self.timeout.map(|t| start + t);
        let pending = self
            .enabled
            .iter()
            .any(|(n, _)| *n == netlink_counters::SPEC.name);
        // Collectors that watch the deadline see it a quarter early, so that what they
        // stop with reaches the scrape before it stops waiting.
        let soft = self.timeout.map(|t| start + t.mul_f64(0.75));
        let shared = Arc::new(Shared::new(soft, pending));
        let (tx, rx) = mpsc::channel::<(usize, Outcome, f64)>();
        for (i, (name, collector)) in self.enabled.iter().enumerate() {
            let (collector, shared, tx) = (Arc::clone(collector), Arc::clone(&shared), tx.clone());
            let name: &'static str = name;
            let run = move || {
                let start = Instant::now();
                let outcome = catch_unwind(AssertUnwindSafe(|| {
                    let mut own = MetricSet::new();
                    collector.update_shared(&shared, &mut own).map(|()| own)
                }));
                if name == netlink_counters::SPEC.name {
                    shared.set_netlink_hw_ready();
                }
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
                    (success, shared.timed_out(name), elapsed)
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
        if let Some(responses) = &self.responses {
            for (encoding, count) in responses.counts() {
                let labels = vec![("encoding", encoding.to_string())];
                let _ = all.add_declared(&EXPORTER_RESPONSES, labels, Value::Int(count));
            }
        }
        all
    }
}

#[cfg(test)]
mod tests;
