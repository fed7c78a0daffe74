//! Our loopback probes against perftest, INSIDE the lab (rxe0 on 10.0.2.15).
//!
//! `probe_vs_perftest [ROUNDS]` interleaves, ROUNDS times (default 5): our WRITE probe,
//! `ib_write_lat -d rxe0 -x 1 -s 64` (server and client on rxe0 through 10.0.2.15), our SEND
//! probe, `ib_send_lat` the same way. Each side runs 1000 timed iterations of 64 bytes. It
//! prints every pair, the medians of t_typical and their ratios (target 0.9..1.1; under
//! TCG 0.8..1.25 is the realistic bar). It asserts nothing about time; it exits 1 only when
//! a tool fails.
#![forbid(unsafe_code)]

use anyhow::{bail, Context as _};
use rdma_probe::oneshot::ping_loopback;
use rdma_probe::{ProbeOp, RunParams};
use std::process::{Command, Stdio};
use std::time::Duration;

const DEVICE: &str = "rxe0";
const ADDR: &str = "10.0.2.15";
const SIZE: &str = "64";

/// t_typical (usec) of one perftest client run against a fresh server.
fn perftest(tool: &str) -> anyhow::Result<f64> {
    let common = ["-d", DEVICE, "-x", "1", "-s", SIZE];
    let mut server = Command::new("timeout")
        .arg("60")
        .arg(tool)
        .args(common)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting the {tool} server"))?;
    let mut last = String::new();
    // The server needs a moment to listen; retry the client a few times.
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(700));
        let out = Command::new("timeout")
            .arg("60")
            .arg(tool)
            .args(common)
            .arg(ADDR)
            .output()
            .with_context(|| format!("running the {tool} client"))?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if let Some(v) = t_typical(&text) {
            let _ = server.wait();
            if v.is_finite() {
                return Ok(v);
            }
            // perftest sometimes prints `inf`; run the pair again.
            server = Command::new("timeout")
                .arg("60")
                .arg(tool)
                .args(common)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| format!("restarting the {tool} server"))?;
        }
        last = format!("{text}{}", String::from_utf8_lossy(&out.stderr));
    }
    let _ = server.kill();
    let _ = server.wait();
    bail!("{tool} printed no result:\n{last}")
}

/// The t_typical column of perftest's latency table.
fn t_typical(out: &str) -> Option<f64> {
    let mut lines = out.lines();
    lines.find(|l| l.contains("t_typical[usec]"))?;
    let row = lines.next()?;
    row.split_whitespace().nth(4)?.parse().ok()
}

fn ours(op: ProbeOp) -> anyhow::Result<f64> {
    let p = RunParams {
        size: 64,
        warmup: 16,
        iterations: 1000,
        timeout: Duration::from_secs(60),
    };
    let start = std::time::Instant::now();
    let r = ping_loopback(DEVICE, 1, None, op, &p).map_err(anyhow::Error::new)?;
    // Cross-check the probe clock against the wall clock: the mean one-way time over the
    // whole run (setup and calibration included, so an upper bound).
    let wall_us =
        start.elapsed().as_secs_f64() * 1e6 / (p.warmup + p.iterations) as f64 / op.rtt_factor();
    println!(
        "  ours {op}: t_typical {:.2} t_avg {:.2} us; wall-clock bound {:.2} us/iteration; clock {:?} ({:.0} ns/read, {:?} GHz)",
        r.summary.t_typical_us, r.summary.t_avg_us, wall_us, r.clock.source, r.clock.read_cost_ns, r.clock.tsc_ghz
    );
    Ok(r.summary.t_typical_us)
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
    let (mut ow, mut pw, mut os, mut ps) = (vec![], vec![], vec![], vec![]);
    for i in 0..rounds {
        ow.push(ours(ProbeOp::Write)?);
        pw.push(perftest("ib_write_lat")?);
        os.push(ours(ProbeOp::Send)?);
        ps.push(perftest("ib_send_lat")?);
        println!(
            "round {}: write ours {:.2} us, ib_write_lat {:.2} us | send ours {:.2} us, ib_send_lat {:.2} us",
            i + 1,
            ow[i],
            pw[i],
            os[i],
            ps[i]
        );
    }
    let (mw, mpw, ms, mps) = (median(ow), median(pw), median(os), median(ps));
    println!("median t_typical, {rounds} interleaved runs of 1000 x 64 B on {DEVICE}:");
    println!(
        "  WRITE: probe {mw:.2} us, ib_write_lat {mpw:.2} us, ratio {:.2}",
        mw / mpw
    );
    println!(
        "  SEND:  probe {ms:.2} us, ib_send_lat {mps:.2} us, ratio {:.2}",
        ms / mps
    );
    println!("target 0.9..1.1 (under TCG 0.8..1.25 is the realistic bar)");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perftest_rows_are_parsed() {
        let out = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n 64      1000          11.83          184.56       15.39    \t       16.42       \t5.93   \t\t36.78  \t\t184.56 \n";
        assert_eq!(t_typical(out), Some(15.39));
        assert_eq!(t_typical("nothing"), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0, 10.0]), 2.5);
    }
}
