//! The pinglist planner at cluster scale, simulated (no RDMA, no network).
//!
//! `pinglist_sim [HOSTS...]` (default 100 1000 10000), racks of 32 hosts, `--probe.mesh-max`
//! 64: every host plans with the same code rdmad runs (`rdma_probe::pinglist::Pinglist`) and
//! the simulation counts, per host size: the most probes any host sends in one round, the
//! rounds until every unordered pair of hosts was probed from one side, and the heap bytes of
//! one host's peer table: the discovery state and peer set read from a real file_sd file of
//! every other host (targets with rack and zone labels), the plan, and per peer the engine's
//! published records: its result (latency histogram, summary) and its state. The engine's
//! private connection record per peer (address, backoff, an Arc of its labels; the QP itself
//! only while planned) is not counted. The targets are printed beside them: at
//! most 64 probes per host per round, full coverage within ceil(1000 / 64) = 16 rounds at
//! 1,000 hosts, memory linear in peers and under 1 KiB per peer. It asserts nothing.

use rdma_probe::discovery::{Discovery, DiscoveryConfig};
use rdma_probe::pinglist::{simulate, Pinglist, DEFAULT_MESH_MAX};
use rdma_probe::snapshot::PeerTransport;
use rdma_probe::{LatencySummary, PeerState, ProbeOp, TargetResult};
use std::time::Instant;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const RACK: usize = 32;
const PORT: u16 = 9737;

fn host_addr(i: usize) -> String {
    format!(
        "10.{}.{}.{}:{PORT}",
        1 + i / 65536,
        (i / 256) % 256,
        i % 256
    )
}

fn rack(i: usize) -> String {
    format!("r{}", i / RACK)
}

/// Heap bytes of host 0's peer table for `n` hosts, read from a real peers file.
fn table_bytes(n: usize) -> anyhow::Result<usize> {
    let dir = std::env::temp_dir().join(format!("pinglist-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("peers.json");
    let mut groups = Vec::new();
    for r in 0..n.div_ceil(RACK) {
        let targets: Vec<String> = (r * RACK..((r + 1) * RACK).min(n))
            .map(|i| format!("\"{}\"", host_addr(i)))
            .collect();
        groups.push(format!(
            "{{\"targets\":[{}],\"labels\":{{\"rack\":\"r{r}\",\"zone\":\"z{}\"}}}}",
            targets.join(","),
            r / 8
        ));
    }
    std::fs::write(&path, format!("[{}]", groups.join(",\n")))?;
    let own = host_addr(0);
    let profiler = dhat::Profiler::builder().testing().build();
    let before = dhat::HeapStats::get().curr_bytes;
    let mut discovery = Discovery::new(DiscoveryConfig {
        file: Some(path.clone()),
        default_port: PORT,
        listen: Some(own.parse()?),
        ..DiscoveryConfig::default()
    });
    let set = discovery.refresh();
    let peers: Vec<(&str, Option<&str>)> = set
        .peers
        .values()
        .map(|p| (p.addr.as_str(), p.rack()))
        .collect();
    let plan = Pinglist::new(DEFAULT_MESH_MAX, &own, set.own_rack(), &peers);
    drop(peers);
    let mut samples: Vec<f64> = (0..100).map(|k| 20_000.0 + f64::from(k)).collect();
    let summary = LatencySummary::from_ns(&mut samples);
    let results: Vec<TargetResult> = set
        .peers
        .keys()
        .map(|addr| TargetResult {
            last: summary,
            runs_total: 1,
            sent_total: 100,
            up: true,
            ..TargetResult::empty(
                "peer",
                "mlx5_0",
                1,
                Some(addr.clone()),
                ProbeOp::Send,
                PeerTransport::Ud,
                64,
            )
        })
        .collect();
    let states: Vec<PeerState> = set
        .peers
        .values()
        .map(|p| PeerState {
            peer: p.addr.clone(),
            connected: false,
            connects_total: 0,
            backoff_seconds: 1.0,
            labels: std::sync::Arc::clone(&p.labels),
            planned: false,
            status: None,
        })
        .collect();
    let after = dhat::HeapStats::get().curr_bytes;
    assert_eq!(set.peers.len(), n - 1, "host 0 sees every other host");
    drop((results, states, plan, set, discovery));
    drop(profiler);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(after - before)
}

fn main() -> anyhow::Result<()> {
    let sizes: Vec<usize> = match std::env::args().skip(1).collect::<Vec<_>>() {
        a if a.is_empty() => vec![100, 1000, 10_000],
        a => a
            .iter()
            .map(|s| {
                s.parse()
                    .map_err(|_| anyhow::anyhow!("`{s}` is not a host count"))
            })
            .collect::<anyhow::Result<_>>()?,
    };
    println!(
        "pinglist planner, racks of {RACK}, --probe.mesh-max {DEFAULT_MESH_MAX} (targets: <= {DEFAULT_MESH_MAX} probes/host/round; coverage <= ceil(hosts/{DEFAULT_MESH_MAX}) rounds; < 1024 B/peer)"
    );
    println!(
        "{:>7} {:>11} {:>16} {:>17} {:>13} {:>14} {:>11} {:>8}",
        "hosts",
        "full mesh",
        "probes/host/rnd",
        "rounds to cover",
        "target rnds",
        "table B/host",
        "B/peer",
        "sim s"
    );
    for n in sizes {
        if n < 2 {
            anyhow::bail!("at least 2 hosts");
        }
        let hosts: Vec<(String, Option<String>)> =
            (0..n).map(|i| (host_addr(i), Some(rack(i)))).collect();
        let t = Instant::now();
        let (rounds, max_probes) = simulate(DEFAULT_MESH_MAX, &hosts, 100_000);
        let sim = t.elapsed().as_secs_f64();
        let bytes = table_bytes(n)?;
        println!(
            "{:>7} {:>11} {:>16} {:>17} {:>13} {:>14} {:>11.0} {:>8.1}",
            n,
            if n - 1 <= DEFAULT_MESH_MAX {
                "yes"
            } else {
                "no"
            },
            max_probes,
            rounds.map_or("never".to_string(), |r| r.to_string()),
            n.div_ceil(DEFAULT_MESH_MAX),
            bytes,
            bytes as f64 / (n - 1) as f64,
            sim
        );
    }
    Ok(())
}
