//! Live UD tests, run INSIDE the Soft-RoCE lab VM (`rdmactl lab test --only probes_ud`):
//! the verbs layer's UD QPs and address handles between rxe_a and rxe_b (GRH in front of the
//! payload, source QPN and GID, a wrong Q_Key dropped by the device), then the probe engine's
//! UD echo transport: two engines echo each other, the QP count of a host stays the same with
//! 1 and 3 peers, and junk / forged / flooded datagrams are dropped and counted while the
//! other peers keep answering.
//!
//! No device is a failure here, never a silent pass. Nothing asserts on time except the
//! plausibility bound of a latency (> 0 and < 100 ms).
#![forbid(unsafe_code)]

use rdma_probe::handshake::{client_session, Offer, UdEndpoint as UdAddr};
use rdma_probe::ud::{Datagram, UD_HEADER};
use rdma_probe::{
    EngineConfig, PeerTransport, ProbeEngine, ProbeHandle, ProbeOp, ProbeSnapshot, Secret,
};
use rdma_verbs::{
    grh_source_gid, AccessFlags, CompletionQueue, Context, GidType, MemoryRegion, ProtectionDomain,
    QpCaps, QpState, QpType, QueuePair, Sge, UdDest, WcOpcode, WcStatus, GRH_LEN,
};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

const TIMEOUT: Duration = Duration::from_secs(10);

fn require_device(name: &str) -> Arc<Context> {
    rdma_verbs::open(name).unwrap_or_else(|e| {
        panic!(
            "FAIL: cannot open {name} ({e}); devices: {:?}. The lab test boot has rxe0, rxe_a and rxe_b.",
            rdma_verbs::devices()
        )
    })
}

/// One UD end: QP (RTS, Q_Key `qkey`), CQ, an MR of receive slots and a send slot.
struct UdEnd {
    ctx: Arc<Context>,
    pd: Arc<ProtectionDomain>,
    cq: Arc<CompletionQueue>,
    qp: QueuePair,
    mr: MemoryRegion,
    sgid_index: u8,
    gid: std::net::Ipv6Addr,
}

const SLOT: usize = GRH_LEN + 256;
const SLOTS: usize = 8;

fn ud_end(device: &str, qkey: u32) -> UdEnd {
    let ctx = require_device(device);
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cq = ctx.create_cq(64).expect("create_cq");
    let qp = pd
        .create_ud_qp(&cq, &cq, QpCaps::default())
        .expect("create_ud_qp");
    assert_eq!(qp.qp_type(), QpType::Ud);
    assert_eq!(qp.state().unwrap(), QpState::Reset);
    qp.ud_ready(1, qkey, 0x1234).expect("UD RESET -> RTS");
    assert_eq!(qp.state().unwrap(), QpState::Rts);
    let mr = pd
        .register(SLOT * (SLOTS + 1), AccessFlags::LOCAL_WRITE)
        .expect("register");
    for i in 0..SLOTS {
        let sge = Sge {
            mr: &mr,
            offset: i * SLOT,
            len: SLOT as u32,
        };
        qp.post_recv(i as u64, &[sge]).expect("post_recv");
    }
    let gid = ctx.choose_gid(1, GidType::RoceV2).expect("a RoCE v2 GID");
    UdEnd {
        sgid_index: u8::try_from(gid.index).unwrap(),
        gid: gid.gid,
        ctx,
        pd,
        cq,
        qp,
        mr,
    }
}

fn send(from: &mut UdEnd, to: &UdEnd, qkey: u32, payload: &[u8]) {
    let ah = from
        .pd
        .create_ah(1, from.sgid_index, to.gid, 0)
        .unwrap_or_else(|e| panic!("create_ah {} -> {}: {e}", from.ctx.name(), to.gid));
    assert_eq!(ah.dgid(), to.gid);
    let off = SLOT * SLOTS;
    from.mr.write(off, payload).unwrap();
    let sge = Sge {
        mr: &from.mr,
        offset: off,
        len: payload.len() as u32,
    };
    let dest = UdDest {
        ah: &ah,
        qp_num: to.qp.qp_num(),
        qkey,
    };
    from.qp
        .post_ud_send(77, dest, &[sge], false)
        .expect("post_ud_send");
    let wc = from.cq.poll_until(1, TIMEOUT).expect("poll");
    assert_eq!(wc.len(), 1, "no send completion");
    assert_eq!((wc[0].wr_id, wc[0].status), (77, WcStatus::Success));
}

