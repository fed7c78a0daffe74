use super::*;
use std::io::Cursor;
use std::os::unix::net::UnixStream;
use std::time::Duration;

#[test]
fn the_mac_is_hmac_sha256_of_label_and_nonces_and_offer() {
    // Computed independently (Python's hmac module): peers built with any HMAC
    // implementation agree on the wire.
    let key = Secret::new(b"0123456789abcdef").unwrap();
    let tag = sign(&key, LABEL_CLIENT, &[1; 16], &[2; 16], &[3; 48]);
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        hex,
        "04ea413625bad44c9723a5de80d11595aa00558a1f3fb7a50a9467a8038694a3"
    );
    assert!(verify(
        &key,
        LABEL_CLIENT,
        &[1; 16],
        &[2; 16],
        &[3; 48],
        tag.as_ref()
    )
    .is_ok());
    let mut bad = tag.as_ref().to_vec();
    bad[31] ^= 1;
    assert!(matches!(
        verify(&key, LABEL_CLIENT, &[1; 16], &[2; 16], &[3; 48], &bad),
        Err(HandshakeError::BadMac)
    ));
}

fn secret(s: &str) -> Secret {
    Secret::new(s.as_bytes()).unwrap()
}

fn client_offer() -> Offer {
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

fn server_offer() -> Offer {
    Offer {
        endpoint: QpEndpoint {
            qp_num: 0x22,
            psn: 0x654321,
            gid: "::ffff:10.1.0.1".parse().unwrap(),
            lid: 0,
        },
        mtu: 3,
        buffer: Some(RemoteBuffer {
            addr: 0x7f00_0000_1000,
            rkey: 0xabcd,
            len: 64,
        }),
        ud: None,
    }
}

/// A stream that records what is read from it.
struct Recorder<S> {
    inner: S,
    read: Vec<u8>,
}
impl<S: Read> Read for Recorder<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}
impl<S: Write> Write for Recorder<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Scripted input, collected output.
struct Script {
    input: Cursor<Vec<u8>>,
    output: Vec<u8>,
}
impl Read for Script {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.input.read(buf)
    }
}
impl Write for Script {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

type Session = (
    Result<Offer, HandshakeError>,
    Result<(Offer, u32), HandshakeError>,
    Vec<u8>,
);

/// Run a client with `cs` against a server with `ss`; returns both results and what the
/// server read.
fn session(cs: &Secret, ss: &Secret, seen: &NonceCache) -> Session {
    let (mut a, b) = UnixStream::pair().unwrap();
    for s in [&a, &b] {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    }
    let cs = cs.clone();
    let client_thread = std::thread::spawn(move || client(&mut a, &cs, &client_offer()));
    let mut rec = Recorder {
        inner: b,
        read: Vec::new(),
    };
    let srv = server(&mut rec, ss, seen, |theirs| {
        assert_eq!(*theirs, client_offer());
        Ok((server_offer(), 7u32))
    });
    // Close our end so a client waiting for a reply sees EOF.
    drop(rec.inner);
    (client_thread.join().unwrap(), srv, rec.read)
}

#[test]
fn the_right_secret_is_accepted_both_ways() {
    let seen = NonceCache::new(16);
    let k = secret("a shared secret of 32 bytes!!!!!");
    let (c, s, _) = session(&k, &k, &seen);
    let got = c.expect("client accepted");
    assert_eq!(got, server_offer());
    assert_eq!(got.buffer.unwrap().rkey, 0xabcd);
    let (theirs, built) = s.expect("server accepted");
    assert_eq!((theirs, built), (client_offer(), 7));
}

#[test]
fn a_wrong_secret_is_refused_and_no_rkey_is_sent() {
    let seen = NonceCache::new(16);
    let (c, s, _) = session(
        &secret("the client's secret is this one"),
        &secret("but the server's is another one"),
        &seen,
    );
    assert!(matches!(s, Err(HandshakeError::BadMac)), "{s:?}");
    assert_eq!(s.unwrap_err().reason(), "bad_mac");
    assert!(
        matches!(c, Err(HandshakeError::Refused(_))),
        "the client is told: {c:?}"
    );
}

#[test]
fn a_replayed_client_transcript_is_refused() {
    let seen = NonceCache::new(16);
    let k = secret("a shared secret of 32 bytes!!!!!");
    let (c, s, recorded) = session(&k, &k, &seen);
    assert!(c.is_ok() && s.is_ok());
    // Same nonce again: refused at HELLO by the cache.
    let mut replay = Script {
        input: Cursor::new(recorded.clone()),
        output: Vec::new(),
    };
    let r = server(&mut replay, &k, &seen, |_| Ok((server_offer(), 0u32)));
    assert!(matches!(r, Err(HandshakeError::Replay)), "{r:?}");
    assert_eq!(replay.output, vec![T_REFUSED, 0, 1, 2]);
    // A server that forgot the nonce still refuses: its fresh challenge breaks the MAC.
    let fresh = NonceCache::new(16);
    let mut replay = Script {
        input: Cursor::new(recorded),
        output: Vec::new(),
    };
    let r = server(&mut replay, &k, &fresh, |_| Ok((server_offer(), 0u32)));
    assert!(matches!(r, Err(HandshakeError::BadMac)), "{r:?}");
    // Nothing but the challenge and the refusal went out: no offer, no rkey.
    assert_eq!(replay.output.len(), 3 + NONCE_LEN + 4);
    assert_eq!(replay.output[0], T_CHALLENGE);
    assert_eq!(
        &replay.output[replay.output.len() - 4..],
        &[T_REFUSED, 0, 1, 1]
    );
}

#[test]
fn truncated_and_garbage_frames_are_refused_without_panicking() {
    let k = secret("a shared secret of 32 bytes!!!!!");
    let mut hello = vec![T_HELLO, 0, 21];
    hello.extend_from_slice(MAGIC);
    hello.push(VERSION);
    hello.extend_from_slice(&[9u8; 16]);
    let cases: Vec<Vec<u8>> = vec![
        vec![],
        vec![T_HELLO],
        vec![T_HELLO, 0, 21, b'R', b'D'],
        vec![T_HELLO, 0xff, 0xff],
        vec![T_CLIENT_OFFER, 0, 0],
        {
            let mut v = hello.clone();
            v[3] = b'X';
            v
        },
        {
            let mut v = hello.clone();
            v[7] = 99;
            v
        },
        // A good hello followed by a garbage offer frame of the wrong size.
        {
            let mut v = hello.clone();
            v.extend_from_slice(&[T_CLIENT_OFFER, 0, 5, 1, 2, 3, 4, 5]);
            v
        },
        (0..=255u8).cycle().take(600).collect(),
    ];
    for (i, input) in cases.into_iter().enumerate() {
        let seen = NonceCache::new(16);
        let mut s = Script {
            input: Cursor::new(input),
            output: Vec::new(),
        };
        let r = server(&mut s, &k, &seen, |_| Ok((server_offer(), 0u32)));
        let e = r.expect_err(&format!("case {i} must be refused"));
        assert_eq!(e.reason(), "malformed", "case {i}: {e}");
    }
    // A client fed garbage instead of a challenge fails cleanly too.
    let mut s = Script {
        input: Cursor::new(vec![T_CHALLENGE, 0, 3, 1, 2, 3]),
        output: Vec::new(),
    };
    assert!(matches!(
        client(&mut s, &k, &client_offer()),
        Err(HandshakeError::Malformed(_))
    ));
}

#[test]
fn a_busy_server_is_named_as_such_and_a_timeout_has_its_own_reason() {
    let mut told = Vec::new();
    refuse_busy(&mut told).unwrap();
    assert_eq!(told, [T_REFUSED, 0, 1, REFUSED_BUSY]);
    let mut s = Script {
        input: Cursor::new(told),
        output: Vec::new(),
    };
    let k = secret("a shared secret of 32 bytes!!!!!");
    match client(&mut s, &k, &client_offer()) {
        Err(HandshakeError::Refused(why)) => assert!(why.starts_with("busy"), "{why}"),
        other => panic!("a busy refusal: {other:?}"),
    }
    for kind in [io::ErrorKind::TimedOut, io::ErrorKind::WouldBlock] {
        assert_eq!(HandshakeError::Io(kind.into()).reason(), "timeout");
    }
    assert_eq!(
        HandshakeError::Io(io::ErrorKind::ConnectionReset.into()).reason(),
        "io"
    );
}

#[test]
fn offers_round_trip_and_bad_ones_are_rejected() {
    let o = server_offer();
    assert_eq!(Offer::decode(&o.encode()).unwrap(), o);
    let c = client_offer();
    assert_eq!(Offer::decode(&c.encode()).unwrap(), c);
    // Each bad offer is refused for its own reason.
    let why = |b: &[u8]| match Offer::decode(b) {
        Err(HandshakeError::Malformed(why)) => why,
        other => panic!("a bad offer must be malformed: {other:?}"),
    };
    let mut bad = o.encode();
    bad[27] = 7;
    assert_eq!(why(&bad), "offer flags");
    let mut bad = o.encode();
    bad[26] = 0;
    assert_eq!(why(&bad), "offer PSN or MTU");
    assert_eq!(why(&bad[..10]), "offer length");
    // Debug output of an offer hides the rkey and address.
    let dbg = format!("{o:?}");
    assert!(!dbg.contains("43981") && !dbg.contains("abcd"), "{dbg}");
}

fn ud_offer() -> Offer {
    Offer {
        endpoint: QpEndpoint {
            qp_num: 0,
            psn: 0,
            gid: "::ffff:10.2.0.3".parse().unwrap(),
            lid: 0,
        },
        mtu: 3,
        buffer: None,
        ud: Some(UdEndpoint {
            qp_num: 0x51,
            qkey: 0x1ee7_c0de,
        }),
    }
}

#[test]
fn ud_offers_round_trip_and_bad_ud_fields_are_rejected() {
    let o = ud_offer();
    let b = o.encode();
    assert_eq!(b.len(), OFFER_UD_LEN);
    assert_eq!(b[27], FLAG_UD);
    assert_eq!(Offer::decode(&b).unwrap(), o);
    // An RC offer is the same 48 bytes as before the UD extension.
    assert_eq!(client_offer().encode().len(), OFFER_LEN);
    let why = |b: &[u8]| match Offer::decode(b) {
        Err(HandshakeError::Malformed(why)) => why,
        other => panic!("a bad offer must be malformed: {other:?}"),
    };
    // The UD flag without its 8 bytes, or 8 bytes without the flag.
    assert_eq!(why(&b[..OFFER_LEN]), "offer length");
    let mut no_flag = b.clone();
    no_flag[27] = 0;
    assert_eq!(why(&no_flag), "offer length");
    for (at, value) in [(48, 0u32), (48, 1), (48, 0x0100_0000), (52, 0x8000_0000)] {
        let mut bad = b.clone();
        bad[at..at + 4].copy_from_slice(&value.to_be_bytes());
        assert_eq!(why(&bad), "offer UD QPN or Q_Key", "{at}: {value:#x}");
    }
    let mut bad = b.clone();
    bad[27] = 4 | FLAG_UD;
    assert_eq!(why(&bad), "offer flags");
    assert!(fuzz_offer(&b));
}

#[test]
fn both_ends_of_a_ud_handshake_derive_the_same_session_key_and_no_two_sessions_share_one() {
    let k = secret("a shared secret of 32 bytes!!!!!");
    let seen = NonceCache::new(16);
    let mut keys = Vec::new();
    for _ in 0..2 {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        for s in [&a, &b] {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        }
        let kc = k.clone();
        let c = std::thread::spawn(move || client_session(&mut a, &kc, &ud_offer()));
        let (theirs, server_key) = server_session(&mut b, &k, &seen, |theirs, key| {
            assert_eq!(theirs.ud, ud_offer().ud);
            Ok((ud_offer(), *key))
        })
        .expect("server accepted");
        assert_eq!(theirs, ud_offer());
        let (offer, client_key) = c.join().unwrap().expect("client accepted");
        assert_eq!(offer, ud_offer());
        assert_eq!(client_key, server_key, "both ends derive one key");
        assert!(!format!("{client_key:?}").contains(&format!("{:?}", client_key.key)));
        keys.push(client_key);
    }
    assert_ne!(keys[0].id, keys[1].id);
    assert_ne!(keys[0].key, keys[1].key);
    // Another secret, same nonces: another key.
    let other = SessionKey::derive(
        &secret("another secret of 32 bytes!!!!!!"),
        &[1; 16],
        &[2; 16],
    );
    assert_ne!(other, SessionKey::derive(&k, &[1; 16], &[2; 16]));
}

#[test]
fn the_nonce_cache_is_bounded() {
    let c = NonceCache::new(2);
    assert!(c.insert([1; 16]));
    assert!(!c.insert([1; 16]));
    assert!(c.insert([2; 16]));
    assert!(c.insert([3; 16]));
    // [1] was forgotten (capacity 2).
    assert!(c.insert([1; 16]));
    assert_ne!(fresh_nonce().unwrap(), fresh_nonce().unwrap());
}

#[test]
fn secrets_are_checked_and_hidden() {
    let err = Secret::new(b"short").unwrap_err().to_string();
    assert_eq!(err, "a probe secret needs at least 16 bytes, got 5");
    let s = secret("0123456789abcdef");
    assert_eq!(format!("{s:?}"), "Secret(16 bytes)");
    let dir = std::env::temp_dir().join(format!("rdma-probe-secret-{}", std::process::id()));
    std::fs::write(&dir, b"0123456789abcdef\n").unwrap();
    let f = Secret::from_file(&dir).unwrap();
    assert_eq!(&*f.0, b"0123456789abcdef");
    // A short file names the file and the length without its trailing newline, never the
    // content; an unreadable one names the file.
    std::fs::write(&dir, b"short-secret\n").unwrap();
    let err = Secret::from_file(&dir).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "{}: a probe secret needs at least 16 bytes, got 12",
            dir.display()
        )
    );
    assert!(!err.contains("short-secret"), "{err}");
    std::fs::remove_file(&dir).unwrap();
    let err = Secret::from_file(&dir).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("reading {}: ", dir.display())),
        "{err}"
    );
}
