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
//! the probes themselves failed or went unanswered).
//!
//! Peers are probed over [`PeerTransport::Ud`] (default: UD echo on one UD QP per local
//! device, whatever the number of peers) or [`PeerTransport::Rc`] (one-sided READ or WRITE on
//! an RC QP pair per peer). Both publish the same per-peer results: latency samples (round
//! trips), runs, failures, and requests sent and lost by direction (UD: a request without
//! its reply within `reply_timeout`, split by the reply's `received` count, see
//! [`crate::ud`]; RC: the request a failed run stopped at, counted as request loss).
//!
//! The peers are discovered again every round ([`crate::discovery`]: static, DNS, file):
//! new peers are added, gone ones dropped with their results (their series vanish), and the
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
    TargetResult, UdEndpointState, LATENCY_BUCKETS, REGISTRATION_BUCKETS,
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
    /// Longest reconnect delay.
    pub backoff_max: Duration,
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
            backoff_max: Duration::from_secs(60),
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
                st.targets.push(TargetResult {
                    kind: k.kind,
                    device: k.device.to_string(),
                    port: k.port,
                    peer: k.peer.map(str::to_string),
                    op: k.op,
                    transport: k.transport,
                    size_bytes: k.size,
                    latency_seconds: Histogram::new(LATENCY_BUCKETS),
                    last: None,
                    runs_total: 0,
                    sent_total: 0,
                    lost_total: 0,
                    lost_request_total: 0,
                    lost_reply_total: 0,
                    failures_total: BTreeMap::new(),
                    up: false,
                    last_error: None,
                });
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
                t.last = LatencySummary::from_ns(&mut samples);
                t.runs_total += 1;
                t.up = true;
            }
            Err(f) => {
                if t.up || t.runs_total == 0 {
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

/// A peer's connection, of the configured transport (the RC one boxed: its QP pair and
/// buffers make it four times the UD one).
enum Conn {
    Rc(Box<PeerConn>),
    Ud(UdPeerConn),
}

impl Conn {
    fn device(&self) -> &str {
        match self {
            Conn::Rc(c) => c.device(),
            Conn::Ud(c) => c.device(),
        }
    }

    /// Whether the peer's handshake showed this engine's own GID.
    fn is_self(&self) -> bool {
        match self {
            Conn::Rc(c) => c.is_self(),
            Conn::Ud(c) => c.is_self(),
        }
    }
}

struct PeerLink {
    addr: String,
    conn: Option<Conn>,
    backoff: Duration,
    next_attempt: Instant,
    connects: u64,
    labels: crate::discovery::Labels,
    /// Failures in a row (connects are tried the least failed first).
    fails: u32,
    /// The connect in progress.
    connecting: Option<mpsc::Receiver<Connected>>,
    /// The run in progress.
    running: Option<Running>,
    /// Picked by the planner for the current round.
    planned: bool,
    status: Option<PeerStatus>,
}

impl PeerLink {
    fn new(addr: String, backoff: Duration) -> PeerLink {
        PeerLink {
            addr,
            conn: None,
            backoff,
            next_attempt: Instant::now(),
            connects: 0,
            labels: crate::discovery::Labels::default(),
            fails: 0,
            connecting: None,
            running: None,
            planned: false,
            status: None,
        }
    }
}

/// The peers of the engine between rounds: links by address, the plan for them, and the
/// addresses found to be this engine.
struct Mesh {
    links: BTreeMap<String, PeerLink>,
    /// Found to be this engine by GID: never probed while discovery lists them.
    own_by_gid: BTreeSet<String>,
    plan: Option<Pinglist>,
    own_id: String,
}

impl Mesh {
    /// Follow the discovered set: add new peers, drop gone ones and their results.
    fn update(&mut self, shared: &Shared, cfg: &EngineConfig, set: &crate::discovery::PeerSet) {
        let before: Vec<String> = self.links.keys().cloned().collect();
        self.own_by_gid.retain(|a| set.peers.contains_key(a));
        let gone: Vec<String> = self
            .links
            .keys()
            .filter(|a| !set.peers.contains_key(*a) || self.own_by_gid.contains(*a))
            .cloned()
            .collect();
        for a in &gone {
            self.links.remove(a);
        }
        for (addr, peer) in &set.peers {
            if self.own_by_gid.contains(addr) {
                continue;
            }
            let link = self
                .links
                .entry(addr.clone())
                .or_insert_with(|| PeerLink::new(addr.clone(), cfg.backoff_min));
            link.labels = std::sync::Arc::clone(&peer.labels);
        }
        if !gone.is_empty() {
            let mut st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            st.targets
                .retain(|t| t.peer.as_ref().is_none_or(|p| !gone.contains(p)));
        }
        let own_id = set
            .own_addrs
            .iter()
            .next()
            .cloned()
            .unwrap_or_else(|| cfg.listen.map(|l| l.to_string()).unwrap_or_default());
        let after: Vec<&String> = self.links.keys().collect();
        if self.plan.is_none()
            || own_id != self.own_id
            || after != before.iter().collect::<Vec<_>>()
        {
            let peers: Vec<(&str, Option<&str>)> = self
                .links
                .values()
                .map(|l| (l.addr.as_str(), l.labels.get("rack").map(String::as_str)))
                .collect();
            self.plan = Some(Pinglist::new(cfg.mesh_max, &own_id, set.own_rack(), &peers));
            self.own_id = own_id;
        }
    }
}

impl PeerLink {
    /// A connect or a run failed at `now`: the next attempt waits the current backoff, and
    /// the backoff after that doubles, up to `max`.
    fn failed(&mut self, now: Instant, max: Duration) {
        self.next_attempt = now + self.backoff;
        self.backoff = (self.backoff * 2).min(max);
        self.fails = self.fails.saturating_add(1);
    }
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

/// The layer a failure points at (see [`PeerStatus`]).
fn layer(kind: FailureKind) -> PeerStatus {
    match kind {
        FailureKind::Connect | FailureKind::Handshake | FailureKind::PeerClosed => {
            PeerStatus::Agent
        }
        FailureKind::HostUnreachable => PeerStatus::Host,
        _ => PeerStatus::Rdma,
    }
}

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

/// What a connect thread hands back.
type Connected = Result<Conn, ProbeFailure>;

/// An RC run in its thread: the connection goes there and comes back with the result.
type RcDone = (Box<PeerConn>, Result<Vec<f64>, ProbeFailure>);

/// A run in progress.
enum Running {
    Ud(crate::ud::PendingRun),
    Rc(mpsc::Receiver<RcDone>),
}

/// A thread slot of a bounded kind (connects, RC runs): freed when the thread ends.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(count: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(Arc::clone(count)))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn peer_key<'a>(cfg: &EngineConfig, device: &'a str, peer: &'a str) -> Key<'a> {
    Key {
        kind: "peer",
        device,
        port: 1,
        peer: Some(peer),
        op: match cfg.transport {
            PeerTransport::Ud => ProbeOp::Send,
            PeerTransport::Rc => cfg.peer_op,
        },
        transport: cfg.transport,
        size: cfg.size,
    }
}

/// The peer thread's bounded helpers and what it needs to start runs.
struct Peers<'a> {
    shared: &'a Shared,
    cfg: &'a EngineConfig,
    clock: Clock,
    connects: Arc<AtomicUsize>,
    rc_runs: Arc<AtomicUsize>,
}

impl Peers<'_> {
    /// Start a connect to `link` in its own thread, if a connect slot is free.
    fn start_connect(&self, link: &mut PeerLink) -> bool {
        let Some(slot) = Slot::take(&self.connects, MAX_CONNECTS) else {
            return false;
        };
        let cfg = self.cfg;
        let secret = cfg.secret.clone().expect("checked at start");
        let (addr, device, gid, size, transport) = (
            link.addr.clone(),
            cfg.peer_device.clone(),
            cfg.gid_index,
            cfg.size,
            cfg.transport,
        );
        let ud = Arc::clone(&self.shared.ud);
        let (tx, rx) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("rdma-probe-connect".into())
            .spawn(move || {
                let _slot = slot;
                let device = device.as_deref();
                let made: Connected = match transport {
                    PeerTransport::Rc => PeerConn::connect(&addr, &secret, device, gid, size)
                        .map(|c| Conn::Rc(Box::new(c))),
                    PeerTransport::Ud => {
                        UdPeerConn::connect(&addr, &secret, device, gid, size, &ud).map(Conn::Ud)
                    }
                };
                let _ = tx.send(made);
            });
        match spawned {
            Ok(_) => {
                link.connecting = Some(rx);
                true
            }
            Err(e) => {
                tracing::warn!("no thread for a peer connect: {e}");
                false
            }
        }
    }

    /// Start a run on `link`'s connection, ending by `deadline`; false when none could start
    /// (no connection, or no RC run slot free).
    fn start_run(&self, link: &mut PeerLink, deadline: Instant) -> bool {
        let cfg = self.cfg;
        let timeout = deadline.saturating_duration_since(Instant::now());
        match link.conn.take() {
            None => false,
            Some(Conn::Ud(c)) => {
                let pending = c.start_run(
                    cfg.warmup,
                    cfg.iterations,
                    &self.clock,
                    cfg.reply_timeout,
                    deadline,
                );
                link.conn = Some(Conn::Ud(c));
                link.running = Some(Running::Ud(pending));
                true
            }
            Some(Conn::Rc(c)) => {
                let Some(slot) = Slot::take(&self.rc_runs, MAX_RC_RUNS) else {
                    link.conn = Some(Conn::Rc(c));
                    return false;
                };
                let (tx, rx) = mpsc::channel();
                let (op, warmup, iterations, clock) =
                    (cfg.peer_op, cfg.warmup, cfg.iterations, self.clock);
                // The connection goes into the thread; if no thread can start, it is dropped
                // with the closure and the peer reconnects later.
                let spawned = std::thread::Builder::new()
                    .name("rdma-probe-rc-run".into())
                    .spawn(move || {
                        let _slot = slot;
                        let r = c.run(op, warmup, iterations, &clock, timeout);
                        let _ = tx.send((c, r));
                    });
                match spawned {
                    Ok(_) => {
                        link.running = Some(Running::Rc(rx));
                        true
                    }
                    Err(e) => {
                        tracing::warn!("no thread for an RC peer run: {e}");
                        false
                    }
                }
            }
        }
    }

    /// A finished connect: keep the connection, or record why it failed.
    fn connected(&self, link: &mut PeerLink, made: Connected) -> Round {
        match made {
            Ok(c) if c.is_self() => Round::Own,
            Ok(c) => {
                link.conn = Some(c);
                link.connects += 1;
                Round::Done
            }
            Err(f) => {
                link.status = Some(layer(f.kind));
                self.shared
                    .record(peer_key(self.cfg, "", &link.addr), Err(f));
                link.failed(Instant::now(), self.cfg.backoff_max);
                Round::Done
            }
        }
    }

    /// A finished run: record it; a failed one drops the connection and backs off.
    fn ran(&self, link: &mut PeerLink, outcome: Outcome, device: &str) {
        let failure = outcome.result.as_ref().err().map(|f| f.kind);
        self.shared
            .record(peer_key(self.cfg, device, &link.addr), outcome);
        match failure {
            None => {
                link.status = Some(PeerStatus::Ok);
                link.backoff = self.cfg.backoff_min;
                link.fails = 0;
            }
            Some(kind) => {
                link.status = Some(layer(kind));
                link.conn = None;
                link.failed(Instant::now(), self.cfg.backoff_max);
            }
        }
    }

    /// Collect `link`'s finished run, if any; true when one was collected.
    fn collect_run(&self, link: &mut PeerLink) -> bool {
        let Some(running) = link.running.as_mut() else {
            return false;
        };
        let (outcome, device) = match running {
            Running::Ud(p) => {
                let Some(r) = p.try_take() else {
                    return false;
                };
                let device = link
                    .conn
                    .as_ref()
                    .map(|c| c.device().to_string())
                    .unwrap_or_default();
                (
                    Outcome {
                        sent: r.sent,
                        lost_request: r.lost_request,
                        lost_reply: r.lost_reply,
                        result: match r.failure {
                            Some(f) => Err(f),
                            None => Ok(r.samples_ns),
                        },
                    },
                    device,
                )
            }
            Running::Rc(rx) => match rx.try_recv() {
                Err(mpsc::TryRecvError::Empty) => return false,
                Err(mpsc::TryRecvError::Disconnected) => (
                    Outcome::from(Err(ProbeFailure::new(
                        FailureKind::Setup,
                        "the RC run's thread ended without a result",
                    ))),
                    String::new(),
                ),
                Ok((c, r)) => {
                    let device = c.device().to_string();
                    // A run stops at its first failed request: that one is lost.
                    let (sent, lost) = if r.is_ok() {
                        (self.cfg.iterations, 0)
                    } else {
                        (1, 1)
                    };
                    link.conn = Some(Conn::Rc(c));
                    (
                        Outcome {
                            result: r,
                            sent,
                            lost_request: lost,
                            lost_reply: 0,
                        },
                        device,
                    )
                }
            },
        };
        link.running = None;
        self.ran(link, outcome, &device);
        true
    }
}

