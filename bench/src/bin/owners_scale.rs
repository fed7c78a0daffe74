//! `rdmad --once` on a dense host against `rdma -j res show qp`, INSIDE the lab
//! (`rdmactl lab run --timeout 1800 --add target/release/owners_scale -- /opt/rdma/extra/owners_scale [QPS]`).
//!
//! One process (this one) opens rxe0 and holds QPS queue pairs (default 10,000; fewer when
//! the device's `max_qp` is lower, which it prints), each moved to INIT (the state a program
//! leaves them in before connecting). Then, once each on the same objects:
//!
//! - `rdma -j res show qp` (iproute2: the whole dump parsed and printed as JSON);
//! - `rdmad --once --collector.disable-defaults --collector.netlink_owners --scrape.timeout=0`
//!   (every dump kind on every device, tallied per owner as it streams; no deadline, so the
//!   whole dump like rdma's);
//! - the same rdmad with `--collector.netlink_owners.max-objects 1000`, whose
//!   `rdma_owner_objects_unread{type="qp"}` series must say how many QPs it did not read.
//!
//! Each tool runs under a fresh copy of this binary (`--measure`) that times it and reads its
//! peak RSS with getrusage(RUSAGE_CHILDREN), so one tool's peak never hides another's. It
//! prints wall time and peak RSS per tool and rdmad/rdma ratios (targets: time <= 1.0x, RSS
//! < 64 MiB). It asserts nothing about time; it exits 1 only when a tool fails or the
//! overflow series is missing or wrong.
#![forbid(unsafe_code)]

use anyhow::{bail, Context as _};
use rdma_verbs::{AccessFlags, QpCaps};
use std::process::{Command, Stdio};
use std::time::Instant;

const DEVICE: &str = "rxe0";
const DEFAULT_QPS: usize = 10_000;
const DUMP_CAP: usize = 1_000;

/// `--measure CMD ARGS..`: run CMD (its stdout is ours), then print
/// `MEASURED <seconds> <peak RSS KiB>` on stderr.
fn measure(argv: &[String]) -> anyhow::Result<()> {
    let (cmd, args) = argv.split_first().context("--measure needs a command")?;
    let start = Instant::now();
    let status = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("running {cmd}"))?;
    let elapsed = start.elapsed().as_secs_f64();
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .context("getrusage")?;
    // ru_maxrss is in KiB on Linux.
    eprintln!("MEASURED {elapsed:.6} {}", usage.max_rss());
    if !status.success() {
        bail!("{cmd} failed: {status}");
    }
    Ok(())
}

/// A tool's run: its stdout, wall time and peak RSS.
struct Run {
    stdout: String,
    seconds: f64,
    rss_kib: u64,
}

