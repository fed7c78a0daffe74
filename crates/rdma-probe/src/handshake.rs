//! The peer handshake: two probe engines exchange QP number, GID, PSN and (server side) the
//! MR to probe, over TCP, authenticated with a shared secret.
//!
//! ```text
//! client                                   server
//! HELLO      magic, version, nonce_c  ->
//!                                     <-  CHALLENGE  nonce_s        (nonce_c seen before: REFUSED)
//! CLIENT_OFFER offer_c, mac_c         ->                            (bad mac: REFUSED)
//!                                     <-  SERVER_OFFER offer_s, mac_s
//! mac_c = HMAC-SHA256(secret, "rdma-probe/1 client" | nonce_c | nonce_s | offer_c)
//! mac_s = HMAC-SHA256(secret, "rdma-probe/1 server" | nonce_c | nonce_s | offer_s)
//! session = HMAC-SHA256(secret, "rdma-probe/1 ud session" | nonce_c | nonce_s)
//! ```
//!
//! Both MACs cover both fresh nonces, so a recorded exchange cannot be replayed: the server's
//! new nonce makes an old client MAC wrong, and a HELLO whose nonce the server has already
//! seen is refused outright. MACs are checked with ring's `hmac::verify` (constant time). The
//! server reveals its rkey only after the client proved it knows the secret; the client
//! offers no memory at all. Both ends also derive a [`SessionKey`] that never crosses the wire:
//! the UD echo datagrams of this session carry its id and are authenticated with its key
//! (`ud.rs`). Frames are `type u8 | length u16 (big endian) | body`, at most
//! [`MAX_BODY`] bytes; anything else is refused without reading further. Nothing here logs.
use rdma_verbs::{QpEndpoint, RemoteBuffer};
use ring::hmac;
use std::collections::{HashSet, VecDeque};
use std::io::{self, Read, Write};
use std::net::Ipv6Addr;
use std::sync::Mutex;

const MAGIC: &[u8; 4] = b"RDPB";
const VERSION: u8 = 1;
/// Largest frame body accepted.
pub const MAX_BODY: usize = 128;
const NONCE_LEN: usize = 16;
const MAC_LEN: usize = 32;
const OFFER_LEN: usize = 48;
/// An offer with a UD endpoint: the 48 bytes, then UD QPN and Q_Key.
const OFFER_UD_LEN: usize = OFFER_LEN + 8;
const FLAG_BUFFER: u8 = 1;
const FLAG_UD: u8 = 2;

const T_HELLO: u8 = 1;
const T_CHALLENGE: u8 = 2;
const T_CLIENT_OFFER: u8 = 3;
const T_SERVER_OFFER: u8 = 4;
const T_REFUSED: u8 = 5;

const LABEL_CLIENT: &[u8] = b"rdma-probe/1 client";
const LABEL_SERVER: &[u8] = b"rdma-probe/1 server";
const LABEL_SESSION: &[u8] = b"rdma-probe/1 ud session";

/// A shared secret. `Debug` never shows it.
#[derive(Clone)]
pub struct Secret(std::sync::Arc<[u8]>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// Why a probe secret was refused. The messages name the file, never its content.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// Fewer than 16 bytes.
    #[error("a probe secret needs at least 16 bytes, got {len}")]
    TooShort {
        /// The secret's length.
        len: usize,
    },
    /// The secret file could not be read.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// What reading it answered.
        source: std::io::Error,
    },
    /// The secret file holds fewer than 16 bytes (trailing blanks not counted).
    #[error("{}: a probe secret needs at least 16 bytes, got {len}", path.display())]
    FileTooShort {
        /// The file.
        path: std::path::PathBuf,
        /// The secret's length.
        len: usize,
    },
}

impl Secret {
    /// At least 16 bytes.
    pub fn new(bytes: &[u8]) -> Result<Secret, SecretError> {
        if bytes.len() < 16 {
            return Err(SecretError::TooShort { len: bytes.len() });
        }
        Ok(Secret(bytes.into()))
    }

    /// Read a secret file (trailing newlines and spaces are not part of the secret).
    pub fn from_file(path: &std::path::Path) -> Result<Secret, SecretError> {
        let raw = std::fs::read(path).map_err(|source| SecretError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let end = raw
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())
            .map_or(0, |i| i + 1);
        Secret::new(&raw[..end]).map_err(|_| SecretError::FileTooShort {
            path: path.to_path_buf(),
            len: end,
        })
    }
}

