//! The peer handshake port under abuse, on 127.0.0.1 (no RDMA device needed): a peer that
//! sends junk, one that connects and says nothing, one that trickles a byte now and then, and
//! a flood of connections above the server's cap. Each is refused and counted by reason
//! (`rdma_probe_handshakes_refused_total{reason}`), each reason is logged once (not once per
//! connection), and a peer that knows the secret still gets through: with no RDMA device for
//! 127.0.0.1 its handshake ends at the responder step (`responder`), which the server only
//! reaches after the client's MAC verified.
//!
//! The server runs with small limits (4 handshakes at once, 2 s per handshake) so that the
//! test is short; the defaults are `peer::ServerLimits::default()`. Nothing asserts on time:
//! the trickler sends a byte every 250 ms and must be cut before its 24-byte HELLO is done,
//! which a per-read timeout alone would never do.
#![forbid(unsafe_code)]

use rdma_probe::handshake::{self, HandshakeError, Offer};
use rdma_probe::peer::{PeerServer, ServerLimits, ServerStats};
use rdma_probe::ud::UdEndpoints;
use rdma_probe::Secret;
use rdma_verbs::QpEndpoint;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SECRET: &[u8] = b"handshake port test secret, 32+ bytes";

/// Every log line the process writes.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn matching(&self, needle: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_string)
            .collect()
    }
}

fn refused(stats: &ServerStats, reason: &str) -> u64 {
    stats.refused().get(reason).copied().unwrap_or(0)
}