fn peer_loop(shared: &Shared, cfg: &EngineConfig, discovery: DiscoveryConfig) {
    let mut discovery = (cfg.has_peers()).then(|| Discovery::new(discovery));
    let mut meter = CpuMeter::start();
    let clock = Clock::calibrate();
    shared.state.lock().unwrap_or_else(|p| p.into_inner()).clock = Some(clock.info());
    let peers = Peers {
        shared,
        cfg,
        clock,
        connects: Arc::new(AtomicUsize::new(0)),
        rc_runs: Arc::new(AtomicUsize::new(0)),
    };
    let mut mesh = Mesh {
        links: BTreeMap::new(),
        own_by_gid: BTreeSet::new(),
        plan: None,
        own_id: String::new(),
    };
    let mut round: u64 = 0;
    loop {
        let start = Instant::now();
        let next = start + cfg.interval;
        // Every run of the round ends by the next round's start.
        let run_deadline = start + cfg.run_timeout.min(cfg.interval);
        let mut own_labels = BTreeMap::new();
        let mut own_by_address = BTreeSet::new();
        if let Some(d) = discovery.as_mut() {
            let set = d.refresh();
            mesh.update(shared, cfg, &set);
            own_labels.clone_from(&set.own_labels);
            own_by_address = set.own_addrs;
        }
        let picks: BTreeSet<usize> = mesh
            .plan
            .as_ref()
            .map(|p| p.round(round).into_iter().collect())
            .unwrap_or_default();
        let full = mesh.plan.as_ref().is_none_or(Pinglist::full_mesh);
        // This round's work: runs on connected peers now; connects for the others whose
        // backoff is over, the least failed first, as far as connect slots go (a peer
        // connected during the round is run at once).
        let now = Instant::now();
        let mut candidates: Vec<(bool, u32, Instant, String)> = Vec::new();
        let mut waiting: BTreeSet<String> = BTreeSet::new();
        for (i, link) in mesh.links.values_mut().enumerate() {
            link.planned = picks.contains(&i);
            if !link.planned {
                if !full && link.running.is_none() {
                    // Not in this round's plan: its QP is not held (a sampled peer
                    // reconnects when it is planned again).
                    link.conn = None;
                }
                continue;
            }
            if link.running.is_some() {
                // Still running since the last round (a slow RC run): not started twice.
                continue;
            }
            if link.conn.is_some() {
                if peers.start_run(link, run_deadline) {
                    waiting.insert(link.addr.clone());
                }
            } else if link.connecting.is_none() && now >= link.next_attempt {
                let silent = link.status == Some(PeerStatus::Host);
                candidates.push((silent, link.fails, link.next_attempt, link.addr.clone()));
            }
        }
        // The peer set of the round is published before any result of it.
        publish(
            shared,
            &mesh,
            discovery.as_ref(),
            &own_labels,
            &own_by_address,
        );
        candidates.sort();
        let mut candidates = candidates.into_iter().map(|c| (c.0, c.3)).peekable();
        let mut own_found = Vec::new();
        let mut stopped = false;
        // A round without runs took its discovery and planning.
        let mut last_run_end = Instant::now();
        loop {
            // Fill free connect slots.
            while let Some((silent, _)) = candidates.peek() {
                let limit = if *silent {
                    MAX_SILENT_CONNECTS
                } else {
                    MAX_CONNECTS
                };
                if peers.connects.load(Ordering::Acquire) >= limit {
                    break;
                }
                let (_, addr) = candidates.next().expect("peeked");
                if let Some(link) = mesh.links.get_mut(&addr) {
                    if link.conn.is_none() && link.connecting.is_none() {
                        peers.start_connect(link);
                    }
                }
            }
            for link in mesh.links.values_mut() {
                if let Some(rx) = link.connecting.as_ref() {
                    let made = match rx.try_recv() {
                        Ok(made) => Some(made),
                        Err(mpsc::TryRecvError::Empty) => None,
                        Err(mpsc::TryRecvError::Disconnected) => Some(Err(ProbeFailure::new(
                            FailureKind::Setup,
                            "the connect thread ended without a result",
                        ))),
                    };
                    if let Some(made) = made {
                        link.connecting = None;
                        if peers.connected(link, made) == Round::Own {
                            own_found.push(link.addr.clone());
                        } else if link.planned
                            && link.conn.is_some()
                            && Instant::now() < run_deadline
                            && peers.start_run(link, run_deadline)
                        {
                            waiting.insert(link.addr.clone());
                        }
                    }
                }
                if peers.collect_run(link) && waiting.remove(&link.addr) {
                    last_run_end = Instant::now();
                }
            }
            let now = Instant::now();
            if now >= next && waiting.is_empty() {
                break;
            }
            // Past the interval only for this round's runs, which end by their deadline.
            if shared.sleep_until(now + PEER_TICK) {
                stopped = true;
                break;
            }
        }
        if stopped {
            return;
        }
        let took = last_run_end.saturating_duration_since(start);
        shared
            .round_duration_ns
            .store(took.as_nanos() as u64, Ordering::Relaxed);
        if took > cfg.interval {
            shared.rounds_late.fetch_add(1, Ordering::Relaxed);
        }
        for addr in own_found {
            tracing::info!(peer = %addr, "peer is this engine (its handshake offered our GID): not probed");
            mesh.links.remove(&addr);
            mesh.own_by_gid.insert(addr.clone());
            mesh.plan = None;
            let mut st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            st.targets
                .retain(|t| t.peer.as_deref() != Some(addr.as_str()));
        }
        publish(
            shared,
            &mesh,
            discovery.as_ref(),
            &own_labels,
            &own_by_address,
        );
        round += 1;
        shared.rounds.fetch_add(1, Ordering::Relaxed);
        meter.flush(&shared.cpu_ns);
    }
}

