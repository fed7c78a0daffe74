//! The `probes` collector: results of the active probe engine (crate `rdma-probe`, behind
//! rdmad's `verbs` feature), read from the engine's shared handle on every scrape. The engine
//! probes on its own interval in its own threads (started by `--probe.enable`); a scrape only
//! copies its latest results, it never probes.
//!
//! Per probed peer, by default at most 6 series (labels `device,port,op,kind="peer",peer,
//! transport,peer_rack`), and only `rdma_probe_peer_status` for a peer that never answered
//! (no successful run and no request answered: every connect timed out or was refused, or
//! its UD requests all went unanswered): a silent peer measured nothing, and 2,000 of them
//! cost a scrape 1 series each instead of 4. Once a peer has answered it keeps all of its
//! series, down or not, so that the rules' increase() over sent and lost goes on across a
//! fault (the first of its counters' samples carries what was sent while it never answered,
//! which increase() does not count as loss; the rules read a pair that is down from its
//! status alone):
//!
//! - `rdma_probe_sent_total{...}`: requests sent to the peer (UD: every request, warmup
//!   included; RC: the timed ones)
//! - `rdma_probe_lost_total{...,direction}`: requests without an answer within the timeout,
//!   `direction="request"` (the peer never received it: prober -> peer) or `"reply"` (the
//!   peer received it, its reply never came back: peer -> prober), from the `received` count
//!   the peer's UD replies carry; losses after the last reply are attributed when the next
//!   reply comes, and as `request` when a run gets no reply at all or fails (a silent peer).
//!   RC losses are all `request`. Loss ratio = sum of both / sent
//! - `rdma_probe_latency_last_seconds{...,stat}`: `typical` and `p99` of the last successful
//!   run (round trips)
//! - `rdma_probe_peer_status{device,peer,peer_rack}`: the last outcome's verdict, 0 ok,
//!   1 agent (TCP refused at once or the handshake failed: the peer's rdmad refuses or is
//!   absent), 2 host (the TCP connect timed out: unreachable), 3 rdma (TCP and handshake
//!   work, the UD requests go unanswered or the RDMA run fails); absent until the first
//!   attempt ended
//!
//! With `--probe.peer-histograms` (off by default) peers also get the loopback targets'
//! detail: `rdma_probe_latency_seconds` (histogram: 15 buckets, sum, count), the other five
//! stats, `rdma_probe_runs_total` and `rdma_probe_failures_total{...,status}`: 29 series per
//! healthy peer instead of 6; then every peer gets its series, never-answered ones included
//! (their failures by name count the attempts).
//!
//! Totals at the default `--probe.mesh-max` 64 (racks of 32, as bench's pinglist_sim): up to
//! 65 hosts every host probes every other one (6 x (n - 1) per host). Above it a host probes
//! its rack (from both sides) and, over the planner's walk, the cross-rack peers in the half
//! of the ring ahead of it (each cross-rack pair from one side), and keeps their series while
//! discovery lists them: 1,000 hosts: 31,000 + 484,000 = 515,000 probed pairs, 3.09 M series
//! (about 3,090 per host); 10,000 hosts: 310,000 + 49,840,000 = 50.15 M pairs, 301 M series
//! (about 30,090 per host), plus a few dozen engine-wide series per host.
//!
//! Loopback targets (labels as above, `kind="loopback"`, `peer=""`, `transport="rc"`):
//!
//! - `rdma_probe_latency_seconds{...}`: histogram of every sample so far (one-way for
//!   send/write, round trip for read)
//! - `rdma_probe_latency_last_seconds{...,stat}`: perftest's summary of the last successful
//!   run, stat = min|max|typical|avg|stdev|p99|p99_9
//! - `rdma_probe_runs_total{...}`, `rdma_probe_failures_total{...,status}` (work-completion
//!   status name such as `RETRY_EXC_ERR`, or `TIMEOUT`, `CONNECT_ERR`, `HOST_UNREACHABLE`,
//!   ...), `rdma_probe_up{...}`
//!
//! Per host:
//!
//! - `rdma_probe_round_duration_seconds`: the last peer round's duration (its start to its
//!   last run's end; at most the interval unless the host is overloaded), and
//!   `rdma_probe_rounds_late_total`: peer rounds longer than `--probe.interval` (with peers
//!   configured)
//! - `rdma_probe_mr_registration_seconds{device,size_bytes}` (histogram),
//!   `rdma_probe_mr_registration_last_seconds`, `rdma_probe_mr_registration_failures_total`
//! - peer series carry `peer_rack`, the peer's `rack` label from discovery (empty when it
//!   has none)
//! - `rdma_probe_discovered_peers{source}` (static, dns, file; this host excluded),
//!   `rdma_probe_discovery_invalid_entries{source}` (skipped in the last refresh),
//!   `rdma_probe_discovery_errors_total{source,reason}`, `rdma_probe_pinglist_peers` (peers
//!   planned in the last round)
//! - `rdma_probe_handshakes_accepted_total`,
//!   `rdma_probe_handshakes_refused_total{reason}` (`malformed`, `bad_mac`, `replay`,
//!   `timeout`: no complete handshake in time, `busy`: no handshake slot free, `io`,
//!   `responder`), `rdma_probe_cpu_seconds_total`,
//!   `rdma_probe_rounds_total`
//! - `rdma_probe_ud_dropped_total{device,reason}`: UD datagrams the device's UD endpoint
//!   dropped (`malformed`, `unknown_session`, `bad_tag`, `wrong_source`, `replay`,
//!   `unexpected`, `bad_count`: a reply whose received count cannot be true, `recv_error`,
//!   `reply_failed`), every reason exported, zeros included;
//!   `rdma_probe_ud_answered_total{device}`, `rdma_probe_ud_sessions{device}`
//!
//! The mapping ([`emit`]) works on the engine's [`ProbeSnapshot`], whose types build without
//! the `verbs` feature, so it is tested in either build. The snapshot holds no key, rkey or
//! address, so none can reach a label.

