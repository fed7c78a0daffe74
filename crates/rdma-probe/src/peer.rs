//! Peer probes (pingmesh): a [`PeerServer`] accepts authenticated TCP handshakes. An RC client
//! gets its own responder QP and MR and a [`PeerConn`] probes it with one-sided RDMA READs
//! (or WRITEs timed to their completion). A UD client ([`UdPeerConn`]) gets a session on the
//! server's one UD QP of that device ([`crate::ud`]) and probes it with UD echo requests: no
//! QP per peer on either side.
//!
//! One-sided operations need no CPU on the peer, so the latency is the network's and the
//! remote NIC's, not the remote scheduler's; a dead peer shows as `RETRY_EXC_ERR`. The TCP
//! connection stays open as a lease: when it closes, the server destroys that client's QP
//! and MR, and the client sees `PEER_CLOSED`. The device and GID of each end are found from
//! the TCP connection's local address (the RoCE v2 GID `::ffff:a.b.c.d` of that address)
//! unless a device is configured.
use crate::clock::Clock;
use crate::cpu::CpuMeter;
use crate::failure::{FailureKind, ProbeFailure};
use crate::handshake::{self, NonceCache, Offer, Secret, SessionKey};
use crate::ratelog::{suppressed_note, RateLimited};
use crate::rc::{one_sided, Limits, PortInfo, Side};
use crate::snapshot::ProbeOp;
use crate::ud::{PendingRun, SessionGuard, UdEndpoint, UdEndpoints, UdRun};
use rdma_verbs::{Context, GidType, Mtu, ProtectionDomain, QpEndpoint, RemoteBuffer, RtsParams};
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod server;

pub use server::{PeerServer, ServerLimits, ServerStats};

/// Largest message a peer probe may use: the responder's buffer size.
pub const PEER_BUFFER: usize = 4096;
/// Connections a server keeps in their handshake at once (each has a thread and is not
/// authenticated yet): one more is told `busy` and closed at once, counted as refused `busy`.
pub const MAX_HANDSHAKES: usize = 64;
/// Of those, from one source address: one flooding host cannot take every slot.
pub const MAX_HANDSHAKES_PER_SOURCE: usize = 8;
/// Authenticated clients (each holds its lease connection and a thread) a server keeps at
/// once; a connection above it is refused `busy` too. Far above a full mesh of
/// `--probe.mesh-max` peers, and above it the planner closes unplanned peers' connections.
pub const MAX_CLIENTS: usize = 1024;
/// A whole handshake (client or server side) must finish within this, however slowly the
/// other side sends its bytes; a silent or trickling client loses its slot then (`timeout`).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);

/// A connection whose reads and writes all end by one deadline (a per-read timeout alone
/// lets a client that sends a byte now and then hold its slot for minutes).
struct Deadlined<'a> {
    stream: &'a TcpStream,
    until: Instant,
}

impl Deadlined<'_> {
    fn remaining(&self) -> io::Result<Duration> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the handshake did not finish in time",
            ));
        }
        Ok(left)
    }
}

impl Read for Deadlined<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.set_read_timeout(Some(self.remaining()?))?;
        let mut s = self.stream;
        s.read(buf)
    }
}

impl Write for Deadlined<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.set_write_timeout(Some(self.remaining()?))?;
        let mut s = self.stream;
        s.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Open `device` (or the device owning `ip`'s RoCE v2 GID) and pick its port and GID.
pub(crate) fn local_port(
    device: Option<&str>,
    gid_index: Option<u8>,
    ip: IpAddr,
) -> Result<(Arc<Context>, PortInfo), ProbeFailure> {
    if let Some(name) = device {
        let ctx =
            rdma_verbs::open(name).map_err(|e| ProbeFailure::setup(&format!("open {name}"), e))?;
        let port = PortInfo::query(&ctx, 1, gid_index)?;
        return Ok((ctx, port));
    }
    let want = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    let list = rdma_verbs::devices().map_err(|e| ProbeFailure::setup("list devices", e))?;
    for d in list {
        let Ok(ctx) = rdma_verbs::open(&d.name) else {
            continue;
        };
        let ports = ctx.query_device().map(|a| a.phys_port_cnt).unwrap_or(1);
        for p in 1..=ports {
            let Ok(table) = ctx.gid_table(p) else {
                continue;
            };
            let hit = table
                .iter()
                .filter(|g| g.gid == want)
                .max_by_key(|g| g.gid_type == GidType::RoceV2);
            if let Some(g) = hit {
                let index = u8::try_from(g.index).ok();
                let port = PortInfo::query(&ctx, p, gid_index.or(index))?;
                return Ok((ctx, port));
            }
        }
    }
    Err(ProbeFailure::new(
        FailureKind::NoDevice,
        format!("no RDMA device has a GID for {ip}"),
    ))
}

fn random_psn() -> u32 {
    handshake::fresh_nonce()
        .map(|n| u32::from_be_bytes([0, n[0], n[1], n[2]]))
        .unwrap_or(0x4242)
}

fn min_mtu(ours: Mtu, theirs: u8) -> Mtu {
    let t = Mtu::from_raw(u32::from(theirs));
    match (ours.bytes(), t.bytes()) {
        (Some(a), Some(b)) if b < a => t,
        _ => ours,
    }
}

/// RTS parameters for peers: a dead peer is declared after ~4 x 67 ms, not ~0.5 s.
fn peer_rts() -> RtsParams {
    RtsParams {
        timeout: 14,
        retry_cnt: 3,
        ..RtsParams::default()
    }
}

/// The endpoint description of a UD-only offer: no RC QP, the GID and LID of the UD QP.
fn ud_only(port: &PortInfo) -> QpEndpoint {
    QpEndpoint {
        qp_num: 0,
        psn: 0,
        gid: port.gid.gid,
        lid: port.lid,
    }
}

/// Whether the peer still holds its end of the control connection.
fn stream_alive(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return false;
    }
    let mut b = [0u8; 1];
    let alive = match stream.peek(&mut b) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => e.kind() == io::ErrorKind::WouldBlock,
    };
    let _ = stream.set_nonblocking(false);
    alive
}

