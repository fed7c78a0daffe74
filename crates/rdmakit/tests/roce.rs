//! `rdmakit::roce` (the `rdmactl doctor roce` checks) on the captured trees: the RoCE
//! fixtures of tests/fixtures/sysfs/ (mlx5, bnxt_re, ice with their DCB netlink answers,
//! configfs and ECN files) and the one-misconfiguration-each trees of
//! tests/fixtures/roce-doctor/ (both built by tests/fixtures/sysfs/build_roce_fixtures.py).
//!
//! Each tree's report is compared with tests/fixtures/golden/doctor-roce/<tree>.json
//! (`UPDATE_GOLDEN=1` rewrites them and fails; refused under `CI`), and each misconfigured
//! tree's own check is asserted by name, so a golden rewrite cannot hide a wrong verdict.

use std::path::{Path, PathBuf};

use rdmakit::ethtool::{CapturedEthtool, EthtoolSource};
use rdmakit::roce::dcb::DcbSource;
use rdmakit::roce::{self, Inputs, RoceReport, Verdict};
use rdmakit::sysfs::{ReadOptions, SysfsReader};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn report(root: &Path) -> RoceReport {
    let snapshot = SysfsReader::new(root)
        .with_options(ReadOptions {
            gids: true,
            counters: false,
        })
        .snapshot()
        .expect("fixture tree is readable");
    let first = CapturedEthtool::new(root.join("ethtool"));
    let after_dir = root.join("ethtool-after");
    let second = CapturedEthtool::new(if after_dir.is_dir() {
        after_dir
    } else {
        root.join("ethtool")
    });
    let dcb = DcbSource::Captured(root.join("dcb"));
    // The second reading of the port counters: the tree's `sysfs-after/` (a copy of the files
    // that moved) when there is one, else the tree itself (nothing moved).
    let names = roce::retransmit_counter_names().expect("embedded rules");
    let after_root = root.join("sysfs-after");
    let after_root = if after_root.is_dir() {
        after_root
    } else {
        root.to_path_buf()
    };
    roce::diagnose(&Inputs {
        root,
        snapshot: &snapshot,
        device: None,
        port_mtu: &|d, p| roce::sysfs_port_mtu(root, d, p),
        dcb: &|nd| dcb.get(nd),
        stats_before: &|nd| first.driver_stats(nd),
        stats_after: &|nd| second.driver_stats(nd),
        interval_seconds: 1.0,
        link_before: &|d, p, nd| roce::sysfs_link_reading(root, d, p, nd, &names),
        link_after: &|d, p, nd| roce::sysfs_link_reading(&after_root, d, p, nd, &names),
    })
}

fn check_golden(name: &str, report: &RoceReport) {
    let mut json = serde_json::to_string_pretty(report).expect("report serializes");
    json.push('\n');
    let golden = fixtures()
        .join("golden/doctor-roce")
        .join(format!("{name}.json"));
    let same = std::fs::read_to_string(&golden).is_ok_and(|old| old == json);
    if std::env::var_os("UPDATE_GOLDEN").is_some() && !same {
        assert!(
            std::env::var_os("CI").is_none(),
            "UPDATE_GOLDEN is set under CI: golden files are rewritten by hand, never by CI"
        );
        std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
        std::fs::write(&golden, &json).unwrap();
        panic!(
            "UPDATE_GOLDEN: rewrote {}; review the diff, then run again without UPDATE_GOLDEN",
            golden.display()
        );
    }
    let want = std::fs::read_to_string(&golden).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run UPDATE_GOLDEN=1 cargo test -p rdmakit --test roce",
            golden.display()
        )
    });
    assert!(
        json == want,
        "doctor roce report of {name} differs from {}; rerun with UPDATE_GOLDEN=1 and review the diff\n--- got ---\n{json}",
        golden.display()
    );
}

fn verdict(r: &RoceReport, target: &str, id: &str) -> Verdict {
    r.checks
        .iter()
        .find(|c| c.target == target && c.id == id)
        .unwrap_or_else(|| panic!("no check {id} on {target} in {r:#?}"))
        .verdict
}

