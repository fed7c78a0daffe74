//! `rdmactl explain`: what an RDMA counter means, what moves it and what to check next, from
//! the counter catalog compiled into the binary (`rdmakit::catalog`).
//!
//! `rdmactl explain NAME [--driver D] [--json]` describes one counter (every family that has
//! it when no driver is given); `rdmactl explain --all [--driver D]` lists the catalog. An
//! unknown name prints up to three close names and exits 1. When this host has the counter,
//! its current value on every device/port is shown too (read from `--path.sysfs`).

use crate::exit;
use rdmakit::catalog::{Catalog, CounterInfo, Kind, Location, Lookup, Overflow};
use rdmakit::doctor::family_of;
use rdmakit::sysfs::SysfsReader;
use rdmakit::Snapshot;
use serde::Serialize;
use std::io::Write;
use std::process::ExitCode;

/// How many "did you mean" names an unknown counter gets.
const SUGGESTIONS: usize = 3;
/// Text width for wrapped paragraphs.
const WRAP: usize = 88;

/// Explain an RDMA counter: meaning, unit, likely causes, what to check next.
///
/// Examples: `rdmactl explain out_of_buffer`, `rdmactl explain duplicate_request --driver rxe`,
/// `rdmactl explain --all --driver mlx5`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The counter's file name in sysfs (e.g. out_of_buffer, symbol_error, rcvd_pkts).
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub name: Option<String>,
    /// Only this driver family (mlx5, mlx4, rxe, ib_pma, irdma, bnxt_re, efa, hfi1, cxgb4, hns,
    /// erdma, mana, ionic, ib_cm) or a
    /// device name that starts with one (mlx5_0, rxe0).
    #[arg(long, short = 'd')]
    pub driver: Option<String>,
    /// List the whole catalog (or one family with --driver) as a table.
    #[arg(long)]
    pub all: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Where sysfs is mounted (for the counter's current value on this host).
    #[arg(long = "path.sysfs", value_name = "PATH", default_value = "/sys")]
    pub path_sysfs: std::path::PathBuf,
}

/// The JSON answer for one NAME.
#[derive(Serialize, Debug)]
struct Explanation<'a> {
    /// What the user asked for.
    name: &'a str,
    /// The driver the user asked for, if any.
    driver: Option<&'a str>,
    /// True when the driver does not describe NAME and `matches` come from other families.
    from_other_families: bool,
    /// The catalog entries (empty when the name is unknown).
    matches: Vec<&'a CounterInfo>,
    /// Close names when `matches` is empty.
    suggestions: Vec<&'a str>,
    /// Current values on this host: (`device/port`, value), for the matched counters.
    host_values: Vec<(String, u64)>,
}

/// Runs `rdmactl explain`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let catalog = Catalog::embedded()
        .map_err(|e| anyhow::anyhow!("the built-in counter catalog is broken: {e}"))?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.all {
        return list(catalog, args.driver.as_deref(), args.json, &mut out);
    }
    // clap guarantees NAME when --all is absent.
    let name = args.name.as_deref().unwrap_or_default();
    // No RDMA device (or no sysfs) is fine here: the catalog answers anyway.
    let snapshot = SysfsReader::new(&args.path_sysfs)
        .snapshot()
        .unwrap_or_default();
    explain(
        catalog,
        &snapshot,
        name,
        args.driver.as_deref(),
        args.json,
        &mut out,
    )
}