/// Run a client handshake on `stream` within [`HANDSHAKE_TIMEOUT`] in all (a server that
/// trickles its answer cannot hold the prober), then put back the connection's timeouts.
fn client_handshake<T>(stream: &TcpStream, f: impl FnOnce(&mut Deadlined<'_>) -> T) -> T {
    let mut timed = Deadlined {
        stream,
        until: Instant::now() + HANDSHAKE_TIMEOUT,
    };
    let out = f(&mut timed);
    let _ = stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
    let _ = stream.set_write_timeout(Some(HANDSHAKE_TIMEOUT));
    out
}

/// The failure of a client handshake with `addr`. A peer whose rdmad authenticated us and
/// then could not set up its QP (no RDMA device, or its device refused the QP) has a working
/// agent and a failed RDMA side: that is the RDMA layer (`SETUP_ERR`), not the agent's
/// `HANDSHAKE_ERR`, or a removed device would be blamed on the agent.
fn handshake_failure(addr: &str, e: &handshake::HandshakeError) -> ProbeFailure {
    let kind = if e.is_responder_refusal() {
        FailureKind::Setup
    } else {
        FailureKind::Handshake
    };
    ProbeFailure::new(kind, format!("{addr}: {e}"))
}

/// Resolve `addr` and open the control connection with the handshake's timeouts.
fn control_connection(addr: &str) -> Result<(TcpStream, IpAddr), ProbeFailure> {
    let connect_err = |e: String| ProbeFailure::new(FailureKind::Connect, format!("{addr}: {e}"));
    let target = addr
        .to_socket_addrs()
        .map_err(|e| connect_err(e.to_string()))?
        .next()
        .ok_or_else(|| connect_err("no address".into()))?;
    // A refusal (RST: nobody listens, the peer's rdmad is absent) fails at once; a timeout
    // (SYNs unanswered: the host is unreachable) is told apart for the failure layer.
    let stream = TcpStream::connect_timeout(&target, HANDSHAKE_TIMEOUT).map_err(|e| {
        // EHOSTUNREACH, ENETUNREACH: an ICMP error or no route, the host is not reachable.
        if e.kind() == io::ErrorKind::TimedOut || matches!(e.raw_os_error(), Some(113 | 101)) {
            ProbeFailure::new(FailureKind::HostUnreachable, format!("{addr}: {e}"))
        } else {
            connect_err(e.to_string())
        }
    })?;
    let _ = stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
    let _ = stream.set_write_timeout(Some(HANDSHAKE_TIMEOUT));
    let _ = stream.set_nodelay(true);
    let local_ip = stream
        .local_addr()
        .map_err(|e| connect_err(e.to_string()))?
        .ip();
    Ok((stream, local_ip))
}

/// The client end of a UD echo probe: a session on this host's UD QP of the device, towards
/// the peer's UD QP. No QP of its own.
pub struct UdPeerConn {
    // Field order: the session goes before the endpoint reference the caller may drop.
    session: SessionGuard,
    endpoint: Arc<UdEndpoint>,
    stream: TcpStream,
    size: usize,
    /// The peer's GID from its offer.
    remote_gid: std::net::Ipv6Addr,
}

impl std::fmt::Debug for UdPeerConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdPeerConn")
            .field("device", &self.endpoint.device())
            .field("peer", &self.stream.peer_addr().ok())
            .finish()
    }
}

