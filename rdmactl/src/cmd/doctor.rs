//! `rdmactl doctor`: sample the counters twice (or read two saved snapshots), work out what
//! moved, and print ranked findings with what to do and which experiment shows it.
//!
//! `rdmactl doctor --from A.json --to B.json` works on saved `rdmactl counters --json` output.
//! On a live machine it also names who holds QPs in ERR (RDMA netlink dumps, owners from
//! /proc) and which cgroups are at their RDMA limit (the rdma cgroup controller).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rdmakit::catalog::{Catalog, Severity};
use rdmakit::doctor::{diagnose, Diagnosis, Rules};
use rdmakit::sysfs::SysfsReader;
use rdmakit::Snapshot;

use crate::exit::CodedError;

/// Arguments of `rdmactl doctor`.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    /// A configuration check instead of the counter diagnosis.
    #[command(subcommand)]
    check: Option<Check>,
    /// Seconds between the two samples.
    #[arg(long, default_value_t = 5.0, value_parser = super::parse_seconds)]
    interval: f64,
    /// The first snapshot: a file saved with `rdmactl counters --json` (needs --to).
    #[arg(long, requires = "to", value_name = "FILE")]
    from: Option<PathBuf>,
    /// The second snapshot (needs --from).
    #[arg(long, requires = "from", value_name = "FILE")]
    to: Option<PathBuf>,
    /// Seconds between --from and --to, to print rates.
    #[arg(long, value_name = "SECS", value_parser = super::parse_seconds)]
    seconds: Option<f64>,
    /// Where sysfs is mounted (the rdma cgroups are read under PATH/fs/cgroup).
    #[arg(long = "path.sysfs", default_value = "/sys")]
    sysfs: PathBuf,
    /// Where procfs is mounted (the owners of QPs in ERR are read from PATH/<pid>).
    #[arg(long = "path.procfs", default_value = "/proc")]
    procfs: PathBuf,
    /// Print the diagnosis as JSON.
    #[arg(long)]
    json: bool,
    /// Also list every counter that moved.
    #[arg(long, short)]
    verbose: bool,
}

fn load(path: &PathBuf) -> Result<Snapshot> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a snapshot saved with `rdmactl counters --json`",
            path.display()
        )
    })
}

/// The configuration checks.
#[derive(clap::Subcommand, Debug)]
enum Check {
    /// Check the RoCE configuration of every Ethernet RDMA port (or DEV's): MTU, RoCE v2 GIDs,
    /// rdma_cm defaults, PFC, the DSCP map, trust, ECN, pause storms, discards, link flaps
    /// and retransmissions. The counters are read twice, --interval apart; SIGUSR1 ends the
    /// interval early. Exit code 0 when no check fails (warnings and "not available"
    /// included), 4 when one fails, 3 when there is no RDMA device.
    Roce(super::doctor_roce::Args),
}

