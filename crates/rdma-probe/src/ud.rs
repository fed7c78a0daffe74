//! UD echo probes: one UD QP per local device answers every peer and probes every peer, so the
//! QP count of a host does not grow with the mesh.
//!
//! A [`UdEndpoint`] owns a device's UD QP, its CQs, an MR of receive and send slots and one
//! thread that does all of its verbs work: it answers requests, and runs the probe jobs the
//! engine hands it (ping-pong: one request outstanding, the next sent when its reply arrives
//! or its timeout passes). Sessions come from the authenticated TCP handshake
//! ([`crate::handshake::SessionKey`]): the server side registers one before it answers the
//! handshake, the client side right after. Each session holds the peer's UD QPN, Q_Key and an
//! address handle, shared by every session towards the same GID (built again when a peer
//! comes back with another GID).
//!
//! A datagram (the payload after the 40-byte GRH area), big endian:
//!
//! ```text
//! 0..4   "RDUD"          4  version 1 or 2   5  kind: 1 request, 2 reply     6..8 zero
//! 8..16  session id      16..24 sequence number   24..32 the requester's send timestamp
//! version 1:  32..48 tag = SipHash-2-4-128(session key, bytes 0..32)
//! version 2:  32..40 received: in a reply, the requests of this session the responder has
//!             accepted so far, this one included (0 in a request)
//!             40..56 tag = SipHash-2-4-128(session key, bytes 0..40)
//! then zero padding up to the probe size
//! ```
//!
//! The responder answers from its own UD QP to the address the handshake gave (never to
//! where a datagram claims to come from), in the request's version, with the same sequence
//! number and timestamp and a fresh tag. Anything else is dropped and counted by
//! [`DropReason`]: short or foreign datagrams, unknown sessions, bad tags, a source QPN or GID
//! that is not the session's peer, replayed requests, replies nobody waits for, replies whose
//! `received` cannot be true (above the sequence number, or below an earlier reply's). A
//! datagram with the wrong Q_Key never reaches us (the device drops it). Loss is a request
//! without its reply within the timeout.
//!
//! This prober sends version 2; a responder answers both (a version-1-only responder, an
//! older rdmad, drops version 2 requests as malformed: upgrade responders first). The
//! `received` count splits loss by direction ([`Direction`]): when the reply to sequence `s`
//! says `r`, `s - r` requests of the session never reached the responder (request loss) and
//! the other unanswered ones up to `s` did, their replies were lost (reply loss). Losses after
//! the last reply are attributed at the next reply, or as request loss when a run gets no
//! reply at all or fails (the peer went silent).
//!
//! An endpoint runs up to [`MAX_ACTIVE_JOBS`] probe runs at once (one request outstanding
//! each), so one slow or silent peer delays no other: its requests time out while the others'
//! replies come in.
use crate::clock::Clock;
use crate::cpu::CpuMeter;
use crate::failure::{FailureKind, ProbeFailure};
use crate::handshake::{self, SessionKey, UdEndpoint as UdAddr};
use crate::ratelog::{suppressed_note, RateLimited};
use crate::rc::PortInfo;
use rdma_verbs::{
    grh_source_gid, AccessFlags, AddressHandle, CompletionQueue, Context, MemoryRegion,
    ProtectionDomain, QpCaps, QueuePair, Sge, UdDest, VerbsError, WcStatus, WorkCompletion,
    GRH_LEN,
};
use std::collections::HashMap;
use std::net::Ipv6Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod datagram;
mod server;

pub use datagram::{fuzz_datagram, Datagram, Direction, DropReason, LossBook};
use server::serve;

/// Bytes of a version 1 datagram's header and tag: the smallest datagram accepted.
pub const UD_HEADER: usize = 48;
/// Bytes of a version 2 datagram's header, count and tag: the smallest UD probe this
/// prober sends.
pub const UD_HEADER_V2: usize = 56;
/// Probe runs an endpoint serves at once (each with one request outstanding); more wait
/// their turn. Below the send queue, which replies to peers share.
pub const MAX_ACTIVE_JOBS: usize = 32;