use super::{Collector, CollectorConfig, CollectorSpec, Reads, Scrape};
use crate::options::{opt, Kind, Opt, Values};
use rdma_probe::{ProbeSnapshot, TargetResult};
use std::collections::HashMap;

use crate::metrics::{Declared, Labels, MetricSet, Value};

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
const PEER_STATUS: Declared = Declared::gauge(
    "rdma_probe_peer_status",
    "A peer's verdict from its last probe: 0 ok, 1 agent (TCP refused or handshake failed: its rdmad refuses or is absent), 2 host (TCP connect timed out: unreachable), 3 rdma (TCP and handshake work, the RDMA probes go unanswered or fail); a peer that never answered has this series only (by default)",
);
const ROUND_DURATION_SECONDS: Declared = Declared::gauge(
    "rdma_probe_round_duration_seconds",
    "Duration of the last peer probe round, from its start to its last run's end",
);
const ROUNDS_LATE: Declared = Declared::counter(
    "rdma_probe_rounds_late",
    "Peer probe rounds that took longer than the probe interval",
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
const SENT: Declared = Declared::counter(
    "rdma_probe_sent",
    "Probe requests sent to a peer (UD: every request, warmup included; RC: the timed ones)",
);
const LOST: Declared = Declared::counter(
    "rdma_probe_lost",
    "Probe requests to a peer without an answer within the timeout, by direction: request (the peer never received it) or reply (it did, the reply never came back), from the count the peer's replies carry; losses after the last reply are attributed at the next one, and count as request while the peer is silent (RC: all request)",
);
const UD_DROPPED: Declared = Declared::counter(
    "rdma_probe_ud_dropped",
    "UD datagrams the device's UD probe endpoint dropped, by reason",
);
const UD_ANSWERED: Declared = Declared::counter(
    "rdma_probe_ud_answered",
    "UD echo requests the device's UD probe endpoint answered",
);
const UD_SESSIONS: Declared = Declared::gauge(
    "rdma_probe_ud_sessions",
    "Peer sessions on the device's one UD probe QP (peers probed plus peers probing us)",
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
        PEER_STATUS,
        ROUND_DURATION_SECONDS,
        ROUNDS_LATE,
        HANDSHAKES_REFUSED,
        HANDSHAKES_ACCEPTED,
        CPU_SECONDS,
        ROUNDS,
        SENT,
        LOST,
        UD_DROPPED,
        UD_ANSWERED,
        UD_SESSIONS,
        DISCOVERED_PEERS,
        DISCOVERY_INVALID_ENTRIES,
        DISCOVERY_ERRORS,
        PINGLIST_PEERS,
    ],
    catalog_counters: &[],
    patterns: &[],
    options: OPTIONS,
    reads: Reads::NOTHING,
    build,
};

