//! The probe engine: runs every configured probe on an interval in its own threads and
//! publishes the results through a [`ProbeHandle`] that rdmad reads on scrape.
//!
//! Two loops, each on its own thread and each on the interval: the loopback loop (per device
//! port the loopback operations, one thread per QP, and every `mr_every` rounds the MR
//! registration timings) and the peer loop. Peers never delay the loopback probes.
//!
//! The peer loop never waits on a dead peer. A round starts a run on every planned peer
//! that is connected (UD: handed to the device's one UD endpoint, which runs up to
//! [`crate::ud::MAX_ACTIVE_JOBS`] peers at once, one request outstanding each; RC: a thread
//! per run, at most [`MAX_RC_RUNS`]) and a connect (TCP connect and handshake, a thread each,
//! at most [`MAX_CONNECTS`] at once, peers whose last connect timed out last and on at most
//! [`MAX_SILENT_CONNECTS`] of them) for every planned peer
//! without a connection whose backoff is over; a peer connected during the round is run at
//! once. Every run ends by the round's end (`min(run_timeout, interval)` after its start),
//! so a round takes its interval whatever the number of silent or slow peers: a silent
//! peer's connect spans rounds in its own thread while the others are probed. The loop
//! polls for finished connects and runs every [`PEER_TICK`]. Threads of the engine: the
//! two loops, at most `MAX_CONNECTS + MAX_RC_RUNS` helpers, one per UD endpoint (device),
//! the loopback probes' per-QP threads while they run, and the listener's (bounded by
//! [`crate::peer::MAX_HANDSHAKES`] and [`crate::peer::MAX_CLIENTS`]).
//!
//! Results go into one [`ProbeSnapshot`] under a mutex: histograms (cumulative, for
//! Prometheus), the last run's perftest summary, success and failure counts (failures by WC
//! status name), handshake refusals by reason, the CPU time all engine threads used, the
//! last peer round's duration and the rounds that took longer than the interval. A failed
//! probe's QPs and MRs are dropped and rebuilt; a failed peer is retried with exponential
//! backoff. Each peer carries a verdict ([`PeerStatus`]): ok, or the layer that failed
//! (`agent`: TCP refused or the handshake failed; `host`: the TCP connect timed out; `rdma`:
//! the probes themselves failed or went unanswered: on UD, two runs in a row without any
//! answer, since one such run on a path that answered the round before is what a lossy path
//! does now and then, and its requests are counted as loss by direction instead).
//!
//! Peers are probed over [`PeerTransport::Ud`] (default: UD echo on one UD QP per local
//! device, whatever the number of peers) or [`PeerTransport::Rc`] (one-sided READ or WRITE on
//! an RC QP pair per peer). Both publish the same per-peer results: latency samples (round
//! trips), runs, failures, and requests sent and lost by direction (UD: a request without
//! its reply within `reply_timeout`, split by the reply's `received` count, see
//! [`crate::ud`]; RC: the request a failed run stopped at, counted as request loss).
//!
//! The peers are discovered again every interval ([`crate::discovery`]: static, DNS, file)
//! on a thread of its own, so a DNS server that does not answer never holds a round; each
//! round takes the newest answer (the first round waits for the first): new peers are
//! added, gone ones dropped with their results (their series vanish), and the
//! [`crate::pinglist`] planner picks the peers of the round (a full mesh up to `mesh_max`).
//! Above `mesh_max` the connections of peers not planned in a round are closed, so the QPs
//! held stay bounded by the plan. A peer whose handshake shows this engine's own GID is
//! this engine: it is dropped and not tried again while discovery keeps listing it.
use crate::clock::{Clock, ClockInfo};
use crate::cpu::CpuMeter;
use crate::discovery::{Discovery, DiscoveryConfig, DiscoveryStats};
use crate::failure::FailureKind;
use crate::failure::ProbeFailure;
use crate::handshake::Secret;
use crate::loopback::{LoopbackProbe, RunParams};
use crate::mrreg::{time_registrations, DEFAULT_MR_SIZES};
use crate::peer::{PeerConn, PeerServer, ServerStats, UdPeerConn};
use crate::pinglist::{Pinglist, DEFAULT_MESH_MAX};
use crate::snapshot::{
    Histogram, PeerState, PeerStatus, PeerTransport, ProbeOp, ProbeSnapshot, RegistrationResult,
    TargetResult, UdEndpointState, REGISTRATION_BUCKETS,
};
use crate::stats::LatencySummary;
use crate::ud::{DropReason, UdEndpoints};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod feed;
mod peers;

