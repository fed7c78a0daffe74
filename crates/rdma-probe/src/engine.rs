//! The probe engine: runs every configured probe on an interval in its own thread and
//! publishes the results through a [`ProbeHandle`] that rdmad reads on scrape.
//!
//! Each round runs, per device port, the loopback operations (one thread per QP), every
//! `mr_every` rounds the MR registration timings, then one run per peer. Results go into one
//! [`ProbeSnapshot`] under a mutex: histograms (cumulative, for Prometheus), the last run's
//! perftest summary, success and failure counts (failures by WC status name), handshake
//! refusals by reason, and the CPU time all engine threads used. A failed probe's QPs and
//! MRs are dropped and rebuilt; a failed peer is retried with exponential backoff.
//!
//! Peers are probed over [`PeerTransport::Ud`] (default: UD echo on one UD QP per local
//! device, whatever the number of peers) or [`PeerTransport::Rc`] (one-sided READ or WRITE on
//! an RC QP pair per peer). Both publish the same per-peer results: latency samples (round
//! trips), runs, failures, and requests sent and lost (UD: a request without its reply within
//! `reply_timeout`; RC: the request a failed run stopped at).
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
use crate::failure::ProbeFailure;
use crate::handshake::Secret;
use crate::loopback::{LoopbackProbe, RunParams};
use crate::mrreg::{time_registrations, DEFAULT_MR_SIZES};
use crate::peer::{PeerConn, PeerServer, ServerStats, UdPeerConn};
use crate::pinglist::{Pinglist, DEFAULT_MESH_MAX};
use crate::snapshot::{
    Histogram, PeerState, PeerTransport, ProbeOp, ProbeSnapshot, RegistrationResult, TargetResult,
    UdEndpointState, LATENCY_BUCKETS, REGISTRATION_BUCKETS,
};
use crate::stats::LatencySummary;
use crate::ud::{DropReason, UdEndpoints, UdRun};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
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
    rounds: AtomicU64,
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
        ProbeSnapshot {
            clock: st.clock,
            rounds_total: s.rounds.load(Ordering::Relaxed),
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
    lost: u64,
}

impl From<Result<Vec<f64>, ProbeFailure>> for Outcome {
    fn from(result: Result<Vec<f64>, ProbeFailure>) -> Outcome {
        Outcome {
            result,
            sent: 0,
            lost: 0,
        }
    }
}

