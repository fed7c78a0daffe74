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
//! 0..4   "RDUD"          4  version 1      5  kind: 1 request, 2 reply     6..8 zero
//! 8..16  session id      16..24 sequence number   24..32 the requester's send timestamp
//! 32..48 tag = SipHash-2-4-128(session key, bytes 0..32)
//! 48..   zero padding up to the probe size
//! ```
//!
//! The responder answers from its own UD QP to the address the handshake gave (never to
//! where a datagram claims to come from), with the same sequence number and timestamp and a
//! fresh tag. Anything else is dropped and counted by [`DropReason`]: short or foreign
//! datagrams, unknown sessions, bad tags, a source QPN or GID that is not the session's peer,
//! replayed requests, replies nobody waits for. A datagram with the wrong Q_Key never reaches
//! us (the device drops it). Loss is a request without its reply within the timeout.
use crate::clock::Clock;
use crate::cpu::CpuMeter;
use crate::failure::{FailureKind, ProbeFailure};
use crate::handshake::{self, SessionKey, UdEndpoint as UdAddr};
use crate::ratelog::{suppressed_note, RateLimited};
use crate::rc::PortInfo;
use rdma_verbs::{
    grh_source_gid, AccessFlags, AddressHandle, CompletionQueue, Context, MemoryRegion,
    ProtectionDomain, QpCaps, QueuePair, Sge, UdDest, WcStatus, WorkCompletion, GRH_LEN,
};
use siphasher::sip128::SipHasher24;
use std::collections::HashMap;
use std::net::Ipv6Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes of a datagram's header and tag: the smallest UD probe.
pub const UD_HEADER: usize = 48;
const MAGIC: &[u8; 4] = b"RDUD";
const VERSION: u8 = 1;
const KIND_REQUEST: u8 = 1;
const KIND_REPLY: u8 = 2;
const TAGGED: usize = 32;

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
/// Longest sleep on the completion channel (new jobs and stop are noticed after it).
const IDLE_WAIT: Duration = Duration::from_millis(20);
/// A run stops after this many requests in a row without a reply (a dead peer costs a few
/// timeouts per round, not `iterations` of them).
const MAX_CONSECUTIVE_LOSSES: u64 = 3;

/// Why a datagram was dropped: the `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DropReason {
    /// Shorter than the header, foreign magic or version, unknown kind.
    Malformed,
    /// A session id this endpoint does not have (or a request for a client session).
    UnknownSession,
    /// The tag does not verify under the session's key.
    BadTag,
    /// Source QPN or GID is not the session's peer.
    WrongSource,
    /// A request whose sequence number is not above the last one answered.
    Replay,
    /// A reply nobody waits for (late after its timeout, duplicated, or forged seq).
    Unexpected,
    /// A receive completed with an error status.
    RecvError,
    /// A reply could not be sent (send queue full or a send error).
    ReplyFailed,
}

impl DropReason {
    /// Every reason, in label order.
    pub const ALL: [DropReason; 8] = [
        DropReason::Malformed,
        DropReason::UnknownSession,
        DropReason::BadTag,
        DropReason::WrongSource,
        DropReason::Replay,
        DropReason::Unexpected,
        DropReason::RecvError,
        DropReason::ReplyFailed,
    ];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::UnknownSession => "unknown_session",
            DropReason::BadTag => "bad_tag",
            DropReason::WrongSource => "wrong_source",
            DropReason::Replay => "replay",
            DropReason::Unexpected => "unexpected",
            DropReason::RecvError => "recv_error",
            DropReason::ReplyFailed => "reply_failed",
        }
    }

    fn index(self) -> usize {
        DropReason::ALL
            .iter()
            .position(|r| *r == self)
            .expect("in ALL")
    }
}

/// One decoded datagram header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    /// Request or reply.
    pub reply: bool,
    /// Session id.
    pub session: u64,
    /// Sequence number.
    pub seq: u64,
    /// The requester's send timestamp (its clock's ticks).
    pub stamp: u64,
}

fn tag(key: &[u8; 16], header: &[u8]) -> [u8; 16] {
    SipHasher24::new_with_key(key).hash(header).as_bytes()
}