/// Receives kept posted (a flood fills these; the thread re-posts each one at once).
const RECV_SLOTS: usize = 256;
/// Sends in flight at most (requests and replies).
const SEND_SLOTS: usize = 64;
/// Keep spinning on the CQ this long after the last datagram before sleeping on the
/// completion channel: a ping-pong's next request comes far sooner.
const SPIN_AFTER_ACTIVITY: Duration = Duration::from_millis(2);
/// How long a run spins for a reply before it yields the CPU on every spin (as the RC
/// probes do): far above a Soft-RoCE round trip, far below a scheduler tick.
const YIELD_AFTER: Duration = Duration::from_micros(200);
/// How long a run waits for a reply, yielding, before it sleeps on the completion channel
/// until the reply timeout: ~3x a Soft-RoCE round trip under TCG, ~1000x a hardware one, so
/// only requests that are almost surely lost put the thread to sleep.
///
/// Sleeping earlier was tried, and gained nothing: a run slept on the channel for the first
/// half of its pair's fastest round trip, so that a path with a 6-12 ms delay would not be
/// spun through. In the 4-host lab's fault matrix the probers' CPU during that delay was
/// 39-40% (37-42% spinning, in the CI run before), the baseline round trip to the delayed
/// host 4.3 ms (1.8-3.8 ms in earlier runs) and the latency alert fired after 102 s (55-97 s
/// before). The likely reason: this thread also answers the peers' requests, and asleep it
/// answers only after a wake-up, which under TCG is slow.
const BLOCK_AFTER: Duration = Duration::from_millis(10);
/// Longest sleep on the completion channel (new jobs and stop are noticed after it).
const IDLE_WAIT: Duration = Duration::from_millis(20);
/// A run stops after this many requests in a row without a reply (a dead peer costs a few
/// timeouts per round, not `iterations` of them).
const MAX_CONSECUTIVE_LOSSES: u64 = 3;

/// Why a session could not be registered with an endpoint.
#[derive(Debug, thiserror::Error)]
pub enum UdSessionError {
    /// The endpoint's GID index does not fit an address handle's `u8`.
    #[error("GID index over 255")]
    GidIndex,
    /// The address handle towards the peer could not be created.
    #[error(transparent)]
    AddressHandle(#[from] VerbsError),
    /// A session of this id and role is registered already.
    #[error("session id already in use")]
    IdInUse,
}

/// Counters of one endpoint, shared with the engine's snapshot.
#[derive(Debug, Default)]
pub struct UdStats {
    dropped: [AtomicU64; 9],
    /// Requests answered.
    pub answered: AtomicU64,
    /// CPU nanoseconds of the endpoint's thread.
    pub cpu_ns: AtomicU64,
}

impl UdStats {
    fn drop_one(&self, why: DropReason) {
        self.dropped[why.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Dropped datagrams of `why` so far.
    pub fn dropped(&self, why: DropReason) -> u64 {
        self.dropped[why.index()].load(Ordering::Relaxed)
    }
}

/// Which end of a handshake a session is (an engine probing itself has both, same id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Role {
    /// We answer its requests.
    Responder,
    /// We send it requests.
    Requester,
}

struct Session {
    key: [u8; 16],
    peer_gid: Ipv6Addr,
    peer: UdAddr,
    ah: Arc<AddressHandle>,
    /// Highest request sequence number answered (responder) or sent (requester): one
    /// sequence for the session's whole life, so that no request of a later run looks like
    /// a replay of an earlier one.
    last_seq: u64,
    /// Responder: requests accepted so far (what a version 2 reply says).
    received: u64,
    /// Requester: loss by direction.
    book: LossBook,
}

/// What the engine asks an endpoint to do: probe one session.
struct Job {
    session: u64,
    warmup: u64,
    iterations: u64,
    size: usize,
    timeout: Duration,
    deadline: Instant,
    clock: Clock,
    done: mpsc::Sender<UdRun>,
}

/// The outcome of one UD probe run.
#[derive(Debug, Clone, Default)]
pub struct UdRun {
    /// Round-trip times of the answered timed requests, nanoseconds.
    pub samples_ns: Vec<f64>,
    /// Requests sent (warmup included: every one is counted by direction).
    pub sent: u64,
    /// Losses attributed in this run: `lost_request + lost_reply` (they may be of requests
    /// of an earlier run: a loss is attributed when a later reply says which way it went).
    pub lost: u64,
    /// Of them, requests the peer never received.
    pub lost_request: u64,
    /// Of them, replies lost after the peer received the request.
    pub lost_reply: u64,
    /// Replies accepted in this run.
    pub replies: u64,
    /// Why the run stopped early, if it did.
    pub failure: Option<ProbeFailure>,
}

impl UdRun {
    /// A run that failed before it sent anything.
    pub fn failed(kind: FailureKind, why: impl Into<String>) -> UdRun {
        UdRun {
            failure: Some(ProbeFailure::new(kind, why)),
            ..UdRun::default()
        }
    }
}

/// A run handed to an endpoint's thread: its result comes by the run's deadline.
#[derive(Debug)]
pub struct PendingRun {
    rx: mpsc::Receiver<UdRun>,
    /// After this, the thread has failed to answer.
    give_up: Instant,
    done: Option<UdRun>,
}

impl PendingRun {
    /// A result known already.
    pub fn done(run: UdRun) -> PendingRun {
        let (_, rx) = mpsc::channel();
        PendingRun {
            rx,
            give_up: Instant::now(),
            done: Some(run),
        }
    }