fn run_measured(argv: &[&str]) -> anyhow::Result<Run> {
    let me = std::env::current_exe().context("current_exe")?;
    let out = Command::new(me)
        .arg("--measure")
        .args(argv)
        .output()
        .with_context(|| format!("measuring {argv:?}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("{argv:?} failed: {stderr}");
    }
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("MEASURED "))
        .with_context(|| format!("no MEASURED line from {argv:?}: {stderr}"))?;
    let mut it = line.split_whitespace();
    let seconds: f64 = it.next().context("seconds")?.parse()?;
    let rss_kib: u64 = it.next().context("rss")?.parse()?;
    Ok(Run {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        seconds,
        rss_kib,
    })
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--measure") {
        return measure(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("--hold") {
        return hold(&args[1..]);
    }
    let wanted: usize = match args.first() {
        Some(n) => n.parse().context("QPS: a number of queue pairs")?,
        None => DEFAULT_QPS,
    };
    let rdmad = std::env::var("RDMAD_BIN").unwrap_or_else(|_| "/opt/rdma/bin/rdmad".into());

    let ctx = rdma_verbs::open(DEVICE).with_context(|| format!("opening {DEVICE}"))?;
    let attr = ctx.query_device().context("query_device")?;
    // The kernel's GSI QP counts against max_qp too.
    let limit = usize::try_from(attr.max_qp).unwrap_or(0).saturating_sub(1);
    let qps = wanted.min(limit);
    println!("{DEVICE}: max_qp {} (device attribute)", attr.max_qp);
    if qps < wanted {
        println!(
            "holding {qps} QPs: {wanted} asked for, the device allows {limit} besides the GSI QP"
        );
    }
    let pd = ctx.alloc_pd().context("alloc_pd")?;
    let cq = ctx.create_cq(16).context("create_cq")?;
    let caps = QpCaps {
        max_send_wr: 1,
        max_recv_wr: 1,
        ..QpCaps::default()
    };
    let start = Instant::now();
    let mut held = Vec::with_capacity(qps);
    for i in 0..qps {
        let qp = pd
            .create_rc_qp(&cq, &cq, caps)
            .with_context(|| format!("create QP {}", i + 1))?;
        qp.to_init(1, AccessFlags::LOCAL_WRITE)
            .with_context(|| format!("QP {} to INIT", i + 1))?;
        held.push(qp);
    }
    println!(
        "holding {} QPs on {DEVICE} in INIT (created in {:.1} s)",
        held.len(),
        start.elapsed().as_secs_f64()
    );

    let iproute = run_measured(&["rdma", "-j", "res", "show", "qp"])?;
    let dumped = serde_json_count(&iproute.stdout);
    let owners = [
        rdmad.as_str(),
        "--once",
        "--collector.disable-defaults",
        "--collector.netlink_owners",
        // No scrape deadline: the whole dump, like rdma's.
        "--scrape.timeout=0",
    ];
    let ours = run_measured(&owners)?;
    let ours_qps = qp_objects(&ours.stdout);
    println!(
        "rdma -j res show qp: {dumped} QPs, {:.3} s, peak RSS {:.1} MiB",
        iproute.seconds,
        mib(iproute.rss_kib)
    );
    println!(
        "rdmad --once (netlink_owners): {ours_qps} QPs attributed, {:.3} s, peak RSS {:.1} MiB",
        ours.seconds,
        mib(ours.rss_kib)
    );
    println!(
        "ratio rdmad/rdma: time {:.2}x (target <= 1.0x), RSS {:.2}x (target: rdmad < 64 MiB: {})",
        ours.seconds / iproute.seconds,
        ours.rss_kib as f64 / iproute.rss_kib as f64,
        if mib(ours.rss_kib) < 64.0 {
            "met"
        } else {
            "NOT met"
        }
    );

    let cap = DUMP_CAP.to_string();
    let capped_args = [
        &owners[..],
        &["--collector.netlink_owners.max-objects", cap.as_str()],
    ]
    .concat();
    let capped = run_measured(&capped_args)?;
    let unread = capped
        .stdout
        .lines()
        .find(|l| {
            l.starts_with("rdma_owner_objects_unread{")
                && l.contains(&format!("device=\"{DEVICE}\""))
                && l.contains("type=\"qp\"")
        })
        .map(str::to_string);
    println!(
        "rdmad --once with max-objects {DUMP_CAP}: {:.3} s, peak RSS {:.1} MiB, {}",
        capped.seconds,
        mib(capped.rss_kib),
        unread
            .as_deref()
            .unwrap_or("no rdma_owner_objects_unread series")
    );
    let Some(line) = unread else {
        bail!("the capped dump has no overflow series for {DEVICE} QPs");
    };
    let value: f64 = line
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .context("the overflow series' value")?;
    let expected = dumped.saturating_sub(DUMP_CAP);
    if value as usize != expected {
        bail!("the overflow series says {value}, the dump had {dumped} QPs (expected {expected} unread)");
    }
    println!("overflow series: {value} QPs unread = {dumped} dumped - cap {DUMP_CAP}");
    drop(held);
    Ok(())
}

/// `--hold QPS ERR`: hold QPS QPs in INIT, ERR of them moved on to ERR, until stdin
/// closes (how the exposition of `rdmactl top`'s owners test was captured: see
/// rdmactl/tests/data/owners.prom).
fn hold(args: &[String]) -> anyhow::Result<()> {
    let num = |i: usize| -> anyhow::Result<usize> {
        args.get(i)
            .context("--hold QPS ERR")?
            .parse()
            .context("--hold QPS ERR: numbers")
    };
    let (qps, err) = (num(0)?, num(1)?);
    let ctx = rdma_verbs::open(DEVICE).with_context(|| format!("opening {DEVICE}"))?;
    let pd = ctx.alloc_pd().context("alloc_pd")?;
    let cq = ctx.create_cq(16).context("create_cq")?;
    let mut held = Vec::new();
    for i in 0..qps {
        let qp = pd
            .create_rc_qp(&cq, &cq, QpCaps::default())
            .context("create QP")?;
        qp.to_init(1, AccessFlags::LOCAL_WRITE).context("to INIT")?;
        if i < err {
            qp.to_error().context("to ERR")?;
        }
        held.push(qp);
    }
    println!("HELD {} QPs, {err} in ERR", held.len());
    let mut sink = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
    Ok(())
}

/// QP entries in `rdma -j res show qp` output.
fn serde_json_count(text: &str) -> usize {
    // One object per QP, each with an "lqpn" key: count them without parsing 10,000 objects
    // into a tree (the count is all that matters here).
    text.matches("\"lqpn\":").count()
}

/// Sum of rdmad's rdma_owner_objects{type="qp"} series on the device.
fn qp_objects(exposition: &str) -> u64 {
    exposition
        .lines()
        .filter(|l| {
            l.starts_with("rdma_owner_objects{")
                && l.contains(&format!("device=\"{DEVICE}\""))
                && l.contains("type=\"qp\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}