/// The `--probe.*` options.
const OPTIONS: &[Opt] = &[
    opt(
        "probe.enable",
        Kind::Bool,
        "BOOL",
        "Run the active probe engine (needs a build with the `verbs` feature) and enable the \
         probes collector.",
    )
    .default("false"),
    opt(
        "probe.interval",
        Kind::Duration { zero: false },
        "DURATION",
        "Time between probe rounds: seconds, or with a unit (500ms, 10s, 1m).",
    )
    .default("10s"),
    opt(
        "probe.size",
        Kind::Size,
        "BYTES",
        "Probe message size, bytes (or 1K, ...).",
    )
    .default("64"),
    opt(
        "probe.iterations",
        Kind::Int {
            min: 1,
            max: u64::MAX,
        },
        "N",
        "Timed exchanges per operation per round.",
    )
    .default("100"),
    opt(
        "probe.devices",
        Kind::List,
        "DEVICES",
        "Devices to probe in loopback, comma-separated (default: every device with an active \
         port).",
    ),
    opt(
        "probe.mr-sizes",
        Kind::SizeList,
        "SIZES",
        "MR sizes whose registration is timed, comma-separated (4K, 1M, ...; \"\" for none).",
    )
    .default("4K,64K,1M,16M,64M"),
    opt(
        "probe.listen",
        Kind::Addr,
        "ADDR",
        "Accept peer probes here: HOST:PORT or :PORT (needs --probe.secret-file).",
    ),
    opt(
        "probe.peer",
        Kind::List,
        "HOST:PORT",
        "A peer to probe, HOST:PORT of its --probe.listen; repeatable (comma-separated in the \
         environment; needs --probe.secret-file).",
    )
    .repeat(),
    opt(
        "probe.transport",
        Kind::Choice(&["ud", "rc"]),
        "ud|rc",
        "How peers are probed: ud (echo requests on one UD QP per local device, whatever the \
         number of peers) or rc (one-sided RDMA READ on an RC QP per peer).",
    )
    .default("ud"),
    opt(
        "probe.peers-dns",
        Kind::Text,
        "NAME",
        "Discover peers in DNS: every A/AAAA record of NAME (a headless Service), ports from \
         the SRV records _rdmad-probe._tcp.NAME (else this host's --probe.listen port); asked \
         again every interval.",
    ),
    opt(
        "probe.peers-file",
        Kind::Path,
        "FILE",
        "Discover peers from a Prometheus file_sd-style JSON (.json) or YAML file: targets \
         HOST:PORT with labels such as rack and zone; re-read when it changes.",
    ),
    opt(
        "probe.mesh-max",
        Kind::Int { min: 1, max: 65536 },
        "N",
        "Probe every peer every round up to this many peers; above it, the host's rack and a \
         rotating sample of the others, at most this many per round.",
    )
    .default("64"),
    opt(
        "probe.rack",
        Kind::Text,
        "RACK",
        "This host's rack label for the pinglist (default: its own entry's rack in \
         --probe.peers-file).",
    ),
    opt(
        "probe.peer-histograms",
        Kind::Bool,
        "BOOL",
        "Export a latency histogram, every summary stat, runs and failures per peer (false: \
         the 6 default series per peer: sent, lost by direction, typical and p99, status; \
         the status alone for a peer that never answered).",
    )
    .default("false"),
    opt(
        "probe.secret-file",
        Kind::Path,
        "FILE",
        "File holding the shared secret of the peer handshake (never logged).",
    ),
];

