//! What a probes scrape costs per peer, against a scrape with no peers, in one run.
//!
//! `cargo run --release -p rdma-bench --bin probe_emit [PEERS] [ROUNDS]` (2,000 peers, 200
//! rounds by default) builds three engine snapshots: one with the loopback targets only, one
//! with PEERS UD peers as the engine holds them after its rounds (one target and one status
//! per peer, a rack label each, losses counted), and one with PEERS silent peers as the
//! engine holds them once each connect timed out (a target without a device, run or sample,
//! its failures counted, and the `host` status: issue #29's SYNs dropped). It interleaves,
//! ROUNDS times, the probes collector's `emit` plus the text encoding of each, and prints the
//! p50s, the series and bytes of each and the ratio of each to no peers. The lab's
//! bench/lab-engine-scrape measures the whole scrape of a running rdmad with silent peers;
//! this one isolates the collector so its growth with the peers is seen without the lab (the
//! per-peer scan it replaced made the collector quadratic).
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use rdma_bench::{median, time};
use rdma_probe::{
    DiscoveryStats, LatencySummary, PeerState, PeerStatus, PeerTransport, ProbeOp, ProbeSnapshot,
    TargetResult,
};
use rdmad::metrics::{Format, MetricSet};

fn target(peer: Option<String>, op: ProbeOp, n: u64) -> TargetResult {
    let (kind, transport) = match peer {
        Some(_) => ("peer", PeerTransport::Ud),
        None => ("loopback", PeerTransport::Rc),
    };
    TargetResult {
        last: Some(LatencySummary {
            iterations: 100,
            t_min_us: 10.0,
            t_max_us: 40.0,
            t_typical_us: 12.0 + (n % 7) as f64,
            t_avg_us: 13.0,
            t_stdev_us: 2.0,
            p99_us: 30.0,
            p99_9_us: 39.0,
        }),
        runs_total: n,
        sent_total: 100 * n,
        lost_total: n % 3,
        lost_request_total: n % 3,
        up: true,
        ..TargetResult::empty(kind, "rxe0", 1, peer, op, transport, 64)
    }
}

/// A peer whose every connect timed out, as the engine records it: no device (never
/// connected), no run, no sample, nothing sent, its failures counted.
fn silent_target(peer: String, n: u64) -> TargetResult {
    TargetResult {
        failures_total: BTreeMap::from([("HOST_UNREACHABLE".to_string(), 1 + n % 4)]),
        last_error: Some(format!("connect to {peer}: timed out after 3 s")),
        ..TargetResult::empty(
            "peer",
            "",
            1,
            Some(peer),
            ProbeOp::Send,
            PeerTransport::Ud,
            64,
        )
    }
}

/// What the engine holds for `peers` peers: answering ones (`silent` false: half of them
/// `ok`, half down after answering), or ones that never answered.
fn snapshot(peers: u64, silent: bool) -> ProbeSnapshot {
    let mut targets: Vec<TargetResult> = [ProbeOp::Send, ProbeOp::Write, ProbeOp::Read]
        .into_iter()
        .map(|op| target(None, op, 1))
        .collect();
    let mut states = Vec::new();
    for i in 0..peers {
        // Addresses are only labels here: nothing is sent anywhere.
        let peer = format!("10.{}.{}.{}:9737", i / 65536, (i / 256) % 256, i % 256);
        targets.push(if silent {
            silent_target(peer.clone(), i)
        } else {
            target(Some(peer.clone()), ProbeOp::Send, i)
        });
        states.push(PeerState {
            peer,
            connected: false,
            connects_total: 0,
            backoff_seconds: 15.0,
            labels: Arc::new(BTreeMap::from([(
                "rack".to_string(),
                format!("r{}", i / 32),
            )])),
            planned: true,
            status: Some(if i % 2 == 0 && !silent {
                PeerStatus::Ok
            } else {
                PeerStatus::Host
            }),
        });
    }
    ProbeSnapshot {
        clock: None,
        rounds_total: 100,
        round_duration_seconds: Some(2.0),
        rounds_late_total: 0,
        cpu_seconds_total: 1.0,
        uptime_seconds: 200.0,
        targets,
        registrations: vec![],
        peers: states,
        handshakes_accepted_total: 0,
        handshakes_refused_total: BTreeMap::new(),
        ud_endpoints: vec![],
        discovery: DiscoveryStats::default(),
        own_labels: BTreeMap::new(),
        own_peers: vec![],
    }
}

fn scrape(s: &ProbeSnapshot) -> anyhow::Result<(usize, usize)> {
    let mut out = MetricSet::new();
    rdmad::collector::probes::emit(s, false, &mut out)?;
    let series = out
        .names()
        .filter_map(|n| out.family(n))
        .map(|f| f.len())
        .sum();
    Ok((series, out.encode(Format::Text).len()))
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let peers: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(2000);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(200);
    anyhow::ensure!(rounds > 0, "ROUNDS must be at least 1");
    let cases = [
        ("no peers".to_string(), snapshot(0, false)),
        (format!("{peers} peers"), snapshot(peers, false)),
        (format!("{peers} silent"), snapshot(peers, true)),
    ];
    let mut times: Vec<Vec<std::time::Duration>> = vec![Vec::new(); cases.len()];
    let mut shapes = vec![(0, 0); cases.len()];
    for _ in 0..rounds {
        for (i, (_, s)) in cases.iter().enumerate() {
            let mut r = Ok((0, 0));
            times[i].push(time(|| r = scrape(s)));
            shapes[i] = r?;
        }
    }
    let p50: Vec<f64> = times.into_iter().map(|t| median(t).as_secs_f64()).collect();
    for (i, (name, _)) in cases.iter().enumerate() {
        println!(
            "{:<14} p50 {:>9.3} ms, {} series, {} bytes",
            format!("{name}:"),
            p50[i] * 1e3,
            shapes[i].0,
            shapes[i].1
        );
    }
    for (i, (name, _)) in cases.iter().enumerate().skip(1) {
        println!(
            "{name}: ratio {:.2}x time for {:.1}x series ({} rounds interleaved)",
            p50[i] / p50[0],
            shapes[i].0 as f64 / shapes[0].0.max(1) as f64,
            rounds
        );
    }
    Ok(())
}
