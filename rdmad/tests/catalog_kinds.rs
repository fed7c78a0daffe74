//! The counter catalog decides a counter's kind and unit: for EVERY catalog entry that rdmad
//! reads, the family rdmad exports for its file has the catalog's type (`# TYPE`), the name
//! suffix that goes with it (`_total` for counters only; `_bytes` for 4-octet words,
//! `_seconds` for milliseconds, with the value converted), and is the family that
//! `rdmad --print-metrics json` names for it.
//!
//! The test writes one fake sysfs tree with a device per catalog family (named so that the
//! family is found from the device name, as for rxe and bnxt_re) and a file for every entry,
//! each file with its own value, so that the exported series of a file is found by its
//! value alone, without this test deriving any metric name itself.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::rdmad;
use rdmakit::catalog::{Catalog, Kind, Location, Unit};

/// The raw value written for entry `i`: far from the other entries' values after any
/// conversion (x4 for words, /1000 for milliseconds), and exact in an f64.
fn raw_value(i: usize) -> u64 {
    1_000_000_000 + 1000 * i as u64
}

/// The value rdmad must export for a raw value in `unit`.
fn exported_value(raw: u64, unit: Unit) -> f64 {
    match unit {
        Unit::Words4 => raw as f64 * 4.0,
        Unit::Ms => raw as f64 / 1000.0,
        _ => raw as f64,
    }
}

/// The device whose name leads to `family` (`ib_pma` files are PMA files on any device).
fn device_of(family: &str) -> String {
    format!("{family}0")
}

struct Entry {
    family: String,
    name: String,
    kind: Kind,
    unit: Unit,
    location: Location,
    raw: u64,
}

fn write_tree(root: &Path, catalog: &Catalog) -> Vec<Entry> {
    let class = root.join("class/infiniband");
    let mut entries = Vec::new();
    for (i, info) in catalog.counters().iter().enumerate() {
        let dir = match info.location {
            Location::PortCounters => "ports/1/counters",
            Location::PortHwCounters => "ports/1/hw_counters",
            Location::DeviceHwCounters => "hw_counters",
            Location::PortCm => continue, // ib_cm: not read by rdmad
            // Optional counters: never sysfs files; the netlink collector's tests cover them.
            Location::PortNetlink => continue,
            // Not sysfs: the netdev collector's own tests and goldens cover these.
            Location::Netdev => continue,
        };
        let dir = class.join(device_of(&info.driver)).join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        let raw = raw_value(i);
        std::fs::write(dir.join(&info.name), format!("{raw}\n")).unwrap();
        entries.push(Entry {
            family: info.driver.clone(),
            name: info.name.clone(),
            kind: info.kind,
            unit: info.unit,
            location: info.location,
            raw,
        });
    }
    entries
}

#[test]
fn every_catalog_counter_is_exported_with_the_catalog_kind_and_unit() {
    let catalog = Catalog::embedded().expect("the embedded catalog loads");
    let tmp = std::env::temp_dir().join(format!("rdmad-catalog-kinds.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let entries = write_tree(&tmp, catalog);
    assert!(entries.len() > 250, "only {} entries", entries.len());

    let out = rdmad()
        .args([
            "--once",
            "--collector.disable-defaults",
            "--collector.sysfs_counters",
            "--path.sysfs",
        ])
        .arg(&tmp)
        .output()
        .expect("rdmad runs");
    let _ = std::fs::remove_dir_all(&tmp);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let exposition = rdmakit::exposition::parse(&text).expect("the exposition parses");

    let inventory: serde_json::Value = serde_json::from_slice(
        &rdmad()
            .args(["--print-metrics", "json"])
            .output()
            .expect("rdmad --print-metrics runs")
            .stdout,
    )
    .expect("--print-metrics json is JSON");
    let declared: BTreeMap<(String, String), String> = inventory["counters"]
        .as_array()
        .expect("counters")
        .iter()
        .map(|c| {
            (
                (
                    c["family"].as_str().unwrap().to_owned(),
                    c["counter"].as_str().unwrap().to_owned(),
                ),
                c["metric"].as_str().unwrap().to_owned(),
            )
        })
        .collect();

    let mut problems = Vec::new();
    for e in &entries {
        let what = format!(
            "{}/{} ({:?}, {}, {})",
            e.family, e.name, e.location, e.kind, e.unit
        );
        let device = device_of(&e.family);
        let want = exported_value(e.raw, e.unit);
        let found: Vec<&rdmakit::exposition::Sample> = exposition
            .samples
            .iter()
            .filter(|s| s.label("device") == Some(device.as_str()) && s.value == want)
            .collect();
        let [sample] = found.as_slice() else {
            problems.push(format!("{what}: {} series with value {want}", found.len()));
            continue;
        };
        let name = sample.name.as_str();
        let exported_type = exposition.types.get(name).map(String::as_str);
        if exported_type != Some(e.kind.as_str()) {
            problems.push(format!("{what}: {name} is exported as {exported_type:?}"));
        }
        if name.ends_with("_total") != (e.kind == Kind::Counter) {
            problems.push(format!("{what}: {name}: `_total` iff a counter"));
        }
        let base = name.strip_suffix("_total").unwrap_or(name);
        match e.unit {
            Unit::Words4 if !base.ends_with("_bytes") => {
                problems.push(format!("{what}: {name} is in bytes but not named so"))
            }
            Unit::Ms if !base.ends_with("_seconds") => {
                problems.push(format!("{what}: {name} is in seconds but not named so"))
            }
            _ => {}
        }
        let per_port = matches!(
            e.location,
            Location::PortCounters | Location::PortHwCounters
        );
        if per_port && sample.label("port") != Some("1") {
            problems.push(format!("{what}: {name} has no port label"));
        }
        match declared.get(&(e.family.clone(), e.name.clone())) {
            Some(metric) if metric == name => {}
            other => problems.push(format!(
                "{what}: exported as {name}, --print-metrics says {other:?}"
            )),
        }
    }
    assert!(
        problems.is_empty(),
        "{} of {} catalog counters:\n{}",
        problems.len(),
        entries.len(),
        problems.join("\n")
    );
}