impl Shared {
    fn record(&self, k: Key<'_>, outcome: impl Into<Outcome>) {
        let Outcome { result, sent, lost } = outcome.into();
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
        t.lost_total += lost;
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
    main: Option<JoinHandle<()>>,
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
            && config.size < crate::ud::UD_HEADER
        {
            return Err(EngineError::Config(format!(
                "UD peer probes carry at least {} bytes (header and tag), not {}",
                crate::ud::UD_HEADER,
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
        let s2 = Arc::clone(&shared);
        let main = std::thread::Builder::new()
            .name("rdma-probe".into())
            .spawn(move || main_loop(&s2, &config, discovery))
            .map_err(EngineError::Spawn)?;
        Ok(ProbeEngine {
            shared,
            main: Some(main),
            server,
        })
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
        if let Some(t) = self.main.take() {
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
    }
}

fn main_loop(shared: &Shared, cfg: &EngineConfig, discovery: DiscoveryConfig) {
    let mut discovery = (cfg.has_peers()).then(|| Discovery::new(discovery));
    let mut meter = CpuMeter::start();
    let clock = Clock::calibrate();
    shared.state.lock().unwrap_or_else(|p| p.into_inner()).clock = Some(clock.info());
    let mut probes: Vec<LoopbackProbe> = if cfg.loopback {
        active_ports(&cfg.devices)
            .into_iter()
            .map(|(d, p)| {
                LoopbackProbe::new(&d, p, cfg.gid_index, cfg.size)
                    .with_cpu_sink(Arc::clone(&shared.cpu_ns))
            })
            .collect()
    } else {
        Vec::new()
    };
    let mut mesh = Mesh {
        links: BTreeMap::new(),
        own_by_gid: BTreeSet::new(),
        plan: None,
        own_id: String::new(),
    };
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
        let mut own_found = Vec::new();
        for (i, link) in mesh.links.values_mut().enumerate() {
            if picks.contains(&i) {
                if peer_round(shared, cfg, link, &clock, &params) == Round::Own {
                    own_found.push(link.addr.clone());
                }
            } else if !full {
                // Not in this round's plan: its QP is not held (a sampled peer reconnects
                // when it is planned again).
                link.conn = None;
            }
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
        {
            let mut st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            st.peers = mesh
                .links
                .values()
                .enumerate()
                .map(|(i, l)| PeerState {
                    peer: l.addr.clone(),
                    connected: l.conn.is_some(),
                    connects_total: l.connects,
                    backoff_seconds: l.backoff.as_secs_f64(),
                    labels: std::sync::Arc::clone(&l.labels),
                    planned: picks.contains(&i),
                })
                .collect();
            if let Some(d) = discovery.as_ref() {
                st.discovery = d.stats().clone();
            }
            st.own_labels = own_labels;
            st.own_peers = own_by_address
                .into_iter()
                .chain(mesh.own_by_gid.iter().cloned())
                .collect();
        }
        round += 1;
        shared.rounds.fetch_add(1, Ordering::Relaxed);
        meter.flush(&shared.cpu_ns);
        let next = start + cfg.interval;
        let mut stop = shared.stop.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if *stop {
                return;
            }
            let now = Instant::now();
            if now >= next {
                break;
            }
            stop = shared
                .wake
                .wait_timeout(stop, next - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// What one peer's turn in a round found.
#[derive(Debug, PartialEq, Eq)]
enum Round {
    /// Probed (or tried, or waiting out its backoff).
    Done,
    /// The peer is this engine.
    Own,
}

fn peer_round(
    shared: &Shared,
    cfg: &EngineConfig,
    link: &mut PeerLink,
    clock: &Clock,
    p: &RunParams,
) -> Round {
    fn key<'a>(cfg: &EngineConfig, device: &'a str, peer: &'a str) -> Key<'a> {
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
    let now = Instant::now();
    if link.conn.is_none() {
        if now < link.next_attempt {
            return Round::Done;
        }
        let secret = cfg.secret.as_ref().expect("checked at start");
        let (device, gid) = (cfg.peer_device.as_deref(), cfg.gid_index);
        let made = match cfg.transport {
            PeerTransport::Rc => PeerConn::connect(&link.addr, secret, device, gid, cfg.size)
                .map(|c| Conn::Rc(Box::new(c))),
            PeerTransport::Ud => {
                UdPeerConn::connect(&link.addr, secret, device, gid, cfg.size, &shared.ud)
                    .map(Conn::Ud)
            }
        };
        match made {
            Ok(c) if c.is_self() => return Round::Own,
            Ok(c) => {
                link.conn = Some(c);
                link.connects += 1;
            }
            Err(f) => {
                shared.record(key(cfg, "", &link.addr), Err(f));
                link.failed(now, cfg.backoff_max);
                return Round::Done;
            }
        }
    }
    let conn = link.conn.as_ref().expect("connected above");
    let outcome = match conn {
        Conn::Rc(c) => {
            let r = c.run(cfg.peer_op, p.warmup, p.iterations, clock, p.timeout);
            // A run stops at its first failed request: that one is lost.
            let (sent, lost) = if r.is_ok() { (p.iterations, 0) } else { (1, 1) };
            Outcome {
                result: r,
                sent,
                lost,
            }
        }
        Conn::Ud(c) => {
            let UdRun {
                samples_ns,
                sent,
                lost,
                failure,
            } = c.run(p.warmup, p.iterations, clock, cfg.reply_timeout, p.timeout);
            Outcome {
                result: match failure {
                    Some(f) => Err(f),
                    None => Ok(samples_ns),
                },
                sent,
                lost,
            }
        }
    };
    let ok = outcome.result.is_ok();
    shared.record(key(cfg, conn.device(), &link.addr), outcome);
    if ok {
        link.backoff = cfg.backoff_min;
    } else {
        link.conn = None;
        link.failed(Instant::now(), cfg.backoff_max);
    }
    Round::Done
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
            Err(EngineError::Config(why)) => assert!(why.contains("at least 48 bytes"), "{why}"),
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
