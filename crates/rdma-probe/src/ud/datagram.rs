//! The UD datagram's wire format ([`super`]): its header, tag and the checks of a
//! reply's `received` count; every byte of it is untrusted input.
use super::{UD_HEADER, UD_HEADER_V2};
use siphasher::sip128::SipHasher24;

pub(super) const MAGIC: &[u8; 4] = b"RDUD";
pub(super) const VERSION: u8 = 1;
pub(super) const VERSION_2: u8 = 2;
pub(super) const KIND_REQUEST: u8 = 1;
pub(super) const KIND_REPLY: u8 = 2;
pub(super) const TAGGED: usize = 32;
pub(super) const TAGGED_V2: usize = 40;

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

    pub(super) fn index(self) -> usize {
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

pub(super) fn tag(key: &[u8; 16], header: &[u8]) -> [u8; 16] {
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
