//! Every counter file in every fixture sysfs tree is described in the counter catalog with a
//! meaning, in the family its device belongs to. A new counter name in a fixture (or a
//! catalog entry removed) fails here; the live suite checks the same for the lab's rxe.

use std::path::PathBuf;

use rdmakit::catalog::Catalog;
use rdmakit::doctor::family_of;
use rdmakit::sysfs::SysfsReader;

#[test]
fn every_fixture_counter_is_in_the_catalog() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/sysfs");
    let catalog = Catalog::embedded().expect("catalog");
    let mut trees: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("fixtures")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("class/infiniband").is_dir())
        .collect();
    trees.sort();
    assert!(trees.len() >= 8, "fixture trees missing: {trees:?}");
    let mut missing = Vec::new();
    let mut checked = 0;
    for tree in &trees {
        let snap = SysfsReader::new(tree).snapshot().expect("fixture reads");
        for dev in &snap.devices {
            let driver = dev.driver.as_deref();
            let counters = dev
                .ports
                .iter()
                .flat_map(|p| p.counters.iter())
                .chain(dev.hw_counters.iter());
            for c in counters {
                checked += 1;
                let family = family_of(catalog, c.source, driver, &dev.name);
                let info = family.as_deref().and_then(|f| catalog.get(f, &c.name));
                match info {
                    Some(i) if !i.meaning.trim().is_empty() => {}
                    _ => missing.push(format!(
                        "{}: {}/{} ({}, family {:?})",
                        tree.file_name().unwrap().to_string_lossy(),
                        dev.name,
                        c.name,
                        c.source.as_str(),
                        family
                    )),
                }
            }
        }
    }
    assert!(checked > 250, "only {checked} counters read");
    assert!(
        missing.is_empty(),
        "not in the catalog:\n  {}",
        missing.join("\n  ")
    );
}
