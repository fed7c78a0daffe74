//! Live probe tests, run INSIDE the Soft-RoCE lab VM (`rdmactl lab test --only probes`):
//! every loopback operation on rxe0 with plausible latencies, MR registration timing, no
//! QP/MR/PD leak over 1000 probe cycles with injected errors, the engine's publication and
//! CPU cost, and two engines on rxe_a/rxe_b probing each other over the authenticated
//! handshake (wrong secret refused; a stopped peer counted and recovered).
//!
//! No device is a failure here, never a silent pass. Nothing asserts on time except the
//! brief's plausibility bounds (latency > 0 and < 100 ms).
#![forbid(unsafe_code)]

use live_tests::LAB_DEVICE;
use rdma_probe::mrreg::time_registrations;
use rdma_probe::oneshot::ping_loopback;
use rdma_probe::{
    Clock, EngineConfig, FailureKind, LoopbackProbe, PeerTransport, ProbeEngine, ProbeHandle,
    ProbeOp, ProbeSnapshot, RunParams, Secret,
};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const A_ADDR: &str = "10.1.0.1";
const B_ADDR: &str = "10.1.0.2";

fn require_device(name: &str) {
    let names: Vec<String> = rdma_verbs::devices()
        .unwrap_or_else(|e| panic!("FAIL: no RDMA stack ({e}); run inside `rdmactl lab run`"))
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert!(
        names.iter().any(|n| n == name),
        "FAIL: {name} missing (devices: {names:?}); the lab test boot has rxe0, rxe_a and rxe_b"
    );
}

fn plausible(what: &str, us: f64) {
    assert!(us > 0.0 && us < 100_000.0, "{what}: {us} us");
}

#[test]
fn every_loopback_op_succeeds_on_rxe0_with_plausible_latencies() {
    require_device(LAB_DEVICE);
    let p = RunParams {
        size: 64,
        warmup: 10,
        iterations: 200,
        timeout: Duration::from_secs(20),
    };
    for op in ProbeOp::ALL {
        let r = ping_loopback(LAB_DEVICE, 1, None, op, &p)
            .unwrap_or_else(|f| panic!("{op} probe on {LAB_DEVICE} failed: {f}"));
        let s = r.summary;
        println!(
            "{op}: t_min {:.2} t_typical {:.2} t_avg {:.2} t_max {:.2} p99 {:.2} us (clock {:?}, read {:.0} ns, clock_gettime {:.0} ns)",
            s.t_min_us, s.t_typical_us, s.t_avg_us, s.t_max_us, s.p99_us, r.clock.source, r.clock.read_cost_ns, r.clock.monotonic_cost_ns
        );
        assert_eq!(s.iterations, 200, "{op}");
        for (name, v) in [
            ("t_min", s.t_min_us),
            ("t_typical", s.t_typical_us),
            ("t_avg", s.t_avg_us),
            ("t_max", s.t_max_us),
            ("p99", s.p99_us),
        ] {
            plausible(&format!("{op} {name}"), v);
        }
        assert!(
            s.t_min_us <= s.t_typical_us && s.t_typical_us <= s.t_max_us,
            "{s:?}"
        );
        assert!(s.p99_us <= s.p99_9_us && s.p99_9_us <= s.t_max_us, "{s:?}");
        // The RoCE v2 IPv4 GID: index 1 (::ffff:10.0.2.15) in the lab.
        assert_eq!(r.gid_index, Some(1), "{op}");
    }
}

#[test]
fn mr_registration_is_timed_for_4k_to_64m() {
    require_device(LAB_DEVICE);
    let ctx = rdma_verbs::open(LAB_DEVICE).unwrap();
    let sizes = rdma_probe::mrreg::DEFAULT_MR_SIZES;
    let regs = time_registrations(&ctx, sizes).expect("PD");
    assert_eq!(regs.len(), sizes.len());
    for r in regs {
        let d = r
            .result
            .unwrap_or_else(|f| panic!("registering {} bytes failed: {f}", r.size));
        println!(
            "MR registration {:>9} bytes: {:>10.1} us",
            r.size,
            d.as_secs_f64() * 1e6
        );
        assert!(d > Duration::ZERO);
    }
}