/// Run `rdmactl doctor`.
pub fn run(args: Args) -> Result<ExitCode> {
    if let Some(Check::Roce(roce)) = args.check {
        return super::doctor_roce::run(roce);
    }
    let catalog =
        Catalog::embedded().map_err(|e| anyhow::anyhow!("the built-in catalog is broken: {e}"))?;
    let rules = Rules::embedded()?;
    let (before, after, seconds) = match (&args.from, &args.to) {
        (Some(a), Some(b)) => (load(a)?, load(b)?, args.seconds),
        _ => {
            if !(args.interval > 0.0 && args.interval <= 3600.0) {
                bail!("--interval must be between 0 and 3600 seconds");
            }
            let reader = SysfsReader::new(&args.sysfs);
            let first = reader.snapshot()?;
            if first.devices.is_empty() {
                return Err(CodedError::no_rdma(format!(
                    "no RDMA devices under {}/class/infiniband: nothing to diagnose",
                    args.sysfs.display()
                )));
            }
            if !args.json {
                eprintln!(
                    "doctor: sampling {} device(s), {} s apart...",
                    first.devices.len(),
                    args.interval
                );
            }
            let t0 = Instant::now();
            std::thread::sleep(Duration::from_secs_f64(args.interval));
            let second = reader.snapshot()?;
            let secs = t0.elapsed().as_secs_f64();
            (first, second, Some(secs))
        }
    };
    let diag = diagnose(&before, &after, seconds, catalog, &rules);
    // Who: only when looking at this machine now (saved snapshots name no owners).
    let who = if args.from.is_none() {
        Some(who(&args.sysfs, &args.procfs))
    } else {
        None
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        let mut value = serde_json::to_value(&diag)?;
        if let (Some(map), Some(who)) = (value.as_object_mut(), &who) {
            map.insert(
                "qps_in_error".into(),
                serde_json::to_value(&who.qps_in_error)?,
            );
            map.insert(
                "cgroups_at_limit".into(),
                serde_json::to_value(&who.cgroups_at_limit)?,
            );
        }
        serde_json::to_writer_pretty(&mut out, &value)?;
        writeln!(out)?;
    } else {
        print_human(&mut out, &diag, args.verbose)?;
        if let Some(who) = &who {
            print_who(&mut out, who)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Who holds QPs in ERR, and which cgroups are at their RDMA limit.
#[derive(Debug, Default, serde::Serialize)]
struct Who {
    qps_in_error: Vec<QpsInError>,
    cgroups_at_limit: Vec<CgroupAtLimit>,
    #[serde(skip)]
    notes: Vec<String>,
}

#[derive(Debug, serde::Serialize)]
struct QpsInError {
    device: String,
    owner: rdmakit::attribution::OwnerKey,
    qps: u64,
}

#[derive(Debug, serde::Serialize)]
struct CgroupAtLimit {
    cgroup: String,
    device: String,
    resource: String,
    current: u64,
    max: u64,
}

fn who(sysfs: &std::path::Path, procfs: &std::path::Path) -> Who {
    let mut who = Who::default();
    match rdmakit::nldev::NldevClient::open() {
        Ok(mut client) => match crate::cmd::resources::owners(&mut client, procfs, None) {
            Ok(report) => {
                for (row, n) in report.qps_in_state("ERR") {
                    who.qps_in_error.push(QpsInError {
                        device: row.device.clone(),
                        owner: row.owner.clone(),
                        qps: n,
                    });
                }
            }
            Err(e) => who.notes.push(format!("owners of QPs unknown: {e:#}")),
        },
        Err(e) => who.notes.push(format!("owners of QPs unknown: {e}")),
    }
    let root = sysfs.join("fs/cgroup");
    match rdmakit::rdmacg::has_controller(&root) {
        Ok(true) => match rdmakit::rdmacg::read_tree(&root, 100_000) {
            Ok(tree) => {
                for (cg, u) in tree.at_limit() {
                    let rdmakit::rdmacg::Amount::Count(max) = u.max else {
                        continue;
                    };
                    who.cgroups_at_limit.push(CgroupAtLimit {
                        cgroup: cg.path.clone(),
                        device: u.device,
                        resource: u.resource,
                        current: u.current,
                        max,
                    });
                }
            }
            Err(e) => who.notes.push(format!("rdma cgroups unread: {e}")),
        },
        Ok(false) => {}
        Err(e) => who.notes.push(format!("rdma cgroups unread: {e}")),
    }
    who
}

fn print_who(out: &mut impl Write, who: &Who) -> std::io::Result<()> {
    for q in &who.qps_in_error {
        let o = &q.owner;
        let mut whom = match o.pid {
            Some(pid) => format!("{} (pid {pid})", o.comm),
            None => o.comm.clone(),
        };
        if !o.cgroup.is_empty() {
            whom.push_str(&format!(", cgroup {}", o.cgroup));
        }
        if !o.pod_uid.is_empty() {
            whom.push_str(&format!(", pod {}", o.pod_uid));
        }
        if !o.job_id.is_empty() {
            whom.push_str(&format!(", Slurm job {}", o.job_id));
            if !o.job_step.is_empty() {
                whom.push_str(&format!(" step {}", o.job_step));
            }
        }
        writeln!(
            out,
            "[WARN ] {} QP(s) in ERR on {} held by {whom}",
            q.qps, q.device
        )?;
        writeln!(
            out,
            "    A QP in ERR failed a work request (see the completion status in the program); it stays in ERR until the program resets or destroys it."
        )?;
    }
    for c in &who.cgroups_at_limit {
        writeln!(
            out,
            "[WARN ] cgroup {} is at its RDMA limit on {}: {} {} of {} (rdma.max)",
            c.cgroup, c.device, c.resource, c.current, c.max
        )?;
        writeln!(
            out,
            "    Its processes' next {} create fails (ENOMEM/EAGAIN from ibv_*). Raise rdma.max or free objects.",
            if c.resource == "hca_handle" { "device open" } else { "verbs object" }
        )?;
    }
    for n in &who.notes {
        writeln!(out, "    ({n})")?;
    }
    Ok(())
}

fn print_human(out: &mut impl Write, diag: &Diagnosis, verbose: bool) -> std::io::Result<()> {
    if diag.findings.is_empty() {
        writeln!(
            out,
            "No findings: {} counter(s) moved, none of them in a way that needs attention.",
            diag.moved.len()
        )?;
    }
    for (i, f) in diag.findings.iter().enumerate() {
        let sev = match f.severity {
            Severity::Error => "ERROR",
            Severity::Warning => "WARN ",
            Severity::Info => "info ",
        };
        let amount = match (f.total, f.rate_per_second) {
            (0, _) => String::new(),
            (t, Some(r)) => format!(" (+{t}, {r:.2}/s)"),
            (t, None) => format!(" (+{t})"),
        };
        writeln!(
            out,
            "{:>2}. [{sev}] {} on {}{amount}",
            i + 1,
            f.title,
            f.target
        )?;
        writeln!(out, "    {}", f.finding)?;
        writeln!(out, "    What to do: {}", f.advice)?;
        if !f.counters.is_empty() {
            let list: Vec<String> = f
                .counters
                .iter()
                .map(|c| format!("{} +{}", c.name, c.delta))
                .collect();
            writeln!(out, "    Counters: {}", list.join(", "))?;
        }
        if let Some(e) = &f.experiment {
            writeln!(out, "    See it happen: rdmactl experiment run {e}")?;
        }
    }
    if verbose && !diag.moved.is_empty() {
        writeln!(out, "\nEvery counter that moved:")?;
        for d in &diag.moved {
            writeln!(out, "  {:<12} {:<32} +{}", d.target(), d.name, d.delta)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod who_tests {
    use super::*;

    #[test]
    fn qps_in_error_name_the_slurm_job_and_step() {
        let who = Who {
            qps_in_error: vec![QpsInError {
                device: "mlx5_0".into(),
                owner: rdmakit::attribution::OwnerKey {
                    comm: "ib_write_bw".into(),
                    cgroup: "/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0".into(),
                    job_id: "4242".into(),
                    job_step: "0".into(),
                    pid: Some(812),
                    ..Default::default()
                },
                qps: 2,
            }],
            cgroups_at_limit: vec![],
            notes: vec![],
        };
        let mut out = Vec::new();
        print_who(&mut out, &who).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("[WARN ] 2 QP(s) in ERR on mlx5_0 held by ib_write_bw (pid 812), cgroup /system.slice/slurmstepd.scope/job_4242/step_0/user/task_0, Slurm job 4242 step 0\n"),
            "{text}"
        );
    }
}