/// The `--probe.*` settings from the resolved options.
pub fn settings(values: &Values) -> anyhow::Result<ProbeSettings> {
    let transport = values.text("probe.transport")?.unwrap_or_default();
    let settings = ProbeSettings {
        enable: values.bool("probe.enable")?,
        interval_ms: values.millis("probe.interval")?,
        size: values.size("probe.size")?,
        iterations: values.int("probe.iterations")?,
        devices: values.list("probe.devices")?,
        mr_sizes: values.sizes("probe.mr-sizes")?,
        listen: values.addr("probe.listen")?,
        peers: values.list("probe.peer")?,
        transport: parse_transport(&transport)
            .map_err(|e| anyhow::anyhow!("--probe.transport: {e}"))?,
        secret_file: values.path("probe.secret-file")?,
        peers_dns: values.text("probe.peers-dns")?,
        peers_file: values.path("probe.peers-file")?,
        mesh_max: values.int("probe.mesh-max")? as usize,
        rack: values.text("probe.rack")?,
        peer_histograms: values.bool("probe.peer-histograms")?,
    };
    let has_peers =
        !settings.peers.is_empty() || settings.peers_dns.is_some() || settings.peers_file.is_some();
    if settings.enable && (settings.listen.is_some() || has_peers) && settings.secret_file.is_none()
    {
        anyhow::bail!(
            "--probe.listen, --probe.peer, --probe.peers-dns and --probe.peers-file need --probe.secret-file"
        );
    }
    Ok(settings)
}

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
    /// Without `--probe.peer-histograms`: peers get the 6 default series only (the status
    /// alone until they first answer).
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
    /// `--probe.transport`.
    pub transport: Transport,
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
    /// `--probe.secret-file` (the secret itself is only read when the engine starts).
    pub secret_file: Option<std::path::PathBuf>,
}

/// `--probe.transport`: how peers are probed (rdma-probe's verbs-free snapshot type, so the
/// setting parses in builds without `verbs`).
pub use rdma_probe::PeerTransport as Transport;

/// `--probe.transport`: `ud` or `rc`.
pub fn parse_transport(text: &str) -> Result<Transport, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "ud" => Ok(Transport::Ud),
        "rc" => Ok(Transport::Rc),
        _ => Err(format!("`{text}` is not a probe transport (`ud` or `rc`)")),
    }
}

/// Defaults, the same as `rdma_probe::EngineConfig::default()`.
pub const DEFAULT_INTERVAL_MS: u64 = 10_000;
/// Default `--probe.mesh-max` (the same as rdma-probe's `pinglist::DEFAULT_MESH_MAX`).
pub const DEFAULT_MESH_MAX: usize = 64;
/// Default message size, bytes.
pub const DEFAULT_SIZE: usize = 64;
/// Default timed exchanges per operation per round.
pub const DEFAULT_ITERATIONS: u64 = 100;
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
            transport: Transport::default(),
            peers_dns: None,
            peers_file: None,
            mesh_max: DEFAULT_MESH_MAX,
            rack: None,
            peer_histograms: false,
            secret_file: None,
        }
    }
}

/// The value grammars of the `--probe.*` options (declared in [`crate::options`]).
pub use crate::options::{parse_interval, parse_listen, parse_size};

/// The running engine (kept alive by the exporter; dropping it stops the probes).
#[derive(Default)]
pub struct Engine {
    #[cfg(feature = "verbs")]
    _engine: Option<rdma_probe::ProbeEngine>,
}

