//! `rdmactl counters`: every counter of every device (or of one device or port) from sysfs,
//! once or as per-second rates.
//!
//! `rdmactl counters [DEV[/PORT]] [--json] [--nonzero] [--watch SECS [--count N]]
//! [--path.sysfs P]`. Once: a table of IB PMA (`counters/`), driver (`hw_counters/`) and
//! device-level driver counters, or the rdmakit Snapshot as JSON. Naming DEV reads only that
//! device (the filter is applied before any of its files is opened, see
//! `rdmakit::sysfs::DeviceFilter`). With `--watch`, it samples every SECS seconds and prints
//! each counter's change per second between samples (one JSON object per line with
//! `--json`); 4-octet-word data counters also show bytes per second (x4). A status line on
//! stderr says when the first sample is taken. Ctrl-C (or SIGTERM) ends watch mode cleanly
//! with exit code 0.

use crate::cmd::devices::{no_devices, or_dash, warn_errors, write_table, Table};
use crate::exit;
use rdmakit::model::{Counter, CounterKind, CounterSource, SourceError, Unit};
use rdmakit::sysfs::{DeviceFilter, ReadOptions, SysfsReader};
use rdmakit::Snapshot;
use serde::Serialize;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Show RDMA counters (IB PMA, driver hw_counters, device-level), once or as rates.
///
/// Examples: `rdmactl counters`, `rdmactl counters mlx5_0/1 --nonzero`,
/// `rdmactl counters rxe0 --watch 1`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Only this device, or this port of it (`mlx5_0`, `mlx5_0/1`).
    #[arg(value_name = "DEV[/PORT]", value_parser = parse_target)]
    pub target: Option<Target>,
    /// Print JSON: the rdmakit Snapshot once, or one object per sample with --watch.
    #[arg(long)]
    pub json: bool,
    /// Hide counters that are zero (with --watch: that did not change).
    #[arg(long)]
    pub nonzero: bool,
    /// Sample every SECS seconds and print rates per second until Ctrl-C.
    #[arg(long, value_name = "SECS", value_parser = parse_interval)]
    pub watch: Option<Duration>,
    /// With --watch: stop after N rate reports.
    #[arg(long, value_name = "N", requires = "watch")]
    pub count: Option<u64>,
    /// The sysfs root; devices are read from <PATH>/class/infiniband.
    #[arg(long = "path.sysfs", value_name = "PATH", default_value = "/sys")]
    pub path_sysfs: PathBuf,
}

/// A device, optionally narrowed to one port (`DEV[/PORT]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Device name.
    pub device: String,
    /// Port number.
    pub port: Option<u32>,
}

fn parse_target(text: &str) -> Result<Target, String> {
    let (device, port) = match text.split_once('/') {
        Some((device, port)) => {
            let port = port
                .parse::<u32>()
                .map_err(|_| format!("port must be a number, got {port:?}"))?;
            (device, Some(port))
        }
        None => (text, None),
    };
    if device.is_empty() {
        return Err("empty device name".to_owned());
    }
    Ok(Target {
        device: device.to_owned(),
        port,
    })
}

/// `--watch`: the workspace's duration grammar, at least 10 ms.
fn parse_interval(text: &str) -> Result<Duration, rdmakit::duration::DurationError> {
    rdmakit::duration::parse(text, Duration::from_millis(10)..=Duration::MAX)
}

/// Runs `rdmactl counters`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut reader = SysfsReader::new(&args.path_sysfs).with_options(ReadOptions {
        gids: false,
        counters: true,
    });
    let names = reader.device_names()?;
    if names.is_empty() {
        return Err(no_devices(&args.path_sysfs));
    }
    if let Some(target) = &args.target {
        if !names.contains(&target.device) {
            anyhow::bail!(
                "no RDMA device named {:?} (devices: {})",
                target.device,
                names.join(", ")
            );
        }
        reader = reader.with_filter(DeviceFilter::only(&target.device));
    }
    let first = sample(&reader, args.target.as_ref())?;
    match args.watch {
        None => once(&args, first),
        Some(interval) => watch(&args, &reader, first, interval),
    }
}