#[test]
fn ud_datagrams_carry_a_grh_the_source_qpn_and_gid_and_a_wrong_qkey_is_dropped() {
    let _g = serial();
    const QKEY: u32 = 0x0bad_cafe;
    let mut a = ud_end("rxe_a", QKEY);
    let b = ud_end("rxe_b", QKEY);
    assert_ne!(a.gid, b.gid);
    let payload = b"one UD datagram from rxe_a to rxe_b";
    send(&mut a, &b, QKEY, payload);
    let wc = b.cq.poll_until(1, TIMEOUT).expect("poll");
    assert_eq!(wc.len(), 1, "FAIL: rxe_b received nothing");
    let w = wc[0];
    println!(
        "UD receive on rxe_b: {w:?}; from QP {} GID {}",
        a.qp.qp_num(),
        a.gid
    );
    assert_eq!(w.status, WcStatus::Success);
    assert_eq!(w.opcode, WcOpcode::Recv);
    assert_eq!(
        w.byte_len as usize,
        GRH_LEN + payload.len(),
        "GRH + payload"
    );
    assert!(w.has_grh(), "RoCE receives carry a GRH");
    assert_eq!(w.src_qp, a.qp.qp_num(), "source QPN");
    assert_eq!(w.qp_num, b.qp.qp_num());
    let slot = w.wr_id as usize * SLOT;
    let bytes = b.mr.to_vec(slot, GRH_LEN + payload.len()).unwrap();
    assert_eq!(&bytes[GRH_LEN..], payload);
    assert_eq!(
        grh_source_gid(&bytes[..GRH_LEN]),
        Some(a.gid),
        "source GID from the GRH: {:02x?}",
        &bytes[..GRH_LEN]
    );

    // The wrong Q_Key: the send completes (UD is unacknowledged), nothing arrives. A right one
    // sent after it arrives alone, so the wrong one was dropped, not delayed.
    send(&mut a, &b, QKEY ^ 1, b"wrong qkey");
    send(&mut a, &b, QKEY, b"right qkey");
    let wc = b.cq.poll_until(2, Duration::from_secs(3)).expect("poll");
    assert_eq!(wc.len(), 1, "FAIL: the wrong Q_Key got through: {wc:?}");
    let slot = wc[0].wr_id as usize * SLOT;
    let got = b.mr.to_vec(slot + GRH_LEN, 10).unwrap();
    assert_eq!(&got, b"right qkey");

    // A controlled Q_Key and UD calls on an RC QP are refused before the device sees them.
    let rc = a.pd.create_rc_qp(&a.cq, &a.cq, QpCaps::default()).unwrap();
    assert!(rc.ud_ready(1, 1, 0).is_err());
    let extra = a.pd.create_ud_qp(&a.cq, &a.cq, QpCaps::default()).unwrap();
    assert!(extra.ud_ready(1, 0x8000_0001, 0).is_err());
}

// ---------------------------------------------------------------------------------------
// The probe engine over UD.

/// The engine tests count QPs and datagrams on rxe_a/rxe_b: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

const SECRET: &str = "lab secret for UD probe engines, 40 bytes";
const A_ADDR: &str = "10.1.0.1";
const B_ADDR: &str = "10.1.0.2";

fn engine(
    device: &str,
    listen: Option<String>,
    peers: &[String],
    transport: PeerTransport,
) -> ProbeEngine {
    let cfg = EngineConfig {
        devices: vec![device.into()],
        loopback: false,
        mr_sizes: vec![],
        interval: Duration::from_millis(250),
        iterations: 50,
        listen: listen.map(|l| l.parse::<SocketAddr>().unwrap()),
        secret: Some(Secret::new(SECRET.as_bytes()).unwrap()),
        peers: peers.to_vec(),
        peer_device: Some(device.into()),
        transport,
        // Generous under a loaded TCG host: a late reply is loss, not a failed test.
        reply_timeout: Duration::from_secs(2),
        run_timeout: Duration::from_secs(20),
        backoff_min: Duration::from_millis(200),
        backoff_max: Duration::from_secs(1),
        ..EngineConfig::default()
    };
    ProbeEngine::start(cfg).unwrap_or_else(|e| panic!("engine on {device}: {e}"))
}

