//! The `probes` collector: results of the active probe engine (crate `rdma-probe`, behind
//! rdmad's `verbs` feature), read from the engine's shared handle on every scrape. The engine
//! probes on its own interval in its own threads (started by `--probe.enable`); a scrape only
//! copies its latest results, it never probes.
//!
//! - `rdma_probe_latency_seconds{device,port,op,kind,peer}`: histogram of every sample so far
//!   (one-way for loopback send/write, round trip for read and peers); `kind` is `loopback`
//!   or `peer`, `peer` is empty for loopback
//! - `rdma_probe_latency_last_seconds{...,stat}`: perftest's summary of the last successful
//!   run, stat = min|max|typical|avg|stdev|p99|p99_9
//! - `rdma_probe_runs_total{...}`, `rdma_probe_failures_total{...,status}` (work-completion
//!   status name such as `RETRY_EXC_ERR`, or `TIMEOUT`, `CONNECT_ERR`, ...),
//!   `rdma_probe_up{...}`
//! - `rdma_probe_mr_registration_seconds{device,size_bytes}` (histogram),
//!   `rdma_probe_mr_registration_last_seconds`, `rdma_probe_mr_registration_failures_total`
//! - peer series also carry `peer_rack`, the peer's `rack` label from discovery (empty when
//!   it has none); with `--probe.peer-histograms=false` peers get no latency histogram
//!   (summary, runs and failures stay): 17 series per peer less (15 buckets, sum, count)
//! - `rdma_probe_discovered_peers{source}` (static, dns, file; this host excluded),
//!   `rdma_probe_discovery_invalid_entries{source}` (skipped in the last refresh),
//!   `rdma_probe_discovery_errors_total{source,reason}`, `rdma_probe_pinglist_peers` (peers
//!   planned in the last round)
//! - `rdma_probe_peer_connected{peer,peer_rack}`, `rdma_probe_handshakes_accepted_total`,
//!   `rdma_probe_handshakes_refused_total{reason}`, `rdma_probe_cpu_seconds_total`,
//!   `rdma_probe_rounds_total`
//!
//! The mapping ([`emit`]) works on [`View`], plain data copied from the engine's snapshot, so
//! it is tested without the `verbs` feature. The snapshot holds no key, rkey or address, and
//! neither does the view, so none can reach a label.

use std::collections::BTreeMap;

use super::{Collector, CollectorConfig, CollectorSpec};
use crate::metrics::{Declared, Histogram, Labels, MetricSet, Value};

/// The families this collector adds (all of them: see [`CollectorSpec::metrics`]).
const LATENCY_SECONDS: Declared = Declared::histogram(
    "rdma_probe_latency_seconds",
    "Probe latency: one-way for loopback send/write, round trip for read and peers",
);
const LATENCY_LAST_SECONDS: Declared = Declared::gauge(
    "rdma_probe_latency_last_seconds",
    "perftest summary of the last successful probe run",
);
const RUNS: Declared = Declared::counter("rdma_probe_runs", "Successful probe runs");
const FAILURES: Declared = Declared::counter(
    "rdma_probe_failures",
    "Failed probe runs by work-completion status or failure name",
);
const UP: Declared = Declared::gauge("rdma_probe_up", "Whether the last probe run succeeded");
const MR_REGISTRATION_SECONDS: Declared = Declared::histogram(
    "rdma_probe_mr_registration_seconds",
    "MR registration time (allocation + ibv_reg_mr)",
);
const MR_REGISTRATION_LAST_SECONDS: Declared = Declared::gauge(
    "rdma_probe_mr_registration_last_seconds",
    "Time of the last MR registration of this size",
);
const MR_REGISTRATION_FAILURES: Declared = Declared::counter(
    "rdma_probe_mr_registration_failures",
    "Failed MR registrations",
);
const PEER_CONNECTED: Declared = Declared::gauge(
    "rdma_probe_peer_connected",
    "Whether the probe connection to a peer is up",
);
const HANDSHAKES_REFUSED: Declared = Declared::counter(
    "rdma_probe_handshakes_refused",
    "Peer handshakes this engine refused, by reason",
);
const HANDSHAKES_ACCEPTED: Declared = Declared::counter(
    "rdma_probe_handshakes_accepted",
    "Peer handshakes this engine accepted",
);
const CPU_SECONDS: Declared = Declared::counter(
    "rdma_probe_cpu_seconds",
    "CPU time used by the probe engine's threads",
);
const ROUNDS: Declared = Declared::counter("rdma_probe_rounds", "Probe rounds completed");
const DISCOVERED_PEERS: Declared = Declared::gauge(
    "rdma_probe_discovered_peers",
    "Peers found by each discovery source in its last refresh, this host excluded",
);
const DISCOVERY_INVALID_ENTRIES: Declared = Declared::gauge(
    "rdma_probe_discovery_invalid_entries",
    "Entries a discovery source skipped as invalid in its last refresh",
);
const DISCOVERY_ERRORS: Declared = Declared::counter(
    "rdma_probe_discovery_errors",
    "Failed refreshes of a discovery source, by reason",
);
const PINGLIST_PEERS: Declared = Declared::gauge(
    "rdma_probe_pinglist_peers",
    "Peers the pinglist planner picked for the last round",
);

