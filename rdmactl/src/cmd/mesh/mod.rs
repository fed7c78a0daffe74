//! `rdmactl mesh`: the pingmesh as a matrix (typical latency, loss by direction, the layer a
//! pair fails at) and the localization's verdicts: which host, which path, which direction,
//! and since when ("h2: egress loss 31% on 3 of 3 pairs since 12:03:10", "h1<->h3: path down
//! (host), h2 reaches both").
//!
//! Two sources, one verdict code:
//! - `--prometheus URL`: the recording rules of dashboards/rules/rdma.rules.yml
//!   (`rdma:probe_pair_status`, `rdma:probe_pair_loss_direction:ratio30s`, the typical
//!   latency) through the HTTP API, and the firing alerts for "since";
//! - `--target [NAME=]URL` (repeated): each rdmad's `/metrics`, scraped twice `--interval`
//!   apart (loss is the counters' increase in between).
//!
//! The classification is the rules' (dashboards/gen.py), with the same thresholds
//! (dashboards/pingmesh.toml, compiled in): a failing pair's fault is its layer
//! (rdma_probe_peer_status: agent, host, rdma) or its lossy direction, read from the target's
//! side (request loss = its ingress, reply loss = its egress) and from the prober's (request
//! loss = its egress); a host is the culprit when at least `min_counterparts`, and more than
//! half, of its counterparts see the same fault, in three passes (targets; probers leaving
//! those targets out; targets leaving those probers out); what no culprit host explains is a
//! path. Latency baselines need the day of history only Prometheus has: the direct mode shows
//! latency and leaves latency verdicts to the rules.

mod sources;
#[cfg(test)]
mod tests;
mod verdict;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use anyhow::{bail, Result};
use serde::Serialize;

use sources::{report_from_prometheus, report_from_targets};
use verdict::lossy;
pub use verdict::{thresholds, verdicts, Fault, Pair, Thresholds, Verdict};

/// Exit code when a fault is named.
pub const FAULT_FOUND: u8 = 4;

/// Colour of the matrix.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Color {
    /// On a terminal, unless NO_COLOR is set.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

/// Where the pingmesh comes from: `rdmactl mesh` and `rdmactl top` take the same options.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Source {
    /// Read the pingmesh from this Prometheus (one that runs dashboards/rules/rdma.rules.yml).
    #[arg(long, value_name = "URL", conflicts_with = "targets")]
    pub prometheus: Option<String>,
    /// Scrape this rdmad's /metrics directly; repeat for every host. NAME (default: the URL's
    /// host) is how the verdicts call the host, and should be what its peers call it.
    #[arg(long = "target", value_name = "[NAME=]URL")]
    pub targets: Vec<String>,
    /// Call the peer at address ADDR (without the port) NAME, as the rules' peer_host label.
    #[arg(long = "peer-name", value_name = "ADDR=NAME")]
    pub peer_names: Vec<String>,
}

impl Source {
    /// Whether a Prometheus or a target was given.
    pub fn is_set(&self) -> bool {
        self.prometheus.is_some() || !self.targets.is_empty()
    }
}

/// Seconds between the two scrapes of every rdmad (direct mode), by default.
pub const DEFAULT_INTERVAL: f64 = 10.0;

/// Arguments of `rdmactl mesh`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Exit codes: 0 no fault, 4 a fault named (the verdicts), 1 an error \
    (e.g. no rdmad or Prometheus answered)."
)]
pub struct Args {
    /// The pingmesh's source.
    #[command(flatten)]
    pub source: Source,
    /// Seconds between the two scrapes of every rdmad (direct mode).
    #[arg(long, default_value_t = DEFAULT_INTERVAL, value_parser = crate::cmd::parse_seconds)]
    pub interval: f64,
    /// Print the matrix and the verdicts as JSON.
    #[arg(long)]
    pub json: bool,
    /// Colour the matrix.
    #[arg(long, value_enum, default_value_t = Color::Auto)]
    pub color: Color,
}