/// Read a snapshot narrowed to the target port; a missing port is an error.
fn sample(reader: &SysfsReader, target: Option<&Target>) -> anyhow::Result<Snapshot> {
    let mut snapshot = reader.snapshot()?;
    if let Some(Target {
        device,
        port: Some(port),
    }) = target
    {
        for dev in &mut snapshot.devices {
            if dev.port(*port).is_none() {
                let have: Vec<String> = dev.ports.iter().map(|p| p.num.to_string()).collect();
                anyhow::bail!(
                    "device {device} has no port {port} (ports: {})",
                    if have.is_empty() {
                        "none".to_owned()
                    } else {
                        have.join(", ")
                    }
                );
            }
            dev.ports.retain(|p| p.num == *port);
            dev.hw_counters.clear();
        }
        snapshot
            .errors
            .retain(|e| e.port.is_none_or(|p| p == *port));
    }
    Ok(snapshot)
}

/// One counter with where it lives.
struct Row<'a> {
    device: &'a str,
    port: Option<u32>,
    counter: &'a Counter,
}

fn rows(snapshot: &Snapshot) -> Vec<Row<'_>> {
    let mut rows = Vec::new();
    for dev in &snapshot.devices {
        for port in &dev.ports {
            rows.extend(port.counters.iter().map(|counter| Row {
                device: &dev.name,
                port: Some(port.num),
                counter,
            }));
        }
        rows.extend(dev.hw_counters.iter().map(|counter| Row {
            device: &dev.name,
            port: None,
            counter,
        }));
    }
    rows
}

/// What a plain value means, for the NOTE column.
fn note(counter: &Counter) -> String {
    match (counter.kind, counter.unit, counter.bytes) {
        (CounterKind::Gauge, Unit::Ms, _) => "gauge, ms".to_owned(),
        (CounterKind::Gauge, _, _) => "gauge".to_owned(),
        (_, Unit::Words4, Some(bytes)) => format!("4-byte words = {bytes} bytes"),
        (_, Unit::Words4, None) => "4-byte words".to_owned(),
        (_, Unit::Bytes, _) => "bytes".to_owned(),
        _ => String::new(),
    }
}

fn once(args: &Args, mut snapshot: Snapshot) -> anyhow::Result<ExitCode> {
    if args.nonzero {
        for dev in &mut snapshot.devices {
            dev.hw_counters.retain(|c| c.value != 0);
            for port in &mut dev.ports {
                port.counters.retain(|c| c.value != 0);
            }
        }
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &snapshot)?;
        writeln!(out)?;
    } else {
        let table = Table {
            headers: vec!["DEVICE", "PORT", "SOURCE", "COUNTER", "VALUE", "NOTE"],
            right: vec![false, true, false, false, true],
            rows: rows(&snapshot)
                .into_iter()
                .map(|r| {
                    vec![
                        r.device.to_owned(),
                        or_dash(r.port),
                        r.counter.source.as_str().to_owned(),
                        r.counter.name.to_string(),
                        r.counter.value.to_string(),
                        note(r.counter),
                    ]
                })
                .collect(),
        };
        write_table(&mut out, &table)?;
    }
    out.flush()?;
    warn_errors(&snapshot.errors);
    Ok(ExitCode::from(exit::OK))
}

/// Identity of a counter across samples.
type Key = (String, Option<u32>, CounterSource, String);

/// A counter's change between two samples (JSON form of a watch row).
#[derive(Serialize, Debug)]
struct RateRow<'a> {
    device: &'a str,
    port: Option<u32>,
    source: CounterSource,
    name: &'a str,
    kind: CounterKind,
    /// The value at the end of the interval.
    value: u64,
    /// The increase over the interval; `None` for gauges, new counters and resets.
    delta: Option<u64>,
    /// `delta` per second.
    per_second: Option<f64>,
    /// Bytes per second for data counters (4-octet words x4, or bytes).
    bytes_per_second: Option<f64>,
}

/// One watch report.
#[derive(Serialize, Debug)]
struct WatchReport<'a> {
    /// Seconds since the first sample.
    elapsed_seconds: f64,
    /// Seconds between the two samples compared.
    interval_seconds: f64,
    rates: Vec<RateRow<'a>>,
    errors: &'a [SourceError],
}

fn key(row: &Row<'_>) -> Key {
    (
        row.device.to_owned(),
        row.port,
        row.counter.source,
        row.counter.name.to_string(),
    )
}

