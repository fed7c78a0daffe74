//! `rdmactl doctor`: sample the counters twice (or read two saved snapshots), work out what
//! moved, and print ranked findings with what to do and which experiment shows it.
//!
//! `rdmactl doctor --from A.json --to B.json` works on saved `rdmactl counters --json` output.

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
pub struct Args {
    /// Seconds between the two samples.
    #[arg(long, default_value_t = 5.0)]
    interval: f64,
    /// The first snapshot: a file saved with `rdmactl counters --json` (needs --to).
    #[arg(long, requires = "to", value_name = "FILE")]
    from: Option<PathBuf>,
    /// The second snapshot (needs --from).
    #[arg(long, requires = "from", value_name = "FILE")]
    to: Option<PathBuf>,
    /// Seconds between --from and --to, to print rates.
    #[arg(long, value_name = "SECS")]
    seconds: Option<f64>,
    /// Where sysfs is mounted.
    #[arg(long = "path.sysfs", default_value = "/sys")]
    sysfs: PathBuf,
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

/// Run `rdmactl doctor`.
pub fn run(args: Args) -> Result<ExitCode> {
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
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &diag)?;
        writeln!(out)?;
    } else {
        print_human(&mut out, &diag, args.verbose)?;
    }
    Ok(ExitCode::SUCCESS)
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