use peers::peer_loop;

/// What the engine probes and how often.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Time between the starts of two rounds.
    pub interval: Duration,
    /// Timed exchanges per operation per round.
    pub iterations: u64,
    /// Untimed exchanges before them.
    pub warmup: u64,
    /// Message size, bytes.
    pub size: usize,
    /// Loopback operations.
    pub ops: Vec<ProbeOp>,
    /// Devices to probe in loopback (empty: every device with an ACTIVE port; use
    /// `loopback = false` for none).
    pub devices: Vec<String>,
    /// Whether to run loopback probes at all.
    pub loopback: bool,
    /// GID index (default: the RoCE v2 GID `choose_gid` picks).
    pub gid_index: Option<u8>,
    /// MR sizes to time (empty: none).
    pub mr_sizes: Vec<usize>,
    /// Time MR registration every this many rounds (the first round included; default 30:
    /// every 5 minutes, since registering 64 MiB pins and zeroes 16384 pages).
    pub mr_every: u64,
    /// Give up on one run after this long.
    pub run_timeout: Duration,
    /// Accept peer handshakes here.
    pub listen: Option<SocketAddr>,
    /// The shared secret (required for `listen` and `peers`).
    pub secret: Option<Secret>,
    /// Peers to probe, `HOST:PORT` of their `listen`.
    pub peers: Vec<String>,
    /// How peers are probed (default UD).
    pub transport: PeerTransport,
    /// Peers from DNS: every address of this name, ports from its `_rdmad-probe._tcp` SRV.
    pub peers_dns: Option<String>,
    /// The DNS server for `peers_dns` (default: the system's resolver).
    pub dns_server: Option<SocketAddr>,
    /// Peers from a file_sd-style JSON/YAML file, re-read when it changes.
    pub peers_file: Option<PathBuf>,
    /// This host's own labels (`rack`, ...), over those of its entry in the peers file.
    pub own_labels: BTreeMap<String, String>,
    /// Largest peer set probed as a full mesh; also the most peers probed in one round.
    pub mesh_max: usize,
    /// Operation for RC peers: read or write (UD peers are always `send`).
    pub peer_op: ProbeOp,
    /// A UD request without its reply this long is lost.
    pub reply_timeout: Duration,
    /// Device for peer QPs (default: the one owning the TCP connection's local address).
    pub peer_device: Option<String>,
    /// First reconnect delay after a peer failure; doubles up to `backoff_max`.
    pub backoff_min: Duration,
    /// Longest reconnect delay: a peer back from a fault is connected again within it (and
    /// a connect timeout), so the pingmesh alerts about it resolve within a minute.
    pub backoff_max: Duration,
    /// The process's async runtime, for the `peers_dns` lookups (rdmad passes its one
    /// runtime); `None`: the DNS source builds its own.
    pub runtime: Option<tokio::runtime::Handle>,
}

impl EngineConfig {
    /// Whether any peer source is configured.
    pub fn has_peers(&self) -> bool {
        !self.peers.is_empty() || self.peers_dns.is_some() || self.peers_file.is_some()
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            interval: Duration::from_secs(10),
            iterations: 100,
            warmup: 10,
            size: 64,
            ops: ProbeOp::ALL.to_vec(),
            devices: Vec::new(),
            loopback: true,
            gid_index: None,
            mr_sizes: DEFAULT_MR_SIZES.to_vec(),
            mr_every: 30,
            run_timeout: Duration::from_secs(5),
            listen: None,
            secret: None,
            peers: Vec::new(),
            transport: PeerTransport::Ud,
            peers_dns: None,
            dns_server: None,
            peers_file: None,
            own_labels: BTreeMap::new(),
            mesh_max: DEFAULT_MESH_MAX,
            peer_op: ProbeOp::Read,
            reply_timeout: Duration::from_millis(500),
            peer_device: None,
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(15),
            runtime: None,
        }
    }
}

