//! Our UD echo probe against `ib_send_lat -c UD`, INSIDE the lab with two devices
//! (`rdmactl lab run --devices 2 --add target/release/ud_vs_perftest -- /opt/rdma/extra/ud_vs_perftest`):
//! rxe_a (10.1.0.1) probes rxe_b (10.1.0.2).
//!
//! `ud_vs_perftest [ROUNDS]` interleaves, ROUNDS times (default 5): our UD probe (a probe
//! engine listening on rxe_b answers from its UD QP; rxe_a's UD endpoint sends 1000 timed
//! echo requests of 64 bytes after a warm-up, one outstanding at a time) and
//! `ib_send_lat -c UD -d rxe_b -x 1 -s 64` / `... -d rxe_a ... 10.1.0.2`, 1000 iterations.
//! perftest reports half the round trip; our probe measures the whole round trip, so its
//! t_typical is halved before the ratio. It prints every pair with its ratio, the medians
//! and their ratio (target 0.8..1.25 under TCG), and the median of the per-round ratios: on
//! a loaded host whole rounds of both tools are starved (milliseconds instead of tens of
//! microseconds), which the ratio of the medians shows and the pairs explain. It asserts
//! nothing about time; it exits 1 only when a tool fails.
#![forbid(unsafe_code)]

use anyhow::{bail, Context as _};
use rdma_probe::peer::UdPeerConn;
use rdma_probe::ud::UdEndpoints;
use rdma_probe::{Clock, EngineConfig, LatencySummary, PeerTransport, ProbeEngine, Secret};
use std::process::{Command, Stdio};
use std::time::Duration;

const SIZE: usize = 64;
const ITERATIONS: u64 = 1000;
const LISTEN: &str = "10.1.0.2:18801";
const SECRET: &[u8] = b"bench secret for the UD echo probe";

/// t_typical (usec) of one `ib_send_lat -c UD` client run against a fresh server.
fn perftest() -> anyhow::Result<f64> {
    let common = |dev: &str| {
        let mut v: Vec<String> = ["-c", "UD", "-x", "1", "-s", &SIZE.to_string(), "-n"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.push(ITERATIONS.to_string());
        v.extend(["-d".to_string(), dev.to_string()]);
        v
    };
    let mut last = String::new();
    for _ in 0..10 {
        let mut server = Command::new("timeout")
            .arg("60")
            .arg("ib_send_lat")
            .args(common("rxe_b"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting the ib_send_lat server")?;
        // The server needs a moment to listen.
        std::thread::sleep(Duration::from_millis(700));
        let out = Command::new("timeout")
            .arg("60")
            .arg("ib_send_lat")
            .args(common("rxe_a"))
            .arg("10.1.0.2")
            .output()
            .context("running the ib_send_lat client")?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let _ = server.kill();
        let _ = server.wait();
        match t_typical(&text) {
            Some(v) if v.is_finite() => return Ok(v),
            _ => last = format!("{text}{}", String::from_utf8_lossy(&out.stderr)),
        }
    }
    bail!("ib_send_lat -c UD printed no result:\n{last}")
}

/// The t_typical column of perftest's latency table.
fn t_typical(out: &str) -> Option<f64> {
    let mut lines = out.lines();
    lines.find(|l| l.contains("t_typical[usec]"))?;
    let row = lines.next()?;
    row.split_whitespace().nth(4)?.parse().ok()
}

/// One run of our UD echo: half the median round trip, usec.
fn ours(conn: &UdPeerConn, clock: &Clock) -> anyhow::Result<f64> {
    let run = conn.run(
        16,
        ITERATIONS,
        clock,
        Duration::from_secs(2),
        Duration::from_secs(120),
    );
    if let Some(f) = run.failure {
        bail!("UD probe failed: {f}");
    }
    let (sent, lost) = (run.sent, run.lost);
    let mut samples = run.samples_ns;
    let s = LatencySummary::from_ns(&mut samples).context("no samples")?;
    println!(
        "  ours UD: RTT t_typical {:.2} t_min {:.2} t_avg {:.2} us; sent {sent} lost {lost}",
        s.t_typical_us, s.t_min_us, s.t_avg_us
    );
    Ok(s.t_typical_us / 2.0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() -> anyhow::Result<()> {
    let rounds: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(5);
    let secret = Secret::new(SECRET).map_err(anyhow::Error::msg)?;
    let responder = ProbeEngine::start(EngineConfig {
        loopback: false,
        mr_sizes: vec![],
        listen: Some(LISTEN.parse()?),
        secret: Some(secret.clone()),
        peer_device: Some("rxe_b".into()),
        transport: PeerTransport::Ud,
        ..EngineConfig::default()
    })?;
    let endpoints = UdEndpoints::default();
    let conn = UdPeerConn::connect(LISTEN, &secret, Some("rxe_a"), None, SIZE, &endpoints)
        .map_err(anyhow::Error::new)?;
    let clock = Clock::calibrate();
    let (mut o, mut p) = (vec![], vec![]);
    for i in 0..rounds {
        o.push(ours(&conn, &clock)?);
        p.push(perftest()?);
        println!(
            "round {}: UD echo ours {:.2} us (RTT/2), ib_send_lat -c UD {:.2} us, ratio {:.2}",
            i + 1,
            o[i],
            p[i],
            o[i] / p[i]
        );
    }
    let per_round = median(o.iter().zip(&p).map(|(a, b)| a / b).collect());
    let (mo, mp) = (median(o), median(p));
    println!(
        "median t_typical, {rounds} interleaved runs of {ITERATIONS} x {SIZE} B, rxe_a -> rxe_b:"
    );
    println!(
        "  UD SEND: probe {mo:.2} us, ib_send_lat -c UD {mp:.2} us, ratio {:.2}",
        mo / mp
    );
    println!("  median of the per-round ratios: {per_round:.2}");
    println!("target 0.8..1.25 (under TCG)");
    drop(conn);
    drop(responder);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perftest_rows_are_parsed() {
        let out = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n 64      1000          11.83          184.56       15.39    \t       16.42       \t5.93   \t\t36.78  \t\t184.56 \n";
        assert_eq!(t_typical(out), Some(15.39));
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
    }
}
