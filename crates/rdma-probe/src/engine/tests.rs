//! Tests of the engine ([`super`]).
use super::peers::{layer, PeerLink};
use super::*;

#[test]
fn peers_without_a_secret_are_refused_at_start() {
    let cfg = EngineConfig {
        peers: vec!["127.0.0.1:1".into()],
        ..EngineConfig::default()
    };
    assert!(matches!(
        ProbeEngine::start(cfg),
        Err(EngineError::Config(_))
    ));
    let cfg = EngineConfig {
        transport: PeerTransport::Rc,
        peer_op: ProbeOp::Send,
        ..EngineConfig::default()
    };
    match ProbeEngine::start(cfg) {
        Err(EngineError::Config(why)) => assert!(why.contains("one-sided"), "{why}"),
        other => panic!(
            "a SEND RC peer op must be a config error: {:?}",
            other.err()
        ),
    }
    let cfg = EngineConfig {
        peers: vec!["127.0.0.1:1".into()],
        secret: Some(Secret::new(b"0123456789abcdef").unwrap()),
        size: 32,
        ..EngineConfig::default()
    };
    match ProbeEngine::start(cfg) {
        Err(EngineError::Config(why)) => assert!(why.contains("at least 56 bytes"), "{why}"),
        other => panic!(
            "32-byte UD probes must be a config error: {:?}",
            other.err()
        ),
    }
}

#[test]
fn an_engine_without_devices_counts_failures_and_stops_cleanly() {
    // On a host without RDMA the configured device cannot open: the failure is counted
    // under its name, nothing panics, and stop() returns.
    let cfg = EngineConfig {
        devices: vec!["no-such-rdma-dev".into()],
        interval: Duration::from_millis(20),
        mr_sizes: vec![],
        ..EngineConfig::default()
    };
    let engine = ProbeEngine::start(cfg).unwrap();
    let h = engine.handle();
    let deadline = Instant::now() + Duration::from_secs(20);
    while h.snapshot().rounds_total < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let snap = h.snapshot();
    assert!(snap.rounds_total >= 2);
    let t = snap
        .target("no-such-rdma-dev", ProbeOp::Write)
        .expect("target");
    assert!(!t.up);
    assert!(
        t.failures_total.get("NO_DEVICE").copied().unwrap_or(0) >= 2,
        "{t:?}"
    );
    engine.stop();
}