/// What one side tells the other: its QP and, from the server, the memory to probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    /// QP number, first PSN, GID, LID.
    pub endpoint: QpEndpoint,
    /// Path MTU code (`ibv_mtu`) the sender uses.
    pub mtu: u8,
    /// The MR the client may READ/WRITE (server only; `Debug` hides its key and address).
    pub buffer: Option<RemoteBuffer>,
    /// The sender's UD QP, for UD echo probes (then `endpoint.qp_num` and `psn` are 0 when
    /// the session has no RC QP; `endpoint.gid` and `lid` address the UD QP).
    pub ud: Option<UdEndpoint>,
}

/// A UD QP as the handshake announces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdEndpoint {
    /// QP number (24 bits, never 0 or 1: those are the SMI and GSI QPs).
    pub qp_num: u32,
    /// The Q_Key its datagrams must carry (never a controlled one: top bit clear).
    pub qkey: u32,
}

/// What both ends of one handshake derive for its UD datagrams: an id the datagrams carry
/// and a key that authenticates them. `Debug` hides the key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SessionKey {
    /// Names the session in every datagram.
    pub id: u64,
    /// SipHash-2-4 key of the datagrams' tags.
    pub key: [u8; 16],
}

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SessionKey({:016x})", self.id)
    }
}

impl SessionKey {
    fn derive(secret: &Secret, nc: &[u8], ns: &[u8]) -> SessionKey {
        let tag = sign(secret, LABEL_SESSION, nc, ns, &[]);
        let t = tag.as_ref();
        SessionKey {
            id: u64::from_be_bytes(t[0..8].try_into().expect("8 bytes")),
            key: t[8..24].try_into().expect("16 bytes"),
        }
    }
}

impl Offer {
    fn encode(&self) -> Vec<u8> {
        let mut b = vec![
            0u8;
            if self.ud.is_some() {
                OFFER_UD_LEN
            } else {
                OFFER_LEN
            }
        ];
        let e = &self.endpoint;
        b[0..4].copy_from_slice(&e.qp_num.to_be_bytes());
        b[4..8].copy_from_slice(&e.psn.to_be_bytes());
        b[8..24].copy_from_slice(&e.gid.octets());
        b[24..26].copy_from_slice(&e.lid.to_be_bytes());
        b[26] = self.mtu;
        if let Some(r) = self.buffer {
            b[27] |= FLAG_BUFFER;
            b[28..36].copy_from_slice(&r.addr.to_be_bytes());
            b[36..40].copy_from_slice(&r.rkey.to_be_bytes());
            b[40..48].copy_from_slice(&r.len.to_be_bytes());
        }
        if let Some(u) = self.ud {
            b[27] |= FLAG_UD;
            b[48..52].copy_from_slice(&u.qp_num.to_be_bytes());
            b[52..56].copy_from_slice(&u.qkey.to_be_bytes());
        }
        b
    }

    fn decode(b: &[u8]) -> Result<Offer, HandshakeError> {
        if b.len() < OFFER_LEN {
            return Err(HandshakeError::Malformed("offer length"));
        }
        let flags = b[27];
        if flags & !(FLAG_BUFFER | FLAG_UD) != 0 {
            return Err(HandshakeError::Malformed("offer flags"));
        }
        let want = if flags & FLAG_UD != 0 {
            OFFER_UD_LEN
        } else {
            OFFER_LEN
        };
        if b.len() != want {
            return Err(HandshakeError::Malformed("offer length"));
        }
        let u32_at = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let gid: [u8; 16] = b[8..24].try_into().expect("16 bytes");
        let buffer = (flags & FLAG_BUFFER != 0).then(|| RemoteBuffer {
            addr: u64_at(28),
            rkey: u32_at(36),
            len: u64_at(40),
        });
        let ud = if flags & FLAG_UD != 0 {
            let (qp_num, qkey) = (u32_at(48), u32_at(52));
            if !(2..=0x00ff_ffff).contains(&qp_num) || qkey & 0x8000_0000 != 0 {
                return Err(HandshakeError::Malformed("offer UD QPN or Q_Key"));
            }
            Some(UdEndpoint { qp_num, qkey })
        } else {
            None
        };
        let psn = u32_at(4);
        if psn > 0x00ff_ffff || !(1..=5).contains(&b[26]) {
            return Err(HandshakeError::Malformed("offer PSN or MTU"));
        }
        Ok(Offer {
            endpoint: QpEndpoint {
                qp_num: u32_at(0),
                psn,
                gid: Ipv6Addr::from(gid),
                lid: u16::from_be_bytes([b[24], b[25]]),
            },
            mtu: b[26],
            buffer,
            ud,
        })
    }
}