impl UdPeerConn {
    /// Connect to the engine at `addr`, authenticate, and register a UD session on the
    /// endpoint of `device` (or of the device owning the TCP connection's local address).
    pub fn connect(
        addr: &str,
        secret: &Secret,
        device: Option<&str>,
        gid_index: Option<u8>,
        size: usize,
        endpoints: &UdEndpoints,
    ) -> Result<UdPeerConn, ProbeFailure> {
        if !(crate::ud::UD_HEADER_V2..=PEER_BUFFER).contains(&size) {
            return Err(ProbeFailure::new(
                FailureKind::Setup,
                format!(
                    "UD probes use {}..={PEER_BUFFER} byte messages, not {size}",
                    crate::ud::UD_HEADER_V2
                ),
            ));
        }
        let (stream, local_ip) = control_connection(addr)?;
        let (ctx, port) = local_port(device, gid_index, local_ip)?;
        let endpoint = endpoints.get(&ctx, port)?;
        let port = endpoint.port().clone();
        let ours = Offer {
            endpoint: ud_only(&port),
            mtu: port.mtu.raw() as u8,
            buffer: None,
            ud: Some(endpoint.address()),
        };
        let (theirs, key) =
            client_handshake(&stream, |s| handshake::client_session(s, secret, &ours))
                .map_err(|e| handshake_failure(addr, &e))?;
        let peer = theirs.ud.ok_or_else(|| {
            ProbeFailure::new(
                FailureKind::Handshake,
                format!("{addr}: the peer offered no UD QP"),
            )
        })?;
        let session = endpoint
            .add_requester(&key, theirs.endpoint.gid, theirs.endpoint.lid, peer)
            .map_err(|e| ProbeFailure::new(FailureKind::Setup, format!("{addr}: {e}")))?;
        Ok(UdPeerConn {
            session,
            endpoint,
            stream,
            size,
            remote_gid: theirs.endpoint.gid,
        })
    }

    /// Whether the peer's handshake offered our own GID (the "peer" is this engine).
    pub fn is_self(&self) -> bool {
        self.remote_gid == self.endpoint.port().gid.gid
    }

    /// The local device.
    pub fn device(&self) -> &str {
        self.endpoint.device()
    }

    /// The local UD endpoint.
    pub fn endpoint(&self) -> &Arc<UdEndpoint> {
        &self.endpoint
    }

    /// False once the peer closed the control connection.
    pub fn alive(&self) -> bool {
        stream_alive(&self.stream)
    }

    /// One run of echo requests; each is lost after `reply_timeout`, the run ends by
    /// `timeout` from now.
    pub fn run(
        &self,
        warmup: u64,
        iterations: u64,
        clock: &Clock,
        reply_timeout: Duration,
        timeout: Duration,
    ) -> UdRun {
        self.start_run(
            warmup,
            iterations,
            clock,
            reply_timeout,
            Instant::now() + timeout,
        )
        .wait()
    }

    /// [`UdPeerConn::run`] without waiting: the run ends by `deadline`; its result comes
    /// from the returned [`PendingRun`] (the endpoint runs many peers' runs at once).
    pub fn start_run(
        &self,
        warmup: u64,
        iterations: u64,
        clock: &Clock,
        reply_timeout: Duration,
        deadline: Instant,
    ) -> PendingRun {
        if !self.alive() {
            return PendingRun::done(UdRun::failed(
                FailureKind::PeerClosed,
                "the peer closed the control connection",
            ));
        }
        self.endpoint.start_probe(
            &self.session,
            warmup,
            iterations,
            self.size,
            reply_timeout,
            deadline,
            clock,
        )
    }
}

/// The client end of a peer probe.
pub struct PeerConn {
    // Field order: the side (QP, MR) drops before its PD and device.
    side: Side,
    _pd: Arc<ProtectionDomain>,
    ctx: Arc<Context>,
    port: PortInfo,
    remote: RemoteBuffer,
    stream: TcpStream,
    size: usize,
    /// The peer's GID from its offer: equal to ours means we reached ourselves.
    remote_gid: std::net::Ipv6Addr,
}

impl std::fmt::Debug for PeerConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerConn")
            .field("device", &self.ctx.name())
            .field("peer", &self.stream.peer_addr().ok())
            .finish()
    }
}

