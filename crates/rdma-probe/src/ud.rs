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

/// Bytes of a version 1 datagram's header and tag: the smallest datagram accepted.
pub const UD_HEADER: usize = 48;
/// Bytes of a version 2 datagram's header, count and tag: the smallest UD probe this
/// prober sends.
pub const UD_HEADER_V2: usize = 56;
const MAGIC: &[u8; 4] = b"RDUD";
const VERSION: u8 = 1;
const VERSION_2: u8 = 2;
const KIND_REQUEST: u8 = 1;
const KIND_REPLY: u8 = 2;
const TAGGED: usize = 32;
const TAGGED_V2: usize = 40;
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
    /// A reply whose `received` count cannot be true: above its sequence number, or below
    /// what an earlier reply of the session said.
    BadCount,
    /// A receive completed with an error status.
    RecvError,
    /// A reply could not be sent (send queue full or a send error).
    ReplyFailed,
}

impl DropReason {
    /// Every reason, in label order.
    pub const ALL: [DropReason; 9] = [
        DropReason::Malformed,
        DropReason::UnknownSession,
        DropReason::BadTag,
        DropReason::WrongSource,
        DropReason::Replay,
        DropReason::Unexpected,
        DropReason::BadCount,
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
            DropReason::BadCount => "bad_count",
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
    /// Version 2: the responder's count of requests received in the session (in a reply; 0
    /// in a request). `None`: version 1.
    pub received: Option<u64>,
}

fn tag(key: &[u8; 16], header: &[u8]) -> [u8; 16] {
    SipHasher24::new_with_key(key).hash(header).as_bytes()
}

/// Compare two tags without an early exit.
fn tags_equal(a: &[u8], b: &[u8; 16]) -> bool {
    a.len() == 16 && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Bytes tagged and bytes in all of a datagram of `version` (None: not a known version).
fn layout(version: u8) -> Option<(usize, usize)> {
    match version {
        VERSION => Some((TAGGED, UD_HEADER)),
        VERSION_2 => Some((TAGGED_V2, UD_HEADER_V2)),
        _ => None,
    }
}

impl Datagram {
    /// Its header's length: [`UD_HEADER`] (version 1) or [`UD_HEADER_V2`].
    pub fn len(&self) -> usize {
        if self.received.is_some() {
            UD_HEADER_V2
        } else {
            UD_HEADER
        }
    }

    /// Never empty (for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Write the header and its tag into `out[..self.len()]` (the rest is left as it is).
    pub fn encode(&self, key: &[u8; 16], out: &mut [u8]) {
        let (tagged, len) = match self.received {
            Some(_) => (TAGGED_V2, UD_HEADER_V2),
            None => (TAGGED, UD_HEADER),
        };
        let out = &mut out[..len];
        out[0..4].copy_from_slice(MAGIC);
        out[4] = if self.received.is_some() {
            VERSION_2
        } else {
            VERSION
        };
        out[5] = if self.reply { KIND_REPLY } else { KIND_REQUEST };
        out[6..8].fill(0);
        out[8..16].copy_from_slice(&self.session.to_be_bytes());
        out[16..24].copy_from_slice(&self.seq.to_be_bytes());
        out[24..32].copy_from_slice(&self.stamp.to_be_bytes());
        if let Some(r) = self.received {
            out[32..40].copy_from_slice(&r.to_be_bytes());
        }
        let t = tag(key, &out[..tagged]);
        out[tagged..len].copy_from_slice(&t);
    }

    /// Decode a header without checking its tag (the session, hence the key, comes from it).
    pub fn decode(b: &[u8]) -> Result<Datagram, DropReason> {
        if b.len() < UD_HEADER || &b[0..4] != MAGIC || b[6..8] != [0, 0] {
            return Err(DropReason::Malformed);
        }
        let (_, len) = layout(b[4]).ok_or(DropReason::Malformed)?;
        if b.len() < len {
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
            received: (b[4] == VERSION_2).then(|| u64_at(32)),
        })
    }

    /// Whether `b`'s tag verifies under `key` (for the version its byte 4 says).
    pub fn verify(b: &[u8], key: &[u8; 16]) -> bool {
        let Some((tagged, len)) = b.get(4).copied().and_then(layout) else {
            return false;
        };
        b.len() >= len && tags_equal(&b[tagged..len], &tag(key, &b[..tagged]))
    }
}

/// Which way a lost request or reply was going.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Prober to peer: the peer never received the request.
    Request,
    /// Peer to prober: the peer received the request, its reply never came back.
    Reply,
}