/// Wait (bounded, generous) until `ok`.
fn wait_until(what: &str, stats: &ServerStats, ok: impl Fn(&ServerStats) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ok(stats) {
        assert!(
            Instant::now() < deadline,
            "gave up waiting for {what}: refused {:?}",
            stats.refused()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Read until the server closes the connection; what it sent. Fails if the server keeps it
/// open for a minute.
fn read_to_close(mut s: &TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("the server did not close the connection: {e}"),
    }
    got
}

fn offer() -> Offer {
    Offer {
        endpoint: QpEndpoint {
            qp_num: 0,
            psn: 0,
            gid: "::ffff:127.0.0.1".parse().unwrap(),
            lid: 0,
        },
        mtu: 3,
        buffer: None,
        ud: Some(handshake::UdEndpoint {
            qp_num: 0x42,
            qkey: 0x1111,
        }),
    }
}

/// A client that knows the secret: connect and run the client side of the handshake.
fn honest(addr: SocketAddr) -> Result<Offer, HandshakeError> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    handshake::client(&mut s, &Secret::new(SECRET).unwrap(), &offer())
}

#[test]
fn junk_silence_a_trickle_and_a_flood_are_refused_counted_and_logged_once_and_an_honest_peer_still_gets_through(
) {
    let lines = Lines::default();
    let writer = lines.clone();
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .init();

    let limits = ServerLimits {
        max_handshakes: 4,
        max_handshakes_per_source: 4,
        max_clients: 16,
        handshake_timeout: Duration::from_secs(2),
    };
    let stats = Arc::new(ServerStats::default());
    let server = PeerServer::start_with_limits(
        "127.0.0.1:0".parse().unwrap(),
        Secret::new(SECRET).unwrap(),
        None,
        None,
        Arc::clone(&stats),
        Arc::new(UdEndpoints::default()),
        limits,
    )
    .expect("listen on 127.0.0.1");
    let addr = server.local_addr();

    // Junk: refused as malformed, told so (REFUSED, code 3), closed.
    for _ in 0..3 {
        let mut s = TcpStream::connect(addr).unwrap();
        let junk: Vec<u8> = (0..=255u8).cycle().skip(7).take(600).collect();
        let _ = s.write_all(&junk);
        let got = read_to_close(&s);
        assert_eq!(got, [5, 0, 1, 3], "a junk sender is told it is malformed");
    }
    wait_until("3 junk refusals", &stats, |s| refused(s, "malformed") == 3);

    // Silent: the server closes it at its handshake deadline, counted as `timeout`.
    let silent = TcpStream::connect(addr).unwrap();
    let got = read_to_close(&silent);
    assert!(
        got.is_empty(),
        "nothing is sent to a silent client: {got:?}"
    );
    wait_until("the silent client's timeout", &stats, |s| {
        refused(s, "timeout") == 1
    });

    // Trickle: a valid HELLO header, then one byte every 250 ms. A per-read timeout (2 s)
    // never fires; the deadline of the whole handshake does, long before the 24 bytes.
    let mut trickle = TcpStream::connect(addr).unwrap();
    let mut hello = vec![1u8, 0, 21];
    hello.extend_from_slice(b"RDPB\x01");
    hello.extend_from_slice(&[0x5a; 16]);
    let mut sent = 0;
    trickle
        .set_read_timeout(Some(Duration::from_millis(250)))
        .unwrap();
    let mut probe = [0u8; 8];
    let closed = loop {
        if sent == hello.len() {
            break false;
        }
        if trickle.write_all(&hello[sent..sent + 1]).is_err() {
            break true;
        }
        sent += 1;
        match trickle.read(&mut probe) {
            Ok(0) => break true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break true,
            Err(_) => {} // read timeout: the pace of the trickle
        }
    };
    assert!(
        closed,
        "the trickler was not cut off before its HELLO was complete ({sent} bytes sent)"
    );
    wait_until("the trickler's timeout", &stats, |s| {
        refused(s, "timeout") == 2
    });
    println!("trickler cut off after {sent} of {} bytes", hello.len());

    // A flood: 3 x the cap of connections that say nothing. Those above the cap are told
    // `busy` and closed at once; the others time out. Meanwhile an honest peer retries
    // until it gets a slot.
    const FLOOD: usize = 12;
    let flood: Vec<TcpStream> = (0..FLOOD)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    let mut honest_tries = 0;
    let honest_outcome = loop {
        honest_tries += 1;
        match honest(addr) {
            // Told busy; or the refusal was lost to a reset (the server closed the
            // connection with our HELLO unread): both mean "try again", as the engine does.
            Err(HandshakeError::Refused(why)) if why.starts_with("busy") => {
                assert!(honest_tries < 500, "the honest peer never got a slot");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(HandshakeError::Io(_) | HandshakeError::Malformed("truncated frame")) => {
                assert!(honest_tries < 500, "the honest peer never got a slot");
                std::thread::sleep(Duration::from_millis(50));
            }
            other => break other,
        }
    };
    let mut busy_told = 0;
    for s in &flood {
        let got = read_to_close(s);
        if got == [5, 0, 1, 6] {
            busy_told += 1;
        } else {
            assert!(got.is_empty(), "a silent flood connection got {got:?}");
        }
    }
    // Every flood connection was refused: busy at once, or at its deadline.
    wait_until("every flood connection refused", &stats, |s| {
        refused(s, "busy") + refused(s, "timeout") >= (FLOOD + 2 + honest_tries - 1) as u64
    });
    let busy = refused(&stats, "busy");
    println!(
        "flood of {FLOOD}: {busy_told} told busy; refused {:?}; honest peer: {honest_tries} tries, {honest_outcome:?}",
        stats.refused()
    );
    assert!(
        busy_told >= FLOOD - limits.max_handshakes - 1,
        "a flood of {FLOOD} above a cap of {} was told busy only {busy_told} times",
        limits.max_handshakes
    );
    assert!(busy >= busy_told as u64);
    // The honest peer authenticated: the server went on to set up its responder, which
    // needs an RDMA device with a GID for 127.0.0.1 (none: refused at that step, code 4).
    match honest_outcome {
        Err(HandshakeError::Refused(why)) => assert!(
            why.contains("responder could not set up"),
            "the honest peer was refused before authentication: {why}"
        ),
        Ok(_) => {}
        Err(e) => panic!("the honest peer's handshake failed: {e}"),
    }
    wait_until("the honest handshake", &stats, |s| {
        refused(s, "responder") + s.accepted.load(std::sync::atomic::Ordering::Relaxed) == 1
    });
    assert_eq!(refused(&stats, "bad_mac"), 0);

    // One log line per reason, however many connections: the first, the rest counted.
    for (reason, events) in [
        ("malformed", 3),
        ("timeout", refused(&stats, "timeout")),
        ("busy", busy),
    ] {
        let logged = lines.matching(&format!("reason=\"{reason}\""));
        assert_eq!(logged.len(), 1, "{events} `{reason}` refusals: {logged:#?}");
        assert!(
            logged[0].contains("peer handshake refused") && logged[0].contains("127.0.0.1:"),
            "{}",
            logged[0]
        );
        println!("{}", logged[0]);
    }
    drop(server);
}