/// The table row. Off unless `--probe.enable` (which turns it on) or `--collector.probes`.
pub const SPEC: CollectorSpec = CollectorSpec {
    name: "probes",
    help:
        "active RDMA probes: loopback and peer latency, MR registration time (needs --probe.enable)",
    default_enabled: false,
    metrics: &[
        LATENCY_SECONDS,
        LATENCY_LAST_SECONDS,
        RUNS,
        FAILURES,
        UP,
        MR_REGISTRATION_SECONDS,
        MR_REGISTRATION_LAST_SECONDS,
        MR_REGISTRATION_FAILURES,
        PEER_CONNECTED,
        HANDSHAKES_REFUSED,
        HANDSHAKES_ACCEPTED,
        CPU_SECONDS,
        ROUNDS,
        DISCOVERED_PEERS,
        DISCOVERY_INVALID_ENTRIES,
        DISCOVERY_ERRORS,
        PINGLIST_PEERS,
    ],
    catalog_counters: &[],
    patterns: &[],
    build,
};

fn build(config: &CollectorConfig) -> Box<dyn Collector> {
    Box::new(Probes {
        source: config.probes.clone(),
    })
}

/// Where the collector reads probe results: the running engine's handle, or nothing.
#[derive(Clone, Default)]
pub struct ProbeSource {
    #[cfg(feature = "verbs")]
    handle: Option<rdma_probe::ProbeHandle>,
    /// `--probe.peer-histograms=false`: no latency histogram for peer targets.
    #[cfg(feature = "verbs")]
    no_peer_histograms: bool,
}

impl std::fmt::Debug for ProbeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProbeSource")
    }
}

/// The settings of the probe engine (`--probe.*`), resolved from flags, env and the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSettings {
    /// `--probe.enable`.
    pub enable: bool,
    /// `--probe.interval`, milliseconds.
    pub interval_ms: u64,
    /// `--probe.size`, bytes.
    pub size: usize,
    /// `--probe.iterations`.
    pub iterations: u64,
    /// `--probe.devices` (empty: every device with an active port).
    pub devices: Vec<String>,
    /// `--probe.mr-sizes`, bytes (empty: none).
    pub mr_sizes: Vec<usize>,
    /// `--probe.listen`.
    pub listen: Option<std::net::SocketAddr>,
    /// `--probe.peer`, each `HOST:PORT`.
    pub peers: Vec<String>,
    /// `--probe.secret-file` (the secret itself is only read when the engine starts).
    pub secret_file: Option<std::path::PathBuf>,
    /// `--probe.peers-dns`.
    pub peers_dns: Option<String>,
    /// `--probe.peers-file`.
    pub peers_file: Option<std::path::PathBuf>,
    /// `--probe.mesh-max`.
    pub mesh_max: usize,
    /// `--probe.rack`.
    pub rack: Option<String>,
    /// `--probe.peer-histograms`.
    pub peer_histograms: bool,
}

