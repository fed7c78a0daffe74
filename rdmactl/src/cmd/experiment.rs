//! `rdmactl experiment`: list the experiments, run one (or all) and show what the device said:
//! numbered steps as they run, counter deltas, catalog explanations, resources before and
//! after cleanup, findings. `--json` prints the report documented in
//! `rdma_experiments::report` instead.
//!
//! Ctrl-C stops an experiment at its next step; its objects are still destroyed and the report
//! says `interrupted` (exit code 130). A second Ctrl-C exits at once. Keys and addresses are
//! masked unless `--show-keys`.
//!
//! Exit codes: 0 every experiment completed, its predictions held and cleanup gave back every
//! resource; 1 otherwise; 2 usage; 3 no RDMA device; 130 interrupted.
use crate::exit::CodedError;
use rdma_experiments::report::{Report, StepResult};
use rdma_experiments::{Options, Outcome, Progress, DECLARATIONS};
use rdmakit::catalog::Experiment;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

/// Break RDMA on purpose and watch what the device says (`list`, `run NAME`, `run --all`).
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(clap::Subcommand, Debug)]
enum Sub {
    /// List the experiments with their lessons.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run one experiment, or all of them with --all.
    Run(RunArgs),
}

/// Arguments of `experiment run`.
#[derive(clap::Args, Debug)]
struct RunArgs {
    /// The experiment (see `rdmactl experiment list`).
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    name: Option<String>,
    /// Run every experiment, in course order.
    #[arg(long)]
    all: bool,
    /// The RDMA device; default: the first one.
    #[arg(long, short = 'd')]
    device: Option<String>,
    /// Print the JSON report instead of text.
    #[arg(long)]
    json: bool,
    /// Show rkeys, lkeys and addresses instead of masking them.
    #[arg(long)]
    show_keys: bool,
    /// The sysfs root.
    #[arg(long = "path.sysfs", default_value = "/sys", value_name = "DIR")]
    sysfs: std::path::PathBuf,
}

/// Run `rdmactl experiment`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Sub::List { json } => list(json),
        Sub::Run(r) => run_experiments(r),
    }
}

/// The capture experiment, implemented in `cmd/wire.rs` on top of rdma-trace's decoder.
const WIRE: Experiment = Experiment::Wire;

/// Every experiment, in the order of the one list (`rdmakit::catalog::Experiment`), with its
/// verbs declaration when it has one (all but `wire`).
fn listed() -> impl Iterator<Item = (Experiment, Option<&'static rdma_experiments::Declaration>)> {
    Experiment::ALL
        .iter()
        .map(|e| (*e, rdma_experiments::declaration(*e)))
}