/// Errors starting the engine.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The configuration is inconsistent.
    #[error("probe configuration: {0}")]
    Config(String),
    /// The peer listener could not be bound.
    #[error("probe listener on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A thread could not be started.
    #[error("starting the probe thread: {0}")]
    Spawn(#[source] std::io::Error),
}

#[derive(Debug)]
struct State {
    clock: Option<ClockInfo>,
    targets: Vec<TargetResult>,
    registrations: Vec<RegistrationResult>,
    peers: Vec<PeerState>,
    discovery: DiscoveryStats,
    own_labels: BTreeMap<String, String>,
    own_peers: Vec<String>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Peer rounds.
    rounds: AtomicU64,
    loopback_rounds: AtomicU64,
    /// Whether peers are configured (rounds_total counts peer rounds then).
    has_peers: bool,
    /// The last peer round's duration (u64::MAX: none yet).
    round_duration_ns: AtomicU64,
    rounds_late: AtomicU64,
    cpu_ns: Arc<AtomicU64>,
    server: Arc<ServerStats>,
    ud: Arc<UdEndpoints>,
    started: Instant,
    stop: Mutex<bool>,
    wake: Condvar,
}

/// A cheap, cloneable read handle on the engine's results.
#[derive(Debug, Clone)]
pub struct ProbeHandle(Arc<Shared>);

impl ProbeHandle {
    /// A copy of the current results.
    pub fn snapshot(&self) -> ProbeSnapshot {
        let s = &self.0;
        let st = s.state.lock().unwrap_or_else(|p| p.into_inner());
        let endpoints = s.ud.all();
        let ud_cpu: u64 = endpoints
            .iter()
            .map(|e| e.stats().cpu_ns.load(Ordering::Relaxed))
            .sum();
        let cpu_ns =
            s.cpu_ns.load(Ordering::Relaxed) + s.server.cpu_ns.load(Ordering::Relaxed) + ud_cpu;
        let mut ud_endpoints: Vec<UdEndpointState> = endpoints
            .iter()
            .map(|e| UdEndpointState {
                device: e.device().to_string(),
                sessions: e.sessions(),
                address_handles: e.address_handles(),
                answered_total: e.stats().answered.load(Ordering::Relaxed),
                dropped_total: DropReason::ALL
                    .iter()
                    .map(|r| (r.name().to_string(), e.stats().dropped(*r)))
                    .collect(),
            })
            .collect();
        ud_endpoints.sort_by(|a, b| a.device.cmp(&b.device));
        let duration = s.round_duration_ns.load(Ordering::Relaxed);
        ProbeSnapshot {
            clock: st.clock,
            rounds_total: if s.has_peers {
                s.rounds.load(Ordering::Relaxed)
            } else {
                s.loopback_rounds.load(Ordering::Relaxed)
            },
            round_duration_seconds: (s.has_peers && duration != u64::MAX)
                .then(|| duration as f64 / 1e9),
            rounds_late_total: s.rounds_late.load(Ordering::Relaxed),
            cpu_seconds_total: cpu_ns as f64 / 1e9,
            uptime_seconds: s.started.elapsed().as_secs_f64(),
            targets: st.targets.clone(),
            registrations: st.registrations.clone(),
            peers: st.peers.clone(),
            handshakes_accepted_total: s.server.accepted.load(Ordering::Relaxed),
            handshakes_refused_total: s.server.refused(),
            ud_endpoints,
            discovery: st.discovery.clone(),
            own_labels: st.own_labels.clone(),
            own_peers: st.own_peers.clone(),
        }
    }
}

struct Key<'a> {
    kind: &'static str,
    device: &'a str,
    port: u8,
    peer: Option<&'a str>,
    op: ProbeOp,
    transport: PeerTransport,
    size: usize,
}

/// What one run adds to a target: its samples (or why it failed) and, for peers, the
/// requests it sent and lost.
struct Outcome {
    result: Result<Vec<f64>, ProbeFailure>,
    sent: u64,
    lost_request: u64,
    lost_reply: u64,
}