/// The body of the `handshake_offer` fuzz target (fuzz/fuzz_targets/), shared with the test
/// that runs its seed corpus (fuzz/seeds/handshake_offer) on every `cargo test`: decode
/// `data` as an offer; an offer that decodes must encode to bytes that decode to the same
/// offer. True when it decoded. No input may panic (other than that property failing).
pub fn fuzz_offer(data: &[u8]) -> bool {
    match Offer::decode(data) {
        Ok(offer) => {
            let again = Offer::decode(&offer.encode());
            assert_eq!(
                again.ok(),
                Some(offer),
                "an offer must survive encode/decode"
            );
            let _ = format!("{offer:?}");
            true
        }
        Err(e) => {
            let _ = e.to_string();
            false
        }
    }
}

/// Why a handshake failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The connection failed or timed out.
    #[error("handshake i/o: {0}")]
    Io(#[from] io::Error),
    /// A frame that is not what the protocol allows at this point.
    #[error("malformed handshake frame: {0}")]
    Malformed(&'static str),
    /// The MAC did not verify: the other side does not know the secret.
    #[error("authentication failed (wrong secret?)")]
    BadMac,
    /// The client nonce was seen before.
    #[error("replayed handshake nonce")]
    Replay,
    /// The other side refused us.
    #[error("refused by the peer: {0}")]
    Refused(&'static str),
    /// The server authenticated the client but could not set up its QP.
    #[error("the responder could not set up its QP: {0}")]
    Responder(#[source] ResponderError),
}

/// Why the server's `respond` could not set up its QP for a client ([`server`]).
pub type ResponderError = Box<dyn std::error::Error + Send + Sync>;

impl HandshakeError {
    /// The `reason` label of a refused handshake.
    pub fn reason(&self) -> &'static str {
        match self {
            HandshakeError::Io(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
                ) =>
            {
                "timeout"
            }
            HandshakeError::Io(_) => "io",
            HandshakeError::Malformed(_) => "malformed",
            HandshakeError::BadMac => "bad_mac",
            HandshakeError::Replay => "replay",
            HandshakeError::Refused(_) => "refused",
            HandshakeError::Responder(_) => "responder",
        }
    }

    fn refusal_code(&self) -> u8 {
        match self {
            HandshakeError::BadMac => 1,
            HandshakeError::Replay => 2,
            HandshakeError::Responder(_) => REFUSED_RESPONDER,
            _ => 3,
        }
    }

    /// Whether the server authenticated us and then could not set up its QP (its
    /// [`HandshakeError::Responder`], as the client receives it).
    pub fn is_responder_refusal(&self) -> bool {
        matches!(self, HandshakeError::Refused(why) if *why == refusal_text(REFUSED_RESPONDER))
    }
}

/// The refusal code of [`HandshakeError::Responder`].
const REFUSED_RESPONDER: u8 = 4;

fn refusal_text(code: u8) -> &'static str {
    match code {
        1 => "authentication failed (wrong secret?)",
        2 => "replayed nonce",
        REFUSED_RESPONDER => "the responder could not set up its QP",
        REFUSED_BUSY => "busy: too many handshakes in progress, try again later",
        _ => "malformed handshake",
    }
}

type Nonce = [u8; NONCE_LEN];

/// The refusal code of a server that has no handshake slot free.
const REFUSED_BUSY: u8 = 6;

/// Tell a client, before its connection is closed unserved, that the server has no
/// handshake slot free (best effort: one small write to a fresh socket).
pub fn refuse_busy<S: Write>(s: &mut S) -> io::Result<()> {
    write_frame(s, T_REFUSED, &[REFUSED_BUSY])
}

/// Client nonces a server has seen, bounded (oldest forgotten first).
#[derive(Debug)]
pub struct NonceCache {
    inner: Mutex<(HashSet<Nonce>, VecDeque<Nonce>)>,
    capacity: usize,
}

impl NonceCache {
    /// Remember up to `capacity` nonces.
    pub fn new(capacity: usize) -> Self {
        NonceCache {
            inner: Mutex::new((HashSet::new(), VecDeque::new())),
            capacity: capacity.max(1),
        }
    }

    /// Record `nonce`; false when it was already there (a replay).
    pub fn insert(&self, nonce: [u8; NONCE_LEN]) -> bool {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (set, order) = &mut *g;
        if !set.insert(nonce) {
            return false;
        }
        order.push_back(nonce);
        while order.len() > self.capacity {
            if let Some(old) = order.pop_front() {
                set.remove(&old);
            }
        }
        true
    }
}

/// 16 fresh random bytes from the kernel.
pub fn fresh_nonce() -> io::Result<[u8; NONCE_LEN]> {
    let mut n = [0u8; NONCE_LEN];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut n)?;
    Ok(n)
}

