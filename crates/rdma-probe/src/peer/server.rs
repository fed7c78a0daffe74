//! The listening side of peer probes ([`super`]): admission of handshakes (bounded, per
//! source too), one thread per client, and each client's responder while its lease lasts.
use super::*;

/// A server's bounds on the connections it serves (the defaults are the constants above).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Connections in their handshake at once ([`MAX_HANDSHAKES`]).
    pub max_handshakes: usize,
    /// Of them from one source address ([`MAX_HANDSHAKES_PER_SOURCE`]).
    pub max_handshakes_per_source: usize,
    /// Authenticated clients at once ([`MAX_CLIENTS`]).
    pub max_clients: usize,
    /// Time for a whole handshake ([`HANDSHAKE_TIMEOUT`]).
    pub handshake_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_handshakes: MAX_HANDSHAKES,
            max_handshakes_per_source: MAX_HANDSHAKES_PER_SOURCE,
            max_clients: MAX_CLIENTS,
            handshake_timeout: HANDSHAKE_TIMEOUT,
        }
    }
}

#[derive(Debug, Default)]
struct Slots {
    handshaking: usize,
    by_source: HashMap<IpAddr, usize>,
    clients: usize,
}

/// Who may start a handshake now: the server's slot accounting.
#[derive(Debug)]
struct Admission {
    limits: ServerLimits,
    slots: Mutex<Slots>,
}

/// Why a new connection gets no place ([`Admission::begin`]): a limit is reached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Busy {
    /// As many handshakes as allowed are in progress.
    #[error("{0} handshakes in progress")]
    Handshakes(usize),
    /// As many handshakes as allowed from one address are in progress.
    #[error("{0} handshakes in progress from {1}")]
    HandshakesFrom(usize, IpAddr),
    /// As many clients as allowed are connected.
    #[error("{0} clients connected")]
    Clients(usize),
}

/// A connection's place among those in their handshake; freed when dropped, or turned into
/// a client's place by [`HandshakeSlot::authenticated`].
#[derive(Debug)]
struct HandshakeSlot {
    admission: Arc<Admission>,
    source: IpAddr,
    client: bool,
}

