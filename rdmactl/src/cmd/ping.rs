//! `rdmactl ping`: a one-shot active probe with perftest's methodology and output columns.
//!
//! Loopback by default (two RC QPs on one device, through its RoCE v2 GID): `--op write`
//! measures like `ib_write_lat`, `send` like `ib_send_lat`, `read` like `ib_read_lat`. With
//! `--peer HOST:PORT --secret-file F` it probes a remote probe engine (rdmad's probe
//! listener) with RDMA READ (or WRITE) round trips after an authenticated handshake. All the
//! work happens in `rdma-probe`; this file parses, picks the device and formats.
use crate::exit::CodedError;
use anyhow::Context as _;
use rdma_probe::oneshot::{self, PingReport};
use rdma_probe::{FailureKind, ProbeFailure, ProbeOp, RunParams, Secret};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Measure RDMA latency now: loopback on a device, or towards a peer probe engine.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Device (default: the first with an ACTIVE port; with --peer, the device owning the
    /// local address of the connection to the peer).
    #[arg(long, short = 'd')]
    pub device: Option<String>,
    /// Port number.
    #[arg(long, short = 'i', default_value_t = 1)]
    pub port: u8,
    /// GID index (default: the RoCE v2 IPv4 GID, as rdma_cm and perftest pick).
    #[arg(long = "gid-index", short = 'x')]
    pub gid_index: Option<u8>,
    /// Probe the peer engine listening at HOST:PORT instead of looping back.
    #[arg(long, requires = "secret_file")]
    pub peer: Option<String>,
    /// File holding the shared secret of the peer handshake (at least 16 bytes).
    #[arg(long)]
    pub secret_file: Option<PathBuf>,
    /// Operation: write (like ib_write_lat), send (ib_send_lat) or read (ib_read_lat).
    /// Peers support read and write.
    #[arg(long, default_value = "write")]
    pub op: ProbeOp,
    /// Timed iterations.
    #[arg(
        short = 'c',
        long = "count",
        visible_short_alias = 'n',
        default_value_t = 1000
    )]
    pub count: u64,
    /// Message size in bytes.
    #[arg(short = 's', long, default_value_t = 2)]
    pub size: usize,
    /// Untimed iterations first.
    #[arg(long, default_value_t = 16)]
    pub warmup: u64,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
    /// Print JSON instead of perftest's table.
    #[arg(long)]
    pub json: bool,
}

fn failure(f: ProbeFailure) -> anyhow::Error {
    if f.kind == FailureKind::NoDevice {
        CodedError::no_rdma(f.to_string())
    } else {
        anyhow::Error::new(f).context("the probe failed")
    }
}

/// Run the probe and print the result.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.count == 0 || args.size == 0 {
        anyhow::bail!("--count and --size must be at least 1");
    }
    let params = RunParams {
        size: args.size,
        warmup: args.warmup,
        iterations: args.count,
        timeout: Duration::from_secs(args.timeout.max(1)),
    };
    let report = match &args.peer {
        Some(peer) => {
            if args.op == ProbeOp::Send {
                anyhow::bail!("peer probes are one-sided: use --op read or --op write");
            }
            let path = args
                .secret_file
                .as_ref()
                .context("--peer needs --secret-file")?;
            let secret = Secret::from_file(path).map_err(anyhow::Error::msg)?;
            if let Err(e) = rdma_verbs::devices() {
                return Err(CodedError::no_rdma(e.to_string()));
            }
            oneshot::ping_peer(
                peer,
                &secret,
                args.device.as_deref(),
                args.gid_index,
                args.op,
                &params,
            )
            .map_err(failure)?
        }
        None => {
            let device = match &args.device {
                Some(d) => d.clone(),
                None => oneshot::first_active_device()
                    .map_err(|e| CodedError::no_rdma(e.to_string()))?
                    .ok_or_else(|| CodedError::no_rdma("no RDMA device with an ACTIVE port"))?,
            };
            oneshot::ping_loopback(&device, args.port, args.gid_index, args.op, &params)
                .map_err(failure)?
        }
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", perftest_table(&report))?;
    }
    Ok(ExitCode::SUCCESS)
}

const LINE: &str =
    "---------------------------------------------------------------------------------------\n";

/// The report in perftest's layout: banner, then the same columns as `ib_write_lat`.
pub fn perftest_table(r: &PingReport) -> String {
    let s = &r.summary;
    let mut t = String::new();
    t.push_str(LINE);
    t.push_str(&format!(
        "                    {} Latency Test\n",
        r.op.perftest_name()
    ));
    t.push_str(&format!(
        " Device         : {:<12} Port           : {}\n",
        r.device, r.port
    ));
    t.push_str(&format!(
        " GID index      : {:<12} Connection type: RC\n",
        r.gid_index.map_or("-".to_string(), |g| g.to_string())
    ));
    t.push_str(&format!(
        " Peer           : {:<12} Warm-up        : {}\n",
        r.peer.as_deref().unwrap_or("loopback"),
        r.warmup
    ));
    let clock = &r.clock;
    t.push_str(&format!(
        " Clock          : {:<12} Read cost      : {:.0} ns (clock_gettime {:.0} ns)\n",
        format!("{:?}", clock.source).to_lowercase(),
        clock.read_cost_ns,
        clock.monotonic_cost_ns
    ));
    t.push_str(&format!(
        " Latency        : {}\n",
        if r.one_way {
            "one-way (RTT/2)"
        } else {
            "round trip"
        }
    ));
    t.push_str(LINE);
    t.push_str(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n");
    t.push_str(&format!(
        " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}\n",
        r.size_bytes,
        s.iterations,
        s.t_min_us,
        s.t_max_us,
        s.t_typical_us,
        s.t_avg_us,
        s.t_stdev_us,
        s.p99_us,
        s.p99_9_us
    ));
    t.push_str(LINE);
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_probe::{ClockInfo, ClockSource, LatencySummary};

    #[test]
    fn the_table_has_perftests_columns_in_order() {
        let r = PingReport {
            device: "rxe0".into(),
            port: 1,
            gid_index: Some(1),
            peer: None,
            op: ProbeOp::Write,
            size_bytes: 64,
            warmup: 16,
            one_way: true,
            summary: LatencySummary {
                iterations: 1000,
                t_min_us: 11.5,
                t_max_us: 180.25,
                t_typical_us: 15.5,
                t_avg_us: 16.0,
                t_stdev_us: 5.0,
                p99_us: 36.0,
                p99_9_us: 180.25,
            },
            clock: ClockInfo {
                source: ClockSource::Tsc,
                read_cost_ns: 25.0,
                monotonic_cost_ns: 1100.0,
                tsc_cost_ns: Some(25.0),
                tsc_ghz: Some(2.0),
            },
        };
        let t = perftest_table(&r);
        assert!(t.contains("RDMA_Write Latency Test"), "{t}");
        let lines: Vec<&str> = t.lines().collect();
        let h = lines
            .iter()
            .position(|l| l.contains("t_typical[usec]"))
            .unwrap();
        let fields: Vec<&str> = lines[h + 1].split_whitespace().collect();
        assert_eq!(
            fields,
            ["64", "1000", "11.50", "180.25", "15.50", "16.00", "5.00", "36.00", "180.25"]
        );
    }
}
