//! `rdmactl trace qp|mr|all [--json]`: stream the RDMA control path live, like a gadget.
//!
//! One line per event (time, pid, comm, device, what; `--json` adds the process's cgroup and
//! pod UID): QP transitions as FROM->TO, failed calls with their errno, MR registrations with
//! size and latency, async events, rdma_cma events. The kernel side is rdma-trace's BPF programs (kprobes on ib_uverbs/ib_core);
//! this binary must be built with its `bpf` feature and run with CAP_BPF + CAP_PERFMON (or
//! as root). Which probes attached goes to stderr, events to stdout. Exit 1 with the reason
//! when tracing cannot start.
use anyhow::Result;
use clap::ValueEnum;
use rdma_trace::{Owner, ProbeStatus, Selection, TraceError, Tracer};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum What {
    /// QP create, modify (state transitions, errors), destroy and QP async events.
    Qp,
    /// MR registration (size, latency, errors) and deregistration.
    Mr,
    /// Everything: QP, MR, CQ and port events, rdma_cma tracepoints.
    All,
}

/// Arguments of `rdmactl trace`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// What to trace.
    #[arg(value_enum)]
    pub what: What,
    /// One JSON object per event and line.
    #[arg(long)]
    pub json: bool,
    /// Stop after this many seconds (default: until Ctrl-C).
    #[arg(long, value_name = "SECS", value_parser = super::parse_duration)]
    pub duration: Option<Duration>,
    /// Only events of this process id.
    #[arg(long)]
    pub pid: Option<u32>,
}

/// Run `rdmactl trace`.
pub fn run(args: Args) -> Result<ExitCode> {
    let selection = match args.what {
        What::Qp => Selection::Qp,
        What::Mr => Selection::Mr,
        What::All => Selection::All,
    };
    let mut tracer = match Tracer::start(selection) {
        Ok(t) => t,
        Err(e @ (TraceError::NoBpfSupport | TraceError::Permission(_))) => {
            eprintln!("rdmactl trace: {e}");
            return Ok(ExitCode::from(crate::exit::FAILURE));
        }
        Err(e) => return Err(e.into()),
    };
    report_probes(&tracer);
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let deadline = args
        .duration
        // Past what a clock can add (hundreds of years): no deadline, as without --duration.
        .and_then(|d| Instant::now().checked_add(d));
    let stdout = std::io::stdout();
    if !args.json {
        writeln!(
            stdout.lock(),
            "{:<15} {:>7} {:<15} {:<10} WHAT",
            "TIME",
            "PID",
            "COMM",
            "DEVICE"
        )?;
    }
    eprintln!("rdmactl trace: ready (Ctrl-C to stop)");
    let mut io_error = None;
    while !stop.load(Ordering::Relaxed) && deadline.is_none_or(|d| Instant::now() < d) {
        tracer.poll(Duration::from_millis(100), &mut |mut ev| {
            if io_error.is_some() || args.pid.is_some_and(|p| p != ev.pid) {
                return;
            }
            // The process's cgroup (pod, Slurm job), read while it most likely still runs.
            ev.resolve_owner(|pid| trace_owner(Path::new("/proc"), pid));
            let mut out = stdout.lock();
            let res = if args.json {
                serde_json::to_string(&ev)
                    .map_err(std::io::Error::other)
                    .and_then(|s| writeln!(out, "{s}"))
            } else {
                writeln!(out, "{}", ev.line())
            };
            if let Err(e) = res.and_then(|_| out.flush()) {
                io_error = Some(e);
            }
        })?;
        if let Some(e) = io_error.take() {
            return Err(e.into());
        }
    }
    let (dropped, malformed) = (tracer.dropped(), tracer.malformed());
    if dropped > 0 || malformed > 0 {
        eprintln!("rdmactl trace: {dropped} events lost (ring buffer full), {malformed} malformed");
    }
    Ok(ExitCode::SUCCESS)
}

/// The owner (cgroup, pod, Slurm job) of an event's process, from
/// `<proc_root>/<pid>/cgroup` (rdmakit's reading of cgroup paths). A process that already
/// exited, an empty or a malformed file: no owner.
fn trace_owner(proc_root: &Path, pid: u32) -> Option<Owner> {
    rdmakit::owner::cgroup_owner(proc_root, pid).map(|o| Owner {
        cgroup: o.cgroup,
        pod_uid: o.pod_uid,
        job: o.job.map(|job| (job.id, job.step)),
    })
}

fn report_probes(tracer: &Tracer) {
    let reports = tracer.reports();
    let attached = reports.iter().filter(|r| r.attached()).count();
    let source = match tracer.symbol_source() {
        rdma_trace::resolve::SymbolSource::Btf => "BTF",
        rdma_trace::resolve::SymbolSource::Kallsyms => "/proc/kallsyms",
    };
    eprintln!(
        "rdmactl trace: attached {attached} of {} probe points (functions resolved from {source})",
        reports.len()
    );
    for r in reports {
        let line = match &r.status {
            ProbeStatus::Attached { target, module } => {
                format!(
                    "attached  {:<10} {:<10} {target} [{module}]",
                    r.what, r.hook
                )
            }
            ProbeStatus::Missing { tried, reason } => format!(
                "missing   {:<10} {:<10} {} ({reason})",
                r.what,
                r.hook,
                tried.join("|")
            ),
            ProbeStatus::Failed { target, error } => {
                format!("failed    {:<10} {:<10} {target}: {error}", r.what, r.hook)
            }
            ProbeStatus::Skipped { reason } => {
                format!("skipped   {:<10} {:<10} {reason}", r.what, r.hook)
            }
        };
        eprintln!("  {line}");
    }
}

#[cfg(test)]
mod tests;
