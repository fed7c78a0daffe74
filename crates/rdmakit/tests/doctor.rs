//! Doctor scenarios: before/after snapshot pairs under tests/fixtures/doctor/<scenario>/ and
//! the findings (rule id, target) the doctor must report for each, in rank order.

use std::path::PathBuf;

use rdmakit::catalog::Catalog;
use rdmakit::doctor::{diagnose, Movement, Rules};
use rdmakit::Snapshot;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/doctor")
}

fn load(path: PathBuf) -> Snapshot {
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_scenario_gives_its_expected_findings() {
    let catalog = Catalog::embedded().expect("embedded catalog");
    let rules = Rules::embedded().expect("embedded rules");
    let mut scenarios: Vec<PathBuf> = std::fs::read_dir(dir())
        .expect("fixture dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    scenarios.sort();
    assert!(scenarios.len() >= 5, "scenarios missing: {scenarios:?}");
    for s in scenarios {
        let before = load(s.join("before.json"));
        let after = load(s.join("after.json"));
        let expected: Vec<(String, String)> = serde_json::from_str(
            &std::fs::read_to_string(s.join("expected.json")).expect("expected.json"),
        )
        .expect("expected.json is a list of [id, target]");
        let diag = diagnose(&before, &after, Some(10.0), catalog, &rules);
        let got: Vec<(String, String)> = diag
            .findings
            .iter()
            .map(|f| (f.id.clone(), f.target.clone()))
            .collect();
        assert_eq!(got, expected, "scenario {}", s.display());
        for f in &diag.findings {
            assert!(
                !f.finding.contains("{target}"),
                "unreplaced target in {f:?}"
            );
            if !f.counters.is_empty() {
                assert_eq!(f.rate_per_second, Some(f.total as f64 / 10.0));
            }
        }
    }
}

#[test]
fn the_wrapped_counter_is_unwrapped_not_reset() {
    let catalog = Catalog::embedded().unwrap();
    let rules = Rules::embedded().unwrap();
    let s = dir().join("mlx5-roce-wrapped-out-of-sequence");
    let diag = diagnose(
        &load(s.join("before.json")),
        &load(s.join("after.json")),
        None,
        catalog,
        &rules,
    );
    let d = diag
        .moved
        .iter()
        .find(|d| d.name == "out_of_sequence" && d.device == "mlx5_1")
        .expect("out_of_sequence moved");
    assert_eq!(d.movement, Movement::Wrapped);
    assert_eq!(d.delta, 14);
    assert_eq!(diag.findings[0].rate_per_second, None);
}

#[test]
fn identical_snapshots_give_nothing() {
    let catalog = Catalog::embedded().unwrap();
    let rules = Rules::embedded().unwrap();
    let s = load(dir().join("rxe-rnr/before.json"));
    let diag = diagnose(&s, &s, Some(1.0), catalog, &rules);
    assert!(
        diag.findings.is_empty() && diag.moved.is_empty(),
        "{diag:?}"
    );
}

#[test]
fn bnxt_re_findings_carry_the_bnxt_re_counters() {
    let catalog = Catalog::embedded().unwrap();
    let rules = Rules::embedded().unwrap();
    let s = dir().join("bnxt-re-retries-exhausted");
    let diag = diagnose(
        &load(s.join("before.json")),
        &load(s.join("after.json")),
        Some(10.0),
        catalog,
        &rules,
    );
    let summary = |id: &str| -> Vec<(String, Option<String>, u64)> {
        diag.findings
            .iter()
            .find(|f| f.id == id)
            .unwrap_or_else(|| panic!("no {id} finding in {:?}", diag.findings))
            .counters
            .iter()
            .map(|d| (d.name.clone(), d.family.clone(), d.delta))
            .collect()
    };
    let bnxt = Some("bnxt_re".to_string());
    assert_eq!(
        summary("transport-retry-exhausted"),
        [("max_retry_exceeded".to_string(), bnxt.clone(), 2)]
    );
    assert_eq!(
        summary("packet-loss"),
        [("to_retransmits".to_string(), bnxt, 14)]
    );
    assert_eq!(diag.findings[0].severity, rdmakit::catalog::Severity::Error);
}

/// Each family's name for the same trouble is in the same rule, and is a counter the catalog
/// describes for that family (not just some family).
#[test]
fn rules_cover_each_familys_equivalents() {
    let catalog = Catalog::embedded().unwrap();
    let rules = Rules::embedded().unwrap();
    let table = [
        ("rnr-retry-exhausted", "rxe", "retry_rnr_exceeded_err"),
        ("rnr-naks", "rxe", "rcvd_rnr_err"),
        ("rnr-naks", "bnxt_re", "rnr_naks_rcvd"),
        ("rnr-naks", "hfi1", "RnrNak"),
        ("transport-retry-exhausted", "rxe", "retry_exceeded_err"),
        ("transport-retry-exhausted", "bnxt_re", "max_retry_exceeded"),
        ("unresponsive-peer", "efa", "unresponsive_remote_events"),
        ("packet-loss", "mlx5", "out_of_sequence"),
        ("packet-loss", "bnxt_re", "to_retransmits"),
        ("packet-loss", "efa", "retrans_pkts"),
        ("packet-loss", "hfi1", "RcResend"),
        ("packet-loss", "irdma", "tcpRetransSegs"),
        ("packet-loss", "irdma", "RetransSegs"),
        ("packet-loss", "cxgb4", "ip4RetransSegs"),
        ("packet-loss", "cxgb4", "ip6RetransSegs"),
        ("remote-access", "bnxt_re", "remote_access_err"),
        ("congestion", "irdma", "cnpHandled"),
        ("congestion", "bnxt_re", "rx_cnp_pkts"),
        ("congestion", "hfi1", "TxWait"),
        ("link-errors", "hfi1", "DcRecvErr"),
        ("link-down", "hfi1", "SwLinkDown,32"),
    ];
    for (id, family, name) in table {
        let rule = rules
            .iter()
            .find(|r| r.id == id)
            .unwrap_or_else(|| panic!("no rule {id}"));
        assert!(
            rule.counters.iter().any(|c| c == name),
            "rule {id} does not list {family}/{name}"
        );
        assert!(
            catalog.get(family, name).is_some(),
            "{family}/{name} is not in the catalog"
        );
    }
}