/// Defaults, the same as `rdma_probe::EngineConfig::default()`.
pub const DEFAULT_INTERVAL_MS: u64 = 10_000;
/// Default message size, bytes.
pub const DEFAULT_SIZE: usize = 64;
/// Default timed exchanges per operation per round.
pub const DEFAULT_ITERATIONS: u64 = 100;
/// Default `--probe.mesh-max` (the same as rdma-probe's `pinglist::DEFAULT_MESH_MAX`).
pub const DEFAULT_MESH_MAX: usize = 64;
/// Default MR sizes to time, bytes.
pub const DEFAULT_MR_SIZES: &[usize] = &[4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20];

impl Default for ProbeSettings {
    fn default() -> ProbeSettings {
        ProbeSettings {
            enable: false,
            interval_ms: DEFAULT_INTERVAL_MS,
            size: DEFAULT_SIZE,
            iterations: DEFAULT_ITERATIONS,
            devices: Vec::new(),
            mr_sizes: DEFAULT_MR_SIZES.to_vec(),
            listen: None,
            peers: Vec::new(),
            secret_file: None,
            peers_dns: None,
            peers_file: None,
            mesh_max: DEFAULT_MESH_MAX,
            rack: None,
            peer_histograms: true,
        }
    }
}

/// `--probe.interval`: seconds (`1`, `0.5`), or with a unit (`500ms`, `10s`, `1m`); in ms.
pub fn parse_interval(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (number, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1000.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60_000.0)
    } else {
        (t, 1000.0)
    };
    let ms = number
        .trim()
        .parse::<f64>()
        .ok()
        .map(|v| v * scale)
        .filter(|ms| ms.is_finite() && *ms >= 1.0 && *ms <= 86_400_000.0)
        .ok_or_else(|| format!("`{text}` is not an interval (1ms to 24h: `1`, `500ms`, `10s`)"))?;
    Ok(ms.round() as u64)
}

/// A size in bytes: `4096`, or with a binary unit (`4K`, `64M`, `1G`, `KiB`/`MiB`/`GiB`).
pub fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let upper = t.to_ascii_uppercase();
    let (number, shift) = [
        ("KIB", 10),
        ("MIB", 20),
        ("GIB", 30),
        ("K", 10),
        ("M", 20),
        ("G", 30),
    ]
    .iter()
    .find_map(|(suffix, shift)| upper.strip_suffix(suffix).map(|n| (n.to_owned(), *shift)))
    .unwrap_or((upper.clone(), 0));
    number
        .trim()
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(1usize << shift))
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("`{text}` is not a size in bytes (`4096`, `64K`, `1M`)"))
}

/// `--probe.listen`: `HOST:PORT`, or `:PORT` for every interface.
pub fn parse_listen(text: &str) -> Result<std::net::SocketAddr, String> {
    let full = match text.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => text.to_owned(),
    };
    full.parse()
        .map_err(|_| format!("`{text}` is not an address (`HOST:PORT` or `:PORT`)"))
}

/// The running engine (kept alive by the exporter; dropping it stops the probes).
#[derive(Default)]
pub struct Engine {
    #[cfg(feature = "verbs")]
    _engine: Option<rdma_probe::ProbeEngine>,
}

/// Start the probe engine when `settings.enable`; the source for the collector.
#[cfg(feature = "verbs")]
pub fn start(settings: &ProbeSettings) -> anyhow::Result<(Engine, ProbeSource)> {
    use anyhow::Context;
    if !settings.enable {
        return Ok((Engine::default(), ProbeSource::default()));
    }
    let secret = match &settings.secret_file {
        // The error names the file, never its content.
        Some(path) => Some(
            rdma_probe::Secret::from_file(path)
                .map_err(|e| anyhow::anyhow!("--probe.secret-file {}: {e}", path.display()))?,
        ),
        None => None,
    };
    let config = rdma_probe::EngineConfig {
        interval: std::time::Duration::from_millis(settings.interval_ms),
        size: settings.size,
        iterations: settings.iterations,
        devices: settings.devices.clone(),
        mr_sizes: settings.mr_sizes.clone(),
        listen: settings.listen,
        peers: settings.peers.clone(),
        peers_dns: settings.peers_dns.clone(),
        peers_file: settings.peers_file.clone(),
        mesh_max: settings.mesh_max,
        own_labels: settings
            .rack
            .iter()
            .map(|r| ("rack".to_string(), r.clone()))
            .collect(),
        secret,
        ..rdma_probe::EngineConfig::default()
    };
    let engine = rdma_probe::ProbeEngine::start(config).context("--probe.enable")?;
    tracing::info!(
        interval_ms = settings.interval_ms,
        size = settings.size,
        iterations = settings.iterations,
        peers = settings.peers.len(),
        peers_dns = settings.peers_dns.as_deref().unwrap_or(""),
        peers_file = %settings.peers_file.as_deref().map(|p| p.display().to_string()).unwrap_or_default(),
        mesh_max = settings.mesh_max,
        listen = ?engine.listen_addr(),
        "probe engine started"
    );
    let source = ProbeSource {
        handle: Some(engine.handle()),
        no_peer_histograms: !settings.peer_histograms,
    };
    Ok((
        Engine {
            _engine: Some(engine),
        },
        source,
    ))
}