fn explain(
    catalog: &Catalog,
    snapshot: &Snapshot,
    name: &str,
    driver: Option<&str>,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<ExitCode> {
    let (matches, from_other_families) = match catalog.lookup(driver, name) {
        Lookup::Found(v) => (v, false),
        Lookup::OtherFamilies(v) => (v, true),
        Lookup::NotFound => (Vec::new(), false),
    };
    let suggestions = if matches.is_empty() {
        catalog.closest(name, SUGGESTIONS)
    } else {
        Vec::new()
    };

    if json {
        let answer = Explanation {
            name,
            driver,
            from_other_families,
            matches: matches.clone(),
            suggestions: suggestions.clone(),
            host_values: matches
                .iter()
                .flat_map(|info| host_values(catalog, snapshot, info))
                .collect(),
        };
        serde_json::to_writer_pretty(&mut *out, &answer)?;
        writeln!(out)?;
    } else if matches.is_empty() {
        // The verdict goes to stderr so scripts reading stdout see nothing half-useful.
        let message = not_found_message(catalog, name, driver, &suggestions);
        eprintln!("rdmactl: {message}");
    } else {
        if from_other_families {
            writeln!(
                out,
                "note: {name} is not described for driver {}; showing the families that have it.\n",
                driver.unwrap_or_default()
            )?;
        }
        for (i, info) in matches.iter().enumerate() {
            if i > 0 {
                writeln!(out)?;
            }
            describe(info, &host_values(catalog, snapshot, info), out)?;
        }
    }
    out.flush()?;
    Ok(ExitCode::from(if matches.is_empty() {
        exit::FAILURE
    } else {
        exit::OK
    }))
}

/// What `explain` says on stderr about a name the catalog does not have.
fn not_found_message(
    catalog: &Catalog,
    name: &str,
    driver: Option<&str>,
    suggestions: &[&str],
) -> String {
    let mut message = format!("{name} is not in the catalog");
    if let Some(family) = firmware_family(catalog, driver) {
        message.push_str(&format!(
            "; {family} takes its counter names from the device firmware at run time, \
             so the catalog cannot list them ({})",
            family_description(catalog, family)
        ));
    }
    if !suggestions.is_empty() {
        message.push_str(&format!("; did you mean: {}?", suggestions.join(", ")));
    }
    message
}

/// The family of `driver` when that family's names come from firmware (ionic).
fn firmware_family<'a>(catalog: &'a Catalog, driver: Option<&str>) -> Option<&'a str> {
    let family = catalog.family_for(driver?)?;
    catalog
        .family_infos()
        .iter()
        .find(|f| f.name == family && f.names_from_firmware)
        .map(|f| f.name.as_str())
}

fn family_description<'a>(catalog: &'a Catalog, family: &str) -> &'a str {
    catalog
        .family_infos()
        .iter()
        .find(|f| f.name == family)
        .map_or("", |f| f.description.as_str())
}

/// The value of this counter on this host, one entry per (device, port) that has it: a
/// device's counters belong to the family its driver (or name) maps to.
fn host_values(catalog: &Catalog, snapshot: &Snapshot, info: &CounterInfo) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for dev in &snapshot.devices {
        let driver = dev.driver.as_deref();
        for port in &dev.ports {
            for c in port.counters.iter().filter(|c| *c.name == *info.name) {
                if family_of(catalog, c.source, driver, &dev.name).as_deref()
                    == Some(info.driver.as_str())
                {
                    out.push((format!("{}/{}", dev.name, port.num), c.value));
                }
            }
        }
        for c in dev.hw_counters.iter().filter(|c| *c.name == *info.name) {
            if family_of(catalog, c.source, driver, &dev.name).as_deref()
                == Some(info.driver.as_str())
            {
                out.push((dev.name.clone(), c.value));
            }
        }
    }
    out
}

fn describe(
    info: &CounterInfo,
    values: &[(String, u64)],
    out: &mut impl Write,
) -> std::io::Result<()> {
    writeln!(out, "{}/{}  [{}]", info.driver, info.name, info.severity)?;
    writeln!(out, "  {}", info.summary)?;
    writeln!(out)?;
    writeln!(out, "What it counts")?;
    for line in wrap(&info.meaning, WRAP - 2) {
        writeln!(out, "  {line}")?;
    }
    writeln!(out)?;
    writeln!(out, "  unit:   {}", unit_text(info))?;
    writeln!(out, "  type:   {}", type_text(info))?;
    if info.location == Location::PortNetlink {
        writeln!(
            out,
            "  where:  {} ({})",
            info.location.path_hint(),
            info.name
        )?;
    } else {
        writeln!(out, "  where:  {}{}", info.location.path_hint(), info.name)?;
    }
    if !info.kernels.is_empty() {
        writeln!(out, "  kernels: {}", info.kernels.join(", "))?;
    }
    if let Some(old) = &info.renamed_from {
        writeln!(out, "  renamed from: {old} (older kernels)")?;
    }
    if let Some(new) = &info.renamed_to {
        writeln!(out, "  renamed to:   {new} (newer kernels)")?;
    }
    if let Some(source) = &info.source {
        writeln!(out, "  source: {source}")?;
    }
    list_section(out, "Likely causes", &info.causes)?;
    list_section(out, "What to check next", &info.next_steps)?;
    if info.experiment.is_some() || info.lesson.is_some() {
        writeln!(out)?;
        writeln!(out, "Learn more")?;
        if let Some(experiment) = info.experiment {
            writeln!(out, "  see it move:  rdmactl experiment run {experiment}")?;
        }
        if let Some(lesson) = info.lesson {
            writeln!(
                out,
                "  read:         lesson {} ({lesson})",
                lesson.chapter()
            )?;
        }
    }

    if !values.is_empty() {
        writeln!(out)?;
        writeln!(out, "On this host")?;
        for (place, value) in values {
            writeln!(out, "  {place} = {value}")?;
        }
    }
    Ok(())
}

