//! The driver x kernel table of issue #32: for every driver and every extracted kernel
//! (`catalog/kernel/<series>.tsv`, read from that kernel's sources), the counters upstream
//! declares, the catalog describes for that kernel, and `rdmactl explain --driver D NAME`
//! explains must be the same number. `catalog/extract-kernel.py --table catalog --rdmactl
//! target/release/rdmactl` prints the same table.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use rdmakit::catalog::Catalog;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// series -> driver -> names, from every extraction file.
fn extractions() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(repo().join("catalog/kernel")).expect("catalog/kernel") {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "tsv") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let series = path.file_stem().unwrap().to_string_lossy().into_owned();
        let drivers: &mut BTreeMap<String, BTreeSet<String>> = out.entry(series).or_default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let f: Vec<&str> = line.split('\t').collect();
            drivers
                .entry(f[0].to_string())
                .or_default()
                .insert(f[2].to_string());
        }
    }
    out
}

/// True when `rdmactl explain --driver DRIVER NAME` explains NAME as DRIVER's counter (not
/// another family's, which it also does, after a note, with exit code 0).
fn explained(driver: &str, name: &str) -> bool {
    let out = Command::new(env!("CARGO_BIN_EXE_rdmactl"))
        .args([
            "explain",
            "--driver",
            driver,
            name,
            "--path.sysfs",
            "/nonexistent",
        ])
        .output()
        .expect("rdmactl runs");
    out.status.success() && String::from_utf8_lossy(&out.stdout).starts_with(&format!("{driver}/"))
}

/// `explained` for every (driver, name) of every kernel but the firmware-named drivers',
/// on as many threads as there are cores.
fn explain_all(
    ext: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
) -> BTreeMap<(String, String), bool> {
    let todo: Vec<(String, String)> = ext
        .values()
        .flat_map(|drivers| drivers.iter())
        .filter(|(_, names)| !names.iter().any(|n| n == "*"))
        .flat_map(|(d, names)| names.iter().map(move |n| (d.clone(), n.clone())))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let chunk = todo.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let workers: Vec<_> = todo
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    part.iter()
                        .map(|(d, n)| ((d.clone(), n.clone()), explained(d, n)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("an explain worker panicked"))
            .collect()
    })
}

#[test]
fn upstream_catalog_and_explain_agree_for_every_driver_and_kernel() {
    let catalog = Catalog::from_dir(repo().join("catalog")).expect("catalog loads");
    let ext = extractions();
    assert!(ext.len() >= 4, "kernels extracted: {:?}", ext.keys());
    // explain does not depend on the kernel: ask once per (driver, name), over all cores
    // (a thousand rdmactl runs, each loading the catalog: 35 s one at a time on 2 cores).
    let asked = explain_all(&ext);
    let mut rows = Vec::new();
    let mut wrong = Vec::new();
    let mut kernels: Vec<&String> = ext.keys().collect();
    kernels.sort_by_key(|s| {
        s.split('.')
            .map(|p| p.parse::<u32>().unwrap())
            .collect::<Vec<_>>()
    });
    for series in kernels {
        let drivers = &ext[series];
        for (driver, names) in drivers {
            if names.iter().any(|n| n == "*") {
                // ionic: the names come from firmware; explain must say so.
                let out = Command::new(env!("CARGO_BIN_EXE_rdmactl"))
                    .args(["explain", "--driver", driver, "anything"])
                    .args(["--path.sysfs", "/nonexistent"])
                    .output()
                    .unwrap();
                let said = String::from_utf8_lossy(&out.stderr).into_owned()
                    + &String::from_utf8_lossy(&out.stdout);
                assert!(said.contains("firmware"), "{driver}: {said}");
                rows.push(format!("{driver}\t{series}\tfirmware\tfirmware\tfirmware"));
                continue;
            }
            let in_catalog = names
                .iter()
                .filter(|n| {
                    catalog
                        .get(driver, n)
                        .is_some_and(|info| info.kernels.contains(series))
                })
                .count();
            let explained_here = names
                .iter()
                .filter(|n| asked[&(driver.clone(), n.to_string())])
                .count();
            rows.push(format!(
                "{driver}\t{series}\t{}\t{in_catalog}\t{explained_here}",
                names.len()
            ));
            if in_catalog != names.len() || explained_here != names.len() {
                wrong.push(rows.last().unwrap().clone());
            }
        }
    }
    println!(
        "driver\tkernel\tupstream\tcatalog\texplained\n{}",
        rows.join("\n")
    );
    // 4 kernels x 9-13 drivers (erdma from 6.2, mana's counters and ionic from 6.x/7.x).
    assert!(rows.len() >= 39, "only {} rows", rows.len());
    assert!(
        wrong.is_empty(),
        "upstream, catalog and explain differ:\n{}",
        wrong.join("\n")
    );
}