/// Start the probe engine when `settings.enable`: without the `verbs` feature that is an
/// error (exit code 1).
#[cfg(not(feature = "verbs"))]
pub fn start(settings: &ProbeSettings) -> anyhow::Result<(Engine, ProbeSource)> {
    if settings.enable {
        anyhow::bail!("--probe.enable: rdmad was built without verbs support; cargo build-rdma");
    }
    Ok((Engine::default(), ProbeSource::default()))
}

struct Probes {
    source: ProbeSource,
}

impl Collector for Probes {
    fn update(&self, out: &mut MetricSet) -> anyhow::Result<()> {
        #[cfg(feature = "verbs")]
        if let Some(handle) = &self.source.handle {
            let mut view = View::from(&handle.snapshot());
            view.peer_histograms = !self.source.no_peer_histograms;
            emit(&view, out)?;
        }
        // Without an engine (not enabled, or built without `verbs`): no series.
        let _ = (&self.source, out);
        Ok(())
    }
}

/// A histogram as the engine gives it: cumulative `(le, count)` pairs, the last `+Inf`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistView {
    /// Cumulative counts per upper bound; a last `+Inf` pair is allowed (and dropped).
    pub cumulative: Vec<(f64, u64)>,
    /// Sum of samples.
    pub sum: f64,
    /// Number of samples.
    pub count: u64,
}

impl HistView {
    fn to_metric(&self) -> Histogram {
        Histogram {
            buckets: self
                .cumulative
                .iter()
                .copied()
                .filter(|(le, _)| le.is_finite())
                .collect(),
            count: self.count,
            sum: self.sum,
        }
    }
}

/// One probe target's results.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TargetView {
    /// `loopback` or `peer`.
    pub kind: String,
    /// Local device.
    pub device: String,
    /// Local port.
    pub port: u8,
    /// `HOST:PORT` of the peer, empty for loopback.
    pub peer: String,
    /// The peer's `rack` label from discovery (peers only; may be empty).
    pub peer_rack: String,
    /// `send`, `write` or `read`.
    pub op: String,
    /// Latency samples, seconds.
    pub latency: HistView,
    /// `(stat, seconds)` of the last successful run.
    pub last: Vec<(&'static str, f64)>,
    /// Successful runs.
    pub runs_total: u64,
    /// Failed runs by status name.
    pub failures_total: BTreeMap<String, u64>,
    /// Whether the last run succeeded.
    pub up: bool,
}

/// One device and MR size's registration timings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RegistrationView {
    /// Device.
    pub device: String,
    /// Buffer size, bytes.
    pub size_bytes: usize,
    /// The last registration, seconds.
    pub last_seconds: Option<f64>,
    /// All registrations, seconds.
    pub seconds: HistView,
    /// Failed registrations.
    pub failures_total: u64,
}