fn unit_text(info: &CounterInfo) -> String {
    use rdmakit::catalog::Unit;
    match info.unit {
        Unit::Words4 => "4-octet words (x4 for bytes, not x lanes)".to_string(),
        Unit::Ticks => "device clock ticks (length depends on the device)".to_string(),
        Unit::Ms => "milliseconds".to_string(),
        other => other.to_string(),
    }
}

fn type_text(info: &CounterInfo) -> String {
    match (info.kind, info.overflow) {
        // A catalog entry is a counter or a gauge (the loader refuses the others).
        (Kind::Gauge | Kind::Info | Kind::Histogram, _) => {
            "gauge (a level or setting, read as is)".to_string()
        }
        (Kind::Counter, Overflow::Wrap) => {
            format!("counter, {}-bit, wraps to 0 at its maximum", info.width)
        }
        (Kind::Counter, Overflow::Saturate) => format!(
            "counter, {}-bit, saturates (stops at its maximum until reset)",
            info.width
        ),
    }
}

fn list_section(out: &mut impl Write, title: &str, items: &[String]) -> std::io::Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(out, "{title}")?;
    for item in items {
        let mut lines = wrap(item, WRAP - 4).into_iter();
        if let Some(first) = lines.next() {
            writeln!(out, "  - {first}")?;
        }
        for rest in lines {
            writeln!(out, "    {rest}")?;
        }
    }
    Ok(())
}

/// Re-flows text (the catalog wraps its own lines) to at most `width` columns.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