impl From<Result<Vec<f64>, ProbeFailure>> for Outcome {
    fn from(result: Result<Vec<f64>, ProbeFailure>) -> Outcome {
        Outcome {
            result,
            sent: 0,
            lost_request: 0,
            lost_reply: 0,
        }
    }
}

/// Whether a failed run of `t`, before it is counted, is logged as a warning: when the
/// target goes down, and for its first result ever. Later failures go to debug (each is
/// counted by kind). A peer that never answered used to warn at every attempt (a dead peer is
/// retried at its backoff), for as long as it stayed dead.
fn failure_warns(t: &TargetResult) -> bool {
    t.up || (t.runs_total == 0 && t.failures_total.is_empty())
}

impl Shared {
    fn record(&self, k: Key<'_>, outcome: impl Into<Outcome>) {
        let Outcome {
            result,
            sent,
            lost_request,
            lost_reply,
        } = outcome.into();
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let pos = st.targets.iter().position(|t| {
            t.kind == k.kind
                && t.peer.as_deref() == k.peer
                && t.op == k.op
                && t.transport == k.transport
                && (k.peer.is_some() || (t.device == k.device && t.port == k.port))
        });
        let t = match pos {
            Some(i) => &mut st.targets[i],
            None => {
                st.targets.push(TargetResult::empty(
                    k.kind,
                    k.device,
                    k.port,
                    k.peer.map(str::to_string),
                    k.op,
                    k.transport,
                    k.size,
                ));
                st.targets.last_mut().expect("just pushed")
            }
        };
        if !k.device.is_empty() {
            t.device = k.device.to_string();
            t.port = k.port;
        }
        t.sent_total += sent;
        t.lost_total += lost_request + lost_reply;
        t.lost_request_total += lost_request;
        t.lost_reply_total += lost_reply;
        match result {
            Ok(mut samples) => {
                for ns in &samples {
                    t.latency_seconds.observe(ns / 1e9);
                }
                // A lossy run may end with answers but no sample past its warm-up: the
                // last latency stays the last one measured.
                if let Some(last) = LatencySummary::from_ns(&mut samples) {
                    t.last = Some(last);
                }
                t.runs_total += 1;
                t.up = true;
            }
            Err(f) => {
                if failure_warns(t) {
                    tracing::warn!(kind = k.kind, device = k.device, peer = k.peer, op = %k.op, "probe failed: {f}");
                } else {
                    tracing::debug!(kind = k.kind, device = k.device, peer = k.peer, op = %k.op, "probe failed: {f}");
                }
                *t.failures_total.entry(f.kind.name()).or_insert(0) += 1;
                t.up = false;
                t.last_error = Some(f.to_string());
            }
        }
    }