fn wait_for(
    h: &ProbeHandle,
    what: &str,
    limit: Duration,
    ok: impl Fn(&ProbeSnapshot) -> bool,
) -> ProbeSnapshot {
    let deadline = Instant::now() + limit;
    loop {
        let s = h.snapshot();
        if ok(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "FAIL: gave up waiting for {what}: {s:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ud_runs(s: &ProbeSnapshot, peer: &str) -> u64 {
    s.target(peer, ProbeOp::Send).map_or(0, |t| t.runs_total)
}

fn ud_sent(s: &ProbeSnapshot, peer: &str) -> u64 {
    s.target(peer, ProbeOp::Send).map_or(0, |t| t.sent_total)
}

#[test]
fn two_engines_echo_each_other_over_ud_sharing_one_qp_and_one_ah_per_peer() {
    let _g = serial();
    require_device("rxe_a");
    require_device("rxe_b");
    let (a_listen, b_listen) = (format!("{A_ADDR}:18711"), format!("{B_ADDR}:18712"));
    let b = engine(
        "rxe_b",
        Some(b_listen.clone()),
        std::slice::from_ref(&a_listen),
        PeerTransport::Ud,
    );
    let a = engine(
        "rxe_a",
        Some(a_listen.clone()),
        std::slice::from_ref(&b_listen),
        PeerTransport::Ud,
    );
    // Three runs and 150 requests each way: a run the loaded host ends early (its requests
    // past the run's deadline are not sent) counts as a run with fewer requests, so the
    // requests are waited for, not inferred from the runs.
    wait_for(&a.handle(), "A echoing B", Duration::from_secs(90), |s| {
        ud_runs(s, &b_listen) >= 3 && ud_sent(s, &b_listen) >= 3 * 50
    });
    wait_for(&b.handle(), "B echoing A", Duration::from_secs(90), |s| {
        ud_runs(s, &a_listen) >= 3 && ud_sent(s, &a_listen) >= 3 * 50
    });
    // In this order, each endpoint's answers counted after the other side's replies.
    let sa0 = a.handle().snapshot();
    let sb = b.handle().snapshot();
    let sa = a.handle().snapshot();
    for (s, other, peer, dev) in [
        (&sa, &sb, &b_listen, "rxe_a"),
        (&sb, &sa0, &a_listen, "rxe_b"),
    ] {
        let t = s.target(peer, ProbeOp::Send).unwrap();
        let last = t.last.expect("a summary");
        println!(
            "{dev} -> {peer} over UD: RTT t_typical {:.2} us t_min {:.2} us; sent {} lost {}; endpoint {:?}",
            last.t_typical_us,
            last.t_min_us,
            t.sent_total,
            t.lost_total,
            s.ud_endpoint(dev)
        );
        assert_eq!(t.transport, PeerTransport::Ud);
        assert_eq!(t.device, dev, "the configured device");
        assert!(t.up, "{t:#?}");
        assert!(t.sent_total >= 3 * 50, "{t:#?}");
        assert!(t.lost_total <= t.sent_total);
        // sent counts the warm-up requests too (so that lost by direction adds up to it);
        // they are answered but not sampled: one sample per answered timed request.
        let answered = t.sent_total - t.lost_total;
        let warmup = t.runs_total * EngineConfig::default().warmup;
        assert!(
            t.latency_seconds.count() <= answered
                && t.latency_seconds.count() + warmup >= answered,
            "one sample per answered timed request: {} samples, {answered} answered, {} runs of {} warm-up requests",
            t.latency_seconds.count(),
            t.runs_total,
            EngineConfig::default().warmup
        );
        assert!(last.t_typical_us > 0.0 && last.t_typical_us < 100_000.0);
        let e = s.ud_endpoint(dev).expect("a UD endpoint");
        // One session each way, both towards the one peer GID: one address handle.
        assert_eq!(e.sessions, 2, "{e:?}");
        assert_eq!(e.address_handles, 1, "{e:?}");
        let theirs = other
            .targets
            .iter()
            .find(|t| t.kind == "peer")
            .expect("the other side's target");
        assert!(
            e.answered_total >= theirs.sent_total - theirs.lost_total,
            "every reply the other side got was answered here: {e:?} vs {theirs:?}"
        );
        assert!(
            e.dropped_total.values().all(|n| *n == 0),
            "FAIL: nothing is dropped between honest peers: {e:?}"
        );
    }
    assert!(sa.handshakes_accepted_total >= 1 && sb.handshakes_accepted_total >= 1);
}

/// UD and RC QPs of `device` in `rdma -j res show qp` (the kernel's GSI QP excluded).
fn qps(device: &str) -> (usize, usize) {
    let v = live_tests::rdma_json(&["res", "show", "qp"]);
    let list = v.as_array().cloned().unwrap_or_default();
    let of = |t: &str| {
        list.iter()
            .filter(|q| q["ifname"] == device && q["type"] == t)
            .count()
    };
    (of("UD"), of("RC"))
}

#[test]
fn the_qps_of_a_host_are_the_same_with_1_and_3_peers_over_ud_and_grow_over_rc() {
    let _g = serial();
    require_device("rxe_a");
    require_device("rxe_b");
    let listens: Vec<String> = (0..3).map(|i| format!("{B_ADDR}:{}", 18721 + i)).collect();
    let servers: Vec<ProbeEngine> = listens
        .iter()
        .map(|l| engine("rxe_b", Some(l.clone()), &[], PeerTransport::Ud))
        .collect();
    let baseline = qps("rxe_a");
    let mut counts = Vec::new();
    for (n, transport) in [
        (1, PeerTransport::Ud),
        (3, PeerTransport::Ud),
        (3, PeerTransport::Rc),
    ] {
        let peers = &listens[..n];
        let a = engine("rxe_a", None, peers, transport);
        let s = wait_for(
            &a.handle(),
            &format!("A probing {n} peers over {transport}"),
            Duration::from_secs(120),
            |s| {
                peers.iter().all(|p| {
                    s.targets
                        .iter()
                        .any(|t| t.peer.as_deref() == Some(p) && t.runs_total >= 1)
                }) && s.peers.len() == n
                    && s.peers.iter().all(|p| p.connected)
            },
        );
        let now = qps("rxe_a");
        println!(
            "rxe_a QPs (UD, RC) with {n} peers over {transport}: {now:?} (baseline {baseline:?}); rdma res show qp: {}",
            live_tests::rdma_json(&["res", "show", "qp"])
        );
        assert!(s.peers.iter().all(|p| p.connected), "{:?}", s.peers);
        counts.push(now);
        drop(a);
    }
    assert_eq!(
        counts[0],
        (baseline.0 + 1, baseline.1),
        "1 peer over UD: one UD QP"
    );
    assert_eq!(
        counts[1], counts[0],
        "FAIL: 3 peers over UD need more QPs than 1"
    );
    assert_eq!(
        counts[2],
        (baseline.0, baseline.1 + 3),
        "3 peers over RC: one RC QP each (what UD saves)"
    );
    drop(servers);
}

/// A raw UD QP on rxe_a that handshakes with a UD engine like a peer would, then misbehaves.
struct Rogue {
    end: UdEnd,
    ah: rdma_verbs::AddressHandle,
    _lease: TcpStream,
    key: rdma_probe::handshake::SessionKey,
    server: UdAddr,
    server_gid: std::net::Ipv6Addr,
}

const ROGUE_QKEY: u32 = 0x0123_4567;

fn rogue(listen: &str) -> Rogue {
    let end = ud_end("rxe_a", ROGUE_QKEY);
    let mut stream = TcpStream::connect(listen).expect("connect to the engine");
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let ours = Offer {
        endpoint: rdma_verbs::QpEndpoint {
            qp_num: 0,
            psn: 0,
            gid: end.gid,
            lid: 0,
        },
        mtu: 3,
        buffer: None,
        ud: Some(UdAddr {
            qp_num: end.qp.qp_num(),
            qkey: ROGUE_QKEY,
        }),
    };
    let secret = Secret::new(SECRET.as_bytes()).unwrap();
    let (theirs, key) = client_session(&mut stream, &secret, &ours).expect("handshake");
    let ah = end
        .pd
        .create_ah(1, end.sgid_index, theirs.endpoint.gid, 0)
        .expect("create_ah");
    Rogue {
        ah,
        end,
        _lease: stream,
        key,
        server: theirs.ud.expect("a UD offer"),
        server_gid: theirs.endpoint.gid,
    }
}

impl Rogue {
    fn send_raw(&mut self, bytes: &[u8]) {
        let off = SLOT * SLOTS;
        self.end.mr.write(off, bytes).unwrap();
        let sge = Sge {
            mr: &self.end.mr,
            offset: off,
            len: bytes.len() as u32,
        };
        let dest = UdDest {
            ah: &self.ah,
            qp_num: self.server.qp_num,
            qkey: self.server.qkey,
        };
        self.end
            .qp
            .post_ud_send(1, dest, &[sge], false)
            .expect("post_ud_send");
        let wc = self.end.cq.poll_until(1, TIMEOUT).expect("poll");
        assert_eq!(wc.len(), 1, "no send completion");
        assert_eq!(wc[0].opcode, WcOpcode::Send, "{wc:?}");
    }

    fn datagram(&self, session: u64, seq: u64, key: &[u8; 16]) -> [u8; 64] {
        let mut b = [0u8; 64];
        Datagram {
            reply: false,
            session,
            seq,
            stamp: 99,
            received: None,
        }
        .encode(key, &mut b);
        b
    }
}

fn dropped(s: &ProbeSnapshot, device: &str, reason: &str) -> u64 {
    s.ud_endpoint(device)
        .and_then(|e| e.dropped_total.get(reason).copied())
        .unwrap_or(0)
}

#[test]
fn junk_forged_replayed_and_flooded_datagrams_are_dropped_and_counted_while_peers_keep_answering() {
    let _g = serial();
    require_device("rxe_a");
    require_device("rxe_b");
    let b_listen = format!("{B_ADDR}:18731");
    let b = engine("rxe_b", Some(b_listen.clone()), &[], PeerTransport::Ud);
    let a = engine(
        "rxe_a",
        None,
        std::slice::from_ref(&b_listen),
        PeerTransport::Ud,
    );
    let (ha, hb) = (a.handle(), b.handle());
    wait_for(&ha, "A echoing B", Duration::from_secs(90), |s| {
        ud_runs(s, &b_listen) >= 2
    });
    let mut r = rogue(&b_listen);
    assert_eq!(UD_HEADER, 48);

    // One of each, each counted under its own reason.
    let key = r.key.key;
    let id = r.key.id;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "malformed",
            b"not a probe datagram at all, just junk bytes..........".to_vec(),
        ),
        ("malformed", vec![0u8; 20]),
        ("unknown_session", r.datagram(id ^ 0x5a5a, 1, &key).to_vec()),
        ("bad_tag", r.datagram(id, 2, b"not the sess key").to_vec()),
    ];
    for (reason, bytes) in cases {
        let before = dropped(&hb.snapshot(), "rxe_b", reason);
        r.send_raw(&bytes);
        wait_for(
            &hb,
            &format!("B counting {reason}"),
            Duration::from_secs(30),
            |s| dropped(s, "rxe_b", reason) == before + 1,
        );
    }

    // A valid request is answered (to the rogue's QP); the same one again is a replay.
    let answered = hb.snapshot().ud_endpoint("rxe_b").unwrap().answered_total;
    let good = r.datagram(id, 1000, &key);
    r.send_raw(&good);
    wait_for(
        &hb,
        "B answering the rogue's valid request",
        Duration::from_secs(30),
        |s| s.ud_endpoint("rxe_b").unwrap().answered_total > answered,
    );
    let wc = r.end.cq.poll_until(1, TIMEOUT).expect("poll");
    assert_eq!(wc.len(), 1, "FAIL: no reply reached the rogue's QP");
    assert_eq!(wc[0].opcode, WcOpcode::Recv, "{wc:?}");
    assert_eq!(
        wc[0].src_qp, r.server.qp_num,
        "the reply comes from B's UD QP"
    );
    let slot = wc[0].wr_id as usize * SLOT;
    let reply = r.end.mr.to_vec(slot + GRH_LEN, 64).unwrap();
    let d = Datagram::decode(&reply).expect("a reply");
    assert!(d.reply && d.seq == 1000 && d.stamp == 99, "{d:?}");
    assert!(
        Datagram::verify(&reply, &key),
        "the reply is tagged with the session key"
    );
    let before = dropped(&hb.snapshot(), "rxe_b", "replay");
    r.send_raw(&good);
    wait_for(&hb, "B counting the replay", Duration::from_secs(30), |s| {
        dropped(s, "rxe_b", "replay") == before + 1
    });

    // A validly tagged request from a QP that is not the session's peer.
    let mut other = ud_end("rxe_a", ROGUE_QKEY);
    let before = dropped(&hb.snapshot(), "rxe_b", "wrong_source");
    {
        let ah = other
            .pd
            .create_ah(1, other.sgid_index, r.server_gid, 0)
            .unwrap();
        let bytes = r.datagram(id, 2000, &key);
        let off = SLOT * SLOTS;
        other.mr.write(off, &bytes).unwrap();
        let sge = Sge {
            mr: &other.mr,
            offset: off,
            len: 64,
        };
        let dest = UdDest {
            ah: &ah,
            qp_num: r.server.qp_num,
            qkey: r.server.qkey,
        };
        other.qp.post_ud_send(1, dest, &[sge], false).unwrap();
        assert_eq!(other.cq.poll_until(1, TIMEOUT).unwrap().len(), 1);
    }
    wait_for(
        &hb,
        "B counting a wrong source",
        Duration::from_secs(30),
        |s| dropped(s, "rxe_b", "wrong_source") == before + 1,
    );

    // A flood of junk, while A keeps probing B.
    let runs_before = ud_runs(&ha.snapshot(), &b_listen);
    let malformed_before = dropped(&hb.snapshot(), "rxe_b", "malformed");
    let unknown_before = dropped(&hb.snapshot(), "rxe_b", "unknown_session");
    const FLOOD: u64 = 3000;
    let started = Instant::now();
    for i in 0..FLOOD {
        let bytes = if i % 2 == 0 {
            [0xa5u8; 64]
        } else {
            r.datagram(i, i, &key)
        };
        r.send_raw(&bytes);
    }
    let flood_s = started.elapsed().as_secs_f64();
    let s = wait_for(
        &ha,
        "A probing B after the flood",
        Duration::from_secs(90),
        |s| ud_runs(s, &b_listen) >= runs_before + 3,
    );
    let sb = hb.snapshot();
    let counted = dropped(&sb, "rxe_b", "malformed") - malformed_before
        + dropped(&sb, "rxe_b", "unknown_session")
        - unknown_before;
    let t = s.target(&b_listen, ProbeOp::Send).unwrap();
    println!(
        "flood: {FLOOD} datagrams in {flood_s:.1} s, {counted} counted as dropped; A -> B: runs {} -> {}, up {}, sent {} lost {}; B's endpoint {:?}",
        runs_before,
        t.runs_total,
        t.up,
        t.sent_total,
        t.lost_total,
        sb.ud_endpoint("rxe_b")
    );
    assert!(
        counted > 0 && counted <= FLOOD,
        "FAIL: {counted} of {FLOOD} flood datagrams counted"
    );
    assert!(
        t.up,
        "FAIL: A's probes of B failed during the flood: {t:#?}"
    );
    assert!(
        sb.ud_endpoint("rxe_b").unwrap().answered_total > answered,
        "B keeps answering"
    );
    drop(r);
    drop(a);
    drop(b);
}