fn list(
    catalog: &Catalog,
    driver: Option<&str>,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<ExitCode> {
    let rows: Vec<&CounterInfo> = match driver {
        Some(d) => {
            let Some(family) = catalog.family_for(d) else {
                eprintln!(
                    "rdmactl: no catalog family for driver {d}; known: {}",
                    catalog.families().join(", ")
                );
                return Ok(ExitCode::from(exit::FAILURE));
            };
            catalog.family(family).collect()
        }
        None => catalog.counters().iter().collect(),
    };
    if json {
        serde_json::to_writer_pretty(&mut *out, &rows)?;
        writeln!(out)?;
        out.flush()?;
        return Ok(ExitCode::from(exit::OK));
    }
    let header = ["DRIVER", "NAME", "UNIT", "KIND", "SEVERITY", "SUMMARY"];
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|c| {
            [
                c.driver.clone(),
                c.name.clone(),
                c.unit.to_string(),
                c.kind.to_string(),
                c.severity.to_string(),
                c.summary.clone(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &cells {
        for (w, cell) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let render = |row: &[String]| {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        line
    };
    writeln!(out, "{}", render(&header.map(String::from)))?;
    for row in &cells {
        writeln!(out, "{}", render(row))?;
    }
    out.flush()?;
    Ok(ExitCode::from(exit::OK))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> &'static Catalog {
        Catalog::embedded().expect("embedded catalog loads")
    }

    fn text_of(name: &str, driver: Option<&str>) -> (String, ExitCode) {
        let mut buf = Vec::new();
        let code = explain(
            catalog(),
            &Snapshot::default(),
            name,
            driver,
            false,
            &mut buf,
        )
        .expect("runs");
        (String::from_utf8(buf).expect("utf-8"), code)
    }

    #[test]
    fn explains_a_known_counter_with_every_section() {
        let (text, code) = text_of("retry_exceeded_err", Some("rxe"));
        assert_eq!(code, ExitCode::from(exit::OK));
        for needle in [
            "rxe/retry_exceeded_err  [error]",
            "What it counts",
            "unit:",
            "counter, 64-bit",
            "ports/<n>/hw_counters/retry_exceeded_err",
            "Likely causes",
            "What to check next",
            "rdmactl experiment run qp-errors",
            "lesson 8 (error-handling)",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
        }
    }

    #[test]
    fn hfi1_width_suffix_is_found_with_and_without_it() {
        for asked in ["SwLinkUp,32", "SwLinkUp"] {
            let (text, code) = text_of(asked, Some("hfi1"));
            assert_eq!(code, ExitCode::from(exit::OK), "{asked}");
            assert!(text.starts_with("hfi1/SwLinkUp,32  ["), "{asked}: {text}");
            assert!(text.contains("ports/<n>/hw_counters/SwLinkUp,32"), "{text}");
        }
        let (text, code) = text_of("SwLinkUp", None);
        assert_eq!(code, ExitCode::from(exit::OK));
        assert!(text.contains("hfi1/SwLinkUp,32"), "{text}");
    }

    #[test]
    fn names_with_spaces_renames_and_kernels_are_shown() {
        let (text, code) = text_of("RNR sent", Some("irdma"));
        assert_eq!(code, ExitCode::from(exit::OK));
        assert!(text.contains("irdma/RNR sent  ["), "{text}");
        assert!(text.contains("kernels: 7.2"), "{text}");
        let (text, _) = text_of("rx_atomic_req", Some("bnxt_re"));
        assert!(text.contains("renamed to:   rx_atomic_requests"), "{text}");
        let (text, _) = text_of("rx_atomic_requests", Some("bnxt_re"));
        assert!(text.contains("renamed from: rx_atomic_req"), "{text}");
        let (text, _) = text_of("cc_rx_ce_pkts", Some("mlx5"));
        assert!(text.contains("netlink only"), "{text}");
    }

    #[test]
    fn ionic_names_are_said_to_come_from_firmware() {
        let (_, code) = text_of("some_fw_counter", Some("ionic0"));
        assert_eq!(code, ExitCode::from(exit::FAILURE));
        let message = not_found_message(catalog(), "some_fw_counter", Some("ionic0"), &[]);
        assert!(message.contains("from the device firmware"), "{message}");
        let message = not_found_message(catalog(), "x", Some("rxe"), &[]);
        assert!(!message.contains("firmware"), "{message}");
    }

    #[test]
    fn without_driver_shows_every_family_and_falls_back_with_a_note() {
        let (text, _) = text_of("duplicate_request", None);
        assert!(text.contains("mlx5/duplicate_request") && text.contains("rxe/duplicate_request"));
        let (text, code) = text_of("duplicate_request", Some("efa"));
        assert_eq!(code, ExitCode::from(exit::OK));
        assert!(text.starts_with("note: duplicate_request is not described for driver efa"));
    }

    #[test]
    fn unknown_name_exits_1_and_suggests_in_json() {
        let (_, code) = text_of("out_of_bufer", None);
        assert_eq!(code, ExitCode::from(exit::FAILURE));
        let mut buf = Vec::new();
        let code = explain(
            catalog(),
            &Snapshot::default(),
            "out_of_bufer",
            None,
            true,
            &mut buf,
        )
        .unwrap();
        assert_eq!(code, ExitCode::from(exit::FAILURE));
        let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(v["matches"].as_array().map(Vec::len), Some(0));
        assert_eq!(v["suggestions"][0], "out_of_buffer");
    }

    #[test]
    fn json_carries_the_catalog_fields() {
        let mut buf = Vec::new();
        explain(
            catalog(),
            &Snapshot::default(),
            "port_xmit_data",
            None,
            true,
            &mut buf,
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
        let m = &v["matches"][0];
        assert_eq!(m["driver"], "ib_pma");
        assert_eq!(m["unit"], "words4");
        assert_eq!(m["kind"], "counter");
        assert_eq!(m["location"], "port_counters");
    }

    #[test]
    fn all_lists_a_table_per_family() {
        let mut buf = Vec::new();
        let code = list(catalog(), Some("rxe0"), false, &mut buf).unwrap();
        assert_eq!(code, ExitCode::from(exit::OK));
        let text = String::from_utf8(buf).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("DRIVER"));
        assert_eq!(lines.len(), 1 + catalog().family("rxe").count());
        assert!(lines.iter().skip(1).all(|l| l.starts_with("rxe ")));
        let mut buf = Vec::new();
        let code = list(catalog(), Some("siw"), false, &mut buf).unwrap();
        assert_eq!(code, ExitCode::from(exit::FAILURE));
    }

    #[test]
    fn wrap_keeps_lines_short_and_words_whole() {
        let lines = wrap("aaa bbb ccc ddd", 7);
        assert_eq!(lines, vec!["aaa bbb", "ccc ddd"]);
        assert!(wrap("", 10).is_empty());
    }

    #[test]
    fn host_values_come_from_the_matching_family_only() {
        let root =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/sysfs/rxe");
        let snap = SysfsReader::new(&root).snapshot().expect("fixture reads");
        let cat = catalog();
        let rxe = cat.get("rxe", "duplicate_request").expect("rxe entry");
        let values = host_values(cat, &snap, rxe);
        assert_eq!(values.len(), 1, "{values:?}");
        assert_eq!(values[0].0, "rxe0/1");
        // The mlx5 entry of the same name must not claim rxe's file.
        let mlx5 = cat.get("mlx5", "duplicate_request").expect("mlx5 entry");
        assert!(host_values(cat, &snap, mlx5).is_empty());
        let mut buf = Vec::new();
        explain(
            cat,
            &snap,
            "duplicate_request",
            Some("rxe"),
            false,
            &mut buf,
        )
        .unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(text.contains("On this host\n  rxe0/1 = "), "{text}");
    }
}