/// What a scrape exports of the engine's snapshot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct View {
    /// Probe targets.
    pub targets: Vec<TargetView>,
    /// MR registration timings.
    pub registrations: Vec<RegistrationView>,
    /// Peers.
    pub peers: Vec<PeerView>,
    /// Handshakes accepted.
    pub handshakes_accepted_total: u64,
    /// Handshakes refused by reason.
    pub handshakes_refused_total: BTreeMap<String, u64>,
    /// CPU time of the engine, seconds.
    pub cpu_seconds_total: f64,
    /// Rounds completed.
    pub rounds_total: u64,
    /// Peers found per discovery source.
    pub discovered_peers: BTreeMap<String, u64>,
    /// Entries skipped per discovery source.
    pub discovery_invalid_entries: BTreeMap<String, u64>,
    /// Failed refreshes by `(source, reason)`.
    pub discovery_errors_total: BTreeMap<(String, String), u64>,
    /// Whether peer targets get a latency histogram (`--probe.peer-histograms`).
    pub peer_histograms: bool,
}

/// One discovered peer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PeerView {
    /// `HOST:PORT`.
    pub peer: String,
    /// Its `rack` label (may be empty).
    pub rack: String,
    /// Whether its connection is up.
    pub connected: bool,
    /// Whether the planner picked it in the last round.
    pub planned: bool,
}

#[cfg(feature = "verbs")]
impl From<&rdma_probe::Histogram> for HistView {
    fn from(h: &rdma_probe::Histogram) -> HistView {
        HistView {
            cumulative: h.cumulative(),
            sum: h.sum(),
            count: h.count(),
        }
    }
}

#[cfg(feature = "verbs")]
impl From<&rdma_probe::ProbeSnapshot> for View {
    fn from(s: &rdma_probe::ProbeSnapshot) -> View {
        let rack_of = |peer: &str| {
            s.peers
                .iter()
                .find(|p| p.peer == peer)
                .and_then(|p| p.labels.get("rack").cloned())
                .unwrap_or_default()
        };
        View {
            targets: s
                .targets
                .iter()
                .map(|t| TargetView {
                    kind: t.kind.to_string(),
                    device: t.device.clone(),
                    port: t.port,
                    peer: t.peer.clone().unwrap_or_default(),
                    peer_rack: t.peer.as_deref().map(rack_of).unwrap_or_default(),
                    op: t.op.name().to_string(),
                    latency: HistView::from(&t.latency_seconds),
                    last: t
                        .last
                        .as_ref()
                        .map(|l| {
                            [
                                ("min", l.t_min_us),
                                ("max", l.t_max_us),
                                ("typical", l.t_typical_us),
                                ("avg", l.t_avg_us),
                                ("stdev", l.t_stdev_us),
                                ("p99", l.p99_us),
                                ("p99_9", l.p99_9_us),
                            ]
                            .into_iter()
                            .map(|(stat, us)| (stat, us / 1e6))
                            .collect()
                        })
                        .unwrap_or_default(),
                    runs_total: t.runs_total,
                    failures_total: t.failures_total.clone(),
                    up: t.up,
                })
                .collect(),
            registrations: s
                .registrations
                .iter()
                .map(|r| RegistrationView {
                    device: r.device.clone(),
                    size_bytes: r.size_bytes,
                    last_seconds: r.last_seconds,
                    seconds: HistView::from(&r.seconds),
                    failures_total: r.failures_total,
                })
                .collect(),
            peers: s
                .peers
                .iter()
                .map(|p| PeerView {
                    peer: p.peer.clone(),
                    rack: p.labels.get("rack").cloned().unwrap_or_default(),
                    connected: p.connected,
                    planned: p.planned,
                })
                .collect(),
            discovered_peers: s.discovery.peers.clone(),
            discovery_invalid_entries: s.discovery.invalid_entries.clone(),
            discovery_errors_total: s.discovery.errors_total.clone(),
            peer_histograms: true,
            handshakes_accepted_total: s.handshakes_accepted_total,
            handshakes_refused_total: s.handshakes_refused_total.clone(),
            cpu_seconds_total: s.cpu_seconds_total,
            rounds_total: s.rounds_total,
        }
    }
}

fn target_labels(t: &TargetView) -> Labels {
    let mut l = vec![
        ("device", t.device.clone()),
        ("port", t.port.to_string()),
        ("op", t.op.clone()),
        ("kind", t.kind.clone()),
        ("peer", t.peer.clone()),
    ];
    if t.kind == "peer" {
        l.push(("peer_rack", t.peer_rack.clone()));
    }
    l
}

