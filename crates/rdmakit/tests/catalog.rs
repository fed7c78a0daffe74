//! Tests of the counter catalog: the embedded data loads and says what the drivers expose,
//! every validation rule rejects what it should (naming file and counter), and lookups and
//! "did you mean" suggestions behave.

use rdmakit::catalog::{
    Catalog, CatalogError, CatalogErrorKind, Kind, Location, Lookup, Overflow, Severity, Unit,
};
use std::path::PathBuf;

fn embedded() -> &'static Catalog {
    match Catalog::embedded() {
        Ok(c) => c,
        Err(e) => panic!("embedded catalog does not load: {e}"),
    }
}

fn names(catalog: &Catalog, family: &str) -> Vec<String> {
    catalog.family(family).map(|c| c.name.clone()).collect()
}

fn repo_catalog_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../catalog")
}

// ---------------------------------------------------------------- the embedded data

#[test]
fn embedded_catalog_loads_with_every_family() {
    let catalog = embedded();
    let families = catalog.families();
    for family in [
        "ib_pma", "mlx5", "rxe", "ib_cm", "irdma", "bnxt_re", "efa", "hfi1", "cxgb4",
    ] {
        assert!(families.contains(&family), "family {family} missing");
        assert!(
            catalog.family(family).count() >= 4,
            "family {family} has almost no counters"
        );
    }
    assert!(catalog.len() > 250, "only {} counters", catalog.len());
}

#[test]
fn embedded_equals_the_directory_on_disk() {
    let from_dir = Catalog::from_dir(repo_catalog_dir()).expect("catalog/ loads");
    let embedded = embedded();
    assert_eq!(from_dir.len(), embedded.len());
    for c in embedded.counters() {
        assert_eq!(
            from_dir.get(&c.driver, &c.name),
            Some(c),
            "{}/{}",
            c.driver,
            c.name
        );
    }
}