/// (pd, cq, qp, mr) of `device` from `rdma -j res show`.
fn resources(device: &str) -> (u64, u64, u64, u64) {
    let v = live_tests::rdma_json(&["res", "show"]);
    let entry = v
        .as_array()
        .and_then(|a| a.iter().find(|e| e["ifname"] == device))
        .unwrap_or_else(|| panic!("{device} not in rdma res show: {v}"));
    let n = |k: &str| {
        entry[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k} in {entry}"))
    };
    (n("pd"), n("cq"), n("qp"), n("mr"))
}

#[test]
fn a_thousand_probe_cycles_with_errors_leak_no_qp_mr_or_pd() {
    require_device(LAB_DEVICE);
    let baseline = resources(LAB_DEVICE);
    let clock = Clock::calibrate();
    let p = RunParams {
        size: 64,
        warmup: 2,
        iterations: 5,
        timeout: Duration::from_secs(10),
    };
    let ctx = rdma_verbs::open(LAB_DEVICE).unwrap();
    let mut probe = LoopbackProbe::new(LAB_DEVICE, 1, None, 64);
    let mut faults = 0u64;
    let mut cycle = |i: u64, probe: &mut LoopbackProbe| {
        if i % 50 == 7 {
            let f = probe
                .inject_remote_access_error()
                .expect("a corrupted rkey must fail");
            assert_eq!(f.kind.name(), "REM_ACCESS_ERR", "{f}");
            faults += 1;
        }
        for op in ProbeOp::ALL {
            probe
                .run(op, &p, &clock)
                .unwrap_or_else(|f| panic!("cycle {i} {op}: {f}"));
        }
        if i % 100 == 3 {
            for r in time_registrations(&ctx, &[4096, 65536]).unwrap() {
                r.result.unwrap();
            }
        }
    };
    for i in 0..10 {
        cycle(i, &mut probe);
    }
    let after_10 = resources(LAB_DEVICE);
    for i in 10..1000 {
        cycle(i, &mut probe);
    }
    let after_1000 = resources(LAB_DEVICE);
    println!(
        "(pd, cq, qp, mr): baseline {baseline:?}, after 10 {after_10:?}, after 1000 {after_1000:?}; {} rebuilds, {faults} injected errors",
        probe.rebuilds()
    );
    assert!(
        faults >= 20 && probe.rebuilds() > faults,
        "errors were recycled"
    );
    assert_eq!(
        after_10, after_1000,
        "(pd, cq, qp, mr) after 10 vs 1000 cycles"
    );
    drop(probe);
    drop(ctx);
    assert_eq!(resources(LAB_DEVICE), baseline, "everything freed on drop");
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
            "gave up waiting for {what}: {s:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn failures(s: &ProbeSnapshot, peer: &str) -> u64 {
    s.target(peer, ProbeOp::Read)
        .map_or(0, |t| t.failures_total.values().sum())
}

fn runs(s: &ProbeSnapshot, peer: &str) -> u64 {
    s.target(peer, ProbeOp::Read).map_or(0, |t| t.runs_total)
}

#[test]
fn the_engine_publishes_histograms_and_summaries_and_counts_its_cpu() {
    require_device(LAB_DEVICE);
    let cfg = EngineConfig {
        devices: vec![LAB_DEVICE.into()],
        interval: Duration::from_millis(300),
        iterations: 50,
        mr_sizes: vec![4096, 1 << 20],
        mr_every: 2,
        ..EngineConfig::default()
    };
    let engine = ProbeEngine::start(cfg).unwrap();
    let h = engine.handle();
    let s = wait_for(&h, "4 rounds", Duration::from_secs(60), |s| {
        s.rounds_total >= 4
    });
    engine.stop();
    for op in ProbeOp::ALL {
        let t = s
            .target(LAB_DEVICE, op)
            .unwrap_or_else(|| panic!("{op}: {s:#?}"));
        assert!(t.up && t.failures_total.is_empty(), "{t:#?}");
        assert!(t.runs_total >= 4);
        assert_eq!(
            t.latency_seconds.count(),
            t.runs_total * 50,
            "one observation per sample"
        );
        let cum = t.latency_seconds.cumulative();
        assert_eq!(cum.last().unwrap().1, t.latency_seconds.count());
        assert!(cum.windows(2).all(|w| w[0].1 <= w[1].1), "cumulative");
        plausible(&format!("{op} t_typical"), t.last.unwrap().t_typical_us);
    }
    assert_eq!(s.registrations.len(), 2, "{:?}", s.registrations);
    assert!(s
        .registrations
        .iter()
        .all(|r| r.last_seconds.is_some() && r.failures_total == 0));
    assert!(s.cpu_seconds_total > 0.0);
    let json = serde_json::to_string(&s).unwrap();
    assert!(
        !json.contains("rkey") && !json.contains("lkey"),
        "no keys published"
    );
}