/// Compare two tags without an early exit.
fn tags_equal(a: &[u8], b: &[u8; 16]) -> bool {
    a.len() == 16 && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Datagram {
    /// Write the header and its tag into `out[..UD_HEADER]` (the rest is left as it is).
    pub fn encode(&self, key: &[u8; 16], out: &mut [u8]) {
        let out = &mut out[..UD_HEADER];
        out[0..4].copy_from_slice(MAGIC);
        out[4] = VERSION;
        out[5] = if self.reply { KIND_REPLY } else { KIND_REQUEST };
        out[6..8].fill(0);
        out[8..16].copy_from_slice(&self.session.to_be_bytes());
        out[16..24].copy_from_slice(&self.seq.to_be_bytes());
        out[24..32].copy_from_slice(&self.stamp.to_be_bytes());
        let t = tag(key, &out[..TAGGED]);
        out[TAGGED..UD_HEADER].copy_from_slice(&t);
    }

    /// Decode a header without checking its tag (the session, hence the key, comes from it).
    pub fn decode(b: &[u8]) -> Result<Datagram, DropReason> {
        if b.len() < UD_HEADER || &b[0..4] != MAGIC || b[4] != VERSION || b[6..8] != [0, 0] {
            return Err(DropReason::Malformed);
        }
        let reply = match b[5] {
            KIND_REQUEST => false,
            KIND_REPLY => true,
            _ => return Err(DropReason::Malformed),
        };
        let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Ok(Datagram {
            reply,
            session: u64_at(8),
            seq: u64_at(16),
            stamp: u64_at(24),
        })
    }

    /// Whether `b`'s tag verifies under `key`.
    pub fn verify(b: &[u8], key: &[u8; 16]) -> bool {
        b.len() >= UD_HEADER && tags_equal(&b[TAGGED..UD_HEADER], &tag(key, &b[..TAGGED]))
    }
}

/// Counters of one endpoint, shared with the engine's snapshot.
#[derive(Debug, Default)]
pub struct UdStats {
    dropped: [AtomicU64; 8],
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
#[derive(Debug, Clone)]
pub struct UdRun {
    /// Round-trip times of the answered timed requests, nanoseconds.
    pub samples_ns: Vec<f64>,
    /// Timed requests sent.
    pub sent: u64,
    /// Timed requests without a reply within the timeout.
    pub lost: u64,
    /// Why the run stopped early, if it did.
    pub failure: Option<ProbeFailure>,
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
    fn ah(&self, gid: Ipv6Addr, lid: u16) -> Result<Arc<AddressHandle>, String> {
        let mut ahs = lock(&self.shared.ahs);
        ahs.retain(|_, w| w.strong_count() > 0);
        if let Some(ah) = ahs.get(&gid).and_then(Weak::upgrade) {
            return Ok(ah);
        }
        let p = &self.shared.port;
        let sgid = u8::try_from(p.gid.index).map_err(|_| "GID index over 255".to_string())?;
        let ah = Arc::new(
            self.shared
                .pd
                .create_ah(p.port, sgid, gid, lid)
                .map_err(|e| e.to_string())?,
        );
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
    ) -> Result<SessionGuard, String> {
        let ah = self.ah(gid, lid)?;
        let mut sessions = lock(&self.shared.sessions);
        if sessions.contains_key(&(key.id, role)) {
            return Err("session id already in use".into());
        }
        sessions.insert(
            (key.id, role),
            Session {
                key: key.key,
                peer_gid: gid,
                peer,
                ah,
                last_seq: 0,
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
    ) -> Result<SessionGuard, String> {
        self.add(key, Role::Responder, gid, lid, peer)
    }

    /// Probe a peer we handshook with.
    pub fn add_requester(
        self: &Arc<Self>,
        key: &SessionKey,
        gid: Ipv6Addr,
        lid: u16,
        peer: UdAddr,
    ) -> Result<SessionGuard, String> {
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
        let fail = |kind, why: &str| UdRun {
            samples_ns: Vec::new(),
            sent: 0,
            lost: 0,
            failure: Some(ProbeFailure::new(kind, why.to_string())),
        };
        if !(UD_HEADER..=self.shared.port.mtu.bytes().unwrap_or(4096) as usize).contains(&size) {
            return fail(
                FailureKind::Setup,
                &format!("UD probes carry {UD_HEADER} bytes to one MTU, not {size}"),
            );
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
            return fail(FailureKind::NoDevice, "the UD endpoint stopped");
        }
        // The thread always answers by the deadline; the margin covers its idle wait.
        let wait = deadline.saturating_duration_since(Instant::now()) + IDLE_WAIT * 10;
        rx.recv_timeout(wait).unwrap_or_else(|_| {
            fail(
                FailureKind::Timeout,
                "the UD endpoint did not finish the run",
            )
        })
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

/// The job in progress.
struct Active {
    job: Job,
    seq: u64,
    /// (seq, stamp) of the request waiting for its reply; the stamp is its send time in
    /// the job's clock ticks.
    waiting: Option<(u64, u64)>,
    done: u64,
    lost_in_a_row: u64,
    run: UdRun,
}

struct Server<'a> {
    shared: &'a Shared,
    verbs: Verbs,
    /// Sends posted and not yet completed, and the next send slot.
    in_flight: usize,
    next_send: usize,
    wcs: Vec<WorkCompletion>,
}

fn serve(shared: &Shared, verbs: Verbs, jobs: mpsc::Receiver<Job>) {
    let mut meter = CpuMeter::start();
    let mut s = Server {
        shared,
        verbs,
        in_flight: 0,
        next_send: 0,
        wcs: Vec::with_capacity(32),
    };
    let mut active: Option<Active> = None;
    // When the loop last found nothing to do after some work (None while busy).
    let mut idle_since: Option<Instant> = None;
    let mut flushes = 0u32;
    let mut idle_spins = 0u32;
    while !shared.stop.load(Ordering::Relaxed) {
        let mut busy = s.poll_sends();
        busy |= s.poll_recvs(&mut active);
        if active.is_none() {
            if let Ok(job) = jobs.try_recv() {
                active = Some(Active {
                    seq: 0,
                    job,
                    waiting: None,
                    done: 0,
                    lost_in_a_row: 0,
                    run: UdRun {
                        samples_ns: Vec::new(),
                        sent: 0,
                        lost: 0,
                        failure: None,
                    },
                });
            }
        }
        // The hot loops read the job's cheap clock, not Instant::now() (~1 us in a TCG
        // guest), so a reply is seen within a fraction of a microsecond.
        if let Some(a) = active.as_mut() {
            if s.step(a) {
                let a = active.take().expect("active");
                let _ = a.job.done.send(a.run);
                (idle_since, idle_spins) = (None, 0);
            } else if a.waited_ns() > YIELD_AFTER.as_nanos() as f64 {
                // A reply this late: let the other threads (maybe the responder) run.
                std::thread::yield_now();
            }
            continue;
        }
        if busy {
            (idle_since, idle_spins) = (None, 0);
            continue;
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        idle_spins = idle_spins.wrapping_add(1);
        if !idle_spins.is_multiple_of(64) {
            if idle_spins > 64 {
                std::thread::yield_now();
            }
            continue;
        }
        if since.elapsed() < SPIN_AFTER_ACTIVITY {
            std::thread::yield_now();
            continue;
        }
        // Idle: sleep on the completion channel (after arming it, poll once more so a
        // datagram that came in between is not left waiting).
        if s.verbs.recv_cq.req_notify(false).is_err() {
            std::thread::sleep(IDLE_WAIT);
            continue;
        }
        if s.poll_recvs(&mut active) {
            (idle_since, idle_spins) = (None, 0);
            continue;
        }
        let _ = s.verbs.recv_cq.wait(IDLE_WAIT);
        flushes = flushes.wrapping_add(1);
        if flushes.is_multiple_of(16) {
            meter.flush(&shared.stats.cpu_ns);
        }
    }
    if let Some(a) = active.take() {
        let mut run = a.run;
        run.failure = Some(ProbeFailure::new(
            FailureKind::NoDevice,
            "the UD endpoint stopped",
        ));
        let _ = a.job.done.send(run);
    }
    meter.flush(&shared.stats.cpu_ns);
}

impl Active {
    /// Nanoseconds since the outstanding request went out (0 when none is).
    fn waited_ns(&self) -> f64 {
        match self.waiting {
            Some((_, stamp)) => self
                .job
                .clock
                .ticks_to_ns(self.job.clock.now().wrapping_sub(stamp)),
            None => 0.0,
        }
    }
}

impl Server<'_> {
    /// Retire send completions; true when there were any.
    fn poll_sends(&mut self) -> bool {
        self.wcs.clear();
        let n = match self.verbs.send_cq.poll_into(&mut self.wcs, SEND_SLOTS) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(device = self.shared.device, "UD send CQ: {e}");
                self.shared.broken.store(true, Ordering::Relaxed);
                0
            }
        };
        self.in_flight = self.in_flight.saturating_sub(n);
        if self.wcs.iter().any(|wc| wc.status != WcStatus::Success) {
            self.check_qp("a UD send failed");
        }
        n > 0
    }

    /// After an error completion: a UD QP that left RTS serves no one any more; mark the
    /// endpoint broken so that the next handshake builds a new one.
    fn check_qp(&self, what: &str) {
        let state = self.verbs.qp.state();
        if !matches!(state, Ok(rdma_verbs::QpState::Rts))
            && !self.shared.broken.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(device = self.shared.device, state = ?state, "{what}: the UD probe QP left RTS; a new one is built at the next handshake");
        }
    }

    /// Handle arrived datagrams; true when there were any.
    fn poll_recvs(&mut self, active: &mut Option<Active>) -> bool {
        let mut wcs = std::mem::take(&mut self.wcs);
        wcs.clear();
        let n = match self.verbs.recv_cq.poll_into(&mut wcs, 32) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(device = self.shared.device, "UD receive CQ: {e}");
                self.shared.broken.store(true, Ordering::Relaxed);
                0
            }
        };
        for wc in &wcs {
            self.on_recv(wc, active);
        }
        self.wcs = wcs;
        n > 0
    }

    fn on_recv(&mut self, wc: &WorkCompletion, active: &mut Option<Active>) {
        let slot = wc.wr_id as usize;
        if slot >= RECV_SLOTS {
            return;
        }
        if wc.status != WcStatus::Success {
            self.dropped(DropReason::RecvError, wc);
            self.check_qp("a UD receive failed");
        } else if let Err(why) = self.datagram(wc, slot, active) {
            self.dropped(why, wc);
        }
        if let Err(f) = self.verbs.post_recv(slot) {
            tracing::warn!(device = self.shared.device, "UD receive re-post: {f}");
            self.shared.broken.store(true, Ordering::Relaxed);
        }
    }

    /// Count a dropped datagram, and log it unless its reason was logged within a minute.
    fn dropped(&self, why: DropReason, wc: &WorkCompletion) {
        self.shared.stats.drop_one(why);
        if let Some(n) = self.shared.drop_log.check(why.name(), Instant::now()) {
            tracing::warn!(
                device = self.shared.device,
                reason = why.name(),
                src_qp = wc.src_qp,
                "UD probe datagram dropped ({}); every drop is counted by reason {}",
                why.name(),
                suppressed_note(n)
            );
        }
    }

    /// Check one datagram and act on it.
    fn datagram(
        &mut self,
        wc: &WorkCompletion,
        slot: usize,
        active: &mut Option<Active>,
    ) -> Result<(), DropReason> {
        let len = (wc.byte_len as usize).min(self.verbs.slot);
        if len < GRH_LEN + UD_HEADER {
            return Err(DropReason::Malformed);
        }
        let mut head = [0u8; GRH_LEN + UD_HEADER];
        self.verbs
            .mr
            .read(slot * self.verbs.slot, &mut head)
            .map_err(|_| DropReason::Malformed)?;
        let (grh, payload) = head.split_at(GRH_LEN);
        let d = Datagram::decode(payload)?;
        let source = wc.has_grh().then(|| grh_source_gid(grh)).flatten();
        let role = if d.reply {
            Role::Requester
        } else {
            Role::Responder
        };
        let mut sessions = lock(&self.shared.sessions);
        let session = sessions
            .get_mut(&(d.session, role))
            .ok_or(DropReason::UnknownSession)?;
        if !Datagram::verify(payload, &session.key) {
            return Err(DropReason::BadTag);
        }
        if wc.src_qp != session.peer.qp_num || source.is_some_and(|g| g != session.peer_gid) {
            return Err(DropReason::WrongSource);
        }
        if d.reply {
            let a = active
                .as_mut()
                .filter(|a| a.job.session == d.session && a.waiting == Some((d.seq, d.stamp)))
                .ok_or(DropReason::Unexpected)?;
            let rtt = a
                .job
                .clock
                .ticks_to_ns(a.job.clock.now().wrapping_sub(d.stamp));
            a.waiting = None;
            a.lost_in_a_row = 0;
            if a.done >= a.job.warmup {
                a.run.samples_ns.push(rtt);
            }
            a.done += 1;
            return Ok(());
        }
        if d.seq <= session.last_seq {
            return Err(DropReason::Replay);
        }
        session.last_seq = d.seq;
        let reply = Datagram { reply: true, ..d };
        let (key, ah, peer) = (session.key, Arc::clone(&session.ah), session.peer);
        drop(sessions);
        let size = len - GRH_LEN;
        self.send(&reply, &key, &ah, peer, size)
            .map_err(|_| DropReason::ReplyFailed)?;
        self.shared.stats.answered.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Post one datagram of `size` bytes (header, then zeros).
    fn send(
        &mut self,
        d: &Datagram,
        key: &[u8; 16],
        ah: &AddressHandle,
        peer: UdAddr,
        size: usize,
    ) -> Result<(), ProbeFailure> {
        if self.in_flight >= SEND_SLOTS {
            self.poll_sends();
            if self.in_flight >= SEND_SLOTS {
                return Err(ProbeFailure::new(FailureKind::Post, "UD send queue full"));
            }
        }
        let v = &mut self.verbs;
        let off = (RECV_SLOTS + self.next_send) * v.slot;
        let mut buf = [0u8; UD_HEADER];
        d.encode(key, &mut buf);
        let size = size.clamp(UD_HEADER, v.slot - GRH_LEN);
        v.mr.write(off, &buf)
            .map_err(|e| ProbeFailure::setup("UD send slot", e))?;
        let sge = Sge {
            mr: &v.mr,
            offset: off,
            len: size as u32,
        };
        let dest = UdDest {
            ah,
            qp_num: peer.qp_num,
            qkey: peer.qkey,
        };
        v.qp.post_ud_send(self.next_send as u64, dest, &[sge], size as u32 <= v.inline)
            .map_err(ProbeFailure::post)?;
        self.next_send = (self.next_send + 1) % SEND_SLOTS;
        self.in_flight += 1;
        Ok(())
    }

    /// Advance the job: send the next request, or time one out. True when it is finished.
    fn step(&mut self, a: &mut Active) -> bool {
        let total = a.job.warmup + a.job.iterations;
        if a.waiting.is_some() {
            if a.waited_ns() < a.job.timeout.as_nanos() as f64 {
                return false;
            }
            // Lost: no reply within the timeout.
            a.waiting = None;
            if a.done >= a.job.warmup {
                a.run.lost += 1;
            }
            a.done += 1;
            a.lost_in_a_row += 1;
            if a.lost_in_a_row >= MAX_CONSECUTIVE_LOSSES {
                a.run.failure = Some(ProbeFailure::new(
                    FailureKind::Timeout,
                    format!("{} requests in a row without a reply", a.lost_in_a_row),
                ));
                return true;
            }
        }
        if a.done >= total {
            return true;
        }
        if Instant::now() >= a.job.deadline {
            a.run.failure = Some(ProbeFailure::new(
                FailureKind::Timeout,
                "the run did not finish before its deadline",
            ));
            return true;
        }
        let target = {
            let mut sessions = lock(&self.shared.sessions);
            sessions
                .get_mut(&(a.job.session, Role::Requester))
                .map(|s| {
                    s.last_seq += 1;
                    (s.last_seq, s.key, Arc::clone(&s.ah), s.peer)
                })
        };
        let Some((seq, key, ah, peer)) = target else {
            a.run.failure = Some(ProbeFailure::new(
                FailureKind::PeerClosed,
                "the session ended",
            ));
            return true;
        };
        a.seq = seq;
        let stamp = a.job.clock.now();
        let d = Datagram {
            reply: false,
            session: a.job.session,
            seq,
            stamp,
        };
        if let Err(f) = self.send(&d, &key, &ah, peer, a.job.size) {
            a.run.failure = Some(f);
            return true;
        }
        a.waiting = Some((a.seq, stamp));
        if a.done >= a.job.warmup {
            a.run.sent += 1;
        }
        false
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
mod tests {
    use super::*;

    const KEY: [u8; 16] = *b"0123456789abcdef";

    fn request() -> Datagram {
        Datagram {
            reply: false,
            session: 0x1122_3344_5566_7788,
            seq: 42,
            stamp: 0xdead_beef,
        }
    }

    #[test]
    fn a_datagram_round_trips_and_its_tag_binds_every_header_byte() {
        let mut b = [0u8; 64];
        request().encode(&KEY, &mut b);
        assert_eq!(&b[0..4], b"RDUD");
        assert_eq!(Datagram::decode(&b), Ok(request()));
        assert!(Datagram::verify(&b, &KEY));
        assert!(!Datagram::verify(&b, b"0123456789abcdeX"));
        for i in 0..TAGGED {
            let mut bad = b;
            bad[i] ^= 0x01;
            assert!(!Datagram::verify(&bad, &KEY), "byte {i} is not covered");
        }
        let mut bad = b;
        bad[40] ^= 0x80;
        assert!(!Datagram::verify(&bad, &KEY), "a flipped tag bit");
        // Padding after the header is not part of it.
        let mut padded = b;
        padded[60] = 7;
        assert!(Datagram::verify(&padded, &KEY));
        let reply = Datagram {
            reply: true,
            ..request()
        };
        let mut r = [0u8; 48];
        reply.encode(&KEY, &mut r);
        assert_eq!(Datagram::decode(&r).unwrap(), reply);
        assert_ne!(
            &r[32..48],
            &b[32..48],
            "a reply's tag differs from its request's"
        );
    }

    #[test]
    fn the_tag_is_siphash_2_4_128_of_the_header() {
        // Reference vector of SipHash-2-4-128 (the reference implementation's vectors.h):
        // key 00..0f, empty input.
        let key: [u8; 16] = core::array::from_fn(|i| i as u8);
        assert_eq!(
            tag(&key, &[]),
            [
                0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6, 0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55,
                0x02, 0x93
            ]
        );
    }

    #[test]
    fn junk_is_malformed_and_never_panics() {
        let mut good = [0u8; 48];
        request().encode(&KEY, &mut good);
        assert_eq!(Datagram::decode(&good[..47]), Err(DropReason::Malformed));
        for (at, v) in [(0, b'X'), (4, 2), (5, 0), (5, 3), (6, 1)] {
            let mut bad = good;
            bad[at] = v;
            assert_eq!(Datagram::decode(&bad), Err(DropReason::Malformed), "{at}");
        }
        let mut x = 0x9e37_79b9u32;
        for len in 0..200 {
            let junk: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            let _ = Datagram::decode(&junk);
            assert!(!Datagram::verify(&junk, &KEY) || len >= UD_HEADER);
        }
        assert!(!Datagram::verify(&[], &KEY));
    }

    #[test]
    fn drop_reasons_have_distinct_names_and_slots() {
        let names: std::collections::BTreeSet<_> =
            DropReason::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), DropReason::ALL.len());
        let s = UdStats::default();
        s.drop_one(DropReason::BadTag);
        s.drop_one(DropReason::BadTag);
        assert_eq!(s.dropped(DropReason::BadTag), 2);
        assert_eq!(s.dropped(DropReason::Malformed), 0);
    }
}