/// Publish the peers' states, discovery's counts and this host's own labels and addresses.
fn publish(
    shared: &Shared,
    mesh: &Mesh,
    discovery: Option<&Discovery>,
    own_labels: &BTreeMap<String, String>,
    own_by_address: &BTreeSet<String>,
) {
    let mut st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
    st.peers = mesh
        .links
        .values()
        .map(|l| PeerState {
            peer: l.addr.clone(),
            // An RC run in flight holds the connection in its thread: still connected.
            connected: l.conn.is_some() || matches!(l.running, Some(Running::Rc(_))),
            connects_total: l.connects,
            backoff_seconds: l.backoff.as_secs_f64(),
            labels: std::sync::Arc::clone(&l.labels),
            planned: l.planned,
            status: l.status,
        })
        .collect();
    if let Some(d) = discovery {
        st.discovery = d.stats().clone();
    }
    st.own_labels.clone_from(own_labels);
    st.own_peers = own_by_address
        .iter()
        .cloned()
        .chain(mesh.own_by_gid.iter().cloned())
        .collect();
}

/// What a finished connect found.
#[derive(Debug, PartialEq, Eq)]
enum Round {
    /// Connected (or failed, recorded).
    Done,
    /// The peer is this engine.
    Own,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_without_a_secret_are_refused_at_start() {
        let cfg = EngineConfig {
            peers: vec!["127.0.0.1:1".into()],
            ..EngineConfig::default()
        };
        assert!(matches!(
            ProbeEngine::start(cfg),
            Err(EngineError::Config(_))
        ));
        let cfg = EngineConfig {
            transport: PeerTransport::Rc,
            peer_op: ProbeOp::Send,
            ..EngineConfig::default()
        };
        match ProbeEngine::start(cfg) {
            Err(EngineError::Config(why)) => assert!(why.contains("one-sided"), "{why}"),
            other => panic!(
                "a SEND RC peer op must be a config error: {:?}",
                other.err()
            ),
        }
        let cfg = EngineConfig {
            peers: vec!["127.0.0.1:1".into()],
            secret: Some(Secret::new(b"0123456789abcdef").unwrap()),
            size: 32,
            ..EngineConfig::default()
        };
        match ProbeEngine::start(cfg) {
            Err(EngineError::Config(why)) => assert!(why.contains("at least 56 bytes"), "{why}"),
            other => panic!(
                "32-byte UD probes must be a config error: {:?}",
                other.err()
            ),
        }
    }