#[test]
fn backoff_doubles_up_to_the_bound_for_a_dead_peer() {
    let secret = Secret::new(b"0123456789abcdef0123").unwrap();
    // A port nobody listens on (bound then closed).
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let cfg = EngineConfig {
        loopback: false,
        mr_sizes: vec![],
        peers: vec![addr.to_string()],
        secret: Some(secret),
        interval: Duration::from_millis(10),
        backoff_min: Duration::from_millis(10),
        backoff_max: Duration::from_millis(40),
        ..EngineConfig::default()
    };
    let engine = ProbeEngine::start(cfg).unwrap();
    let h = engine.handle();
    let deadline = Instant::now() + Duration::from_secs(20);
    let fails = |h: &ProbeHandle| {
        h.snapshot()
            .target(&addr.to_string(), ProbeOp::Send)
            .and_then(|t| t.failures_total.get("CONNECT_ERR").copied())
            .unwrap_or(0)
    };
    // The backoffs the engine reports on the way: each one of 10, 20, 40 ms, never less
    // than the one before (sampling may miss a step, it never sees one out of order).
    let mut seen: Vec<f64> = Vec::new();
    while fails(&h) < 4 && Instant::now() < deadline {
        if let Some(b) = h.snapshot().peers.first().map(|p| p.backoff_seconds) {
            if seen.last() != Some(&b) {
                seen.push(b);
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        seen.iter().all(|b| [0.01, 0.02, 0.04].contains(b)) && seen.windows(2).all(|w| w[0] < w[1]),
        "backoffs seen: {seen:?}"
    );
    let snap = h.snapshot();
    assert!(fails(&h) >= 4, "{snap:?}");
    let p = &snap.peers[0];
    assert!(!p.connected);
    assert_eq!(p.backoff_seconds, 0.04, "bounded by backoff_max");
    engine.stop();
}

/// Peers from a file follow the file without a restart: a new peer is tried, a removed
/// one goes with its results (its series vanish), labels come along, a bad line is
/// skipped and counted. Connects fail (nobody listens): no RDMA needed.
#[test]
fn peers_follow_the_peers_file_and_removed_ones_lose_their_results() {
    let dead = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .to_string()
    };
    let (a, b) = (dead(), dead());
    let dir = std::env::temp_dir().join(format!("rdma-probe-engine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("peers.yml");
    std::fs::write(
        &file,
        format!("- targets: ['{a}', 'no port here']\n  labels: {{rack: r1}}\n"),
    )
    .unwrap();
    let cfg = EngineConfig {
        loopback: false,
        mr_sizes: vec![],
        peers_file: Some(file.clone()),
        secret: Some(Secret::new(b"0123456789abcdef0123").unwrap()),
        interval: Duration::from_millis(20),
        backoff_min: Duration::from_millis(10),
        backoff_max: Duration::from_millis(10),
        ..EngineConfig::default()
    };
    let engine = ProbeEngine::start(cfg).unwrap();
    let h = engine.handle();
    let wait = |what: &str, cond: &dyn Fn(&ProbeSnapshot) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = h.snapshot();
            if cond(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "{what}: {s:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let s = wait("A tried", &|s| s.target(&a, ProbeOp::Send).is_some());
    assert_eq!(s.peers.len(), 1);
    assert_eq!(
        s.peers[0].labels.get("rack").map(String::as_str),
        Some("r1")
    );
    assert_eq!(s.discovery.invalid_entries.get("file"), Some(&1));
    let tmp = dir.join("peers.tmp");
    std::fs::write(&tmp, format!("- targets: ['{b}']\n")).unwrap();
    std::fs::rename(&tmp, &file).unwrap();
    let s = wait("B tried, A gone", &|s| {
        s.target(&b, ProbeOp::Send).is_some() && s.target(&a, ProbeOp::Send).is_none()
    });
    assert_eq!(
        s.peers.iter().map(|p| p.peer.as_str()).collect::<Vec<_>>(),
        [b.as_str()]
    );
    assert!(s.target(&b, ProbeOp::Send).unwrap().failures_total["CONNECT_ERR"] >= 1);
    engine.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each failure waits the current backoff before the next attempt and doubles the one
/// after, up to the bound: 10, 20, 40, 40 ms for a 10 ms start and a 40 ms bound.
#[test]
fn transports_parse_and_name_their_label() {
    assert_eq!("ud".parse::<PeerTransport>(), Ok(PeerTransport::Ud));
    assert_eq!("RC".parse::<PeerTransport>(), Ok(PeerTransport::Rc));
    assert!("tcp"
        .parse::<PeerTransport>()
        .unwrap_err()
        .to_string()
        .contains("ud or rc"));
    assert_eq!(EngineConfig::default().transport, PeerTransport::Ud);
    assert_eq!(PeerTransport::Rc.to_string(), "rc");
}

/// A listener on 127.0.0.1 that never accepts, its accept queue full: further SYNs are
/// dropped and a connect to it hangs until its timeout (a silent host). The connection
/// that fills the queue is kept with it.
fn silent_peer() -> (std::os::fd::OwnedFd, std::net::TcpStream, String) {
    use nix::sys::socket::{
        bind, getsockname, listen, socket, AddressFamily, Backlog, SockFlag, SockType, SockaddrIn,
    };
    use std::os::fd::AsRawFd;
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::empty(),
        None,
    )
    .unwrap();
    bind(fd.as_raw_fd(), &SockaddrIn::new(127, 0, 0, 1, 0)).unwrap();
    listen(&fd, Backlog::new(0).unwrap()).unwrap();
    let addr: SockaddrIn = getsockname(fd.as_raw_fd()).unwrap();
    let addr = std::net::SocketAddr::from(std::net::SocketAddrV4::from(addr));
    // Backlog 0: one connection fills the queue (the kernel admits backlog + 1).
    let filler = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .expect("the first connection fills the queue");
    (fd, filler, addr.to_string())
}

/// Threads of this process whose name starts with `prefix` (names are cut at 15 bytes).
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .filter(|n| n.starts_with(prefix))
        .count()
}

/// 40 silent peers (more than the connect slots), one refusing peer and one answering
/// peer (an engine's listener on 127.0.0.1): the answering one is tried in almost every
/// round, the silent ones are `host`, the refusing one `agent`, and the connect threads
/// stay within their bound. Counts of rounds and attempts only, no timings. Without
/// RDMA on the host the answering peer's attempt fails at once after the TCP connect
/// (no local device): the engine's scheduling is what is tested; with RDMA it runs.
#[test]
fn silent_peers_never_starve_an_answering_one() {
    let secret = Secret::new(b"0123456789abcdef0123").unwrap();
    let silent: Vec<_> = (0..40).map(|_| silent_peer()).collect();
    let refusing = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let answering = ProbeEngine::start(EngineConfig {
        loopback: false,
        mr_sizes: vec![],
        listen: Some("127.0.0.1:0".parse().unwrap()),
        secret: Some(secret.clone()),
        ..EngineConfig::default()
    })
    .unwrap();
    let healthy = answering.listen_addr().unwrap().to_string();
    let mut peers: Vec<String> = silent.iter().map(|s| s.2.clone()).collect();
    peers.push(refusing.clone());
    peers.push(healthy.clone());
    let engine = ProbeEngine::start(EngineConfig {
        loopback: false,
        mr_sizes: vec![],
        peers,
        secret: Some(secret),
        // Long enough for one attempt on the answering peer (a TCP connect and a handshake
        // on 127.0.0.1) on a loaded 2-core machine: at 50 ms, rounds outran the attempts
        // under a parallel build and the count fell below the bound with nothing starved.
        interval: Duration::from_millis(250),
        backoff_min: Duration::from_millis(1),
        backoff_max: Duration::from_millis(1),
        ..EngineConfig::default()
    })
    .unwrap();
    let h = engine.handle();
    let attempts = |s: &ProbeSnapshot, peer: &str| {
        s.target(peer, ProbeOp::Send)
            .map(|t| t.runs_total + t.failures_total.values().sum::<u64>())
            .unwrap_or(0)
    };
    let status = |s: &ProbeSnapshot, peer: &str| {
        s.peers
            .iter()
            .find(|p| p.peer == peer)
            .and_then(|p| p.status)
    };
    // Bounded wait until every silent peer's connect timed out once (3 s each, 24 at a
    // time): then all of them are `host` and keep being retried.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut most_connect_threads = 0;
    loop {
        let s = h.snapshot();
        most_connect_threads = most_connect_threads.max(threads_named("rdma-probe-conn"));
        if silent
            .iter()
            .all(|p| status(&s, &p.2) == Some(PeerStatus::Host))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "silent peers not all `host`: {:?}",
            s.peers
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let s0 = h.snapshot();
    let (r0, a0) = (s0.rounds_total, attempts(&s0, &healthy));
    let deadline = Instant::now() + Duration::from_secs(120);
    let s1 = loop {
        let s = h.snapshot();
        most_connect_threads = most_connect_threads.max(threads_named("rdma-probe-conn"));
        if s.rounds_total >= r0 + 20 {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "rounds stalled: {}",
            s.rounds_total
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let rounds = s1.rounds_total - r0;
    let tried = attempts(&s1, &healthy) - a0;
    eprintln!(
        "{rounds} rounds with 40 silent peers: the answering peer tried {tried} times; \
         at most {most_connect_threads} connect threads seen; last round {:?} s, late {}",
        s1.round_duration_seconds, s1.rounds_late_total
    );
    // Almost every round: a round may end just before the attempt's result comes in (a
    // loaded machine), which the next round then counts.
    assert!(
        tried * 100 >= rounds * 85,
        "the answering peer was tried in {tried} of {rounds} rounds"
    );
    assert!(
        most_connect_threads <= MAX_CONNECTS,
        "{most_connect_threads} connect threads"
    );
    assert_eq!(status(&s1, &refusing), Some(PeerStatus::Agent));
    assert!(s1.target(&refusing, ProbeOp::Send).unwrap().failures_total["CONNECT_ERR"] >= 1);
    let silent_fails = s1
        .target(&silent[0].2, ProbeOp::Send)
        .unwrap()
        .failures_total
        .get("HOST_UNREACHABLE")
        .copied();
    assert!(
        silent_fails >= Some(1),
        "{:?}",
        s1.target(&silent[0].2, ProbeOp::Send)
    );
    assert!(s1.round_duration_seconds.is_some());
    // The answering peer is not `host` whatever else failed on this machine.
    assert_ne!(status(&s1, &healthy), Some(PeerStatus::Host));
    engine.stop();
    answering.stop();
}

#[test]
fn failures_name_their_layer() {
    assert_eq!(layer(FailureKind::Connect), PeerStatus::Agent);
    assert_eq!(layer(FailureKind::Handshake), PeerStatus::Agent);
    assert_eq!(layer(FailureKind::PeerClosed), PeerStatus::Agent);
    assert_eq!(layer(FailureKind::HostUnreachable), PeerStatus::Host);
    assert_eq!(layer(FailureKind::Timeout), PeerStatus::Rdma);
    assert_eq!(layer(FailureKind::NoDevice), PeerStatus::Rdma);
}

#[test]
fn backoff_doubles_on_each_failure() {
    let min = Duration::from_millis(10);
    let max = Duration::from_millis(40);
    let t0 = Instant::now();
    let mut link = PeerLink::new("127.0.0.1:1".into(), min);
    link.next_attempt = t0;
    let mut waits = Vec::new();
    for _ in 0..4 {
        link.failed(t0, max);
        waits.push(link.next_attempt - t0);
    }
    let ms = Duration::from_millis;
    assert_eq!(waits, [ms(10), ms(20), ms(40), ms(40)]);
    assert_eq!(link.backoff, max);
}

#[test]
fn one_unanswered_ud_run_on_an_answering_path_is_loss_and_two_are_a_failure() {
    use super::peers::{run_verdict, RunVerdict};
    let t = Some(FailureKind::Timeout);
    let ok = Some(PeerStatus::Ok);
    // A lossy path: one silent run after an answered one keeps the verdict OK...
    assert_eq!(run_verdict(ok, 0, t, true), RunVerdict::Lossy);
    // ...the second in a row is the RDMA layer failing.
    assert_eq!(
        run_verdict(ok, 1, t, true),
        RunVerdict::Failed(PeerStatus::Rdma)
    );
    // Never answered yet, or failing already: no grace.
    assert_eq!(
        run_verdict(None, 0, t, true),
        RunVerdict::Failed(PeerStatus::Rdma)
    );
    assert_eq!(
        run_verdict(Some(PeerStatus::Rdma), 0, t, true),
        RunVerdict::Failed(PeerStatus::Rdma)
    );
    // RC runs stop at their first failed request: no grace there.
    assert_eq!(
        run_verdict(ok, 0, t, false),
        RunVerdict::Failed(PeerStatus::Rdma)
    );
    // Other failures name their layer at once.
    assert_eq!(
        run_verdict(ok, 0, Some(FailureKind::PeerClosed), true),
        RunVerdict::Failed(PeerStatus::Agent)
    );
    assert_eq!(run_verdict(ok, 1, None, true), RunVerdict::Answered);
}

#[test]
fn a_dns_server_that_never_answers_does_not_hold_the_rounds() {
    // A DNS server on 127.0.0.1 that takes every query and never answers (UDP read by
    // nobody, TCP accepted by the kernel and never read): each lookup waits its timeouts.
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let dns = udp.local_addr().unwrap();
    let _tcp = std::net::TcpListener::bind(dns).ok();
    let secret = Secret::new(b"0123456789abcdef0123").unwrap();
    let cfg = EngineConfig {
        loopback: false,
        mr_sizes: vec![],
        secret: Some(secret),
        peers_dns: Some("pm.test".into()),
        dns_server: Some(dns),
        interval: Duration::from_millis(20),
        ..EngineConfig::default()
    };
    let engine = ProbeEngine::start(cfg).unwrap();
    let h = engine.handle();
    let resolve_errors = |s: &ProbeSnapshot| {
        s.discovery
            .errors_total
            .get(&("dns".to_string(), "resolve".to_string()))
            .copied()
            .unwrap_or(0)
    };
    // The first round waits for the first answer (a failed lookup); after it, the rounds
    // keep their interval while every later lookup waits for its timeouts.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut s = h.snapshot();
    while s.rounds_total < 30 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        s = h.snapshot();
    }
    engine.stop();
    assert!(
        s.rounds_total >= 30,
        "FAIL: {} rounds in 60 s while the DNS server did not answer ({} lookups failed)",
        s.rounds_total,
        resolve_errors(&s)
    );
    // Inline, every round was one lookup: as many failures as rounds.
    assert!(
        resolve_errors(&s) >= 1 && resolve_errors(&s) * 4 <= s.rounds_total,
        "{} rounds, {} failed lookups",
        s.rounds_total,
        resolve_errors(&s)
    );
}

#[test]
fn a_target_warns_when_it_goes_down_and_once_if_it_never_answered() {
    let mut t = TargetResult::empty(
        "peer",
        "",
        0,
        Some("h2:7420".into()),
        ProbeOp::Send,
        PeerTransport::Ud,
        64,
    );
    // Never answered: the first failure warns, the next ones do not.
    assert!(failure_warns(&t));
    t.failures_total.insert("host".into(), 1);
    assert!(!failure_warns(&t));
    // It answers, then fails: that warns once more.
    t.runs_total = 1;
    t.up = true;
    assert!(failure_warns(&t));
    *t.failures_total.entry("timeout".into()).or_insert(0) += 1;
    t.up = false;
    assert!(!failure_warns(&t));
}