    /// The result if the run is over (never blocks).
    pub fn try_take(&mut self) -> Option<UdRun> {
        if let Some(r) = self.done.take() {
            return Some(r);
        }
        match self.rx.try_recv() {
            Ok(r) => Some(r),
            Err(mpsc::TryRecvError::Disconnected) => Some(UdRun::failed(
                FailureKind::NoDevice,
                "the UD endpoint stopped",
            )),
            Err(mpsc::TryRecvError::Empty) if Instant::now() >= self.give_up => {
                Some(UdRun::failed(
                    FailureKind::Timeout,
                    "the UD endpoint did not finish the run",
                ))
            }
            Err(mpsc::TryRecvError::Empty) => None,
        }
    }

    /// Wait for the result.
    pub fn wait(mut self) -> UdRun {
        if let Some(r) = self.done.take() {
            return r;
        }
        let wait = self.give_up.saturating_duration_since(Instant::now());
        self.rx.recv_timeout(wait).unwrap_or_else(|_| {
            UdRun::failed(
                FailureKind::Timeout,
                "the UD endpoint did not finish the run",
            )
        })
    }
}

/// The verbs objects of an endpoint (touched only by its thread, and by Drop).
struct Verbs {
    // Field order: QP before its CQs and MR, all before the PD and the device.
    qp: QueuePair,
    send_cq: Arc<CompletionQueue>,
    recv_cq: Arc<CompletionQueue>,
    mr: MemoryRegion,
    slot: usize,
    inline: u32,
}

struct Shared {
    device: String,
    port: PortInfo,
    qp_num: u32,
    qkey: u32,
    pd: Arc<ProtectionDomain>,
    sessions: Mutex<HashMap<(u64, Role), Session>>,
    ahs: Mutex<HashMap<Ipv6Addr, Weak<AddressHandle>>>,
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    stats: Arc<UdStats>,
    stop: AtomicBool,
    broken: AtomicBool,
    /// A line per drop reason per minute at most: a flood is counted, not logged.
    drop_log: RateLimited,
}

/// A device's UD QP and the thread serving it. Dropping it stops the thread and frees the
/// QP, its CQs, MR and address handles.
pub struct UdEndpoint {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    _ctx: Arc<Context>,
}

impl std::fmt::Debug for UdEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdEndpoint")
            .field("device", &self.shared.device)
            .field("qp_num", &self.shared.qp_num)
            .finish()
    }
}

fn random_u32() -> u32 {
    handshake::fresh_nonce()
        .map(|n| u32::from_be_bytes([n[0], n[1], n[2], n[3]]))
        .unwrap_or(0x5eed_0001)
}

