//! `rdmactl doctor roce [DEV]`: the RoCE configuration checks of `rdmakit::roce`, printed
//! like `rdmactl doctor`'s findings (or as JSON), with the exit code saying whether one
//! failed.
//!
//! On this machine the facts come from sysfs, configfs, DCB netlink, the ethtool ioctl and
//! (with the `verbs` feature) `ibv_query_port`; `--path.sysfs` with the `--path.*-capture`
//! options runs the same checks on a tree captured elsewhere (the fixtures).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use rdmakit::ethtool::{CapturedEthtool, EthtoolError, EthtoolSource, KernelEthtool};
use rdmakit::roce::dcb::{DcbError, DcbSource};
use rdmakit::roce::{self, Inputs, PortMtu, RoceReport, Verdict};
use rdmakit::sysfs::{ReadOptions, SysfsReader};

use crate::exit::CodedError;

/// Exit code when a check fails.
pub const CHECK_FAILED: u8 = 4;

/// Arguments of `rdmactl doctor roce`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Only this RDMA device.
    #[arg(value_name = "DEV")]
    device: Option<String>,
    /// Print the checks as JSON.
    #[arg(long)]
    json: bool,
    /// Seconds between the two readings of the driver statistics (pause, discards) and of
    /// the link and retransmission counters. An upper bound: SIGUSR1 (`kill -USR1 PID`)
    /// ends the interval early, to watch a port while a fault or a job runs and read the
    /// checks once it is over; the counts and rates then cover the time actually waited
    /// (`interval_seconds` in the JSON).
    #[arg(long, default_value_t = 1.0, value_parser = super::parse_seconds)]
    interval: f64,
    /// Where sysfs is mounted (configfs is read under PATH/kernel/config).
    #[arg(long = "path.sysfs", default_value = "/sys")]
    sysfs: PathBuf,
    /// Read the driver statistics from captured ethtool answers (as rdmad's option).
    #[arg(long = "path.ethtool-capture", value_name = "DIR")]
    ethtool_capture: Option<PathBuf>,
    /// The second reading's captured answers (default: the first reading's).
    #[arg(
        long = "path.ethtool-capture-after",
        value_name = "DIR",
        requires = "ethtool_capture"
    )]
    ethtool_after: Option<PathBuf>,
    /// Read DCB netlink answers from captured files (DIR/<netdev>/ieee.bin or errno).
    #[arg(long = "path.dcb-capture", value_name = "DIR")]
    dcb_capture: Option<PathBuf>,
}

fn port_mtu(sysfs: &std::path::Path, live: bool, device: &str, port: u32) -> Option<PortMtu> {
    if let Some(m) = roce::sysfs_port_mtu(sysfs, device, port) {
        return Some(m);
    }
    if !live {
        return None;
    }
    verbs_port_mtu(device, port)
}

#[cfg(feature = "verbs")]
fn verbs_port_mtu(device: &str, port: u32) -> Option<PortMtu> {
    let ctx = rdma_verbs::open(device).ok()?;
    let a = ctx.query_port(u8::try_from(port).ok()?).ok()?;
    Some(PortMtu {
        active: a.active_mtu.bytes()?,
        max: a.max_mtu.bytes()?,
        source: "ibv_query_port",
    })
}

#[cfg(not(feature = "verbs"))]
fn verbs_port_mtu(_device: &str, _port: u32) -> Option<PortMtu> {
    None
}