    /// Wait until `until` or until stopped; true when stopped.
    fn sleep_until(&self, until: Instant) -> bool {
        let mut stop = self.stop.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if *stop {
                return true;
            }
            let now = Instant::now();
            if now >= until {
                return false;
            }
            stop = self
                .wake
                .wait_timeout(stop, until - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    fn record_registration(&self, device: &str, size: usize, r: &Result<Duration, ProbeFailure>) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let pos = st
            .registrations
            .iter()
            .position(|x| x.device == device && x.size_bytes == size);
        let e = match pos {
            Some(i) => &mut st.registrations[i],
            None => {
                st.registrations.push(RegistrationResult {
                    device: device.to_string(),
                    size_bytes: size,
                    last_seconds: None,
                    seconds: Histogram::new(REGISTRATION_BUCKETS),
                    failures_total: 0,
                });
                st.registrations.last_mut().expect("just pushed")
            }
        };
        match r {
            Ok(d) => {
                e.last_seconds = Some(d.as_secs_f64());
                e.seconds.observe(d.as_secs_f64());
            }
            Err(f) => {
                tracing::warn!(device, size, "MR registration failed: {f}");
                e.failures_total += 1;
            }
        }
    }
}

/// The running engine. Dropping it stops its threads and frees every QP and MR.
#[derive(Debug)]
pub struct ProbeEngine {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    server: Option<PeerServer>,
}

impl ProbeEngine {
    /// Validate `config`, bind the listener (if any) and start the probe thread.
    pub fn start(config: EngineConfig) -> Result<ProbeEngine, EngineError> {
        if (config.listen.is_some() || config.has_peers()) && config.secret.is_none() {
            return Err(EngineError::Config(
                "peer probes and the probe listener need a shared secret".into(),
            ));
        }
        if config.transport == PeerTransport::Rc && config.peer_op == ProbeOp::Send {
            return Err(EngineError::Config(
                "RC peer probes are one-sided: peer op must be read or write".into(),
            ));
        }
        if config.transport == PeerTransport::Ud
            && config.has_peers()
            && config.size < crate::ud::UD_HEADER_V2
        {
            return Err(EngineError::Config(format!(
                "UD peer probes carry at least {} bytes (header, count and tag), not {}",
                crate::ud::UD_HEADER_V2,
                config.size
            )));
        }
        if config.has_peers() && config.size > crate::peer::PEER_BUFFER {
            return Err(EngineError::Config(format!(
                "peer probes use at most {} byte messages",
                crate::peer::PEER_BUFFER
            )));
        }
        if config.iterations == 0 || config.size == 0 || config.interval.is_zero() {
            return Err(EngineError::Config(
                "interval, iterations and size must be positive".into(),
            ));
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                clock: None,
                targets: Vec::new(),
                registrations: Vec::new(),
                peers: Vec::new(),
                discovery: DiscoveryStats::default(),
                own_labels: BTreeMap::new(),
                own_peers: Vec::new(),
            }),
            rounds: AtomicU64::new(0),
            loopback_rounds: AtomicU64::new(0),
            has_peers: config.has_peers(),
            round_duration_ns: AtomicU64::new(u64::MAX),
            rounds_late: AtomicU64::new(0),
            cpu_ns: Arc::new(AtomicU64::new(0)),
            server: Arc::new(ServerStats::default()),
            ud: Arc::new(UdEndpoints::default()),
            started: Instant::now(),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let server = match (config.listen, &config.secret) {
            (Some(addr), Some(secret)) => Some(
                PeerServer::start(
                    addr,
                    secret.clone(),
                    config.peer_device.clone(),
                    config.gid_index,
                    Arc::clone(&shared.server),
                    Arc::clone(&shared.ud),
                )
                .map_err(|source| EngineError::Listen { addr, source })?,
            ),
            _ => None,
        };
        let listen = server.as_ref().map(PeerServer::local_addr);
        let discovery = DiscoveryConfig {
            static_peers: config.peers.clone(),
            dns_name: config.peers_dns.clone(),
            dns_server: config.dns_server,
            dns_timeout: None,
            dns_keep_last_good: None,
            file: config.peers_file.clone(),
            default_port: listen.map_or(crate::DEFAULT_PEER_PORT, |l| l.port()),
            listen,
            own_labels: config.own_labels.clone(),
            runtime: config.runtime.clone(),
        };
        let mut engine = ProbeEngine {
            shared,
            threads: Vec::new(),
            server,
        };
        let config = Arc::new(config);
        if config.loopback {
            let (s2, c2) = (Arc::clone(&engine.shared), Arc::clone(&config));
            let t = std::thread::Builder::new()
                .name("rdma-probe-loop".into())
                .spawn(move || loopback_loop(&s2, &c2))
                .map_err(EngineError::Spawn)?;
            engine.threads.push(t);
        }
        let s2 = Arc::clone(&engine.shared);
        let t = std::thread::Builder::new()
            .name("rdma-probe".into())
            .spawn(move || peer_loop(&s2, &config, discovery))
            .map_err(EngineError::Spawn)?;
        engine.threads.push(t);
        Ok(engine)
    }

    /// The read handle.
    pub fn handle(&self) -> ProbeHandle {
        ProbeHandle(Arc::clone(&self.shared))
    }

    /// Where the peer listener listens.
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(PeerServer::local_addr)
    }

    /// Stop and wait for the threads (also done on drop).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        *self.shared.stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.shared.wake.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.server = None;
    }
}