fn variant(name: &str) -> RoceReport {
    let r = report(&fixtures().join("roce-doctor").join(name));
    check_golden(&format!("variant-{name}"), &r);
    r
}

#[test]
fn mlx5_tree() {
    let r = report(&fixtures().join("sysfs/roce-mlx5"));
    check_golden("roce-mlx5", &r);
    for id in [
        "mtu",
        "roce-v2-gid",
        "cm-roce-mode",
        "cm-tos",
        "pfc",
        "dscp-map",
        "tc-protected",
        "ecn",
    ] {
        assert_eq!(verdict(&r, "mlx5_0/1", id), Verdict::Ok, "{id}");
    }
    // mlx5_1 has no rdma_cm group: ToS 0 is the kernel default, DSCP 0 has no APP entry.
    assert_eq!(verdict(&r, "mlx5_1/1", "cm-tos"), Verdict::Warn);
    assert_eq!(verdict(&r, "mlx5_1/1", "tc-protected"), Verdict::Warn);
    // mlx5_1's driver refuses the statistics; the VF and the bond have no DCB.
    assert_eq!(verdict(&r, "mlx5_1/1", "pause"), Verdict::NotAvailable);
    assert_eq!(verdict(&r, "mlx5_2/1", "pfc"), Verdict::NotAvailable);
    assert_eq!(verdict(&r, "mlx5_bond_0/1", "pfc"), Verdict::NotAvailable);
    let vf = r
        .checks
        .iter()
        .find(|c| c.target == "mlx5_2/1" && c.id == "pfc")
        .unwrap();
    assert!(
        vf.finding.contains("not available on this driver"),
        "{vf:?}"
    );
    assert_eq!(r.worst, Verdict::Warn);
}

#[test]
fn bnxt_and_ice_trees() {
    for (tree, target) in [("roce-bnxt", "bnxt_re0/1"), ("roce-ice", "irdma0/1")] {
        let r = report(&fixtures().join("sysfs").join(tree));
        check_golden(tree, &r);
        assert_eq!(verdict(&r, target, "pfc"), Verdict::Ok, "{tree}");
        assert_eq!(verdict(&r, target, "dscp-map"), Verdict::Ok, "{tree}");
        // No mlx5 ECN switches on these drivers.
        assert_eq!(verdict(&r, target, "ecn"), Verdict::NotAvailable, "{tree}");
    }
    let bnxt = report(&fixtures().join("sysfs/roce-bnxt"));
    assert_eq!(verdict(&bnxt, "bnxt_re0/1", "tc-protected"), Verdict::Ok);
    // ice has no rdma_cm group: ToS 0 -> DSCP 0, which has no APP entry.
    let ice = report(&fixtures().join("sysfs/roce-ice"));
    assert_eq!(verdict(&ice, "irdma0/1", "cm-tos"), Verdict::Warn);
}

#[test]
fn healthy_variant_is_all_ok_but_trust() {
    let r = variant("healthy");
    for c in &r.checks {
        let want = if c.id == "trust" {
            Verdict::NotAvailable
        } else {
            Verdict::Ok
        };
        assert_eq!(c.verdict, want, "{c:?}");
        assert!(c.fix.is_none(), "{c:?}");
    }
}