/// A requester session's loss bookkeeping, over its whole life: what the replies' `received`
/// counts say, and what of the unanswered requests is attributed to each direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LossBook {
    /// Requests that got no valid reply in time (warmup included).
    pub unanswered: u64,
    /// Of them, attributed to request loss.
    pub request: u64,
    /// Of them, attributed to reply loss.
    pub reply: u64,
    /// The last accepted reply's (sequence number, received count).
    pub last: Option<(u64, u64)>,
}

impl LossBook {
    /// Check the `received` count of an authenticated reply to `seq` (the request we wait
    /// for): it may not exceed `seq` nor go below an earlier reply's. `Ok(false)`: a version 1
    /// reply, nothing to attribute.
    pub fn check(&self, seq: u64, received: Option<u64>) -> Result<bool, DropReason> {
        let Some(r) = received else {
            return Ok(false);
        };
        if r == 0 || r > seq {
            return Err(DropReason::BadCount);
        }
        if let Some((s0, r0)) = self.last {
            if seq <= s0 || r < r0 || r - r0 > seq - s0 {
                return Err(DropReason::BadCount);
            }
        }
        Ok(true)
    }

    /// A checked reply to `seq` says the peer received `received` requests: attribute every
    /// unanswered request so far. Returns the (request, reply) losses newly attributed.
    pub fn attribute(&mut self, seq: u64, received: u64) -> (u64, u64) {
        self.last = Some((seq, received));
        let never_arrived = seq - received;
        let before = (self.request, self.reply);
        // Counters never go back: an earlier attribution as request loss (a silent spell)
        // stays; the rest goes to reply loss.
        let free = self.unanswered - self.reply;
        self.request = self.request.max(never_arrived.min(free));
        self.reply = self.unanswered - self.request;
        (self.request - before.0, self.reply - before.1)
    }

    /// The peer went silent (a run without any reply, or one that failed): every unanswered
    /// request not attributed yet counts as request loss. Returns how many.
    pub fn silent(&mut self) -> u64 {
        let pending = self.unanswered - self.request - self.reply;
        self.request += pending;
        pending
    }
}