impl PeerConn {
    /// Connect to the engine at `addr` (`HOST:PORT`), authenticate, and connect an RC QP
    /// from `device` (or the device owning the TCP connection's local address).
    pub fn connect(
        addr: &str,
        secret: &Secret,
        device: Option<&str>,
        gid_index: Option<u8>,
        size: usize,
    ) -> Result<PeerConn, ProbeFailure> {
        if size == 0 || size > PEER_BUFFER {
            return Err(ProbeFailure::new(
                FailureKind::Setup,
                format!("peer probes use 1..={PEER_BUFFER} byte messages, not {size}"),
            ));
        }
        let (stream, local_ip) = control_connection(addr)?;
        let (ctx, mut port) = local_port(device, gid_index, local_ip)?;
        let pd = ctx
            .alloc_pd()
            .map_err(|e| ProbeFailure::setup("alloc_pd", e))?;
        let side = Side::new(&ctx, &pd, size, random_psn())?;
        let ours = Offer {
            endpoint: side.endpoint(&port),
            mtu: port.mtu.raw() as u8,
            buffer: None,
            ud: None,
        };
        let theirs = client_handshake(&stream, |s| handshake::client(s, secret, &ours))
            .map_err(|e| handshake_failure(addr, &e))?;
        let remote = theirs
            .buffer
            .filter(|b| b.len >= size as u64)
            .ok_or_else(|| {
                ProbeFailure::new(
                    FailureKind::Handshake,
                    format!("{addr}: the peer offered no buffer of {size} bytes"),
                )
            })?;
        port.mtu = min_mtu(port.mtu, theirs.mtu);
        side.connect(&port, theirs.endpoint, peer_rts())?;
        Ok(PeerConn {
            side,
            _pd: pd,
            ctx,
            port,
            remote,
            stream,
            size,
            remote_gid: theirs.endpoint.gid,
        })
    }

    /// The local device.
    pub fn device(&self) -> &str {
        self.ctx.name()
    }

    /// The local GID index.
    pub fn gid_index(&self) -> u32 {
        self.port.gid.index
    }

    /// Whether the peer's handshake offered this connection's own GID: the "peer" is this
    /// engine (reached through a name or an address discovery did not know as its own).
    pub fn is_self(&self) -> bool {
        self.remote_gid == self.port.gid.gid
    }

    /// The message size.
    pub fn size(&self) -> usize {
        self.size
    }

    /// False once the peer closed the control connection.
    pub fn alive(&self) -> bool {
        stream_alive(&self.stream)
    }

    /// One run: READ (or WRITE) round trips in nanoseconds.
    pub fn run(
        &self,
        op: ProbeOp,
        warmup: u64,
        iterations: u64,
        clock: &Clock,
        timeout: Duration,
    ) -> Result<Vec<f64>, ProbeFailure> {
        if op == ProbeOp::Send {
            return Err(ProbeFailure::new(
                FailureKind::Setup,
                "peer probes are one-sided: use read or write",
            ));
        }
        if !self.alive() {
            return Err(ProbeFailure::new(
                FailureKind::PeerClosed,
                "the peer closed the control connection",
            ));
        }
        let abort = AtomicBool::new(false);
        let limits = Limits::new(&abort, Instant::now() + timeout, clock);
        let mut remote = self.remote;
        remote.len = self.size as u64;
        one_sided(&self.side, remote, op, warmup, iterations, clock, &limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    fn offer() -> Offer {
        Offer {
            endpoint: QpEndpoint {
                qp_num: 0x11,
                psn: 0x123456,
                gid: "::ffff:10.1.0.2".parse().unwrap(),
                lid: 0,
            },
            mtu: 3,
            buffer: None,
            ud: None,
        }
    }

    /// The client's failure when the server answers with `respond`'s error or a wrong
    /// secret.
    fn refused(server_secret: &str, respond_err: &str) -> ProbeFailure {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        for s in [&a, &b] {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        }
        let ks = Secret::new(server_secret.as_bytes()).unwrap();
        let err = respond_err.to_string();
        let server = std::thread::spawn(move || {
            let seen = NonceCache::new(4);
            handshake::server_session(&mut b, &ks, &seen, |_, _| Err::<(Offer, ()), _>(err.into()))
                .expect_err("the server refuses")
        });
        let kc = Secret::new(b"a shared secret of 32 bytes!!!!!").unwrap();
        let e =
            handshake::client_session(&mut a, &kc, &offer()).expect_err("the client is refused");
        server.join().unwrap();
        handshake_failure("10.2.0.2:9737", &e)
    }

    #[test]
    fn a_responder_without_its_qp_is_an_rdma_failure_and_a_bad_secret_the_agents() {
        let f = refused(
            "a shared secret of 32 bytes!!!!!",
            "open rxe0: No such device",
        );
        assert_eq!(f.kind, FailureKind::Setup, "{f}");
        assert!(f.detail.contains("could not set up its QP"), "{f}");
        let f = refused("another secret of 32 bytes!!!!!!", "not reached");
        assert_eq!(f.kind, FailureKind::Handshake, "{f}");
    }
}