#[test]
fn misconfigured_variants() {
    let t = "mlx5_0/1";
    let r = variant("pfc-on-wrong-priority");
    assert_eq!(verdict(&r, t, "tc-protected"), Verdict::Fail);
    assert!(r.checks[0]
        .fix
        .as_deref()
        .is_some_and(|f| f.contains("dscp-prio 26:4")));
    assert_eq!(r.checks[0].id, "tc-protected", "fail ranks first");
    assert!(r.checks[0].finding.contains("priority 3") && r.checks[0].finding.contains('4'));

    let r = variant("mtu-too-small");
    assert_eq!(verdict(&r, t, "mtu"), Verdict::Fail);
    let r = variant("mtu-limits-roce");
    assert_eq!(verdict(&r, t, "mtu"), Verdict::Warn);
    assert!(r
        .checks
        .iter()
        .any(|c| c.id == "mtu" && c.fix.as_deref().is_some_and(|f| f.contains("mtu 4192"))));

    let r = variant("ecn-off");
    assert_eq!(verdict(&r, t, "ecn"), Verdict::Warn);
    let r = variant("no-roce-v2-gid");
    assert_eq!(verdict(&r, t, "roce-v2-gid"), Verdict::Fail);

    let r = variant("no-pfc-pcp-trust");
    assert_eq!(verdict(&r, t, "pfc"), Verdict::Warn);
    assert_eq!(verdict(&r, t, "trust"), Verdict::Warn);

    let r = variant("cm-roce-v1-tos-0");
    assert_eq!(verdict(&r, t, "cm-roce-mode"), Verdict::Warn);
    assert_eq!(verdict(&r, t, "cm-tos"), Verdict::Warn);

    let r = variant("pause-storm-discards");
    assert_eq!(verdict(&r, t, "pause"), Verdict::Fail);
    assert_eq!(verdict(&r, t, "discards"), Verdict::Warn);
    for id in ["link-flaps", "retransmits"] {
        assert_eq!(verdict(&r, t, id), Verdict::Ok, "{id}: nothing moved");
    }

    let r = variant("link-flap-retransmits");
    assert_eq!(verdict(&r, t, "link-flaps"), Verdict::Warn);
    assert_eq!(verdict(&r, t, "retransmits"), Verdict::Warn);
    let flap = r.checks.iter().find(|c| c.id == "link-flaps").unwrap();
    assert!(
        flap.finding.contains("carrier_changes +2") && flap.finding.contains("link_downed +1"),
        "{flap:?}"
    );
    let re = r.checks.iter().find(|c| c.id == "retransmits").unwrap();
    assert!(re.finding.starts_with("30 retransmission"), "{re:?}");
    assert!(
        re.evidence
            .iter()
            .any(|e| e == "hw_counters/out_of_sequence = 40 (+28 in 1.0 s)"),
        "{re:?}"
    );
    // The other checks of the same healthy configuration are untouched.
    assert_eq!(verdict(&r, t, "pfc"), Verdict::Ok);
}

#[test]
fn every_variant_tree_has_a_golden_and_back() {
    let trees: Vec<String> = std::fs::read_dir(fixtures().join("roce-doctor"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(trees.len() >= 9, "{trees:?}");
    for t in &trees {
        // variant() compares with the golden.
        variant(t);
    }
    for e in std::fs::read_dir(fixtures().join("golden/doctor-roce"))
        .unwrap()
        .flatten()
    {
        let f = e.file_name().to_string_lossy().into_owned();
        if let Some(v) = f
            .strip_prefix("variant-")
            .and_then(|f| f.strip_suffix(".json"))
        {
            assert!(trees.iter().any(|t| t == v), "{f}: golden without a tree");
        }
    }
}

/// Each lesson a check points to names a real chapter title and `## ` section of the course
/// (English text; the Italian one has the same structure, held by rdmactl's lessons_structure).
#[test]
fn every_lesson_pointer_names_a_real_section() {
    let lessons = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../lessons/src/en");
    for pointer in roce::LESSONS {
        let rest = pointer
            .strip_prefix("rdmactl lesson show ")
            .unwrap_or_else(|| panic!("{pointer}: not a lesson show command"));
        let (num, rest) = rest
            .split_once(" (")
            .expect("chapter number, then (Title: Section)");
        let (title, section) = rest
            .strip_suffix(')')
            .and_then(|r| r.split_once(": "))
            .unwrap_or_else(|| panic!("{pointer}: want (Title: Section)"));
        let n: u32 = num.parse().unwrap();
        let chapter = std::fs::read_dir(&lessons)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                p.file_name()
                    .and_then(|f| f.to_str())
                    .is_some_and(|f| f.starts_with(&format!("{n:02}-")))
            })
            .unwrap_or_else(|| panic!("{pointer}: no chapter {n} in {}", lessons.display()));
        let text = std::fs::read_to_string(&chapter).unwrap();
        assert!(
            text.lines()
                .next()
                .is_some_and(|l| l == format!("# {n}. {title}")),
            "{pointer}: chapter {n} is not titled {title:?}"
        );
        assert!(
            text.lines().any(|l| l == format!("## {section}")),
            "{pointer}: chapter {n} has no section {section:?}"
        );
    }
}