/// The body of the `ud_datagram` fuzz target (fuzz/fuzz_targets/), shared with the test that
/// runs its seed corpus (fuzz/seeds/ud_datagram) on every `cargo test`: decode `data` as a
/// datagram and check its tag under a fixed key; a datagram that decodes must encode to bytes
/// that decode to the same datagram and verify. Then `data` in 57-byte steps (a datagram and
/// a byte of timed-out requests) drives a session's [`LossBook`] as the endpoint does: no
/// sequence of replies may panic it or break `request + reply <= unanswered`. True when
/// `data` decoded. No input may panic (other than those properties failing).
pub fn fuzz_datagram(data: &[u8]) -> bool {
    const FUZZ_KEY: [u8; 16] = *b"fuzz-session-key";
    let decoded = match Datagram::decode(data) {
        Ok(d) => {
            let _ = Datagram::verify(data, &FUZZ_KEY);
            let mut b = [0u8; UD_HEADER_V2];
            d.encode(&FUZZ_KEY, &mut b);
            assert_eq!(Datagram::decode(&b[..d.len()]), Ok(d), "encode/decode");
            assert!(Datagram::verify(&b[..d.len()], &FUZZ_KEY), "own tag");
            let _ = format!("{d:?}");
            true
        }
        Err(e) => {
            let _ = e.name();
            false
        }
    };
    let mut book = LossBook::default();
    for chunk in data.chunks(UD_HEADER_V2 + 1) {
        let (head, timed_out) = chunk.split_at(chunk.len().saturating_sub(1));
        book.unanswered = book
            .unanswered
            .saturating_add(u64::from(timed_out.first().copied().unwrap_or(0) % 4));
        if let Ok(d) = Datagram::decode(head) {
            if let Ok(true) = book.check(d.seq, d.received) {
                book.attribute(d.seq, d.received.unwrap_or(0));
            }
        }
        if chunk.first() == Some(&0) {
            book.silent();
        }
        assert!(book.request + book.reply <= book.unanswered, "{book:?}");
    }
    decoded
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
        // The thread always answers by the deadline; the margin covers its idle wait.
        PendingRun {
            rx,
            give_up: deadline.max(Instant::now()) + IDLE_WAIT * 10,
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
    let mut active: Vec<Active> = Vec::with_capacity(MAX_ACTIVE_JOBS);
    // When the loop last found nothing to do after some work (None while busy).
    let mut idle_since: Option<Instant> = None;
    let mut flushes = 0u32;
    let mut idle_spins = 0u32;
    while !shared.stop.load(Ordering::Relaxed) {
        let mut busy = s.poll_sends();
        busy |= s.poll_recvs(&mut active);
        while active.len() < MAX_ACTIVE_JOBS {
            let Ok(job) = jobs.try_recv() else { break };
            active.push(Active {
                seq: 0,
                job,
                waiting: None,
                done: 0,
                lost_in_a_row: 0,
                run: UdRun::default(),
            });
        }
        // The hot loops read the job's cheap clock, not Instant::now() (~1 us in a TCG
        // guest), so a reply is seen within a fraction of a microsecond.
        if !active.is_empty() {
            let mut i = 0;
            let mut all_late = true;
            while i < active.len() {
                if s.step(&mut active[i]) {
                    let a = active.swap_remove(i);
                    s.finish(a);
                    (idle_since, idle_spins) = (None, 0);
                    all_late = false;
                    continue;
                }
                all_late &= active[i].waited_ns() > YIELD_AFTER.as_nanos() as f64;
                i += 1;
            }
            if all_late {
                // Every reply this late: let the other threads (maybe the responder) run.
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
    for mut a in active {
        a.run.failure = Some(ProbeFailure::new(
            FailureKind::NoDevice,
            "the UD endpoint stopped",
        ));
        s.finish(a);
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
    fn poll_recvs(&mut self, active: &mut [Active]) -> bool {
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

    fn on_recv(&mut self, wc: &WorkCompletion, active: &mut [Active]) {
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
        active: &mut [Active],
    ) -> Result<(), DropReason> {
        let len = (wc.byte_len as usize).min(self.verbs.slot);
        if len < GRH_LEN + UD_HEADER {
            return Err(DropReason::Malformed);
        }
        let mut buf = [0u8; GRH_LEN + UD_HEADER_V2];
        let head = &mut buf[..len.min(GRH_LEN + UD_HEADER_V2)];
        self.verbs
            .mr
            .read(slot * self.verbs.slot, head)
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
                .iter_mut()
                .find(|a| a.job.session == d.session && a.waiting == Some((d.seq, d.stamp)))
                .ok_or(DropReason::Unexpected)?;
            // Nothing moves before every check passed.
            let counted = session.book.check(d.seq, d.received)?;
            let rtt = a
                .job
                .clock
                .ticks_to_ns(a.job.clock.now().wrapping_sub(d.stamp));
            a.waiting = None;
            a.lost_in_a_row = 0;
            a.run.replies += 1;
            if a.done >= a.job.warmup {
                a.run.samples_ns.push(rtt);
            }
            a.done += 1;
            if let (true, Some(r)) = (counted, d.received) {
                let (req, rep) = session.book.attribute(d.seq, r);
                a.run.lost_request += req;
                a.run.lost_reply += rep;
            }
            return Ok(());
        }
        if d.seq <= session.last_seq {
            return Err(DropReason::Replay);
        }
        session.last_seq = d.seq;
        session.received += 1;
        let reply = Datagram {
            reply: true,
            received: d.received.map(|_| session.received),
            ..d
        };
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
        let mut buf = [0u8; UD_HEADER_V2];
        d.encode(key, &mut buf);
        let size = size.clamp(d.len(), v.slot - GRH_LEN);
        v.mr.write(off, &buf[..d.len()])
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
            // Lost: no reply within the timeout (which way: see LossBook).
            a.waiting = None;
            if let Some(s) = lock(&self.shared.sessions).get_mut(&(a.job.session, Role::Requester))
            {
                s.book.unanswered += 1;
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
            received: Some(0),
        };
        if let Err(f) = self.send(&d, &key, &ah, peer, a.job.size) {
            a.run.failure = Some(f);
            return true;
        }
        a.waiting = Some((a.seq, stamp));
        a.run.sent += 1;
        false
    }

    /// A run is over: a peer that answered nothing in it (or stopped answering) is silent,
    /// its unattributed losses count as request loss; then the result goes to the engine.
    fn finish(&mut self, mut a: Active) {
        if a.run.replies == 0 || a.run.failure.is_some() {
            if let Some(s) = lock(&self.shared.sessions).get_mut(&(a.job.session, Role::Requester))
            {
                a.run.lost_request += s.book.silent();
            }
        }
        a.run.lost = a.run.lost_request + a.run.lost_reply;
        let _ = a.job.done.send(a.run);
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
            received: None,
        }
    }

    #[test]
    fn a_version_2_reply_carries_its_count_under_the_tag() {
        let reply = Datagram {
            reply: true,
            received: Some(40),
            ..request()
        };
        let mut b = [0u8; 64];
        reply.encode(&KEY, &mut b);
        assert_eq!(b[4], 2);
        assert_eq!(reply.len(), UD_HEADER_V2);
        assert_eq!(Datagram::decode(&b), Ok(reply));
        assert!(Datagram::verify(&b, &KEY));
        // Every byte up to the tag is covered, the count included.
        for i in 0..TAGGED_V2 {
            let mut bad = b;
            bad[i] ^= 0x01;
            assert!(!Datagram::verify(&bad, &KEY), "byte {i} is not covered");
        }
        // A version 2 datagram cut to the version 1 length is malformed, not misread.
        assert_eq!(Datagram::decode(&b[..50]), Err(DropReason::Malformed));
        assert!(!Datagram::verify(&b[..50], &KEY));
        // A version 1 datagram relabelled as version 2 does not verify.
        let mut v1 = [0u8; 64];
        request().encode(&KEY, &mut v1);
        v1[4] = 2;
        assert!(!Datagram::verify(&v1, &KEY));
        let mut v3 = b;
        v3[4] = 3;
        assert_eq!(Datagram::decode(&v3), Err(DropReason::Malformed));
    }

    /// The prober's book of one session: requests 1..=10, the peer received 1..=6 but 4
    /// (request 4 lost on the way), and replied to all it received but 5 and 6 (lost on the
    /// way back); 7..=10 never arrived. Replies: 1, 2, 3, then silence from 4 on.
    #[test]
    fn loss_is_split_by_direction_from_the_replies_counts() {
        let mut b = LossBook::default();
        for seq in 1..=3 {
            assert_eq!(b.check(seq, Some(seq)), Ok(true));
            assert_eq!(b.attribute(seq, seq), (0, 0));
        }
        // 4, 5, 6 time out: not attributed yet.
        b.unanswered += 3;
        // Reply to 7 (say it came back): the peer had received 1, 2, 3, 5, 6, 7 = 6.
        assert_eq!(b.check(7, Some(6)), Ok(true));
        assert_eq!(
            b.attribute(7, 6),
            (1, 2),
            "4 lost going, 5 and 6 coming back"
        );
        // Then 8..=10 time out and the run ends without another reply: the peer is silent
        // since, those count as request loss.
        b.unanswered += 3;
        assert_eq!(b.silent(), 3);
        assert_eq!((b.request, b.reply), (4, 2));
        assert_eq!(b.request + b.reply, b.unanswered);
        // The peer answers again at 11 with 9 received: 8 and 9 had arrived after all (their
        // replies were lost). The request counter never goes back; nothing is counted twice.
        assert_eq!(b.check(11, Some(9)), Ok(true));
        assert_eq!(b.attribute(11, 9), (0, 0));
        assert_eq!(b.request + b.reply, b.unanswered);
        // Silence with nothing pending adds nothing.
        assert_eq!(b.silent(), 0);
    }

    /// Replies whose count cannot be true are refused before anything moves: a forged or
    /// replayed reply never moves loss (nor, since the engine checks it before it takes the
    /// sample, latency).
    #[test]
    fn impossible_counts_are_refused_and_move_nothing() {
        // Requests 1..=5, 1 and 2 never arrived: the reply to 5 says 3.
        let mut b = LossBook {
            unanswered: 2,
            ..LossBook::default()
        };
        assert_eq!(b.check(5, Some(3)), Ok(true));
        assert_eq!(b.attribute(5, 3), (2, 0));
        let before = b;
        for (seq, r) in [
            (6, 7), // more received than sent
            (6, 0), // a reply counts its own request
            (5, 3), // not a later sequence than the last accepted reply (replayed)
            (4, 3), // an older one
            (7, 2), // fewer received than an earlier reply said
            (7, 6), // 3 more received since the last reply, only 2 sent since
        ] {
            assert_eq!(
                b.check(seq, Some(r)),
                Err(DropReason::BadCount),
                "{seq} {r}"
            );
            assert_eq!(b, before);
        }
        assert_eq!(b.check(7, Some(5)), Ok(true));
        // Version 1 replies carry no count: accepted, nothing to attribute.
        assert_eq!(b.check(6, None), Ok(false));
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