    #[test]
    fn an_engine_without_devices_counts_failures_and_stops_cleanly() {
        // On a host without RDMA the configured device cannot open: the failure is counted
        // under its name, nothing panics, and stop() returns.
        let cfg = EngineConfig {
            devices: vec!["no-such-rdma-dev".into()],
            interval: Duration::from_millis(20),
            mr_sizes: vec![],
            ..EngineConfig::default()
        };
        let engine = ProbeEngine::start(cfg).unwrap();
        let h = engine.handle();
        let deadline = Instant::now() + Duration::from_secs(20);
        while h.snapshot().rounds_total < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let snap = h.snapshot();
        assert!(snap.rounds_total >= 2);
        let t = snap
            .target("no-such-rdma-dev", ProbeOp::Write)
            .expect("target");
        assert!(!t.up);
        assert!(
            t.failures_total.get("NO_DEVICE").copied().unwrap_or(0) >= 2,
            "{t:?}"
        );
        engine.stop();
    }

    #[test]
    fn backoff_doubles_up_to_the_bound_for_a_dead_peer() {
        let secret = Secret::new(b"0123456789abcdef0123").unwrap();
        // A port nobody listens on (bound then closed).
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let cfg = EngineConfig {
            loopback: false,
            mr_sizes: vec![],
            peers: vec![addr.to_string()],
            secret: Some(secret),
            interval: Duration::from_millis(10),
            backoff_min: Duration::from_millis(10),
            backoff_max: Duration::from_millis(40),
            ..EngineConfig::default()
        };
        let engine = ProbeEngine::start(cfg).unwrap();
        let h = engine.handle();
        let deadline = Instant::now() + Duration::from_secs(20);
        let fails = |h: &ProbeHandle| {
            h.snapshot()
                .target(&addr.to_string(), ProbeOp::Send)
                .and_then(|t| t.failures_total.get("CONNECT_ERR").copied())
                .unwrap_or(0)
        };
        // The backoffs the engine reports on the way: each one of 10, 20, 40 ms, never less
        // than the one before (sampling may miss a step, it never sees one out of order).
        let mut seen: Vec<f64> = Vec::new();
        while fails(&h) < 4 && Instant::now() < deadline {
            if let Some(b) = h.snapshot().peers.first().map(|p| p.backoff_seconds) {
                if seen.last() != Some(&b) {
                    seen.push(b);
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            seen.iter().all(|b| [0.01, 0.02, 0.04].contains(b))
                && seen.windows(2).all(|w| w[0] < w[1]),
            "backoffs seen: {seen:?}"
        );
        let snap = h.snapshot();
        assert!(fails(&h) >= 4, "{snap:?}");
        let p = &snap.peers[0];
        assert!(!p.connected);
        assert_eq!(p.backoff_seconds, 0.04, "bounded by backoff_max");
        engine.stop();
    }

    /// Peers from a file follow the file without a restart: a new peer is tried, a removed
    /// one goes with its results (its series vanish), labels come along, a bad line is
    /// skipped and counted. Connects fail (nobody listens): no RDMA needed.
    #[test]
    fn peers_follow_the_peers_file_and_removed_ones_lose_their_results() {
        let dead = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .to_string()
        };
        let (a, b) = (dead(), dead());
        let dir = std::env::temp_dir().join(format!("rdma-probe-engine-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("peers.yml");
        std::fs::write(
            &file,
            format!("- targets: ['{a}', 'no port here']\n  labels: {{rack: r1}}\n"),
        )
        .unwrap();
        let cfg = EngineConfig {
            loopback: false,
            mr_sizes: vec![],
            peers_file: Some(file.clone()),
            secret: Some(Secret::new(b"0123456789abcdef0123").unwrap()),
            interval: Duration::from_millis(20),
            backoff_min: Duration::from_millis(10),
            backoff_max: Duration::from_millis(10),
            ..EngineConfig::default()
        };
        let engine = ProbeEngine::start(cfg).unwrap();
        let h = engine.handle();
        let wait = |what: &str, cond: &dyn Fn(&ProbeSnapshot) -> bool| {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let s = h.snapshot();
                if cond(&s) {
                    return s;
                }
                assert!(Instant::now() < deadline, "{what}: {s:?}");
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        let s = wait("A tried", &|s| s.target(&a, ProbeOp::Send).is_some());
        assert_eq!(s.peers.len(), 1);
        assert_eq!(
            s.peers[0].labels.get("rack").map(String::as_str),
            Some("r1")
        );
        assert_eq!(s.discovery.invalid_entries.get("file"), Some(&1));
        let tmp = dir.join("peers.tmp");
        std::fs::write(&tmp, format!("- targets: ['{b}']\n")).unwrap();
        std::fs::rename(&tmp, &file).unwrap();
        let s = wait("B tried, A gone", &|s| {
            s.target(&b, ProbeOp::Send).is_some() && s.target(&a, ProbeOp::Send).is_none()
        });
        assert_eq!(
            s.peers.iter().map(|p| p.peer.as_str()).collect::<Vec<_>>(),
            [b.as_str()]
        );
        assert!(s.target(&b, ProbeOp::Send).unwrap().failures_total["CONNECT_ERR"] >= 1);
        engine.stop();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Each failure waits the current backoff before the next attempt and doubles the one
    /// after, up to the bound: 10, 20, 40, 40 ms for a 10 ms start and a 40 ms bound.
    #[test]
    fn transports_parse_and_name_their_label() {
        assert_eq!("ud".parse::<PeerTransport>(), Ok(PeerTransport::Ud));
        assert_eq!("RC".parse::<PeerTransport>(), Ok(PeerTransport::Rc));
        assert!("tcp"
            .parse::<PeerTransport>()
            .unwrap_err()
            .contains("ud or rc"));
        assert_eq!(EngineConfig::default().transport, PeerTransport::Ud);
        assert_eq!(PeerTransport::Rc.to_string(), "rc");
    }

    /// A listener on 127.0.0.1 that never accepts, its accept queue full: further SYNs are
    /// dropped and a connect to it hangs until its timeout (a silent host). The connection
    /// that fills the queue is kept with it.
    fn silent_peer() -> (std::os::fd::OwnedFd, std::net::TcpStream, String) {
        use nix::sys::socket::{
            bind, getsockname, listen, socket, AddressFamily, Backlog, SockFlag, SockType,
            SockaddrIn,
        };
        use std::os::fd::AsRawFd;
        let fd = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::empty(),
            None,
        )
        .unwrap();
        bind(fd.as_raw_fd(), &SockaddrIn::new(127, 0, 0, 1, 0)).unwrap();
        listen(&fd, Backlog::new(0).unwrap()).unwrap();
        let addr: SockaddrIn = getsockname(fd.as_raw_fd()).unwrap();
        let addr = std::net::SocketAddr::from(std::net::SocketAddrV4::from(addr));
        // Backlog 0: one connection fills the queue (the kernel admits backlog + 1).
        let filler = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .expect("the first connection fills the queue");
        (fd, filler, addr.to_string())
    }

    /// Threads of this process whose name starts with `prefix` (names are cut at 15 bytes).
    fn threads_named(prefix: &str) -> usize {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
            .filter(|n| n.starts_with(prefix))
            .count()
    }

    /// 40 silent peers (more than the connect slots), one refusing peer and one answering
    /// peer (an engine's listener on 127.0.0.1): the answering one is tried in almost every
    /// round, the silent ones are `host`, the refusing one `agent`, and the connect threads
    /// stay within their bound. Counts of rounds and attempts only, no timings. Without
    /// RDMA on the host the answering peer's attempt fails at once after the TCP connect
    /// (no local device): the engine's scheduling is what is tested; with RDMA it runs.
    #[test]
    fn silent_peers_never_starve_an_answering_one() {
        let secret = Secret::new(b"0123456789abcdef0123").unwrap();
        let silent: Vec<_> = (0..40).map(|_| silent_peer()).collect();
        let refusing = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .to_string();
        let answering = ProbeEngine::start(EngineConfig {
            loopback: false,
            mr_sizes: vec![],
            listen: Some("127.0.0.1:0".parse().unwrap()),
            secret: Some(secret.clone()),
            ..EngineConfig::default()
        })
        .unwrap();
        let healthy = answering.listen_addr().unwrap().to_string();
        let mut peers: Vec<String> = silent.iter().map(|s| s.2.clone()).collect();
        peers.push(refusing.clone());
        peers.push(healthy.clone());
        let engine = ProbeEngine::start(EngineConfig {
            loopback: false,
            mr_sizes: vec![],
            peers,
            secret: Some(secret),
            interval: Duration::from_millis(50),
            backoff_min: Duration::from_millis(1),
            backoff_max: Duration::from_millis(1),
            ..EngineConfig::default()
        })
        .unwrap();
        let h = engine.handle();
        let attempts = |s: &ProbeSnapshot, peer: &str| {
            s.target(peer, ProbeOp::Send)
                .map(|t| t.runs_total + t.failures_total.values().sum::<u64>())
                .unwrap_or(0)
        };
        let status = |s: &ProbeSnapshot, peer: &str| {
            s.peers
                .iter()
                .find(|p| p.peer == peer)
                .and_then(|p| p.status)
        };
        // Bounded wait until every silent peer's connect timed out once (3 s each, 24 at a
        // time): then all of them are `host` and keep being retried.
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut most_connect_threads = 0;
        loop {
            let s = h.snapshot();
            most_connect_threads = most_connect_threads.max(threads_named("rdma-probe-conn"));
            if silent
                .iter()
                .all(|p| status(&s, &p.2) == Some(PeerStatus::Host))
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "silent peers not all `host`: {:?}",
                s.peers
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let s0 = h.snapshot();
        let (r0, a0) = (s0.rounds_total, attempts(&s0, &healthy));
        let deadline = Instant::now() + Duration::from_secs(120);
        let s1 = loop {
            let s = h.snapshot();
            most_connect_threads = most_connect_threads.max(threads_named("rdma-probe-conn"));
            if s.rounds_total >= r0 + 40 {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "rounds stalled: {}",
                s.rounds_total
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let rounds = s1.rounds_total - r0;
        let tried = attempts(&s1, &healthy) - a0;
        eprintln!(
            "{rounds} rounds with 40 silent peers: the answering peer tried {tried} times; \
             at most {most_connect_threads} connect threads seen; last round {:?} s, late {}",
            s1.round_duration_seconds, s1.rounds_late_total
        );
        // Almost every round: a round may end just before the attempt's result comes in (a
        // loaded machine), which the next round then counts.
        assert!(
            tried * 100 >= rounds * 85,
            "the answering peer was tried in {tried} of {rounds} rounds"
        );
        assert!(
            most_connect_threads <= MAX_CONNECTS,
            "{most_connect_threads} connect threads"
        );
        assert_eq!(status(&s1, &refusing), Some(PeerStatus::Agent));
        assert!(s1.target(&refusing, ProbeOp::Send).unwrap().failures_total["CONNECT_ERR"] >= 1);
        let silent_fails = s1
            .target(&silent[0].2, ProbeOp::Send)
            .unwrap()
            .failures_total
            .get("HOST_UNREACHABLE")
            .copied();
        assert!(
            silent_fails >= Some(1),
            "{:?}",
            s1.target(&silent[0].2, ProbeOp::Send)
        );
        assert!(s1.round_duration_seconds.is_some());
        // The answering peer is not `host` whatever else failed on this machine.
        assert_ne!(status(&s1, &healthy), Some(PeerStatus::Host));
        engine.stop();
        answering.stop();
    }

    #[test]
    fn failures_name_their_layer() {
        assert_eq!(layer(FailureKind::Connect), PeerStatus::Agent);
        assert_eq!(layer(FailureKind::Handshake), PeerStatus::Agent);
        assert_eq!(layer(FailureKind::PeerClosed), PeerStatus::Agent);
        assert_eq!(layer(FailureKind::HostUnreachable), PeerStatus::Host);
        assert_eq!(layer(FailureKind::Timeout), PeerStatus::Rdma);
        assert_eq!(layer(FailureKind::NoDevice), PeerStatus::Rdma);
    }

    #[test]
    fn backoff_doubles_on_each_failure() {
        let min = Duration::from_millis(10);
        let max = Duration::from_millis(40);
        let t0 = Instant::now();
        let mut link = PeerLink::new("127.0.0.1:1".into(), min);
        link.next_attempt = t0;
        let mut waits = Vec::new();
        for _ in 0..4 {
            link.failed(t0, max);
            waits.push(link.next_attempt - t0);
        }
        let ms = Duration::from_millis;
        assert_eq!(waits, [ms(10), ms(20), ms(40), ms(40)]);
        assert_eq!(link.backoff, max);
    }
}