/// What a MAC covers: `label | nonce_c | nonce_s | offer`.
fn mac_input(label: &[u8], nc: &[u8], ns: &[u8], offer: &[u8]) -> Vec<u8> {
    [label, nc, ns, offer].concat()
}

/// HMAC-SHA256 of `label | nc | ns | offer` under the secret.
fn sign(secret: &Secret, label: &[u8], nc: &[u8], ns: &[u8], offer: &[u8]) -> hmac::Tag {
    let key = hmac::Key::new(hmac::HMAC_SHA256, &secret.0);
    hmac::sign(&key, &mac_input(label, nc, ns, offer))
}

/// Check `tag` against the HMAC of `label | nc | ns | offer` in constant time.
fn verify(
    secret: &Secret,
    label: &[u8],
    nc: &[u8],
    ns: &[u8],
    offer: &[u8],
    tag: &[u8],
) -> Result<(), HandshakeError> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, &secret.0);
    hmac::verify(&key, &mac_input(label, nc, ns, offer), tag).map_err(|_| HandshakeError::BadMac)
}

fn write_frame<S: Write>(s: &mut S, t: u8, body: &[u8]) -> io::Result<()> {
    debug_assert!(body.len() <= MAX_BODY);
    let mut buf = Vec::with_capacity(3 + body.len());
    buf.push(t);
    buf.extend_from_slice(&(body.len() as u16).to_be_bytes());
    buf.extend_from_slice(body);
    s.write_all(&buf)?;
    s.flush()
}

fn read_frame<S: Read>(s: &mut S) -> Result<(u8, Vec<u8>), HandshakeError> {
    let truncated = |e: io::Error| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            HandshakeError::Malformed("truncated frame")
        } else {
            HandshakeError::Io(e)
        }
    };
    let mut h = [0u8; 3];
    s.read_exact(&mut h).map_err(truncated)?;
    let len = usize::from(u16::from_be_bytes([h[1], h[2]]));
    if len > MAX_BODY {
        return Err(HandshakeError::Malformed("frame too long"));
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).map_err(truncated)?;
    Ok((h[0], body))
}

/// Read a frame of type `want` with exactly `len` bytes; a REFUSED frame becomes `Refused`.
fn expect_frame<S: Read>(s: &mut S, want: u8, len: usize) -> Result<Vec<u8>, HandshakeError> {
    expect_frame_of(s, want, &[len])
}

/// Read a frame of type `want` whose length is one of `lens`.
fn expect_frame_of<S: Read>(
    s: &mut S,
    want: u8,
    lens: &[usize],
) -> Result<Vec<u8>, HandshakeError> {
    let (t, body) = read_frame(s)?;
    if t == T_REFUSED && body.len() == 1 {
        return Err(HandshakeError::Refused(refusal_text(body[0])));
    }
    if t != want {
        return Err(HandshakeError::Malformed("unexpected frame type"));
    }
    if !lens.contains(&body.len()) {
        return Err(HandshakeError::Malformed("wrong frame length"));
    }
    Ok(body)
}

/// The lengths of an offer frame's body: an offer (with or without UD) and its MAC.
const OFFER_FRAMES: [usize; 2] = [OFFER_LEN + MAC_LEN, OFFER_UD_LEN + MAC_LEN];

/// Client side: offer `ours`, get the server's offer (authenticated).
pub fn client<S: Read + Write>(
    s: &mut S,
    secret: &Secret,
    ours: &Offer,
) -> Result<Offer, HandshakeError> {
    client_session(s, secret, ours).map(|(offer, _)| offer)
}