impl Drop for ProbeEngine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Device ports with an ACTIVE port, for `devices = []`.
fn active_ports(filter: &[String]) -> Vec<(String, u8)> {
    let mut out = Vec::new();
    let names: Vec<String> = if filter.is_empty() {
        rdma_verbs::devices()
            .map(|l| l.into_iter().map(|d| d.name).collect())
            .unwrap_or_default()
    } else {
        filter.to_vec()
    };
    for name in names {
        let Ok(ctx) = rdma_verbs::open(&name) else {
            // Keep a configured device even when absent now: its failures get counted.
            if !filter.is_empty() {
                out.push((name, 1));
            }
            continue;
        };
        let ports = ctx.query_device().map(|a| a.phys_port_cnt).unwrap_or(1);
        for p in 1..=ports {
            let active = ctx
                .query_port(p)
                .map(|a| a.state == rdma_verbs::PortState::Active)
                .unwrap_or(false);
            if active || !filter.is_empty() {
                out.push((name.clone(), p));
            }
        }
    }
    out
}

/// Connects (TCP connect and handshake, each in its own short-lived thread) in progress at
/// once: a silent peer holds one for up to [`crate::peer::HANDSHAKE_TIMEOUT`] twice (connect,
/// then handshake), so 2,000 silent peers cost at most this many threads, never one each.
pub const MAX_CONNECTS: usize = 32;
/// Of them, connects to peers whose last connect timed out (`host`: the expensive ones, a
/// slot held for seconds) take at most this many; the others stay free for peers that
/// answer, so a healthy peer that reconnects never queues behind silent ones.
pub const MAX_SILENT_CONNECTS: usize = 24;
/// RC peer runs in progress at once (each blocks a thread on its QP; UD runs need no thread:
/// the device's one UD endpoint runs up to [`crate::ud::MAX_ACTIVE_JOBS`] at once).
pub const MAX_RC_RUNS: usize = 16;
/// How often the peer thread looks for finished connects and runs within a round.
const PEER_TICK: Duration = Duration::from_millis(2);

/// The loopback probes and MR registration timings, on their own thread and interval: never
/// late because of peers.
fn loopback_loop(shared: &Shared, cfg: &EngineConfig) {
    let mut meter = CpuMeter::start();
    let clock = Clock::calibrate();
    let mut probes: Vec<LoopbackProbe> = active_ports(&cfg.devices)
        .into_iter()
        .map(|(d, p)| {
            LoopbackProbe::new(&d, p, cfg.gid_index, cfg.size)
                .with_cpu_sink(Arc::clone(&shared.cpu_ns))
        })
        .collect();
    let params = RunParams {
        size: cfg.size,
        warmup: cfg.warmup,
        iterations: cfg.iterations,
        timeout: cfg.run_timeout,
    };
    let mut round: u64 = 0;
    loop {
        let start = Instant::now();
        for probe in &mut probes {
            for &op in &cfg.ops {
                let r = probe.run(op, &params, &clock);
                shared.record(
                    Key {
                        kind: "loopback",
                        device: probe.device(),
                        port: probe.port(),
                        peer: None,
                        op,
                        transport: PeerTransport::Rc,
                        size: cfg.size,
                    },
                    r,
                );
            }
        }
        if !cfg.mr_sizes.is_empty() && round.checked_rem(cfg.mr_every.max(1)) == Some(0) {
            let mut devices: Vec<&str> = probes.iter().map(|p| p.device()).collect();
            devices.dedup();
            for d in devices {
                let timed = rdma_verbs::open(d)
                    .map_err(|e| ProbeFailure::setup("open", e))
                    .and_then(|ctx| time_registrations(&ctx, &cfg.mr_sizes));
                match timed {
                    Ok(list) => {
                        for r in list {
                            shared.record_registration(d, r.size, &r.result);
                        }
                    }
                    Err(f) => {
                        for &size in &cfg.mr_sizes {
                            shared.record_registration(d, size, &Err(f.clone()));
                        }
                    }
                }
            }
        }
        round += 1;
        shared.loopback_rounds.fetch_add(1, Ordering::Relaxed);
        meter.flush(&shared.cpu_ns);
        if shared.sleep_until(start + cfg.interval) {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
