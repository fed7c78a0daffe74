//! The peer loop of the engine ([`super`]): the peers' links and connections, the
//! bounded connect and RC-run threads, and one round after another.
use super::feed::Feed;
use super::*;

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

pub(super) struct PeerLink {
    addr: String,
    conn: Option<Conn>,
    pub(super) backoff: Duration,
    pub(super) next_attempt: Instant,
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
    /// UD runs in a row that got no answer at all (see [`run_verdict`]).
    silent_runs: u32,
}

impl PeerLink {
    pub(super) fn new(addr: String, backoff: Duration) -> PeerLink {
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
            silent_runs: 0,
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
    pub(super) fn failed(&mut self, now: Instant, max: Duration) {
        self.next_attempt = now + self.backoff;
        self.backoff = (self.backoff * 2).min(max);
        self.fails = self.fails.saturating_add(1);
    }
}

/// The layer a failure points at (see [`PeerStatus`]).
pub(super) fn layer(kind: FailureKind) -> PeerStatus {
    match kind {
        FailureKind::Connect | FailureKind::Handshake | FailureKind::PeerClosed => {
            PeerStatus::Agent
        }
        FailureKind::HostUnreachable => PeerStatus::Host,
        _ => PeerStatus::Rdma,
    }
}

/// What a finished run means for its peer's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RunVerdict {
    /// Answered: the peer is OK.
    Answered,
    /// A UD run without a single answer right after an answered one: on a lossy path (20%
    /// loss ends a run at its third unanswered request in a row, or at its deadline, now and
    /// then) that is loss, already counted by direction, not a failed layer. The peer keeps
    /// its OK verdict and its session; a second such run in a row is a failure.
    Lossy,
    /// Failed at this layer: drop the connection and back off.
    Failed(PeerStatus),
}

/// The verdict of a run that ended with `failure` (None: answered) on a link whose last
/// verdict is `last`, after `silent_before` unanswered UD runs in a row.
pub(super) fn run_verdict(
    last: Option<PeerStatus>,
    silent_before: u32,
    failure: Option<FailureKind>,
    ud: bool,
) -> RunVerdict {
    match failure {
        None => RunVerdict::Answered,
        Some(FailureKind::Timeout) if ud && last == Some(PeerStatus::Ok) && silent_before == 0 => {
            RunVerdict::Lossy
        }
        Some(kind) => RunVerdict::Failed(layer(kind)),
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

    /// A finished run: record it; a failed one drops the connection and backs off (a lone
    /// unanswered UD run on an answering path is loss: [`run_verdict`]).
    fn ran(&self, link: &mut PeerLink, outcome: Outcome, device: &str) {
        let failure = outcome.result.as_ref().err().map(|f| f.kind);
        self.shared
            .record(peer_key(self.cfg, device, &link.addr), outcome);
        let ud = matches!(link.conn, Some(Conn::Ud(_)));
        match run_verdict(link.status, link.silent_runs, failure, ud) {
            RunVerdict::Answered => {
                link.status = Some(PeerStatus::Ok);
                link.backoff = self.cfg.backoff_min;
                link.fails = 0;
                link.silent_runs = 0;
            }
            RunVerdict::Lossy => link.silent_runs += 1,
            RunVerdict::Failed(status) => {
                link.status = Some(status);
                link.silent_runs = 0;
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

pub(super) fn peer_loop(shared: &Arc<Shared>, cfg: &EngineConfig, discovery: DiscoveryConfig) {
    let mut feed = cfg
        .has_peers()
        .then(|| Feed::start(shared, cfg.interval, discovery));
    let shared: &Shared = shared;
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
        // The newest discovered peers (waited for only before the first round).
        let mut own_labels = BTreeMap::new();
        let mut own_by_address = BTreeSet::new();
        let mut stats = None;
        if let Some((set, st)) = feed.as_mut().and_then(Feed::latest) {
            mesh.update(shared, cfg, set);
            own_labels.clone_from(&set.own_labels);
            own_by_address.clone_from(&set.own_addrs);
            stats = Some(st.clone());
        }
        let start = Instant::now();
        let next = start + cfg.interval;
        // Every run of the round ends by the next round's start.
        let run_deadline = start + cfg.run_timeout.min(cfg.interval);
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
        publish(shared, &mesh, stats.as_ref(), &own_labels, &own_by_address);
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
        publish(shared, &mesh, stats.as_ref(), &own_labels, &own_by_address);
        round += 1;
        shared.rounds.fetch_add(1, Ordering::Relaxed);
        meter.flush(&shared.cpu_ns);
    }
}

/// Publish the peers' states, discovery's counts and this host's own labels and addresses.
fn publish(
    shared: &Shared,
    mesh: &Mesh,
    discovery: Option<&DiscoveryStats>,
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
        st.discovery = d.clone();
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