/// [`client`], also returning the session's UD key.
pub fn client_session<S: Read + Write>(
    s: &mut S,
    secret: &Secret,
    ours: &Offer,
) -> Result<(Offer, SessionKey), HandshakeError> {
    let nc = fresh_nonce()?;
    let mut hello = Vec::with_capacity(21);
    hello.extend_from_slice(MAGIC);
    hello.push(VERSION);
    hello.extend_from_slice(&nc);
    write_frame(s, T_HELLO, &hello)?;
    let ns = expect_frame(s, T_CHALLENGE, NONCE_LEN)?;
    let offer = ours.encode();
    let tag = sign(secret, LABEL_CLIENT, &nc, &ns, &offer);
    let mut body = offer.to_vec();
    body.extend_from_slice(tag.as_ref());
    write_frame(s, T_CLIENT_OFFER, &body)?;
    let reply = expect_frame_of(s, T_SERVER_OFFER, &OFFER_FRAMES)?;
    let (offer_s, tag_s) = reply.split_at(reply.len() - MAC_LEN);
    verify(secret, LABEL_SERVER, &nc, &ns, offer_s, tag_s)?;
    Ok((
        Offer::decode(offer_s)?,
        SessionKey::derive(secret, &nc, &ns),
    ))
}

/// Server side: authenticate the client, let `respond` build our QP for the client's offer,
/// send our offer. Returns the client's offer and what `respond` built. On refusal the
/// client is told why (one REFUSED frame) before the error is returned.
pub fn server<S, R, F>(
    s: &mut S,
    secret: &Secret,
    seen: &NonceCache,
    respond: F,
) -> Result<(Offer, R), HandshakeError>
where
    S: Read + Write,
    F: FnOnce(&Offer) -> Result<(Offer, R), ResponderError>,
{
    server_session(s, secret, seen, |offer: &Offer, _: &SessionKey| {
        respond(offer)
    })
}

/// [`server`] whose `respond` also gets the session's UD key (to register the session
/// before the client learns it may send).
pub fn server_session<S, R, F>(
    s: &mut S,
    secret: &Secret,
    seen: &NonceCache,
    respond: F,
) -> Result<(Offer, R), HandshakeError>
where
    S: Read + Write,
    F: FnOnce(&Offer, &SessionKey) -> Result<(Offer, R), ResponderError>,
{
    let result = server_inner(s, secret, seen, respond);
    if let Err(e) = &result {
        if !matches!(e, HandshakeError::Io(_)) {
            // Best effort: the client may already be gone.
            let _ = write_frame(s, T_REFUSED, &[e.refusal_code()]);
        }
    }
    result
}

fn server_inner<S, R, F>(
    s: &mut S,
    secret: &Secret,
    seen: &NonceCache,
    respond: F,
) -> Result<(Offer, R), HandshakeError>
where
    S: Read + Write,
    F: FnOnce(&Offer, &SessionKey) -> Result<(Offer, R), ResponderError>,
{
    let hello = expect_frame(s, T_HELLO, 4 + 1 + NONCE_LEN)?;
    if &hello[..4] != MAGIC || hello[4] != VERSION {
        return Err(HandshakeError::Malformed("bad magic or version"));
    }
    let nc: [u8; NONCE_LEN] = hello[5..].try_into().expect("16 bytes");
    if !seen.insert(nc) {
        return Err(HandshakeError::Replay);
    }
    let ns = fresh_nonce()?;
    write_frame(s, T_CHALLENGE, &ns)?;
    let body = expect_frame_of(s, T_CLIENT_OFFER, &OFFER_FRAMES)?;
    let (offer_c, tag_c) = body.split_at(body.len() - MAC_LEN);
    verify(secret, LABEL_CLIENT, &nc, &ns, offer_c, tag_c)?;
    let theirs = Offer::decode(offer_c)?;
    let session = SessionKey::derive(secret, &nc, &ns);
    let (ours, built) = respond(&theirs, &session).map_err(HandshakeError::Responder)?;
    let offer_s = ours.encode();
    let tag = sign(secret, LABEL_SERVER, &nc, &ns, &offer_s);
    let mut reply = offer_s.to_vec();
    reply.extend_from_slice(tag.as_ref());
    write_frame(s, T_SERVER_OFFER, &reply)?;
    Ok((theirs, built))
}

#[cfg(test)]
mod tests;
