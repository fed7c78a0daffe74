//! The catalog against the kernel: `catalog/kernel/<series>.tsv` is what
//! `catalog/extract-kernel.py` read from each kernel's drivers/infiniband sources. Every
//! catalog entry of a kernel driver's family must name exactly the kernels whose sources
//! declare it, and a family marked complete here must describe every counter its driver
//! declares in every extracted kernel.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use rdmakit::catalog::{Catalog, Location};

/// Families that describe every counter the kernel declares (hfi1's ~690 names: 39 written
/// by hand, the rest generated from chip.c by catalog/gen-hfi1.py).
const COMPLETE: &[&str] = &[
    "mlx5", "mlx4", "bnxt_re", "irdma", "efa", "hns", "erdma", "mana", "cxgb4", "rxe", "hfi1",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// (driver, name) -> level -> kernel series, from every extraction file.
type Extraction = BTreeMap<(String, String), BTreeMap<String, BTreeSet<String>>>;

fn extraction() -> (Extraction, Vec<String>) {
    let dir = repo().join("catalog/kernel");
    let mut out = Extraction::new();
    let mut series = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("catalog/kernel")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "tsv"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut lines = text.lines();
        let header = lines.next().expect("header line");
        let version = header.strip_prefix("# kernel ").expect("# kernel X.Y.Z");
        let s: Vec<&str> = version.split('.').take(2).collect();
        let s = s.join(".");
        assert_eq!(
            file.file_stem().unwrap().to_string_lossy(),
            s,
            "{} holds kernel {version}",
            file.display()
        );
        for line in lines {
            // Later comment lines say where the tree came from ("# source: ...").
            if line.starts_with('#') {
                continue;
            }
            let f: Vec<&str> = line.split('\t').collect();
            assert_eq!(f.len(), 5, "{}: bad line {line:?}", file.display());
            out.entry((f[0].to_string(), f[2].to_string()))
                .or_default()
                .entry(f[1].to_string())
                .or_default()
                .insert(s.clone());
        }
        series.push(s);
    }
    (out, series)
}

fn level(location: Location) -> Option<&'static str> {
    match location {
        Location::PortHwCounters => Some("port"),
        Location::DeviceHwCounters => Some("device"),
        Location::PortNetlink => Some("netlink"),
        _ => None,
    }
}

fn series_key(s: &str) -> (u32, u32) {
    let mut it = s.split('.').map(|p| p.parse::<u32>().unwrap());
    (it.next().unwrap(), it.next().unwrap())
}

#[test]
fn extractions_cover_the_lts_kernels_and_the_new_drivers() {
    let (ext, series) = extraction();
    for lts in ["6.1", "6.6", "6.12"] {
        assert!(
            series.iter().any(|s| s == lts),
            "kernels extracted: {series:?}"
        );
    }
    assert!(series.len() >= 4, "kernels extracted: {series:?}");
    for (driver, name) in [
        ("hfi1", "SwLinkUp,32"),
        ("hfi1", "RxRbufDescPart2CorErr"),
        ("hfi1", "RcvHdrOvr12"),
        ("irdma", "RNR sent"),
        ("mlx5", "cc_rx_ce_pkts"),
        ("mana", "requester_timeout"),
        ("ionic", "*"),
    ] {
        assert!(
            ext.contains_key(&(driver.to_string(), name.to_string())),
            "{driver}/{name} missing from the extraction"
        );
    }
    let levels = &ext[&("mlx5".to_string(), "cc_rx_ce_pkts".to_string())];
    assert!(levels.contains_key("netlink") && !levels.contains_key("port"));
}

#[test]
fn catalog_kernels_equal_the_extraction() {
    let catalog = Catalog::from_dir(repo().join("catalog")).expect("catalog loads");
    let (ext, _series) = extraction();
    let drivers: BTreeSet<&str> = ext.keys().map(|(d, _)| d.as_str()).collect();
    let mut problems = Vec::new();
    for info in catalog.counters() {
        if !drivers.contains(info.driver.as_str()) || info.name == "lifespan" {
            continue;
        }
        let Some(lvl) = level(info.location) else {
            continue;
        };
        let key = (info.driver.clone(), info.name.clone());
        let want: BTreeSet<String> = ext
            .get(&key)
            .and_then(|levels| levels.get(lvl))
            .cloned()
            .unwrap_or_default();
        let at_device = ext.get(&key).is_some_and(|l| l.contains_key("device"));
        if lvl == "port" && at_device != info.also_device {
            problems.push(format!(
                "{}/{}: also_device = {}, sources: device level {at_device}",
                info.driver, info.name, info.also_device
            ));
        }
        let have: BTreeSet<String> = info.kernels.iter().cloned().collect();
        if want.is_empty() {
            problems.push(format!(
                "{}/{}: no extracted kernel declares it at level {lvl}",
                info.driver, info.name
            ));
        } else if have != want {
            problems.push(format!(
                "{}/{}: catalog kernels {have:?}, sources {want:?}",
                info.driver, info.name
            ));
        }
        let sorted = {
            let mut k = info.kernels.clone();
            k.sort_by_key(|s| series_key(s));
            k
        };
        if sorted != info.kernels {
            problems.push(format!(
                "{}/{}: kernels not in order",
                info.driver, info.name
            ));
        }
        for other in [&info.renamed_from, &info.renamed_to].into_iter().flatten() {
            if catalog.get(&info.driver, other).is_none() {
                problems.push(format!(
                    "{}/{}: rename partner {other} has no entry",
                    info.driver, info.name
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn complete_families_describe_every_kernel_counter() {
    let catalog = Catalog::from_dir(repo().join("catalog")).expect("catalog loads");
    let (ext, _) = extraction();
    let mut missing = Vec::new();
    let mut checked = 0;
    for ((driver, name), levels) in &ext {
        if !COMPLETE.contains(&driver.as_str()) {
            continue;
        }
        checked += 1;
        match catalog.get(driver, name) {
            Some(info) => {
                let lvl = level(info.location).unwrap_or("?");
                if !levels.contains_key(lvl) {
                    missing.push(format!(
                        "{driver}/{name}: catalog says {lvl}, sources say {:?}",
                        levels.keys().collect::<Vec<_>>()
                    ));
                }
            }
            None => missing.push(format!("{driver}/{name} ({:?})", levels)),
        }
    }
    assert!(checked > 1000, "only {checked} names checked");
    assert!(
        missing.is_empty(),
        "not in the catalog:\n{}",
        missing.join("\n")
    );
}

#[test]
fn ionic_names_come_from_firmware() {
    let catalog = Catalog::from_dir(repo().join("catalog")).expect("catalog loads");
    let ionic = catalog
        .family_infos()
        .iter()
        .find(|f| f.name == "ionic")
        .expect("ionic family");
    assert!(ionic.names_from_firmware);
    assert_eq!(catalog.family("ionic").count(), 0);
}

#[test]
fn width_suffix_and_spaces_resolve() {
    let catalog = Catalog::embedded().expect("catalog");
    let with = catalog.get("hfi1", "SwLinkUp,32").expect("SwLinkUp,32");
    let without = catalog.get("hfi1", "SwLinkUp").expect("SwLinkUp");
    assert_eq!(with.name, "SwLinkUp,32");
    assert_eq!(with, without);
    assert_eq!(catalog.by_name("SwLinkUp").len(), 1);
    assert!(catalog.get("irdma", "RNR sent").is_some());
    assert!(catalog.get("hfi1", "NoSuchCounter,32").is_none());
}
