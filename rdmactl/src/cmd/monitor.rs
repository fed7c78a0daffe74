//! `rdmactl monitor`: print RDMA device and link events as they happen (device registered or
//! unregistered, netdev attached or detached, renames), like `rdma monitor`. Ctrl-C ends it.
//!
//! Events come from `rdmakit::nldev::Monitor`: kernel notifications where the kernel sends
//! them, otherwise (Linux 6.1) differences between device/port dumps taken every
//! `--interval-ms`. Each event says which (`source`: kernel or poll).
use crate::exit::CodedError;
use rdmakit::nldev::{Event, Monitor, NldevError};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

/// Print RDMA device and link events as they come (Ctrl-C ends).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// One JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,
    /// How often to compare device/port dumps, in milliseconds (kernels without notifications).
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub interval_ms: u64,
    /// Exit after this many events (default: run until interrupted).
    #[arg(long)]
    pub count: Option<u64>,
}

fn nl_error(err: NldevError) -> anyhow::Error {
    if err.is_no_rdma() {
        CodedError::no_rdma(err.to_string())
    } else {
        anyhow::Error::new(err)
    }
}

/// One event as `rdma monitor` prints it: `[REGISTER] dev 3 rxe9`.
fn text(e: &Event) -> String {
    let mut s = format!("[{}]", e.kind.name());
    if let Some(i) = e.dev_index {
        s.push_str(&format!(" dev {i}"));
    }
    if let Some(n) = &e.dev_name {
        s.push_str(&format!(" {n}"));
    }
    if let Some(p) = e.port {
        s.push_str(&format!(" port {p}"));
    }
    if let Some(n) = &e.netdev {
        s.push_str(&format!(
            " netdev {} {n}",
            e.netdev_index.map(|i| i.to_string()).unwrap_or_default()
        ));
    }
    s
}

/// Run `rdmactl monitor`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut monitor = Monitor::start(Duration::from_millis(args.interval_ms)).map_err(nl_error)?;
    eprintln!(
        "rdmactl monitor: watching {} device(s); kernel notify group: {}; comparing dumps every {} ms",
        monitor.topology().len(),
        if monitor.kernel_notifications { "joined" } else { "unavailable" },
        args.interval_ms
    );
    let mut seen = 0u64;
    let mut out = std::io::stdout();
    while args.count.is_none_or(|c| seen < c) {
        let event = monitor.next_event().map_err(nl_error)?;
        if args.json {
            writeln!(out, "{}", serde_json::to_string(&event)?)?;
        } else {
            writeln!(out, "{}", text(&event))?;
        }
        out.flush()?;
        seen += 1;
    }
    Ok(ExitCode::SUCCESS)
}