impl Admission {
    fn new(limits: ServerLimits) -> Arc<Admission> {
        Arc::new(Admission {
            limits,
            slots: Mutex::new(Slots::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a new connection from `source`, or why there is none.
    fn begin(self: &Arc<Self>, source: IpAddr) -> Result<HandshakeSlot, Busy> {
        let l = &self.limits;
        let mut s = self.lock();
        let from_source = s.by_source.get(&source).copied().unwrap_or(0);
        if s.handshaking >= l.max_handshakes {
            return Err(Busy::Handshakes(s.handshaking));
        }
        if from_source >= l.max_handshakes_per_source {
            return Err(Busy::HandshakesFrom(from_source, source));
        }
        if s.clients >= l.max_clients {
            return Err(Busy::Clients(s.clients));
        }
        s.handshaking += 1;
        *s.by_source.entry(source).or_insert(0) += 1;
        Ok(HandshakeSlot {
            admission: Arc::clone(self),
            source,
            client: false,
        })
    }
}

impl HandshakeSlot {
    /// The handshake succeeded: the connection now holds a client's place until dropped.
    fn authenticated(&mut self) {
        if !self.client {
            let mut s = self.admission.lock();
            s.clients += 1;
            self.release_handshake(&mut s);
            self.client = true;
        }
    }

    fn release_handshake(&self, s: &mut Slots) {
        s.handshaking = s.handshaking.saturating_sub(1);
        if let Some(n) = s.by_source.get_mut(&self.source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                s.by_source.remove(&self.source);
            }
        }
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        let mut s = self.admission.lock();
        if self.client {
            s.clients = s.clients.saturating_sub(1);
        } else {
            self.release_handshake(&mut s);
        }
    }
}

/// Handshake outcomes seen by a server (and its CPU time), shared with whoever reports them.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Handshakes accepted.
    pub accepted: AtomicU64,
    /// Handshakes refused, by reason (`bad_mac`, `replay`, `malformed`, `io`, `timeout`,
    /// `busy`, ...).
    pub refused: Mutex<BTreeMap<String, u64>>,
    /// Clients connected now.
    pub active: AtomicUsize,
    /// CPU nanoseconds used by the server's threads.
    pub cpu_ns: AtomicU64,
    /// One log line per refusal reason per minute at most: a flood is counted, not logged.
    log: RateLimited,
}

impl ServerStats {
    /// Count a refusal of the connection from `from`, and log it unless this reason was
    /// logged less than a minute ago.
    fn refuse(&self, reason: &'static str, from: SocketAddr, why: &dyn std::fmt::Display) {
        {
            let mut m = self.refused.lock().unwrap_or_else(|p| p.into_inner());
            *m.entry(reason.to_string()).or_insert(0) += 1;
        }
        if let Some(n) = self.log.check(reason, Instant::now()) {
            tracing::info!(
                reason,
                peer = %from,
                "peer handshake refused: {why} {}",
                suppressed_note(n)
            );
        }
    }

    /// Refusals so far, by reason.
    pub fn refused(&self) -> BTreeMap<String, u64> {
        self.refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// A client's responder, alive while the client's TCP connection is: its own QP and MR
/// (RC), or a session on the device's UD QP (UD).
enum Responder {
    Rc {
        _side: Side,
        _pd: Arc<ProtectionDomain>,
        _ctx: Arc<Context>,
    },
    Ud(#[allow(dead_code)] SessionGuard),
}

/// Accepts peer handshakes on a TCP address until dropped or stopped.
pub struct PeerServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    local: SocketAddr,
}

impl std::fmt::Debug for PeerServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerServer")
            .field("local", &self.local)
            .finish()
    }
}

impl PeerServer {
    /// Listen on `addr`; responders use `device` (or the device of the address a client
    /// reached us on); UD clients get sessions on the endpoints of `ud`.
    pub fn start(
        addr: SocketAddr,
        secret: Secret,
        device: Option<String>,
        gid_index: Option<u8>,
        stats: Arc<ServerStats>,
        ud: Arc<UdEndpoints>,
    ) -> io::Result<PeerServer> {
        PeerServer::start_with_limits(
            addr,
            secret,
            device,
            gid_index,
            stats,
            ud,
            ServerLimits::default(),
        )
    }

    /// [`PeerServer::start`] with other bounds than the defaults (the tests' small ones).
    pub fn start_with_limits(
        addr: SocketAddr,
        secret: Secret,
        device: Option<String>,
        gid_index: Option<u8>,
        stats: Arc<ServerStats>,
        ud: Arc<UdEndpoints>,
        limits: ServerLimits,
    ) -> io::Result<PeerServer> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let local = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let server = Server {
            secret,
            device,
            gid_index,
            stats,
            ud,
            limits,
            seen: NonceCache::new(4096),
        };
        let thread = std::thread::Builder::new()
            .name("rdma-probe-listen".into())
            .spawn(move || accept_loop(listener, Arc::new(server), stop2))?;
        Ok(PeerServer {
            stop,
            thread: Some(thread),
            local,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl Drop for PeerServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What every client thread of a server shares.
struct Server {
    secret: Secret,
    device: Option<String>,
    gid_index: Option<u8>,
    stats: Arc<ServerStats>,
    ud: Arc<UdEndpoints>,
    limits: ServerLimits,
    seen: NonceCache,
}

fn accept_loop(listener: TcpListener, server: Arc<Server>, stop: Arc<AtomicBool>) {
    let admission = Admission::new(server.limits);
    let mut meter = CpuMeter::start();
    let mut clients: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((mut stream, from)) => {
                clients.retain(|h| !h.is_finished());
                let slot = match admission.begin(from.ip()) {
                    Ok(slot) => slot,
                    Err(why) => {
                        // Told so, closed at once: no thread, no read from the client.
                        let _ = stream.set_nonblocking(true);
                        let _ = handshake::refuse_busy(&mut stream);
                        // What already came is read away, so that closing sends FIN (the
                        // client reads the refusal), not RST.
                        let _ = stream.read(&mut [0u8; 512]);
                        server
                            .stats
                            .refuse("busy", from, &format_args!("busy: {why}"));
                        continue;
                    }
                };
                let (shared, stop) = (Arc::clone(&server), Arc::clone(&stop));
                let spawned = std::thread::Builder::new()
                    .name("rdma-probe-client".into())
                    .spawn(move || serve_client(stream, from, slot, &shared, &stop));
                match spawned {
                    Ok(h) => clients.push(h),
                    // The closure (with the stream and the slot) is dropped: closed, freed.
                    Err(e) => server
                        .stats
                        .refuse("busy", from, &format_args!("no thread: {e}")),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                meter.flush(&server.stats.cpu_ns);
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
    for h in clients {
        let _ = h.join();
    }
    meter.flush(&server.stats.cpu_ns);
}

fn serve_client(
    stream: TcpStream,
    from: SocketAddr,
    mut slot: HandshakeSlot,
    server: &Server,
    stop: &AtomicBool,
) {
    let (device, gid_index, stats, ud) = (
        server.device.as_deref(),
        server.gid_index,
        &*server.stats,
        &*server.ud,
    );
    let mut meter = CpuMeter::start();
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_nodelay(true);
    let local_ip = stream
        .local_addr()
        .map(|a| a.ip())
        .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
    let respond = |theirs: &Offer, session: &SessionKey| -> Result<_, handshake::ResponderError> {
        let (ctx, mut port) = local_port(device, gid_index, local_ip).map_err(|f| f.to_string())?;
        if let Some(peer) = theirs.ud {
            let endpoint = ud.get(&ctx, port).map_err(|f| f.to_string())?;
            let port = endpoint.port().clone();
            let ours = Offer {
                endpoint: ud_only(&port),
                mtu: port.mtu.raw() as u8,
                buffer: None,
                ud: Some(endpoint.address()),
            };
            // Registered before our offer goes out: the client's first request finds it.
            let guard =
                endpoint.add_responder(session, theirs.endpoint.gid, theirs.endpoint.lid, peer)?;
            return Ok((ours, Responder::Ud(guard)));
        }
        port.mtu = min_mtu(port.mtu, theirs.mtu);
        let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
        let side = Side::new(&ctx, &pd, PEER_BUFFER, random_psn()).map_err(|f| f.to_string())?;
        side.connect(&port, theirs.endpoint, peer_rts())
            .map_err(|f| f.to_string())?;
        let ours = Offer {
            endpoint: side.endpoint(&port),
            mtu: port.mtu.raw() as u8,
            buffer: Some(side.remote()),
            ud: None,
        };
        Ok((
            ours,
            Responder::Rc {
                _side: side,
                _pd: pd,
                _ctx: ctx,
            },
        ))
    };
    let mut timed = Deadlined {
        stream: &stream,
        until: Instant::now() + server.limits.handshake_timeout,
    };
    let outcome = handshake::server_session(&mut timed, &server.secret, &server.seen, respond);
    let responder = match outcome {
        Ok((_, r)) => r,
        Err(e) if e.reason() == "timeout" => {
            let limit = server.limits.handshake_timeout.as_secs_f64();
            let why = format!("no complete handshake within {limit} s (silent or too slow)");
            stats.refuse("timeout", from, &why);
            meter.flush(&stats.cpu_ns);
            return;
        }
        Err(e) => {
            stats.refuse(e.reason(), from, &e);
            meter.flush(&stats.cpu_ns);
            return;
        }
    };
    slot.authenticated();
    stats.accepted.fetch_add(1, Ordering::Relaxed);
    stats.active.fetch_add(1, Ordering::Relaxed);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 16];
    while !stop.load(Ordering::Relaxed) {
        match (&stream).read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    drop(responder);
    drop(slot);
    stats.active.fetch_sub(1, Ordering::Relaxed);
    meter.flush(&stats.cpu_ns);
}