/// Start the probe engine when `settings.enable`; the source for the collector.
/// DNS discovery runs on `runtime`, the process's one async runtime.
#[cfg(feature = "verbs")]
pub fn start(
    settings: &ProbeSettings,
    runtime: &tokio::runtime::Handle,
) -> anyhow::Result<(Engine, ProbeSource)> {
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
        secret,
        transport: settings.transport,
        peers_dns: settings.peers_dns.clone(),
        peers_file: settings.peers_file.clone(),
        mesh_max: settings.mesh_max,
        own_labels: settings
            .rack
            .iter()
            .map(|r| ("rack".to_string(), r.clone()))
            .collect(),
        runtime: Some(runtime.clone()),
        ..rdma_probe::EngineConfig::default()
    };
    let engine = rdma_probe::ProbeEngine::start(config).context("--probe.enable")?;
    tracing::info!(
        interval_ms = settings.interval_ms,
        size = settings.size,
        iterations = settings.iterations,
        peers = settings.peers.len(),
        transport = ?settings.transport,
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
pub fn start(
    settings: &ProbeSettings,
    _runtime: &tokio::runtime::Handle,
) -> anyhow::Result<(Engine, ProbeSource)> {
    if settings.enable {
        anyhow::bail!("--probe.enable: rdmad was built without verbs support; cargo build-rdma");
    }
    Ok((Engine::default(), ProbeSource::default()))
}

struct Probes {
    source: ProbeSource,
}

impl Collector for Probes {
    fn update(&self, _scrape: &Scrape, out: &mut MetricSet) -> anyhow::Result<()> {
        #[cfg(feature = "verbs")]
        if let Some(handle) = &self.source.handle {
            emit(&handle.snapshot(), !self.source.no_peer_histograms, out)?;
        }
        // Without an engine (not enabled, or built without `verbs`): no series.
        let _ = (&self.source, out);
        Ok(())
    }
}

/// Each peer's `rack` label from discovery, looked up once per scrape (a scan per target
/// made a scrape quadratic in the peers: 2,000 peers cost 7x the scrape time of none).
fn racks(snapshot: &ProbeSnapshot) -> HashMap<&str, &str> {
    snapshot
        .peers
        .iter()
        .filter_map(|p| Some((p.peer.as_str(), p.labels.get("rack")?.as_str())))
        .collect()
}

fn target_labels(racks: &HashMap<&str, &str>, t: &TargetResult) -> Labels {
    let mut l = vec![
        ("device", t.device.clone()),
        ("port", t.port.to_string()),
        ("op", t.op.name().to_string()),
        ("kind", t.kind.to_string()),
        // Empty for loopback.
        ("peer", t.peer.clone().unwrap_or_default()),
        ("transport", t.transport.name().to_string()),
    ];
    if let Some(peer) = &t.peer {
        let rack = racks.get(peer.as_str()).copied().unwrap_or_default();
        l.push(("peer_rack", rack.to_string()));
    }
    l
}

/// The latency stats a peer gets by default; the others only with the peer detail.
const PEER_STATS: [&str; 2] = ["typical", "p99"];

/// Add the metrics of the engine's `snapshot` to `out`. Per peer by default at most 6
/// series (sent, lost by direction, latency typical and p99, status), and only the status
/// for a peer that never answered ([`TargetResult::ever_answered`]); `peer_detail`
/// (`--probe.peer-histograms`) adds the latency histogram, the other stats, runs and
/// failures, for every peer. Loopback targets always get everything.
pub fn emit(
    snapshot: &ProbeSnapshot,
    peer_detail: bool,
    out: &mut MetricSet,
) -> anyhow::Result<()> {
    let racks = racks(snapshot);
    for t in &snapshot.targets {
        let peer = t.kind == "peer";
        if peer && !peer_detail && !t.ever_answered() {
            // Nothing measured: sent and lost would be 0 (or equal), no latency; its
            // rdma_probe_peer_status (below) says why.
            continue;
        }
        let l = target_labels(&racks, t);
        let detail = peer_detail || !peer;
        if detail {
            out.add_declared(
                &LATENCY_SECONDS,
                l.clone(),
                Value::Histogram(t.latency_seconds.clone()),
            )?;
        }
        if let Some(last) = &t.last {
            for (stat, us) in [
                ("min", last.t_min_us),
                ("max", last.t_max_us),
                ("typical", last.t_typical_us),
                ("avg", last.t_avg_us),
                ("stdev", last.t_stdev_us),
                ("p99", last.p99_us),
                ("p99_9", last.p99_9_us),
            ] {
                if !detail && !PEER_STATS.contains(&stat) {
                    continue;
                }
                let mut lb = l.clone();
                lb.push(("stat", stat.to_string()));
                out.add_declared(&LATENCY_LAST_SECONDS, lb, Value::Float(us / 1e6))?;
            }
        }
        if peer {
            out.add_declared(&SENT, l.clone(), Value::Int(t.sent_total))?;
            for (direction, n) in [
                ("request", t.lost_request_total),
                ("reply", t.lost_reply_total),
            ] {
                let mut lb = l.clone();
                lb.push(("direction", direction.to_string()));
                out.add_declared(&LOST, lb, Value::Int(n))?;
            }
        }
        if !detail {
            continue;
        }
        out.add_declared(&RUNS, l.clone(), Value::Int(t.runs_total))?;
        for (status, n) in &t.failures_total {
            let mut lb = l.clone();
            lb.push(("status", status.clone()));
            out.add_declared(&FAILURES, lb, Value::Int(*n))?;
        }
        if !peer {
            // Peers have rdma_probe_peer_status instead.
            out.add_declared(&UP, l, Value::Int(u64::from(t.up)))?;
        }
    }
    for r in &snapshot.registrations {
        let l: Labels = vec![
            ("device", r.device.clone()),
            ("size_bytes", r.size_bytes.to_string()),
        ];
        out.add_declared(
            &MR_REGISTRATION_SECONDS,
            l.clone(),
            Value::Histogram(r.seconds.clone()),
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
    // The device each peer is probed from: its first target's (one pass, not one per peer).
    let mut devices: HashMap<&str, &str> = HashMap::new();
    for t in &snapshot.targets {
        if let Some(peer) = &t.peer {
            devices.entry(peer.as_str()).or_insert(t.device.as_str());
        }
    }
    for p in &snapshot.peers {
        let Some(status) = p.status else {
            // Not tried yet: no verdict.
            continue;
        };
        let device = devices
            .get(p.peer.as_str())
            .copied()
            .unwrap_or_default()
            .to_string();
        out.add_declared(
            &PEER_STATUS,
            vec![
                ("device", device),
                ("peer", p.peer.clone()),
                (
                    "peer_rack",
                    p.labels.get("rack").cloned().unwrap_or_default(),
                ),
            ],
            Value::Int(status.value()),
        )?;
    }
    if let Some(seconds) = snapshot.round_duration_seconds {
        out.add_declared(&ROUND_DURATION_SECONDS, vec![], Value::Float(seconds))?;
        out.add_declared(&ROUNDS_LATE, vec![], Value::Int(snapshot.rounds_late_total))?;
    }
    let d = &snapshot.discovery;
    for (source, n) in &d.peers {
        out.add_declared(
            &DISCOVERED_PEERS,
            vec![("source", source.clone())],
            Value::Int(*n),
        )?;
    }
    for (source, n) in &d.invalid_entries {
        out.add_declared(
            &DISCOVERY_INVALID_ENTRIES,
            vec![("source", source.clone())],
            Value::Int(*n),
        )?;
    }
    for ((source, reason), n) in &d.errors_total {
        out.add_declared(
            &DISCOVERY_ERRORS,
            vec![("source", source.clone()), ("reason", reason.clone())],
            Value::Int(*n),
        )?;
    }
    if !snapshot.peers.is_empty() || !d.peers.is_empty() {
        let planned = snapshot.peers.iter().filter(|p| p.planned).count() as u64;
        out.add_declared(&PINGLIST_PEERS, vec![], Value::Int(planned))?;
    }
    for (reason, n) in &snapshot.handshakes_refused_total {
        out.add_declared(
            &HANDSHAKES_REFUSED,
            vec![("reason", reason.clone())],
            Value::Int(*n),
        )?;
    }
    out.add_declared(
        &HANDSHAKES_ACCEPTED,
        vec![],
        Value::Int(snapshot.handshakes_accepted_total),
    )?;
    for e in &snapshot.ud_endpoints {
        let l: Labels = vec![("device", e.device.clone())];
        for (reason, n) in &e.dropped_total {
            let mut lb = l.clone();
            lb.push(("reason", reason.clone()));
            out.add_declared(&UD_DROPPED, lb, Value::Int(*n))?;
        }
        out.add_declared(&UD_ANSWERED, l.clone(), Value::Int(e.answered_total))?;
        out.add_declared(&UD_SESSIONS, l, Value::Int(e.sessions as u64))?;
    }
    out.add_declared(
        &CPU_SECONDS,
        vec![],
        Value::Float(snapshot.cpu_seconds_total),
    )?;
    out.add_declared(&ROUNDS, vec![], Value::Int(snapshot.rounds_total))?;
    Ok(())
}

#[cfg(test)]
mod tests;