#[test]
fn rxe_describes_exactly_the_counters_rxe_exposes() {
    let mut got = names(embedded(), "rxe");
    got.sort();
    let mut want = vec![
        "ack_deferred",
        "completer_retry_err",
        "duplicate_request",
        "lifespan",
        "link_downed",
        "out_of_seq_request",
        "rcvd_bytes",
        "rcvd_pkts",
        "rcvd_rnr_err",
        "rcvd_seq_err",
        "rdma_recvs",
        "rdma_sends",
        "retry_exceeded_err",
        "retry_rnr_exceeded_err",
        "send_err",
        "send_rnr_err",
        "sent_bytes",
        "sent_pkts",
    ];
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn ib_pma_and_mlx5_cover_the_required_names() {
    let catalog = embedded();
    for name in [
        "symbol_error",
        "link_error_recovery",
        "link_downed",
        "port_rcv_errors",
        "port_rcv_remote_physical_errors",
        "port_rcv_switch_relay_errors",
        "port_xmit_discards",
        "port_rcv_constraint_errors",
        "port_xmit_constraint_errors",
        "local_link_integrity_errors",
        "excessive_buffer_overrun_errors",
        "VL15_dropped",
        "port_xmit_wait",
        "port_xmit_data",
        "port_rcv_data",
        "port_xmit_packets",
        "port_rcv_packets",
        "unicast_xmit_packets",
        "unicast_rcv_packets",
        "multicast_xmit_packets",
        "multicast_rcv_packets",
    ] {
        assert!(catalog.get("ib_pma", name).is_some(), "ib_pma/{name}");
    }
    for name in [
        "out_of_buffer",
        "out_of_sequence",
        "duplicate_request",
        "rnr_nak_retry_err",
        "packet_seq_err",
        "implied_nak_seq_err",
        "local_ack_timeout_err",
        "resp_local_length_error",
        "req_cqe_error",
        "resp_cqe_error",
        "req_cqe_flush_error",
        "resp_cqe_flush_error",
        "req_remote_invalid_request",
        "req_remote_access_errors",
        "resp_remote_access_errors",
        "rx_read_requests",
        "rx_write_requests",
        "rx_atomic_requests",
        "rx_dct_connect",
        "roce_adp_retrans",
        "roce_adp_retrans_to",
        "roce_slow_restart",
        "roce_slow_restart_cnps",
        "roce_slow_restart_trans",
        "rp_cnp_ignored",
        "rp_cnp_handled",
        "np_ecn_marked_roce_packets",
        "np_cnp_sent",
        "rx_icrc_encapsulated",
        "lifespan",
        "req_transport_retries_exceeded",
        "req_rnr_retries_exceeded",
    ] {
        assert!(catalog.get("mlx5", name).is_some(), "mlx5/{name}");
    }
}

#[test]
fn facts_the_reference_insists_on() {
    let catalog = embedded();
    // Data counters count 4-octet words, not bytes.
    let data = catalog.get("ib_pma", "port_xmit_data").unwrap();
    assert_eq!(data.unit, Unit::Words4);
    // lifespan is a period in ms, a gauge, everywhere it appears.
    let lifespans = catalog.by_name("lifespan");
    assert!(lifespans.len() >= 2);
    for l in lifespans {
        assert_eq!((l.kind, l.unit), (Kind::Gauge, Unit::Ms), "{}", l.driver);
    }
    // mlx5 queue counters are 32-bit and wrap; PMA error counters saturate.
    let oob = catalog.get("mlx5", "out_of_buffer").unwrap();
    assert_eq!((oob.width, oob.overflow), (32, Overflow::Wrap));
    let sym = catalog.get("ib_pma", "symbol_error").unwrap();
    assert_eq!((sym.width, sym.overflow), (16, Overflow::Saturate));
    // Retry exhaustion is an error, flushes are not.
    assert_eq!(
        catalog.get("rxe", "retry_exceeded_err").unwrap().severity,
        Severity::Error
    );
    assert_eq!(
        catalog.get("mlx5", "req_cqe_flush_error").unwrap().severity,
        Severity::Info
    );
    // Locations.
    assert_eq!(
        catalog.get("efa", "keep_alive_rcvd").unwrap().location,
        Location::DeviceHwCounters
    );
    assert_eq!(
        catalog.get("rxe", "sent_pkts").unwrap().location,
        Location::PortHwCounters
    );
}

#[test]
fn every_entry_explains_itself() {
    for c in embedded().counters() {
        assert!(
            c.meaning.len() >= 60,
            "{}/{}: meaning too thin",
            c.driver,
            c.name
        );
        assert!(
            !c.summary.ends_with('.'),
            "{}/{}: summary ends with '.'",
            c.driver,
            c.name
        );
        assert!(
            !c.meaning.contains('\n'),
            "{}/{}: meaning not flowed",
            c.driver,
            c.name
        );
        if c.severity != Severity::Info {
            assert!(!c.causes.is_empty(), "{}/{}: no causes", c.driver, c.name);
            assert!(
                !c.next_steps.is_empty(),
                "{}/{}: no next steps",
                c.driver,
                c.name
            );
        }
        if c.kind == Kind::Gauge {
            assert_eq!(c.overflow, Overflow::Wrap, "{}/{}", c.driver, c.name);
        }
    }
}

// ---------------------------------------------------------------- lookups

#[test]
fn lookup_by_driver_then_by_name() {
    let catalog = embedded();
    match catalog.lookup(Some("rxe"), "duplicate_request") {
        Lookup::Found(v) => assert_eq!((v.len(), v[0].driver.as_str()), (1, "rxe")),
        other => panic!("{other:?}"),
    }
    // A device name maps to its family.
    match catalog.lookup(Some("mlx5_0"), "duplicate_request") {
        Lookup::Found(v) => assert_eq!(v[0].driver, "mlx5"),
        other => panic!("{other:?}"),
    }
    // Not described for efa: fall back to the families that have it.
    match catalog.lookup(Some("efa"), "duplicate_request") {
        Lookup::OtherFamilies(v) => {
            let drivers: Vec<&str> = v.iter().map(|c| c.driver.as_str()).collect();
            assert!(
                drivers.contains(&"mlx5") && drivers.contains(&"rxe"),
                "{drivers:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    // No driver: every family with that name.
    match catalog.lookup(None, "link_downed") {
        Lookup::Found(v) => assert!(v.len() >= 2),
        other => panic!("{other:?}"),
    }
    assert_eq!(catalog.lookup(None, "no_such_counter"), Lookup::NotFound);
    assert_eq!(
        catalog.lookup(Some("rxe"), "no_such_counter"),
        Lookup::NotFound
    );
}

#[test]
fn lookup_ignores_case_when_nothing_matches_exactly() {
    let catalog = embedded();
    assert_eq!(catalog.get("irdma", "rxecnmrkd").unwrap().name, "RxECNMrkd");
    assert_eq!(catalog.by_name("vl15_dropped")[0].name, "VL15_dropped");
}

#[test]
fn mlx5_vport_names_resolve_to_the_counter() {
    let catalog = embedded();
    let info = catalog.get("mlx5", "vport_out_of_buffer").expect("alias");
    assert_eq!(info.name, "out_of_buffer");
    let found = catalog.by_name("vport_local_ack_timeout_err");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].driver, "mlx5");
    // The prefix belongs to mlx5 only.
    assert!(catalog.get("rxe", "vport_sent_pkts").is_none());
}

#[test]
fn family_for_maps_device_names() {
    let catalog = embedded();
    assert_eq!(catalog.family_for("mlx5"), Some("mlx5"));
    assert_eq!(catalog.family_for("rxe0"), Some("rxe"));
    assert_eq!(catalog.family_for("bnxt_re1"), Some("bnxt_re"));
    assert_eq!(catalog.family_for("siw0"), None);
}

#[test]
fn closest_suggests_near_names_only() {
    let catalog = embedded();
    let s = catalog.closest("out_of_bufer", 3);
    assert_eq!(s.first(), Some(&"out_of_buffer"), "{s:?}");
    let s = catalog.closest("rcvd_pkt", 3);
    assert_eq!(s.first(), Some(&"rcvd_pkts"), "{s:?}");
    assert!(s.len() <= 3);
    // Distinct names only, even when several families share one.
    let s = catalog.closest("link_downd", 3);
    assert_eq!(
        s.iter().filter(|n| **n == "link_downed").count(),
        1,
        "{s:?}"
    );
    // Nothing close: nothing suggested.
    assert!(catalog.closest("completely_unrelated_words", 3).is_empty());
}

// ---------------------------------------------------------------- validation errors

const GOOD: &str = r#"
family = "demo"
description = "A demo family"
location = "port_hw_counters"

[[counter]]
name = "good_one"
summary = "A fine counter"
unit = "packets"
kind = "counter"
width = 64
severity = "info"
meaning = "Counts something worth counting."
"#;

/// GOOD with one more counter whose body is `body` (the `name` line is added).
fn with_counter(name: &str, body: &str) -> String {
    format!("{GOOD}\n[[counter]]\nname = \"{name}\"\n{body}\n")
}

const BODY: &str = r#"summary = "Another counter"
unit = "events"
kind = "counter"
width = 32
severity = "warning"
meaning = "Counts another thing."
causes = ["something"]
next_steps = ["look"]"#;

fn load_err(file: &str, text: &str) -> CatalogError {
    match Catalog::from_sources([(file, text)]) {
        Ok(c) => panic!("expected an error, loaded {} counters", c.len()),
        Err(e) => e,
    }
}

fn assert_names(err: &CatalogError, file: &str, counter: Option<&str>) {
    assert_eq!(err.file, file);
    assert_eq!(err.counter.as_deref(), counter);
    let text = err.to_string();
    assert!(text.contains(file), "{text}");
    if let Some(counter) = counter {
        assert!(text.contains(counter), "{text}");
    }
}

#[test]
fn a_good_file_loads() {
    let c = Catalog::from_sources([("demo.toml", GOOD)]).expect("loads");
    assert_eq!(c.len(), 1);
    assert_eq!(c.family_infos()[0].description, "A demo family");
    let info = c.get("demo", "good_one").unwrap();
    assert_eq!(info.driver, "demo");
    assert_eq!(info.overflow, Overflow::Wrap); // the default
    assert_eq!(info.file, "demo.toml");
}

#[test]
fn rejects_invalid_toml() {
    let err = load_err("demo.toml", "family = \"demo\"\n[[counter]\n");
    assert!(matches!(err.kind, CatalogErrorKind::Syntax(_)), "{err}");
    assert_names(&err, "demo.toml", None);
}

#[test]
fn rejects_unknown_counter_field() {
    let text = with_counter("typo", &format!("{BODY}\nseverty = \"info\""));
    let err = load_err("demo.toml", &text);
    assert!(
        matches!(&err.kind, CatalogErrorKind::UnknownField(f) if f == "severty"),
        "{err}"
    );
    assert_names(&err, "demo.toml", Some("typo"));
}

#[test]
fn rejects_unknown_top_level_field() {
    let text = format!("colour = \"blue\"\n{GOOD}");
    let err = load_err("demo.toml", &text);
    assert!(
        matches!(&err.kind, CatalogErrorKind::UnknownField(f) if f == "colour"),
        "{err}"
    );
    assert_names(&err, "demo.toml", None);
}

#[test]
fn rejects_missing_field() {
    let body = BODY.replace("severity = \"warning\"\n", "");
    let err = load_err("demo.toml", &with_counter("no_severity", &body));
    assert!(
        matches!(&err.kind, CatalogErrorKind::Shape(m) if m.contains("severity")),
        "{err}"
    );
    assert_names(&err, "demo.toml", Some("no_severity"));
}

#[test]
fn rejects_empty_meaning() {
    let body = BODY.replace("meaning = \"Counts another thing.\"", "meaning = \"  \"");
    let err = load_err("demo.toml", &with_counter("mute", &body));
    assert!(
        matches!(err.kind, CatalogErrorKind::EmptyText("meaning")),
        "{err}"
    );
    assert_names(&err, "demo.toml", Some("mute"));
}

#[test]
fn rejects_a_missing_or_empty_family_description() {
    let err = load_err(
        "demo.toml",
        &GOOD.replace("description = \"A demo family\"\n", ""),
    );
    assert!(
        matches!(&err.kind, CatalogErrorKind::Shape(m) if m.contains("description")),
        "{err}"
    );
    assert_names(&err, "demo.toml", None);
    let err = load_err("demo.toml", &GOOD.replace("A demo family", ""));
    assert!(
        matches!(err.kind, CatalogErrorKind::EmptyText("description")),
        "{err}"
    );
}

#[test]
fn rejects_empty_list_items() {
    let body = BODY.replace("causes = [\"something\"]", "causes = [\"\"]");
    let err = load_err("demo.toml", &with_counter("blank_cause", &body));
    assert!(
        matches!(err.kind, CatalogErrorKind::EmptyText("causes")),
        "{err}"
    );
}

#[test]
fn rejects_bad_summary() {
    let long = "x".repeat(rdmakit::catalog::MAX_SUMMARY_CHARS + 1);
    let body = BODY.replace("Another counter", &long);
    let err = load_err("demo.toml", &with_counter("wordy", &body));
    assert!(matches!(err.kind, CatalogErrorKind::BadSummary), "{err}");
    assert_names(&err, "demo.toml", Some("wordy"));
}

#[test]
fn rejects_values_outside_the_closed_sets() {
    for (field, bad) in [
        ("unit", "unit = \"pkts\""),
        // The workspace's kinds and units a counter file cannot have.
        ("unit", "unit = \"count\""),
        ("kind", "kind = \"histogram\""),
        ("kind", "kind = \"info\""),
        ("severity", "severity = \"fatal\""),
    ] {
        let original = BODY
            .lines()
            .find(|l| l.starts_with(&format!("{field} =")))
            .unwrap();
        let body = BODY.replace(original, bad);
        let err = load_err("demo.toml", &with_counter("odd", &body));
        match &err.kind {
            CatalogErrorKind::InvalidValue {
                field: f, allowed, ..
            } => {
                assert_eq!(*f, field);
                assert!(!allowed.is_empty());
                let value = bad.split('"').nth(1).unwrap();
                assert!(!allowed.iter().any(|a| a == value), "{bad}: {allowed:?}");
                if field == "kind" {
                    assert_eq!(allowed, &["counter", "gauge"]);
                }
            }
            other => panic!("{field}: {other:?}"),
        }
        assert_names(&err, "demo.toml", Some("odd"));
    }
}

#[test]
fn rejects_unknown_experiment_and_lesson() {
    let err = load_err(
        "demo.toml",
        &with_counter("lab", &format!("{BODY}\nexperiment = \"qp-stats\"")),
    );
    match &err.kind {
        CatalogErrorKind::InvalidValue { field, allowed, .. } => {
            assert_eq!(*field, "experiment");
            assert!(allowed.iter().any(|a| a == "qp-states"));
        }
        other => panic!("{other:?}"),
    }
    assert_names(&err, "demo.toml", Some("lab"));

    let err = load_err(
        "demo.toml",
        &with_counter("course", &format!("{BODY}\nlesson = \"chapter-12\"")),
    );
    assert!(
        matches!(
            &err.kind,
            CatalogErrorKind::InvalidValue {
                field: "lesson",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn rejects_bad_width_and_saturating_gauges() {
    let body = BODY.replace("width = 32", "width = 48");
    let err = load_err("demo.toml", &with_counter("wide", &body));
    assert!(
        matches!(&err.kind, CatalogErrorKind::InvalidValue { field: "width", value, .. } if value == "48"),
        "{err}"
    );
    let body = BODY
        .replace("kind = \"counter\"", "kind = \"gauge\"")
        .replace("width = 32", "width = 32\noverflow = \"saturate\"");
    let err = load_err("demo.toml", &with_counter("level", &body));
    assert!(
        matches!(
            &err.kind,
            CatalogErrorKind::InvalidValue {
                field: "overflow",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn rejects_a_missing_location_without_default() {
    let text = GOOD.replace("location = \"port_hw_counters\"\n", "");
    let err = load_err("demo.toml", &text);
    assert!(
        matches!(&err.kind, CatalogErrorKind::Shape(m) if m.contains("location")),
        "{err}"
    );
    assert_names(&err, "demo.toml", Some("good_one"));
}

#[test]
fn rejects_duplicates() {
    let text = with_counter("good_one", BODY);
    let err = load_err("demo.toml", &text);
    assert!(
        matches!(&err.kind, CatalogErrorKind::Duplicate { first_file } if first_file == "demo.toml"),
        "{err}"
    );
    assert_names(&err, "demo.toml", Some("good_one"));
    // The same name in two families is fine.
    let other = GOOD.replace("family = \"demo\"", "family = \"other\"");
    let c = Catalog::from_sources([("demo.toml", GOOD), ("other.toml", other.as_str())]).unwrap();
    assert_eq!(c.by_name("good_one").len(), 2);
}

#[test]
fn rejects_family_that_does_not_match_the_file_name() {
    let err = load_err("mlx5.toml", GOOD);
    assert!(
        matches!(&err.kind, CatalogErrorKind::FamilyMismatch { declared, expected } if declared == "demo" && expected == "mlx5"),
        "{err}"
    );
    assert_names(&err, "mlx5.toml", None);
}

#[test]
fn rejects_a_file_without_counters() {
    let err = load_err(
        "demo.toml",
        "family = \"demo\"\ndescription = \"d\"\nlocation = \"port_counters\"\n",
    );
    assert!(matches!(err.kind, CatalogErrorKind::NoCounters), "{err}");
}

#[test]
fn from_dir_reports_io_errors_and_reads_only_toml() {
    let missing = std::env::temp_dir().join("rdmakit-catalog-test-does-not-exist");
    let err = Catalog::from_dir(&missing).unwrap_err();
    assert!(matches!(err.kind, CatalogErrorKind::Io(_)), "{err}");

    let dir = std::env::temp_dir().join(format!("rdmakit-catalog-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("demo.toml"), GOOD).unwrap();
    std::fs::write(dir.join("README.md"), "not a catalog file").unwrap();
    std::fs::write(dir.join("rules.toml"), "[[rule]]\nid = \"not a family\"\n").unwrap();
    let loaded = Catalog::from_dir(&dir);
    std::fs::write(
        dir.join("broken.toml"),
        "family = \"broken\"\ndescription = \"d\"\n",
    )
    .unwrap();
    let broken = Catalog::from_dir(&dir);
    std::fs::remove_dir_all(&dir).unwrap();

    assert_eq!(loaded.expect("demo.toml loads").len(), 1);
    let err = broken.unwrap_err();
    assert_eq!(err.file, "broken.toml");
    assert!(matches!(err.kind, CatalogErrorKind::NoCounters), "{err}");
}