impl UdEndpoint {
    /// Create the UD QP of `ctx`'s `port` (random Q_Key and PSN), post its receives and
    /// start its thread.
    pub(crate) fn start(ctx: &Arc<Context>, port: PortInfo) -> Result<UdEndpoint, ProbeFailure> {
        let pd = ctx
            .alloc_pd()
            .map_err(|e| ProbeFailure::setup("alloc_pd", e))?;
        let send_cq = ctx
            .create_cq(SEND_SLOTS as u32 * 2)
            .map_err(|e| ProbeFailure::setup("create_cq", e))?;
        let recv_cq = ctx
            .create_cq_with_channel(RECV_SLOTS as u32 * 2)
            .map_err(|e| ProbeFailure::setup("create_cq", e))?;
        let caps = QpCaps {
            max_send_wr: SEND_SLOTS as u32,
            max_recv_wr: RECV_SLOTS as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 256,
        };
        let qp = pd
            .create_ud_qp(&send_cq, &recv_cq, caps)
            .or_else(|_| {
                pd.create_ud_qp(
                    &send_cq,
                    &recv_cq,
                    QpCaps {
                        max_inline_data: 0,
                        ..caps
                    },
                )
            })
            .map_err(|e| ProbeFailure::setup("create_ud_qp", e))?;
        let qkey = random_u32() & !rdma_verbs::CONTROLLED_QKEY_BIT;
        qp.ud_ready(port.port, qkey, random_u32())
            .map_err(|e| ProbeFailure::setup("UD QP to RTS", e))?;
        // A UD message is at most one MTU: slots that size never see a length error.
        let payload = port.mtu.bytes().unwrap_or(4096) as usize;
        let slot = GRH_LEN + payload;
        // Registered zeroed: a send slot's padding after its header stays zero.
        let mr = pd
            .register(slot * (RECV_SLOTS + SEND_SLOTS), AccessFlags::LOCAL_WRITE)
            .map_err(|e| ProbeFailure::setup("register", e))?;
        let inline = qp.max_inline_data();
        let verbs = Verbs {
            qp,
            send_cq,
            recv_cq,
            mr,
            slot,
            inline,
        };
        for i in 0..RECV_SLOTS {
            verbs.post_recv(i)?;
        }
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            device: ctx.name().to_string(),
            qp_num: verbs.qp.qp_num(),
            qkey,
            port,
            pd,
            sessions: Mutex::new(HashMap::new()),
            ahs: Mutex::new(HashMap::new()),
            jobs: Mutex::new(Some(tx)),
            stats: Arc::new(UdStats::default()),
            stop: AtomicBool::new(false),
            broken: AtomicBool::new(false),
            drop_log: RateLimited::default(),
        });
        let s2 = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("rdma-probe-ud-{}", ctx.name()))
            .spawn(move || serve(&s2, verbs, rx))
            .map_err(|e| ProbeFailure::new(FailureKind::Setup, format!("UD thread: {e}")))?;
        Ok(UdEndpoint {
            shared,
            thread: Some(thread),
            _ctx: Arc::clone(ctx),
        })
    }

    /// The device.
    pub fn device(&self) -> &str {
        &self.shared.device
    }

    /// What the handshake announces of this endpoint.
    pub fn address(&self) -> UdAddr {
        UdAddr {
            qp_num: self.shared.qp_num,
            qkey: self.shared.qkey,
        }
    }

    pub(crate) fn port(&self) -> &PortInfo {
        &self.shared.port
    }

    /// Counters.
    pub fn stats(&self) -> &Arc<UdStats> {
        &self.shared.stats
    }

    /// Sessions registered now (both roles).
    pub fn sessions(&self) -> usize {
        lock(&self.shared.sessions).len()
    }

    /// False once the thread hit an error it cannot recover from (a new endpoint is built).
    pub fn healthy(&self) -> bool {
        !self.shared.broken.load(Ordering::Relaxed)
    }

    /// The AH towards `gid`, shared with every other session towards it.
    fn ah(&self, gid: Ipv6Addr, lid: u16) -> Result<Arc<AddressHandle>, UdSessionError> {
        let mut ahs = lock(&self.shared.ahs);
        ahs.retain(|_, w| w.strong_count() > 0);
        if let Some(ah) = ahs.get(&gid).and_then(Weak::upgrade) {
            return Ok(ah);
        }
        let p = &self.shared.port;
        let sgid = u8::try_from(p.gid.index).map_err(|_| UdSessionError::GidIndex)?;
        let ah = Arc::new(self.shared.pd.create_ah(p.port, sgid, gid, lid)?);
        ahs.insert(gid, Arc::downgrade(&ah));
        Ok(ah)
    }

    /// Address handles cached now (one per peer GID in use).
    pub fn address_handles(&self) -> usize {
        let mut ahs = lock(&self.shared.ahs);
        ahs.retain(|_, w| w.strong_count() > 0);
        ahs.len()
    }

    /// Register a session of the handshake `key` with the peer at `gid`/`lid` and UD
    /// address `peer`; it lasts as long as the returned guard.
    fn add(
        self: &Arc<Self>,
        key: &SessionKey,
        role: Role,
        gid: Ipv6Addr,
        lid: u16,
        peer: UdAddr,
    ) -> Result<SessionGuard, UdSessionError> {
        let ah = self.ah(gid, lid)?;
        let mut sessions = lock(&self.shared.sessions);
        if sessions.contains_key(&(key.id, role)) {
            return Err(UdSessionError::IdInUse);
        }
        sessions.insert(
            (key.id, role),
            Session {
                key: key.key,
                peer_gid: gid,
                peer,
                ah,
                last_seq: 0,
                received: 0,
                book: LossBook::default(),
            },
        );
        Ok(SessionGuard {
            endpoint: Arc::clone(self),
            id: key.id,
            role,
        })
    }

    /// Answer the requests of a peer that handshook with us.
    pub fn add_responder(
        self: &Arc<Self>,
        key: &SessionKey,
        gid: Ipv6Addr,
        lid: u16,
        peer: UdAddr,
    ) -> Result<SessionGuard, UdSessionError> {
        self.add(key, Role::Responder, gid, lid, peer)
    }

    /// Probe a peer we handshook with.
    pub fn add_requester(
        self: &Arc<Self>,
        key: &SessionKey,
        gid: Ipv6Addr,
        lid: u16,
        peer: UdAddr,
    ) -> Result<SessionGuard, UdSessionError> {
        self.add(key, Role::Requester, gid, lid, peer)
    }

    /// One ping-pong run on `session`: `warmup` untimed then `iterations` timed requests of
    /// `size` bytes, each lost after `timeout`; the whole run ends by `deadline`.
    #[allow(clippy::too_many_arguments)]
    pub fn probe(
        &self,
        session: &SessionGuard,
        warmup: u64,
        iterations: u64,
        size: usize,
        timeout: Duration,
        deadline: Instant,
        clock: &Clock,
    ) -> UdRun {
        self.start_probe(session, warmup, iterations, size, timeout, deadline, clock)
            .wait()
    }

    /// [`UdEndpoint::probe`] without waiting: the run goes to the endpoint's thread, which
    /// serves up to [`MAX_ACTIVE_JOBS`] runs at once; take its result from the returned
    /// [`PendingRun`].
    #[allow(clippy::too_many_arguments)]
    pub fn start_probe(
        &self,
        session: &SessionGuard,
        warmup: u64,
        iterations: u64,
        size: usize,
        timeout: Duration,
        deadline: Instant,
        clock: &Clock,
    ) -> PendingRun {
        if !(UD_HEADER_V2..=self.shared.port.mtu.bytes().unwrap_or(4096) as usize).contains(&size) {
            return PendingRun::done(UdRun::failed(
                FailureKind::Setup,
                format!("UD probes carry {UD_HEADER_V2} bytes to one MTU, not {size}"),
            ));
        }
        let (tx, rx) = mpsc::channel();
        let job = Job {
            session: session.id,
            warmup,
            iterations,
            size,
            timeout,
            deadline,
            clock: *clock,
            done: tx,
        };
        let sent = lock(&self.shared.jobs)
            .as_ref()
            .is_some_and(|jobs| jobs.send(job).is_ok());
        if !sent {
            return PendingRun::done(UdRun::failed(
                FailureKind::NoDevice,
                "the UD endpoint stopped",
            ));
        }
        // The thread answers by the deadline, or by the reply timeout of a request still
        // out at the deadline (a lossy path often has one); the margin covers its idle wait.
        PendingRun {
            rx,
            give_up: deadline.max(Instant::now()) + timeout + IDLE_WAIT * 10,
            done: None,
        }
    }
}