#[test]
fn the_default_engine_cost_is_measured_per_minute() {
    // Measured and printed, checked loosely (CPU time in a TCG guest includes the emulated
    // rxe work done in softirq context on our threads, and time the host stole from the
    // vCPU). Two parts: the default probes (10 s interval, 3 ops x 100 iterations) for 30 s,
    // and one MR registration round of the default sizes (4 KiB..64 MiB), which the default
    // engine runs every `mr_every` rounds.
    require_device(LAB_DEVICE);
    let defaults = EngineConfig::default();
    let cfg = EngineConfig {
        devices: vec![LAB_DEVICE.into()],
        mr_sizes: vec![],
        ..EngineConfig::default()
    };
    let engine = ProbeEngine::start(cfg).unwrap();
    let h = engine.handle();
    std::thread::sleep(Duration::from_secs(30));
    let s = h.snapshot();
    engine.stop();
    let probes_per_minute = s.cpu_seconds_total / s.uptime_seconds * 60.0;
    let ctx = rdma_verbs::open(LAB_DEVICE).unwrap();
    let before = rdma_probe::cpu::thread_cpu_ns().expect("procfs");
    let regs = time_registrations(&ctx, &defaults.mr_sizes).unwrap();
    let mr_round = (rdma_probe::cpu::thread_cpu_ns().unwrap() - before) as f64 / 1e9;
    assert!(regs.iter().all(|r| r.result.is_ok()));
    let rounds_per_minute = 60.0 / defaults.interval.as_secs_f64();
    let mr_per_minute = mr_round * rounds_per_minute / defaults.mr_every as f64;
    let total = probes_per_minute + mr_per_minute;
    println!(
        "default engine CPU: probes {probes_per_minute:.3} s/min ({} rounds in {:.1} s), MR round {mr_round:.3} s every {} rounds = {mr_per_minute:.3} s/min; total {total:.3} s/min = {:.2}% of a core",
        s.rounds_total,
        s.uptime_seconds,
        defaults.mr_every,
        total / 60.0 * 100.0
    );
    assert!(s.rounds_total >= 3, "{s:#?}");
    for t in &s.targets {
        assert!(t.up, "{t:#?}");
    }
    assert!(s.cpu_seconds_total > 0.0 && mr_round > 0.0);
}

fn peer_engine(device: &str, listen: &str, peers: &[String], secret: &str) -> ProbeEngine {
    let cfg = EngineConfig {
        devices: vec![device.into()],
        loopback: false,
        mr_sizes: vec![],
        interval: Duration::from_millis(250),
        iterations: 50,
        listen: Some(listen.parse::<SocketAddr>().unwrap()),
        secret: Some(Secret::new(secret.as_bytes()).unwrap()),
        peers: peers.to_vec(),
        // These tests are about RC READ peers (UD peers: probes_ud.rs).
        transport: PeerTransport::Rc,
        backoff_min: Duration::from_millis(200),
        backoff_max: Duration::from_secs(1),
        ..EngineConfig::default()
    };
    ProbeEngine::start(cfg).unwrap_or_else(|e| panic!("engine on {device} ({listen}): {e}"))
}

const SECRET: &str = "lab secret for probe engines, 48 bytes long ....";