fn list(json: bool) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    if json {
        let v: Vec<serde_json::Value> = listed()
            .map(|(e, d)| {
                let mut entry = serde_json::json!({
                    "name": e.as_str(),
                    "title": e.title(),
                    "lesson": {"name": e.lesson().as_str(), "chapter": e.lesson().chapter()},
                });
                if let Some(d) = d {
                    entry["shows"] = d.shows.into();
                    entry["family"] = d.family.into();
                    entry["parts"] = serde_json::to_value(d.parts)?;
                }
                if let Some(needs) = e.needs() {
                    entry["needs"] = needs.into();
                }
                Ok(entry)
            })
            .collect::<Result<_, serde_json::Error>>()?;
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
    } else {
        for (e, d) in listed() {
            let extra = match (d, e.needs()) {
                (None, Some(_)) => " (needs --devices 2, root; not in --all)",
                _ => "",
            };
            writeln!(
                out,
                "{:<18} lesson {:>2} {:<20} {}{extra}",
                e.as_str(),
                e.lesson().chapter(),
                e.lesson().as_str(),
                e.title()
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn default_device() -> anyhow::Result<String> {
    let devs = rdma_verbs::devices().map_err(|e| {
        if e.is_no_rdma() {
            CodedError::no_rdma(e.to_string())
        } else {
            anyhow::Error::new(e)
        }
    })?;
    devs.into_iter().next().map(|d| d.name).ok_or_else(|| {
        CodedError::no_rdma(
            "no RDMA devices found (for Soft-RoCE: modprobe rdma_rxe && rdma link add rxe0 type rxe netdev eth0)",
        )
    })
}

fn run_experiments(args: RunArgs) -> anyhow::Result<ExitCode> {
    // `wire` is the tracer's experiment: it captures real RoCE v2 frames on the lab's veth
    // pair and decodes what a sniffer learns (needs rxe_a/rxe_b and root).
    if args.name.as_deref() == Some(WIRE.as_str()) {
        return crate::cmd::wire::run_wire(args.json, args.show_keys);
    }
    let names: Vec<&str> = if args.all {
        DECLARATIONS.iter().map(|d| d.name()).collect()
    } else {
        let name = args.name.as_deref().unwrap_or_default();
        if rdma_experiments::by_name(name).is_none() {
            anyhow::bail!(
                "no experiment named {name:?} (try: {})",
                DECLARATIONS
                    .iter()
                    .map(|d| d.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        vec![name]
    };
    let device = match args.device {
        Some(d) => {
            let all = rdma_verbs::devices().map_err(|e| CodedError::no_rdma(e.to_string()))?;
            if !all.iter().any(|x| x.name == d) {
                return Err(CodedError::no_rdma(format!(
                    "RDMA device {d:?} not found (available: {})",
                    all.iter()
                        .map(|x| x.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            d
        }
        None => default_device()?,
    };
    let opts = Options {
        device,
        show_keys: args.show_keys,
        sysfs_root: args.sysfs,
    };
    let cancel = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // A second signal while the first is being handled exits at once.
        signal_hook::flag::register_conditional_shutdown(signal, 130, Arc::clone(&cancel))?;
        signal_hook::flag::register(signal, Arc::clone(&cancel))?;
    }
    let t0 = Instant::now();
    let mut reports = Vec::new();
    for name in names {
        let report = if args.json {
            rdma_experiments::run(name, &opts, &cancel, &mut |_| {})?
        } else {
            let mut out = std::io::stdout();
            let decl = rdma_experiments::by_name(name).expect("checked above");
            let _ = writeln!(
                out,
                "\n== {} — {}\n   lesson {} ({}); device {}\n   {}",
                decl.name(),
                decl.title(),
                decl.lesson().chapter(),
                decl.lesson().as_str(),
                opts.device,
                decl.shows
            );
            rdma_experiments::run(name, &opts, &cancel, &mut |p| print_progress(&mut out, p))?
        };
        if !args.json {
            print_report(&report)?;
        }
        let stop = report.outcome == Outcome::Interrupted;
        reports.push(report);
        if stop {
            break;
        }
    }
    let elapsed = t0.elapsed();
    let mut out = std::io::stdout().lock();
    if args.json {
        if args.all {
            serde_json::to_writer_pretty(
                &mut out,
                &serde_json::json!({
                    "schema": "rdmactl.experiments/1",
                    "duration_ms": elapsed.as_millis() as u64,
                    "experiments": reports,
                }),
            )?;
        } else if let Some(r) = reports.first() {
            serde_json::to_writer_pretty(&mut out, r)?;
        }
        writeln!(out)?;
    } else if args.all {
        writeln!(
            out,
            "\n{} experiments in {:.1} s",
            reports.len(),
            elapsed.as_secs_f64()
        )?;
    }
    Ok(exit_code(&reports))
}

/// 130 interrupted, 1 failed / leaked / mispredicted, else 0.
fn exit_code(reports: &[Report]) -> ExitCode {
    if reports.iter().any(|r| r.outcome == Outcome::Interrupted) {
        return ExitCode::from(130);
    }
    let bad = reports.iter().any(|r| {
        r.outcome != Outcome::Completed
            || r.resources.equal == Some(false)
            || !r.unmet_expectations().is_empty()
            || !r.surprises().is_empty()
    });
    if bad {
        ExitCode::from(crate::exit::FAILURE)
    } else {
        ExitCode::SUCCESS
    }
}

fn print_progress(out: &mut impl Write, p: Progress<'_>) {
    let _ = match p {
        Progress::Part(d) => writeln!(out, "\n-- {}: {}", d.name, d.title),
        Progress::Step(s) => {
            let result = match (&s.wc_status, &s.errno, s.result) {
                (Some(wc), _, _) => wc.clone(),
                (None, None, _) if s.values.contains_key("state") => {
                    s.values["state"].as_str().unwrap_or("?").to_string()
                }
                (None, Some(e), _) => format!("{} ({})", e.name, e.code),
                (None, None, StepResult::Ok) => "ok".into(),
                (None, None, StepResult::Error) => "error".into(),
                (None, None, StepResult::Info) => String::new(),
            };
            let verdict = match (s.as_expected, &s.expected) {
                (Some(true), Some(_)) => " [as expected]".to_string(),
                (Some(false), Some(e)) => format!(" [UNEXPECTED: lesson says {e}]"),
                _ => String::new(),
            };
            let time = s
                .elapsed_us
                .map(|us| {
                    if us >= 10_000.0 {
                        format!(" {:.1} ms", us / 1000.0)
                    } else {
                        format!(" {us:.0} us")
                    }
                })
                .unwrap_or_default();
            writeln!(
                out,
                "{:>4}. {:<28} {}{}{}{}",
                s.n,
                s.verb,
                s.detail,
                if result.is_empty() {
                    String::new()
                } else {
                    format!(" -> {result}")
                },
                time,
                verdict
            )
        }
    };
    let _ = out.flush();
}

fn print_report(r: &Report) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "\nCounters by part (declared for {}):",
        r.declared_family
    )?;
    for p in &r.parts {
        let moved: Vec<String> = p
            .counters_moved
            .iter()
            .map(|c| format!("{} +{}", c.name, c.delta))
            .collect();
        writeln!(
            out,
            "  {:<16} moved: {}",
            p.name,
            if moved.is_empty() {
                "nothing".into()
            } else {
                moved.join(", ")
            }
        )?;
        for e in &p.expectations {
            let mark = match e.met {
                Some(true) => "ok",
                Some(false) => "NOT MET",
                None => "n/a",
            };
            writeln!(
                out,
                "  {:<16}   {} {} (delta {}) {mark}",
                "",
                match e.expect {
                    rdma_experiments::report::Expect::Moves => "must move:",
                    rdma_experiments::report::Expect::Stays => "must stay:",
                },
                e.counter,
                e.delta.map_or("-".into(), |d| d.to_string())
            )?;
        }
        if !p.async_events.is_empty() {
            writeln!(
                out,
                "  {:<16}   async events: {}",
                "",
                p.async_events.join(", ")
            )?;
        }
    }
    if !r.explanations.is_empty() {
        writeln!(
            out,
            "\nWhat the counters mean ({}):",
            r.family.as_deref().unwrap_or("?")
        )?;
        for e in &r.explanations {
            writeln!(out, "  {}: {}", e.counter, e.summary)?;
        }
    }
    if !r.findings.is_empty() {
        writeln!(out, "\nFindings:")?;
        for f in &r.findings {
            writeln!(out, "  [{}] {}", f.id, f.text)?;
        }
    }
    let res = &r.resources;
    match (&res.before, &res.after) {
        (Some(b), Some(a)) => writeln!(
            out,
            "\nResources (rdma res) before: {}\n                     after:  {}  -> {}",
            fmt_counts(b),
            fmt_counts(a),
            if a == b { "all released" } else { "LEAK" }
        )?,
        _ => writeln!(
            out,
            "\nResources: not measured ({})",
            res.note.as_deref().unwrap_or("unknown")
        )?,
    }
    let unmet = r.unmet_expectations();
    writeln!(
        out,
        "Outcome: {:?} in {} ms{}{}{}",
        r.outcome,
        r.duration_ms,
        r.error
            .as_deref()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default(),
        if unmet.is_empty() {
            String::new()
        } else {
            format!("; counter predictions not met: {}", unmet.join(", "))
        },
        match r.surprises().len() {
            0 => String::new(),
            n => format!("; {n} step(s) differed from the lesson"),
        }
    )?;
    Ok(())
}

fn fmt_counts(m: &std::collections::BTreeMap<String, u64>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(" ")
}
