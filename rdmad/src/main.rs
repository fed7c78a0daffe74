//! rdmad: the RDMA exporter.
//!
//! Serves `/metrics` (collected fresh on every scrape; Prometheus text 0.0.4, or OpenMetrics
//! when the `Accept` header asks for it), `/healthz` and a small index page. `--once` prints
//! one exposition to stdout and exits, for node_exporter's textfile collector.
//!
//! Exit codes: 0 clean exit, 1 failure (bad setting, cannot listen), 2 usage error.
//! A host with no RDMA device is not an error: rdmad logs it and serves its own metrics.
#![forbid(unsafe_code)]

use std::io::IsTerminal;
use std::process::ExitCode;

use rdmad::cli::{self, ParseFailure};

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RDMAD_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    let settings = match cli::command().try_get_matches_from(std::env::args_os()) {
        // `--generate man|complete-*|readme-options` (hidden): no settings needed.
        Ok(matches) if matches.contains_id("generate") => {
            let what = matches
                .get_one::<String>("generate")
                .cloned()
                .unwrap_or_default();
            return match cli::generate(&what) {
                Ok(text) => write_stdout(&text),
                Err(e) => {
                    eprintln!("rdmad: {e:#}");
                    ExitCode::from(1)
                }
            };
        }
        Ok(matches) => cli::resolve(&matches).map_err(ParseFailure::Invalid),
        Err(e) => Err(ParseFailure::Usage(e)),
    };
    let settings = match settings {
        Ok(settings) => settings,
        Err(ParseFailure::Usage(e)) => {
            let code = e.exit_code();
            let _ = e.print();
            return ExitCode::from(u8::try_from(code).unwrap_or(2));
        }
        Err(ParseFailure::Invalid(e)) => {
            eprintln!("rdmad: {e:#}");
            return ExitCode::from(1);
        }
    };
    if settings.print_metrics {
        return match rdmad::inventory::json() {
            Ok(text) => write_stdout(&text),
            Err(e) => {
                eprintln!("rdmad: {e:#}");
                ExitCode::from(1)
            }
        };
    }
    match rdmad::daemon::run(settings) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdmad: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Print `text`; a reader that stopped early (`| head`) is not a failure.
fn write_stdout(text: &str) -> ExitCode {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("rdmad: writing to stdout: {e}");
            ExitCode::from(1)
        }
        _ => ExitCode::SUCCESS,
    }
}