#[test]
fn two_engines_probe_each_other_and_a_stopped_peer_is_counted_then_recovered() {
    require_device("rxe_a");
    require_device("rxe_b");
    let (a_listen, b_listen) = (format!("{A_ADDR}:18611"), format!("{B_ADDR}:18612"));
    let b = peer_engine("rxe_b", &b_listen, std::slice::from_ref(&a_listen), SECRET);
    let a = peer_engine("rxe_a", &a_listen, std::slice::from_ref(&b_listen), SECRET);
    let (ha, hb) = (a.handle(), b.handle());
    let sa = wait_for(&ha, "A probing B", Duration::from_secs(60), |s| {
        runs(s, &b_listen) >= 3
    });
    let sb = wait_for(&hb, "B probing A", Duration::from_secs(60), |s| {
        runs(s, &a_listen) >= 3
    });
    let (ta, tb) = (
        sa.target(&b_listen, ProbeOp::Read).unwrap(),
        sb.target(&a_listen, ProbeOp::Read).unwrap(),
    );
    println!(
        "A(rxe_a) -> B: t_typical {:.2} us; B(rxe_b) -> A: t_typical {:.2} us",
        ta.last.unwrap().t_typical_us,
        tb.last.unwrap().t_typical_us
    );
    assert_eq!(
        (ta.device.as_str(), tb.device.as_str()),
        ("rxe_a", "rxe_b"),
        "device found from the TCP local address"
    );
    plausible("A->B", ta.last.unwrap().t_typical_us);
    plausible("B->A", tb.last.unwrap().t_typical_us);
    assert!(sa.handshakes_accepted_total >= 1 && sb.handshakes_accepted_total >= 1);
    assert!(
        sa.handshakes_refused_total.is_empty(),
        "{:?}",
        sa.handshakes_refused_total
    );

    // Stop B: A's failures rise and its peer goes down.
    let before = failures(&ha.snapshot(), &b_listen);
    b.stop();
    let down = wait_for(
        &ha,
        "A to count B's failure",
        Duration::from_secs(60),
        |s| failures(s, &b_listen) >= before + 2 && !s.peers[0].connected,
    );
    let t = down.target(&b_listen, ProbeOp::Read).unwrap();
    println!("A's failures towards the stopped B: {:?}", t.failures_total);
    assert!(!t.up);
    let names: Vec<&String> = t.failures_total.keys().collect();
    assert!(
        names.iter().all(|n| [
            "PEER_CLOSED",
            "CONNECT_ERR",
            "RETRY_EXC_ERR",
            "HANDSHAKE_ERR",
            "TIMEOUT"
        ]
        .contains(&n.as_str())),
        "{names:?}"
    );
    assert!(down.peers[0].backoff_seconds <= 1.0, "backoff bounded");

    // Restart B on the same address: A reconnects and succeeds again.
    let runs_down = runs(&down, &b_listen);
    let b2 = peer_engine("rxe_b", &b_listen, std::slice::from_ref(&a_listen), SECRET);
    let up = wait_for(&ha, "A to recover", Duration::from_secs(60), |s| {
        runs(s, &b_listen) >= runs_down + 2
            && s.target(&b_listen, ProbeOp::Read).is_some_and(|t| t.up)
    });
    assert!(
        up.peers[0].connected && up.peers[0].connects_total >= 2,
        "{:?}",
        up.peers
    );
    drop(a);
    drop(b2);
}

#[test]
fn a_wrong_secret_is_refused_and_counted_on_both_sides() {
    require_device("rxe_a");
    require_device("rxe_b");
    let b_listen = format!("{B_ADDR}:18613");
    let b = peer_engine("rxe_b", &b_listen, &[], SECRET);
    let c = peer_engine(
        "rxe_a",
        &format!("{A_ADDR}:18614"),
        std::slice::from_ref(&b_listen),
        "not the lab secret, but long enough",
    );
    let sc = wait_for(
        &c.handle(),
        "C's handshake failures",
        Duration::from_secs(60),
        |s| {
            s.target(&b_listen, ProbeOp::Read)
                .and_then(|t| {
                    t.failures_total
                        .get(&FailureKind::Handshake.name())
                        .copied()
                })
                .unwrap_or(0)
                >= 2
        },
    );
    let sb = wait_for(&b.handle(), "B's refusals", Duration::from_secs(30), |s| {
        s.handshakes_refused_total
            .get("bad_mac")
            .copied()
            .unwrap_or(0)
            >= 2
    });
    let t = sc.target(&b_listen, ProbeOp::Read).unwrap();
    assert_eq!(t.runs_total, 0, "no probe ran without authentication");
    assert_eq!(sb.handshakes_accepted_total, 0);
    let refused: BTreeMap<String, u64> = sb.handshakes_refused_total.clone();
    println!("B refused {refused:?}; C saw {:?}", t.failures_total);
    assert!(
        t.last_error.as_deref().unwrap_or("").contains("secret"),
        "{:?}",
        t.last_error
    );
}