/// Run `rdmactl doctor roce`.
pub fn run(args: Args) -> Result<ExitCode> {
    if !(args.interval >= 0.0 && args.interval <= 3600.0) {
        bail!("--interval must be between 0 and 3600 seconds");
    }
    // Before the first reading: a SIGUSR1 that comes once it is taken ends the interval
    // instead of killing the process (SIGUSR1's default action).
    let end = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, Arc::clone(&end))?;
    let reader = SysfsReader::new(&args.sysfs).with_options(ReadOptions {
        gids: true,
        counters: false,
    });
    let snapshot = reader.snapshot()?;
    if snapshot.devices.is_empty() {
        return Err(CodedError::no_rdma(format!(
            "no RDMA devices under {}/class/infiniband: nothing to check",
            args.sysfs.display()
        )));
    }
    if let Some(d) = &args.device {
        if snapshot.device(d).is_none() {
            return Err(CodedError::no_rdma(format!(
                "no RDMA device {d:?} under {}/class/infiniband",
                args.sysfs.display()
            )));
        }
    }
    let live = args.sysfs == std::path::Path::new("/sys");
    // A tree from another machine never makes us ask this machine's kernel about netdevs
    // of the same name: without captures those facts are not available.
    let first: Option<Box<dyn EthtoolSource>> = match &args.ethtool_capture {
        Some(d) => Some(Box::new(CapturedEthtool::new(d.clone()))),
        None => live.then(|| Box::new(KernelEthtool) as Box<dyn EthtoolSource>),
    };
    let second: Option<Box<dyn EthtoolSource>> = match (&args.ethtool_after, &args.ethtool_capture)
    {
        (Some(d), _) | (None, Some(d)) => Some(Box::new(CapturedEthtool::new(d.clone()))),
        (None, None) => live.then(|| Box::new(KernelEthtool) as Box<dyn EthtoolSource>),
    };
    let dcb = match &args.dcb_capture {
        Some(d) => Some(DcbSource::Captured(d.clone())),
        None => live.then_some(DcbSource::Kernel),
    };
    let no_capture = |what: &str| {
        format!(
            "{} is not this machine's sysfs and no {what} was given",
            args.sysfs.display()
        )
    };
    let read_stats = |src: &Option<Box<dyn EthtoolSource>>, nd: &str| match src {
        Some(s) => s.driver_stats(nd),
        None => Err(EthtoolError::Capture {
            path: nd.to_string(),
            message: no_capture("--path.ethtool-capture"),
        }),
    };
    // The first reading of every netdev, then the interval, then the checks (which take
    // the second reading).
    let mut before = std::collections::HashMap::new();
    for dev in &snapshot.devices {
        for p in &dev.ports {
            if let Some(nd) = &p.netdev {
                before
                    .entry(nd.clone())
                    .or_insert_with(|| read_stats(&first, nd));
            }
        }
    }
    // The link and transport counters, first reading (the second is taken by the checks).
    let retransmit_names = roce::retransmit_counter_names()?;
    let link = |root: &std::path::Path, d: &str, p: u32, nd: &str| {
        roce::sysfs_link_reading(root, d, p, nd, &retransmit_names)
    };
    let mut link_before = std::collections::HashMap::new();
    for dev in &snapshot.devices {
        for p in &dev.ports {
            if let Some(nd) = &p.netdev {
                link_before.insert(
                    (dev.name.clone(), p.num),
                    link(&args.sysfs, &dev.name, p.num, nd),
                );
            }
        }
    }
    let t0 = Instant::now();
    if args.interval > 0.0 && args.ethtool_capture.is_none() {
        super::sleep_until_flag(Duration::from_secs_f64(args.interval), &end);
    }
    // Captured answers have no time: the interval is what was asked for.
    let secs = if args.ethtool_capture.is_some() {
        args.interval
    } else {
        t0.elapsed().as_secs_f64()
    };
    let sysfs = args.sysfs.clone();
    let report = roce::diagnose(&Inputs {
        root: &args.sysfs,
        snapshot: &snapshot,
        device: args.device.as_deref(),
        port_mtu: &|d, p| port_mtu(&sysfs, live, d, p),
        dcb: &|nd| match &dcb {
            Some(d) => d.get(nd),
            None => Err(DcbError::Io(no_capture("--path.dcb-capture"))),
        },
        stats_before: &|nd| {
            before
                .get(nd)
                .cloned()
                .unwrap_or_else(|| read_stats(&first, nd))
        },
        stats_after: &|nd| read_stats(&second, nd),
        interval_seconds: secs,
        link_before: &|d, p, nd| {
            link_before
                .get(&(d.to_string(), p))
                .cloned()
                .unwrap_or_else(|| link(&sysfs, d, p, nd))
        },
        link_after: &|d, p, nd| link(&sysfs, d, p, nd),
    });
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        print_human(&mut out, &report)?;
    }
    Ok(if report.worst == Verdict::Fail {
        ExitCode::from(CHECK_FAILED)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_human(out: &mut impl Write, r: &RoceReport) -> std::io::Result<()> {
    if r.checks.is_empty() {
        writeln!(out, "No RoCE ports to check.")?;
    }
    for (i, c) in r.checks.iter().enumerate() {
        writeln!(
            out,
            "{:>2}. [{:<4}] {} on {} ({})",
            i + 1,
            c.verdict.label(),
            c.id,
            c.target,
            c.netdev
        )?;
        writeln!(out, "    {}", c.finding)?;
        for e in &c.evidence {
            writeln!(out, "    - {e}")?;
        }
        if let Some(f) = &c.fix {
            writeln!(out, "    Fix: {f}")?;
        }
        if c.verdict != Verdict::Ok {
            writeln!(out, "    Read: {}", c.lesson)?;
        }
    }
    for s in &r.skipped {
        writeln!(out, "    (skipped {s})")?;
    }
    let count = |v: Verdict| r.checks.iter().filter(|c| c.verdict == v).count();
    writeln!(
        out,
        "{} fail, {} warn, {} not available, {} ok",
        count(Verdict::Fail),
        count(Verdict::Warn),
        count(Verdict::NotAvailable),
        count(Verdict::Ok)
    )?;
    Ok(())
}

#[cfg(test)]
mod tests;