fn watch(
    args: &Args,
    reader: &SysfsReader,
    first: Snapshot,
    interval: Duration,
) -> anyhow::Result<ExitCode> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    warn_errors(&first.errors);
    let start = Instant::now();
    let mut previous: HashMap<Key, (u64, Option<u64>)> = HashMap::new();
    let remember = |snapshot: &Snapshot, map: &mut HashMap<Key, (u64, Option<u64>)>| {
        map.clear();
        for row in rows(snapshot) {
            map.insert(key(&row), (row.counter.value, row.counter.bytes));
        }
    };
    remember(&first, &mut previous);
    let mut last = start;
    let mut reports = 0u64;
    // A status line, not data: stderr keeps stdout a clean table or JSON stream. It is
    // written once the first sample is taken and Ctrl-C is handled.
    let _ = writeln!(
        std::io::stderr(),
        "rdmactl: sampling every {:.2} s; rates are per second; Ctrl-C stops",
        interval.as_secs_f64()
    );
    loop {
        if args.count.is_some_and(|n| reports >= n) || super::sleep_until_flag(interval, &stop) {
            break;
        }
        let snapshot = sample(reader, args.target.as_ref())?;
        let now = Instant::now();
        let dt = now.duration_since(last).as_secs_f64();
        let mut rates = Vec::new();
        for row in rows(&snapshot) {
            let before = previous.get(&key(&row));
            let (delta, per_second, bytes_per_second) = match (row.counter.kind, before) {
                (CounterKind::Counter, Some((old, old_bytes))) if row.counter.value >= *old => {
                    let delta = row.counter.value - old;
                    let bytes = match (row.counter.bytes, old_bytes) {
                        (Some(new), Some(old)) if new >= *old => Some((new - old) as f64 / dt),
                        _ => None,
                    };
                    (Some(delta), Some(delta as f64 / dt), bytes)
                }
                _ => (None, None, None),
            };
            let changed = match (row.counter.kind, before) {
                (CounterKind::Counter, _) => delta != Some(0),
                // A gauge (a counter file is never info or histogram).
                (_, Some((old, _))) => *old != row.counter.value,
                (_, None) => true,
            };
            if args.nonzero && !changed {
                continue;
            }
            rates.push(RateRow {
                device: row.device,
                port: row.port,
                source: row.counter.source,
                name: &row.counter.name,
                kind: row.counter.kind,
                value: row.counter.value,
                delta,
                per_second,
                bytes_per_second,
            });
        }
        let report = WatchReport {
            elapsed_seconds: now.duration_since(start).as_secs_f64(),
            interval_seconds: dt,
            rates,
            errors: &snapshot.errors,
        };
        print_report(args.json, &report)?;
        remember(&snapshot, &mut previous);
        last = now;
        reports += 1;
    }
    Ok(ExitCode::from(exit::OK))
}

fn print_report(json: bool, report: &WatchReport<'_>) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer(&mut out, report)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "\n--- +{:.1} s (interval {:.2} s) ---",
            report.elapsed_seconds, report.interval_seconds
        )?;
        let table = Table {
            headers: vec![
                "DEVICE", "PORT", "SOURCE", "COUNTER", "VALUE", "PER_SEC", "NOTE",
            ],
            right: vec![false, true, false, false, true, true],
            rows: report
                .rates
                .iter()
                .map(|r| {
                    let per_sec = match (r.kind, r.per_second) {
                        (CounterKind::Gauge, _) => "gauge".to_owned(),
                        (_, Some(rate)) => format!("{rate:.1}"),
                        (_, None) => "reset".to_owned(),
                    };
                    let note = match r.bytes_per_second {
                        Some(b) => format!("{b:.1} bytes/s"),
                        None => String::new(),
                    };
                    vec![
                        r.device.to_owned(),
                        or_dash(r.port),
                        r.source.as_str().to_owned(),
                        r.name.to_owned(),
                        r.value.to_string(),
                        per_sec,
                        note,
                    ]
                })
                .collect(),
        };
        write_table(&mut out, &table)?;
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(
            parse_target("mlx5_0/1"),
            Ok(Target {
                device: "mlx5_0".into(),
                port: Some(1)
            })
        );
        assert_eq!(
            parse_target("rxe0"),
            Ok(Target {
                device: "rxe0".into(),
                port: None
            })
        );
        assert!(parse_target("mlx5_0/x").is_err());
        assert!(parse_target("/1").is_err());
    }

    #[test]
    fn intervals() {
        assert_eq!(parse_interval("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_interval("0").is_err());
        assert!(parse_interval("NaN").is_err());
        assert!(parse_interval("soon").is_err());
    }

    #[test]
    fn notes() {
        let c = Counter::new("port_xmit_data", CounterSource::Pma, 3);
        assert_eq!(note(&c), "4-byte words = 12 bytes");
        let c = Counter::new("lifespan", CounterSource::Hw, 10);
        assert_eq!(note(&c), "gauge, ms");
    }
}
