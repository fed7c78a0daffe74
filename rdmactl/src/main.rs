//! rdmactl: the RDMA command line.
//!
//! A thin binary: every subcommand lives in `cmd/<name>.rs`, parses its own arguments and
//! returns an [`ExitCode`]. Data comes from the `rdmakit` model, verbs from `rdma-verbs`,
//! the Soft-RoCE lab from `rdma-lab` (the `lab` feature, on by default; developer tooling that
//! the packaged, operator's build leaves out).
//!
//! Exit codes (documented in the README and `--help`):
//! 0 success, 1 failure, 2 usage error, 3 no RDMA stack or no RDMA device to talk to.
#![forbid(unsafe_code)]

mod cmd;
mod exit;

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

/// rdmactl: look at, explain and exercise RDMA devices (InfiniBand, RoCE v2, Soft-RoCE).
///
/// Exit codes: 0 success, 1 failure, 2 usage error, 3 no RDMA stack or no RDMA device.
#[derive(Parser, Debug)]
#[command(name = "rdmactl", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// List RDMA devices and ports: state, rate, link layer, netdev, driver, PCI address.
    Devices(cmd::devices::Args),
    /// Show RDMA counters (IB PMA, driver hw_counters, device-level), once or as rates.
    Counters(cmd::counters::Args),
    /// Show RDMA resources (QPs, CQs, MRs, PDs, CM IDs, contexts, SRQs) like `rdma res show`.
    Resources(cmd::resources::Args),
    /// Print RDMA device and link events as they come (Ctrl-C ends).
    Monitor(cmd::monitor::Args),
    /// Stream the RDMA control path live with eBPF: QP transitions, MR registrations, events.
    Trace(cmd::trace::Args),
    /// Explain an RDMA counter: what it counts, likely causes, what to check next.
    Explain(cmd::explain::Args),
    /// Sample counters twice (or compare two saved snapshots) and explain what moved.
    Doctor(cmd::doctor::Args),
    /// Break RDMA on purpose and watch what the device says (list, run NAME, run --all).
    #[cfg(feature = "verbs")]
    Experiment(cmd::experiment::Args),
    /// Break RDMA on purpose and watch what the device says (not in this build).
    #[cfg(not(feature = "verbs"))]
    Experiment(cmd::WithoutVerbs),
    /// Measure RDMA latency now, like perftest: loopback or towards a peer probe engine.
    #[cfg(feature = "verbs")]
    Ping(cmd::ping::Args),
    /// Measure RDMA latency now, like perftest (not in this build).
    #[cfg(not(feature = "verbs"))]
    Ping(cmd::WithoutVerbs),
    /// Read the course "RDMA programming fundamentals" in the terminal (list, show N [--lang it]).
    Lesson(cmd::lesson::Args),
    /// Show RDMA devices and ports as the verbs layer sees them.
    #[cfg(feature = "verbs")]
    Verbs(cmd::verbs::Args),
    /// Show RDMA devices and ports as the verbs layer sees them (not in this build).
    #[cfg(not(feature = "verbs"))]
    Verbs(cmd::WithoutVerbs),
    // Developer tooling, the `lab` feature: the packaged rdmactl has no `lab`, not even a
    // hidden one, so its man page and completions, generated from this command, name none.
    /// The Soft-RoCE lab: a qemu VM with a real rxe device (`lab up`, `lab run -- CMD`).
    #[cfg(feature = "lab")]
    Lab(cmd::lab::Args),
    /// Live full-screen view of RDMA ports: rates, errors explained, QPs, probes, events.
    Top(cmd::top::Args),
    /// The pingmesh: latency and loss matrix, and which host, path and direction is at fault.
    Mesh(cmd::mesh::Args),
    /// Print the man page or shell completions (man, complete-bash|zsh|fish), for packages.
    #[command(hide = true)]
    Generate(cmd::generate::Args),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RDMACTL_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // args_os: std::env::args panics on an argument that is not UTF-8.
        Err(err) => match cmd::without_lab(
            &err,
            std::env::args_os().map(|a| a.to_string_lossy().into_owned()),
        ) {
            Some(lab) => return exit::report(&lab),
            None => err.exit(),
        },
    };
    let result = match cli.command {
        #[cfg(feature = "lab")]
        Command::Lab(args) => cmd::lab::run(args),
        Command::Top(args) => cmd::top::run(args),
        Command::Mesh(args) => cmd::mesh::run(args),
        Command::Generate(args) => cmd::generate::run(args, Cli::command()),
        Command::Trace(args) => cmd::trace::run(args),
        Command::Devices(args) => cmd::devices::run(args),
        Command::Counters(args) => cmd::counters::run(args),
        #[cfg(feature = "verbs")]
        Command::Verbs(args) => cmd::verbs::run(args),
        #[cfg(not(feature = "verbs"))]
        Command::Verbs(_) => cmd::without_verbs("verbs"),
        Command::Doctor(args) => cmd::doctor::run(args),
        Command::Resources(args) => cmd::resources::run(args),
        Command::Monitor(args) => cmd::monitor::run(args),
        Command::Explain(args) => cmd::explain::run(args),
        Command::Lesson(args) => cmd::lesson::run(args),
        #[cfg(feature = "verbs")]
        Command::Ping(args) => cmd::ping::run(args),
        #[cfg(not(feature = "verbs"))]
        Command::Ping(_) => cmd::without_verbs("ping"),
        #[cfg(feature = "verbs")]
        Command::Experiment(args) => cmd::experiment::run(args),
        #[cfg(not(feature = "verbs"))]
        Command::Experiment(_) => cmd::without_verbs("experiment"),
    };
    match result {
        Ok(code) => code,
        Err(err) => exit::report(&err),
    }
}