impl Drop for UdEndpoint {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        *lock(&self.shared.jobs) = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A registered session; dropping it removes the session.
pub struct SessionGuard {
    endpoint: Arc<UdEndpoint>,
    id: u64,
    role: Role,
}

impl std::fmt::Debug for SessionGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionGuard")
            .field("device", &self.endpoint.device())
            .finish()
    }
}

impl SessionGuard {
    /// The endpoint it lives on.
    pub fn endpoint(&self) -> &Arc<UdEndpoint> {
        &self.endpoint
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        lock(&self.endpoint.shared.sessions).remove(&(self.id, self.role));
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Verbs {
    fn post_recv(&self, i: usize) -> Result<(), ProbeFailure> {
        let sge = Sge {
            mr: &self.mr,
            offset: i * self.slot,
            len: self.slot as u32,
        };
        self.qp
            .post_recv(i as u64, &[sge])
            .map_err(ProbeFailure::post)
    }
}

/// The UD endpoints of an engine: one per (device, port, GID index), made on first use by
/// the listener or the prober, shared by both.
#[derive(Debug, Default)]
pub struct UdEndpoints {
    map: Mutex<HashMap<(String, u8, u32), Arc<UdEndpoint>>>,
}

impl UdEndpoints {
    /// The endpoint of `ctx`'s `port` (made now if missing or broken).
    pub(crate) fn get(
        &self,
        ctx: &Arc<Context>,
        port: PortInfo,
    ) -> Result<Arc<UdEndpoint>, ProbeFailure> {
        let key = (ctx.name().to_string(), port.port, port.gid.index);
        let mut map = lock(&self.map);
        if let Some(e) = map.get(&key).filter(|e| e.healthy()) {
            return Ok(Arc::clone(e));
        }
        let e = Arc::new(UdEndpoint::start(ctx, port)?);
        map.insert(key, Arc::clone(&e));
        Ok(e)
    }

    /// Every endpoint, for the snapshot.
    pub fn all(&self) -> Vec<Arc<UdEndpoint>> {
        lock(&self.map).values().cloned().collect()
    }
}

#[cfg(test)]
mod tests;