/// What `rdmactl mesh` prints.
#[derive(Serialize, Debug)]
pub struct Report {
    /// "prometheus" or "targets".
    pub source: &'static str,
    /// Every host, sorted.
    pub hosts: Vec<String>,
    /// Every pair.
    pub pairs: Vec<Pair>,
    /// The named faults; empty when the mesh is healthy.
    pub verdicts: Vec<Verdict>,
    /// Targets that could not be scraped (direct mode), with why.
    pub unreachable_targets: Vec<String>,
}

/// Build the report from `source`; `interval`: seconds between the two scrapes of every
/// rdmad (direct mode).
pub fn report(source: &Source, interval: f64) -> Result<Report> {
    let t = thresholds()?;
    match (&source.prometheus, source.targets.is_empty()) {
        (Some(url), _) => report_from_prometheus(url, &t),
        (None, false) => report_from_targets(source, interval, &t),
        (None, true) => bail!("give --prometheus URL or at least one --target URL"),
    }
}

fn cell(p: &Pair) -> String {
    if let Some(f) = Fault::layer(p.status) {
        return format!("DOWN {}", f.name());
    }
    let lat = p
        .latency_typical_seconds
        .map_or("-".to_string(), |s| format!("{:.0}us", s * 1e6));
    let pct = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{:.0}%", r * 100.0));
    format!("{lat} {}/{}", pct(p.loss_request), pct(p.loss_reply))
}

/// The matrix and the verdicts as text; `color` adds ANSI colours.
pub fn print_text(r: &Report, t: &Thresholds, color: bool, out: &mut impl Write) -> Result<()> {
    let paint = |s: &str, code: &str| {
        if color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    };
    writeln!(
        out,
        "pingmesh from {}: row = prober, column = target; typical latency, lost requests/replies",
        r.source
    )?;
    let width = r
        .hosts
        .iter()
        .map(|h| h.len())
        .chain(r.pairs.iter().map(|p| cell(p).len()))
        .max()
        .unwrap_or(4)
        .max(6)
        + 2;
    write!(out, "{:width$}", "")?;
    for h in &r.hosts {
        write!(out, "{h:width$}")?;
    }
    writeln!(out)?;
    for row in &r.hosts {
        write!(out, "{row:width$}")?;
        for col in &r.hosts {
            let text = match r
                .pairs
                .iter()
                .find(|p| &p.prober == row && &p.target == col)
            {
                Some(p) => {
                    let s = format!("{:width$}", cell(p));
                    if p.status > 0 {
                        paint(&s, "31")
                    } else if lossy(p.loss_request, t) || lossy(p.loss_reply, t) {
                        paint(&s, "33")
                    } else {
                        paint(&s, "32")
                    }
                }
                None => format!("{:width$}", if row == col { "" } else { "." }),
            };
            write!(out, "{text}")?;
        }
        writeln!(out)?;
    }
    for (line, verdict) in summary(r, t) {
        if verdict {
            writeln!(out, "{}", paint(&line, "1;31"))?;
        } else {
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}

/// The lines under the matrix, as `rdmactl mesh` and `rdmactl top` print them: the targets
/// not scraped, then the verdicts (`true`) or the line saying there is no fault.
pub fn summary(r: &Report, t: &Thresholds) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = r
        .unreachable_targets
        .iter()
        .map(|u| (format!("not scraped: {u}"), false))
        .collect();
    if r.verdicts.is_empty() {
        out.push((
            format!(
                "no fault: every pair answers, no direction loses over {:.0}%",
                t.loss_ratio * 100.0
            ),
            false,
        ));
    }
    out.extend(r.verdicts.iter().map(|v| (v.text.clone(), true)));
    out
}

/// The report as JSON (`--json`).
pub fn print_json(r: &Report, out: &mut impl Write) -> Result<()> {
    serde_json::to_writer_pretty(&mut *out, r)?;
    writeln!(out)?;
    Ok(())
}

/// `rdmactl mesh`.
pub fn run(args: Args) -> Result<ExitCode> {
    let t = thresholds()?;
    let r = report(&args.source, args.interval)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        print_json(&r, &mut out)?;
    } else {
        let color = match args.color {
            Color::Always => true,
            Color::Never => false,
            Color::Auto => {
                std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
            }
        };
        print_text(&r, &t, color, &mut out)?;
    }
    Ok(ExitCode::from(if r.verdicts.is_empty() {
        0
    } else {
        FAULT_FOUND
    }))
}