/// Add the metrics of `view` to `out`.
pub fn emit(view: &View, out: &mut MetricSet) -> anyhow::Result<()> {
    for t in &view.targets {
        let l = target_labels(t);
        if view.peer_histograms || t.kind != "peer" {
            out.add_declared(
                &LATENCY_SECONDS,
                l.clone(),
                Value::Histogram(t.latency.to_metric()),
            )?;
        }
        for (stat, seconds) in &t.last {
            let mut lb = l.clone();
            lb.push(("stat", stat.to_string()));
            out.add_declared(&LATENCY_LAST_SECONDS, lb, Value::Float(*seconds))?;
        }
        out.add_declared(&RUNS, l.clone(), Value::Int(t.runs_total))?;
        for (status, n) in &t.failures_total {
            let mut lb = l.clone();
            lb.push(("status", status.clone()));
            out.add_declared(&FAILURES, lb, Value::Int(*n))?;
        }
        out.add_declared(&UP, l, Value::Int(u64::from(t.up)))?;
    }
    for r in &view.registrations {
        let l: Labels = vec![
            ("device", r.device.clone()),
            ("size_bytes", r.size_bytes.to_string()),
        ];
        out.add_declared(
            &MR_REGISTRATION_SECONDS,
            l.clone(),
            Value::Histogram(r.seconds.to_metric()),
        )?;
        if let Some(seconds) = r.last_seconds {
            out.add_declared(
                &MR_REGISTRATION_LAST_SECONDS,
                l.clone(),
                Value::Float(seconds),
            )?;
        }
        out.add_declared(&MR_REGISTRATION_FAILURES, l, Value::Int(r.failures_total))?;
    }
    for p in &view.peers {
        out.add_declared(
            &PEER_CONNECTED,
            vec![("peer", p.peer.clone()), ("peer_rack", p.rack.clone())],
            Value::Int(u64::from(p.connected)),
        )?;
    }
    for (source, n) in &view.discovered_peers {
        out.add_declared(
            &DISCOVERED_PEERS,
            vec![("source", source.clone())],
            Value::Int(*n),
        )?;
    }
    for (source, n) in &view.discovery_invalid_entries {
        out.add_declared(
            &DISCOVERY_INVALID_ENTRIES,
            vec![("source", source.clone())],
            Value::Int(*n),
        )?;
    }
    for ((source, reason), n) in &view.discovery_errors_total {
        out.add_declared(
            &DISCOVERY_ERRORS,
            vec![("source", source.clone()), ("reason", reason.clone())],
            Value::Int(*n),
        )?;
    }
    if !view.peers.is_empty() || !view.discovered_peers.is_empty() {
        let planned = view.peers.iter().filter(|p| p.planned).count() as u64;
        out.add_declared(&PINGLIST_PEERS, vec![], Value::Int(planned))?;
    }
    for (reason, n) in &view.handshakes_refused_total {
        out.add_declared(
            &HANDSHAKES_REFUSED,
            vec![("reason", reason.clone())],
            Value::Int(*n),
        )?;
    }
    out.add_declared(
        &HANDSHAKES_ACCEPTED,
        vec![],
        Value::Int(view.handshakes_accepted_total),
    )?;
    out.add_declared(&CPU_SECONDS, vec![], Value::Float(view.cpu_seconds_total))?;
    out.add_declared(&ROUNDS, vec![], Value::Int(view.rounds_total))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Format;

    fn view() -> View {
        View {
            targets: vec![
                TargetView {
                    kind: "loopback".into(),
                    device: "rxe0".into(),
                    port: 1,
                    peer: String::new(),
                    peer_rack: String::new(),
                    op: "write".into(),
                    latency: HistView {
                        // Per bucket 2, 3, 0, 1 (the last in +Inf): cumulative 2, 5, 5, 6.
                        cumulative: vec![(1e-5, 2), (2e-5, 5), (5e-5, 5), (f64::INFINITY, 6)],
                        sum: 0.25,
                        count: 6,
                    },
                    last: vec![("p99", 1.5e-5)],
                    runs_total: 3,
                    failures_total: BTreeMap::from([
                        ("RETRY_EXC_ERR".to_string(), 2),
                        ("TIMEOUT".to_string(), 1),
                    ]),
                    up: true,
                },
                TargetView {
                    kind: "peer".into(),
                    device: "rxe_a".into(),
                    port: 1,
                    peer: "10.0.0.2:9737".into(),
                    peer_rack: "r2".into(),
                    op: "read".into(),
                    ..TargetView::default()
                },
            ],
            registrations: vec![RegistrationView {
                device: "rxe0".into(),
                size_bytes: 4096,
                last_seconds: Some(0.001),
                seconds: HistView {
                    cumulative: vec![(1e-3, 1), (f64::INFINITY, 1)],
                    sum: 0.001,
                    count: 1,
                },
                failures_total: 0,
            }],
            peers: vec![PeerView {
                peer: "10.0.0.2:9737".into(),
                rack: "r2".into(),
                connected: false,
                planned: true,
            }],
            handshakes_accepted_total: 4,
            handshakes_refused_total: BTreeMap::from([("bad_mac".to_string(), 1)]),
            cpu_seconds_total: 0.5,
            rounds_total: 7,
            discovered_peers: BTreeMap::from([("dns".to_string(), 1)]),
            discovery_invalid_entries: BTreeMap::from([("file".to_string(), 2)]),
            discovery_errors_total: BTreeMap::from([(
                ("dns".to_string(), "no_records".to_string()),
                3,
            )]),
            peer_histograms: true,
        }
    }

    fn text() -> String {
        let mut set = MetricSet::new();
        emit(&view(), &mut set).unwrap();
        set.encode(Format::Text)
    }

    const WRITE: &str = "device=\"rxe0\",port=\"1\",op=\"write\",kind=\"loopback\",peer=\"\"";

    #[test]
    fn latency_is_one_histogram_with_cumulative_buckets_inf_sum_and_count() {
        let text = text();
        assert_eq!(
            text.matches("# TYPE rdma_probe_latency_seconds histogram\n")
                .count(),
            1,
            "{text}"
        );
        let bucket =
            |le: &str| format!("rdma_probe_latency_seconds_bucket{{{WRITE},le=\"{le}\"}} ");
        let value = |le: &str| -> u64 {
            let prefix = bucket(le);
            let line = text
                .lines()
                .find(|l| l.starts_with(&prefix))
                .unwrap_or_else(|| panic!("no {prefix} in {text}"));
            line[prefix.len()..].parse().unwrap()
        };
        let les: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("rdma_probe_latency_seconds_bucket{device=\"rxe0\""))
            .map(|l| {
                let start = l.find("le=\"").unwrap() + 4;
                &l[start..start + l[start..].find('"').unwrap()]
            })
            .collect();
        assert_eq!(les.len(), 4, "3 bounds and +Inf once: {les:?}");
        assert_eq!(les.last(), Some(&"+Inf"));
        let counts: Vec<u64> = les.iter().map(|le| value(le)).collect();
        assert_eq!(counts, vec![2, 5, 5, 6], "cumulative, +Inf = count");
        assert!(
            text.contains(&format!("rdma_probe_latency_seconds_sum{{{WRITE}}} 0.25\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!("rdma_probe_latency_seconds_count{{{WRITE}}} 6\n")),
            "{text}"
        );
        // The peer target with no samples still has its series, with count 0.
        assert!(text.contains(
            "rdma_probe_latency_seconds_count{device=\"rxe_a\",port=\"1\",op=\"read\",kind=\"peer\",peer=\"10.0.0.2:9737\",peer_rack=\"r2\"} 0\n"
        ), "{text}");
    }

    #[test]
    fn failures_by_status_runs_and_up() {
        let text = text();
        assert!(
            text.contains(&format!(
                "rdma_probe_failures_total{{{WRITE},status=\"RETRY_EXC_ERR\"}} 2\n"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "rdma_probe_failures_total{{{WRITE},status=\"TIMEOUT\"}} 1\n"
            )),
            "{text}"
        );
        assert_eq!(text.matches("rdma_probe_failures_total{").count(), 2);
        assert!(text.contains(&format!("rdma_probe_runs_total{{{WRITE}}} 3\n")));
        assert!(text.contains(&format!("rdma_probe_up{{{WRITE}}} 1\n")));
        assert!(
            text.contains(&format!(
                "rdma_probe_latency_last_seconds{{{WRITE},stat=\"p99\"}} 0.000015\n"
            )) || text.contains(&format!(
                "rdma_probe_latency_last_seconds{{{WRITE},stat=\"p99\"}} 1.5e-5\n"
            )),
            "{text}"
        );
    }

    #[test]
    fn engine_wide_series() {
        let text = text();
        for line in [
            "rdma_probe_rounds_total 7\n",
            "rdma_probe_cpu_seconds_total 0.5\n",
            "rdma_probe_handshakes_accepted_total 4\n",
            "rdma_probe_handshakes_refused_total{reason=\"bad_mac\"} 1\n",
            "rdma_probe_peer_connected{peer=\"10.0.0.2:9737\",peer_rack=\"r2\"} 0\n",
            "rdma_probe_discovered_peers{source=\"dns\"} 1\n",
            "rdma_probe_discovery_invalid_entries{source=\"file\"} 2\n",
            "rdma_probe_discovery_errors_total{source=\"dns\",reason=\"no_records\"} 3\n",
            "rdma_probe_pinglist_peers 1\n",
            "rdma_probe_mr_registration_seconds_count{device=\"rxe0\",size_bytes=\"4096\"} 1\n",
            "rdma_probe_mr_registration_failures_total{device=\"rxe0\",size_bytes=\"4096\"} 0\n",
            "rdma_probe_mr_registration_last_seconds{device=\"rxe0\",size_bytes=\"4096\"} 0.001\n",
        ] {
            assert!(text.contains(line), "missing {line:?} in {text}");
        }
    }

    #[test]
    fn without_peer_histograms_peers_keep_summaries_runs_and_up_only() {
        let mut v = view();
        v.targets[1].last = vec![("typical", 2e-5)];
        v.peer_histograms = false;
        let mut set = MetricSet::new();
        emit(&v, &mut set).unwrap();
        let text = set.encode(Format::Text);
        let peer = "kind=\"peer\",peer=\"10.0.0.2:9737\",peer_rack=\"r2\"";
        assert!(
            !text
                .lines()
                .any(|l| l.starts_with("rdma_probe_latency_seconds") && l.contains(peer)),
            "{text}"
        );
        assert!(
            text.contains(&format!("rdma_probe_latency_seconds_count{{{WRITE}}} 6\n")),
            "loopback keeps its histogram"
        );
        for family in [
            "rdma_probe_latency_last_seconds{",
            "rdma_probe_runs_total{",
            "rdma_probe_up{",
        ] {
            assert!(
                text.lines()
                    .any(|l| l.starts_with(family) && l.contains(peer)),
                "{family} for the peer: {text}"
            );
        }
    }

    #[test]
    fn without_an_engine_the_collector_adds_nothing() {
        let collector = Probes {
            source: ProbeSource::default(),
        };
        let mut set = MetricSet::new();
        collector.update(&mut set).unwrap();
        assert_eq!(set.names().count(), 0);
    }

    #[test]
    fn flag_value_parsers() {
        assert_eq!(parse_interval("1"), Ok(1000));
        assert_eq!(parse_interval("0.5"), Ok(500));
        assert_eq!(parse_interval("250ms"), Ok(250));
        assert_eq!(parse_interval("10s"), Ok(10_000));
        assert_eq!(parse_interval("2m"), Ok(120_000));
        assert!(parse_interval("0").is_err());
        assert!(parse_interval("soon").is_err());
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert!(parse_size("0").is_err());
        assert!(parse_size("-1").is_err());
        assert_eq!(parse_listen(":9737").unwrap().port(), 9737);
        assert_eq!(
            parse_listen("127.0.0.1:1").unwrap().to_string(),
            "127.0.0.1:1"
        );
        assert!(parse_listen("nowhere").is_err());
    }

    #[cfg(not(feature = "verbs"))]
    #[test]
    fn enabling_without_verbs_is_a_clear_error() {
        let settings = ProbeSettings {
            enable: true,
            ..ProbeSettings::default()
        };
        let e = start(&settings).err().expect("must fail").to_string();
        assert!(
            e.contains("built without verbs support; cargo build-rdma"),
            "{e}"
        );
        assert!(start(&ProbeSettings::default()).is_ok());
    }
}
