//! Tests of the sysfs reader on the fixture trees in `tests/fixtures/sysfs/`.
//!
//! Each fixture's Snapshot is serialized to JSON and compared with its golden file in
//! `tests/fixtures/sysfs/golden/<fixture>.json` (run with `UPDATE_GOLDEN=1` to rewrite them
//! after an intended change: the tests write the files and fail, and refuse when `CI` is set;
//! review the diff and run again). The other tests pin down the facts and
//! quirks one by one: units, gauges, GIDs, absent directories, unreadable and garbage files,
//! and device filters applied before any file of a device is read.

use rdmakit::model::{CounterKind, CounterSource, SourceErrorKind, Unit};
use rdmakit::sysfs::{DeviceFilter, ReadOptions, SysfsReader};
use rdmakit::Snapshot;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/sysfs")
}

fn read(fixture: &str) -> Snapshot {
    SysfsReader::new(fixtures().join(fixture))
        .snapshot()
        .expect("fixture root is readable")
}

fn check_golden(fixture: &str) {
    let snapshot = read(fixture);
    let mut json = serde_json::to_string_pretty(&snapshot).expect("snapshot serializes");
    json.push('\n');
    let golden = fixtures().join("golden").join(format!("{fixture}.json"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        // A rewrite is never a pass: refused under CI; outside CI written, then a failure, so
        // the new file is reviewed (git diff) and checked by a run without UPDATE_GOLDEN.
        assert!(
            std::env::var_os("CI").is_none(),
            "UPDATE_GOLDEN is set under CI: golden files are rewritten by hand, never by CI"
        );
        std::fs::create_dir_all(golden.parent().expect("golden dir")).expect("create golden dir");
        std::fs::write(&golden, &json).expect("write golden");
        panic!(
            "UPDATE_GOLDEN: rewrote {}; review the diff, then run again without UPDATE_GOLDEN \
             (and re-run tests/fixtures/doctor/make_scenarios.py: the doctor scenarios are \
             derived from these files)",
            golden.display()
        );
    }
    let expected = std::fs::read_to_string(&golden).unwrap_or_else(|err| {
        panic!(
            "{}: {err}; run UPDATE_GOLDEN=1 cargo test -p rdmakit --test sysfs",
            golden.display()
        )
    });
    assert!(
        json == expected,
        "snapshot of fixture {fixture} differs from {}; rerun with UPDATE_GOLDEN=1 and review \
         the diff.\n--- got ---\n{json}",
        golden.display()
    );
}

macro_rules! golden_tests {
    ($($test:ident => $fixture:expr,)*) => {
        $(
            #[test]
            fn $test() {
                check_golden($fixture);
            }
        )*
    };
}

golden_tests! {
    golden_mlx5_ib => "mlx5-ib",
    golden_mlx5_roce => "mlx5-roce",
    golden_rxe => "rxe",
    golden_iwarp => "iwarp",
    golden_bnxt_re => "bnxt-re",
    golden_efa => "efa",
    golden_hfi1 => "hfi1",
    golden_quirks => "quirks",
    golden_filters => "filters",
}

#[test]
fn golden_json_round_trips() {
    let snapshot = read("mlx5-roce");
    let json = serde_json::to_string(&snapshot).expect("serializes");
    let back: Snapshot = serde_json::from_str(&json).expect("deserializes");
    assert_eq!(back, snapshot);
}

#[test]
fn rxe_is_what_the_lab_shows() {
    let s = read("rxe");
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    let dev = s.device("rxe0").expect("rxe0");
    assert_eq!(
        dev.driver, None,
        "rxe is a virtual device: no parent, no driver link"
    );
    assert_eq!(dev.pci_addr, None);
    assert_eq!(dev.fw_ver, None, "rxe prints an empty fw_ver");
    let port = dev.port(1).expect("port 1");
    assert!(
        port.counters.iter().all(|c| c.source == CounterSource::Hw),
        "rxe has no counters/ (PMA) directory"
    );
    let names: Vec<&str> = port.counters.iter().map(|c| &*c.name).collect();
    assert_eq!(
        names,
        [
            "ack_deferred",
            "completer_retry_err",
            "duplicate_request",
            "lifespan",
            "link_downed",
            "out_of_seq_request",
            "rcvd_pkts",
            "rcvd_rnr_err",
            "rcvd_seq_err",
            "rdma_recvs",
            "rdma_sends",
            "retry_exceeded_err",
            "retry_rnr_exceeded_err",
            "send_err",
            "send_rnr_err",
            "sent_pkts",
        ]
    );
    let lifespan = port
        .counter(CounterSource::Hw, "lifespan")
        .expect("lifespan");
    assert_eq!(lifespan.kind, CounterKind::Gauge);
    assert_eq!(lifespan.unit, Unit::Ms);
    assert_eq!(lifespan.value, 10);
    let sent = port
        .counter(CounterSource::Hw, "sent_pkts")
        .expect("sent_pkts");
    assert_eq!((sent.value, sent.kind), (1234, CounterKind::Counter));
    let gids: Vec<(u32, &str, Option<&str>, Option<&str>)> = port
        .gids
        .iter()
        .map(|g| {
            (
                g.index,
                g.gid.as_str(),
                g.gid_type.as_deref(),
                g.netdev.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        gids,
        [
            (0, "fe80::5054:ff:fe12:3456", Some("RoCE v2"), Some("eth0")),
            (1, "::ffff:10.0.2.15", Some("RoCE v2"), Some("eth0")),
        ],
        "all-zero GIDs are skipped"
    );
    assert_eq!(port.netdev.as_deref(), Some("eth0"));
    assert_eq!(port.link_layer.as_deref(), Some("Ethernet"));
    let rate = port.rate.as_ref().expect("rate");
    assert_eq!(rate.bits_per_second, Some(2_500_000_000));
    assert_eq!((rate.width, rate.speed.as_deref()), (Some(1), None));
}

#[test]
fn mlx5_infiniband_port() {
    let s = read("mlx5-ib");
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    let dev = s.device("mlx5_0").expect("mlx5_0");
    assert_eq!(dev.driver.as_deref(), Some("mlx5_core"));
    assert_eq!(dev.pci_addr.as_deref(), Some("0000:3b:00.0"));
    assert_eq!(dev.hca_type.as_deref(), Some("MT4123"));
    assert_eq!(dev.board_id.as_deref(), Some("MT_0000000223"));
    assert_eq!(
        dev.node_type.as_ref().map(|n| (n.id, n.name.as_str())),
        Some((1, "CA"))
    );
    let port = dev.port(1).expect("port 1");
    assert_eq!(port.lid, Some(0x1a));
    assert_eq!(port.sm_lid, Some(1));
    assert_eq!(port.state.as_ref().map(|s| s.id), Some(4));
    assert_eq!(
        port.phys_state.as_ref().map(|s| s.name.as_str()),
        Some("LinkUp")
    );
    let rate = port.rate.as_ref().expect("rate");
    assert_eq!(rate.text, "100 Gb/sec (4X EDR)");
    assert_eq!(rate.bits_per_second, Some(100_000_000_000));
    assert_eq!(port.netdev, None, "InfiniBand GIDs have no netdev");
    assert_eq!(port.gids.len(), 1);
    assert_eq!(port.gids[0].gid_type.as_deref(), Some("IB/RoCE v1"));
    let pma = port
        .counters
        .iter()
        .filter(|c| c.source == CounterSource::Pma)
        .count();
    assert_eq!(
        pma, 21,
        "all PMA files incl. the extended set and port_xmit_wait"
    );
    let rcv = port
        .counter(CounterSource::Pma, "port_rcv_data")
        .expect("port_rcv_data");
    assert_eq!(rcv.unit, Unit::Words4);
    assert_eq!(rcv.bytes, Some(rcv.value * 4), "x4, not x lanes");
    let xmit = port
        .counter(CounterSource::Pma, "port_xmit_data")
        .expect("port_xmit_data");
    assert_eq!(xmit.value, 1 << 62);
    assert_eq!(
        xmit.bytes, None,
        "bytes overflowing u64 are absent, not wrapped"
    );
    let pkts = port
        .counter(CounterSource::Pma, "port_rcv_packets")
        .expect("port_rcv_packets");
    assert_eq!((pkts.unit, pkts.bytes), (Unit::Count, None));
    assert!(port.counter(CounterSource::Hw, "out_of_buffer").is_some());
    let sym = port
        .counter(CounterSource::Pma, "symbol_error")
        .expect("symbol_error");
    assert_eq!(sym.value, 0, "a zero counter is present, with value 0");
}

#[test]
fn mlx5_roce_gids_and_states() {
    let s = read("mlx5-roce");
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    assert_eq!(s.devices.len(), 2);
    let p0 = s.devices[0].port(1).expect("port");
    let types: Vec<Option<&str>> = p0.gids.iter().map(|g| g.gid_type.as_deref()).collect();
    assert_eq!(
        types,
        [
            Some("IB/RoCE v1"),
            Some("RoCE v2"),
            Some("IB/RoCE v1"),
            Some("RoCE v2")
        ]
    );
    assert_eq!(p0.gids[3].gid, "::ffff:192.168.1.10");
    assert_eq!(p0.netdev.as_deref(), Some("ens1f0np0"));
    assert_eq!(p0.lid, Some(0), "RoCE ports print lid 0x0");
    assert!(p0.counter(CounterSource::Hw, "np_cnp_sent").is_some());
    let p1 = s.devices[1].port(1).expect("port");
    assert_eq!(
        p1.state.as_ref().map(|s| (s.id, s.name.as_str())),
        Some((1, "DOWN"))
    );
    assert_eq!(s.devices[1].pci_addr.as_deref(), Some("0000:5e:00.1"));
}

#[test]
fn iwarp_no_pma_is_an_error_per_file_not_a_zero() {
    let s = read("iwarp");
    let dev = s.device("cxgb4_0").expect("cxgb4_0");
    let port = dev.port(1).expect("port");
    assert!(
        port.counters.is_empty(),
        "N/A counters must be absent, not zero: {:?}",
        port.counters
    );
    // iw_cxgb4 registers its hw counters for the device, not for a port.
    assert_eq!(dev.hw_counters.len(), 9);
    assert!(dev
        .hw_counters
        .iter()
        .all(|c| c.source == CounterSource::DeviceHw));
    assert!(dev.hw_counters.iter().any(|c| &*c.name == "ip4RetransSegs"));
    assert_eq!(s.errors.len(), 16, "{:?}", s.errors);
    for err in &s.errors {
        assert_eq!(err.kind, SourceErrorKind::NotAvailable);
        assert_eq!(err.device.as_deref(), Some("cxgb4_0"));
        assert_eq!(err.port, Some(1));
        assert!(
            err.path
                .starts_with("class/infiniband/cxgb4_0/ports/1/counters/"),
            "{}",
            err.path
        );
        assert_eq!(err.detail, "N/A (no PMA)");
    }
    assert_eq!(
        dev.node_type.as_ref().map(|n| n.name.as_str()),
        Some("RNIC")
    );
    let rate = port.rate.as_ref().expect("rate");
    assert_eq!(
        (rate.bits_per_second, rate.width, rate.speed.as_deref()),
        (Some(10_000_000_000), Some(4), None),
        "SDR prints no speed name"
    );
    assert_eq!(port.gids.len(), 1);
    assert_eq!(
        port.gids[0].gid_type, None,
        "no gid_attrs: absent, not an error"
    );
}

#[test]
fn bnxt_re_has_no_pma_dir_and_gauges() {
    let s = read("bnxt-re");
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    let dev = s.device("bnxt_re0").expect("bnxt_re0");
    assert_eq!(dev.driver.as_deref(), Some("bnxt_en"));
    let port = dev.port(1).expect("port");
    assert!(port.counters.iter().all(|c| c.source == CounterSource::Hw));
    let qps = port
        .counter(CounterSource::Hw, "active_qps")
        .expect("active_qps");
    assert_eq!(qps.kind, CounterKind::Gauge);
    let wm = port
        .counter(CounterSource::Hw, "watermark_qps")
        .expect("watermark_qps");
    assert_eq!(wm.kind, CounterKind::Gauge);
    let rx = port
        .counter(CounterSource::Hw, "rx_bytes")
        .expect("rx_bytes");
    assert_eq!((rx.unit, rx.bytes), (Unit::Bytes, Some(rx.value)));
    assert_eq!(port.netdev.as_deref(), Some("ens2f0np0"));
}

#[test]
fn efa_device_and_port_hw_counters() {
    let s = read("efa");
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    let dev = s.device("efa_0").expect("efa_0");
    assert_eq!(dev.hw_counters.len(), 13);
    assert!(dev
        .hw_counters
        .iter()
        .all(|c| c.source == CounterSource::DeviceHw));
    assert!(dev.hw_counters.iter().any(|c| &*c.name == "submitted_cmds"));
    let port = dev.port(1).expect("port");
    assert_eq!(port.counters.len(), 18);
    assert_eq!(port.link_layer.as_deref(), Some("Unknown"));
    assert_eq!(dev.node_type.as_ref().map(|n| n.id), Some(7));
    let rdma_read = port
        .counter(CounterSource::Hw, "rdma_read_resp_bytes")
        .expect("rdma_read_resp_bytes");
    assert_eq!(rdma_read.unit, Unit::Bytes);
}

#[test]
fn hfi1_device_level_counters() {
    let s = read("hfi1");
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    let dev = s.device("hfi1_0").expect("hfi1_0");
    let names: Vec<&str> = dev.hw_counters.iter().map(|c| &*c.name).collect();
    assert!(names.contains(&"DcRecvErr"), "{names:?}");
    let lifespan = dev
        .hw_counters
        .iter()
        .find(|c| &*c.name == "lifespan")
        .expect("device lifespan");
    assert_eq!(lifespan.kind, CounterKind::Gauge);
    let port = dev.port(1).expect("port");
    assert!(port.counter(CounterSource::Pma, "port_xmit_wait").is_some());
    assert!(port.counter(CounterSource::Hw, "TxWait").is_some());
    assert_eq!(dev.driver.as_deref(), Some("hfi1"));
}

#[test]
fn quirks_are_collected_with_context_and_never_fatal() {
    let s = read("quirks");
    let got: Vec<(&str, SourceErrorKind)> = s
        .errors
        .iter()
        .map(|e| {
            (
                e.path
                    .strip_prefix("class/infiniband/mlx5_0/")
                    .unwrap_or(&e.path),
                e.kind,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("ports/1/state", SourceErrorKind::Unparsable),
            ("ports/1/lid", SourceErrorKind::Unparsable),
            ("ports/1/gids/0", SourceErrorKind::Unparsable),
            (
                "ports/1/counters/VL15_dropped",
                SourceErrorKind::NotAvailable
            ),
            ("ports/1/counters/link_downed", SourceErrorKind::Unparsable),
            (
                "ports/1/counters/port_rcv_errors",
                SourceErrorKind::Unparsable
            ),
            (
                "ports/1/hw_counters/out_of_buffer",
                SourceErrorKind::IsDirectory
            ),
            ("ports/1/hw_counters/oversized", SourceErrorKind::TooLarge),
        ]
    );
    assert!(s
        .errors
        .iter()
        .all(|e| e.device.as_deref() == Some("mlx5_0")));
    assert!(s
        .errors
        .iter()
        .filter(|e| e.path.contains("/ports/"))
        .all(|e| e.port == Some(1)));
    let garbage = s
        .errors
        .iter()
        .find(|e| e.path.ends_with("port_rcv_errors"))
        .expect("garbage error");
    assert_eq!(garbage.detail, "0xdeadbeef");

    let dev = s
        .device("mlx5_0")
        .expect("the bad device is still reported");
    let port = dev.port(1).expect("port");
    assert_eq!(port.state, None);
    assert_eq!(port.lid, None);
    assert_eq!(
        port.sm_lid,
        Some(1),
        "one bad attribute does not spoil the next"
    );
    let rate = port.rate.as_ref().expect("rate text kept");
    assert_eq!((rate.text.as_str(), rate.bits_per_second), ("fast", None));
    assert_eq!(
        port.gids.len(),
        1,
        "the bad GID is skipped, the good one kept"
    );
    let names: Vec<&str> = port.counters.iter().map(|c| &*c.name).collect();
    assert_eq!(
        names,
        [
            "port_rcv_data",
            "port_xmit_data",
            "symbol_error",
            "lifespan",
            "out_of_sequence"
        ]
    );
    let good = s.device("mlx5_1").expect("the other device");
    assert_eq!(good.port(1).map(|p| p.counters.len()), Some(2));
    assert_eq!(
        good.port(1)
            .and_then(|p| p.rate.as_ref())
            .and_then(|r| r.bits_per_second),
        Some(400_000_000_000)
    );
}

#[test]
fn excluded_device_is_never_read() {
    let root = fixtures().join("filters");
    // Unfiltered, the broken device produces errors...
    let all = SysfsReader::new(&root).snapshot().expect("readable");
    assert_eq!(all.devices.len(), 2);
    assert_eq!(all.errors.len(), 4, "{:?}", all.errors);
    assert!(all
        .errors
        .iter()
        .all(|e| e.device.as_deref() == Some("mlx5_1")));
    // ...excluded, none of its files is opened: no errors at all.
    let filter = DeviceFilter::new(None, Some("mlx5_1")).expect("valid");
    let s = SysfsReader::new(&root)
        .with_filter(filter)
        .snapshot()
        .expect("readable");
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    let names: Vec<&str> = s.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["mlx5_0"]);
    // Same with an include pattern.
    let filter = DeviceFilter::new(Some("mlx5_0"), None).expect("valid");
    let s = SysfsReader::new(&root)
        .with_filter(filter)
        .snapshot()
        .expect("readable");
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    assert_eq!(s.devices.len(), 1);
    // And DeviceFilter::only.
    let s = SysfsReader::new(&root)
        .with_filter(DeviceFilter::only("mlx5_1"))
        .snapshot()
        .expect("readable");
    assert_eq!(s.devices.len(), 1);
    assert_eq!(s.errors.len(), 4);
}

#[test]
fn invalid_filter_is_a_typed_error() {
    let err = DeviceFilter::new(Some("mlx5_["), None).expect_err("invalid regex");
    let msg = err.to_string();
    assert!(msg.contains("include") && msg.contains("mlx5_["), "{msg}");
    assert!(
        std::error::Error::source(&err).is_some(),
        "carries the regex error"
    );
}

#[test]
fn missing_class_dir_is_no_devices_not_an_error() {
    let root = std::env::temp_dir().join(format!("rdmakit-no-sysfs-{}", std::process::id()));
    let s = SysfsReader::new(&root)
        .snapshot()
        .expect("no class dir is fine");
    assert!(s.devices.is_empty());
    assert!(s.errors.is_empty());
    assert!(SysfsReader::new(&root)
        .device_names()
        .expect("ok")
        .is_empty());
}

#[test]
fn device_names_lists_without_filtering() {
    let reader = SysfsReader::new(fixtures().join("filters"))
        .with_filter(DeviceFilter::new(Some("nothing"), None).expect("valid"));
    assert_eq!(
        reader.device_names().expect("readable"),
        ["mlx5_0", "mlx5_1"]
    );
    assert!(reader.snapshot().expect("readable").devices.is_empty());
}

#[test]
fn counters_can_be_skipped_and_are_then_never_opened() {
    let s = SysfsReader::new(fixtures().join("filters"))
        .with_options(ReadOptions {
            counters: false,
            ..ReadOptions::default()
        })
        .snapshot()
        .expect("readable");
    assert!(
        s.errors.is_empty(),
        "the broken counter files were not opened"
    );
    assert_eq!(s.devices.len(), 2);
    assert!(s
        .devices
        .iter()
        .all(|d| d.hw_counters.is_empty() && d.ports.iter().all(|p| p.counters.is_empty())));
    assert_eq!(
        s.devices[1].port(1).and_then(|p| p.lid),
        Some(4),
        "port attributes are still read"
    );
}

#[test]
fn gids_can_be_skipped() {
    let s = SysfsReader::new(fixtures().join("rxe"))
        .with_options(ReadOptions {
            gids: false,
            ..ReadOptions::default()
        })
        .snapshot()
        .expect("readable");
    let port = s.devices[0].port(1).expect("port");
    assert!(port.gids.is_empty());
    assert_eq!(port.netdev, None);
    assert_eq!(port.counters.len(), 16, "counters are still read");
}

#[test]
fn unit_and_kind_rules() {
    use rdmakit::model::Counter;
    let c = Counter::new("port_xmit_data", CounterSource::Pma, 10);
    assert_eq!((c.unit, c.bytes), (Unit::Words4, Some(40)));
    let c = Counter::new("port_xmit_data", CounterSource::Hw, 10);
    assert_eq!(
        c.unit,
        Unit::Count,
        "only the PMA data counters are in words"
    );
    let c = Counter::new("lifespan", CounterSource::DeviceHw, 10);
    assert_eq!((c.kind, c.unit), (CounterKind::Gauge, Unit::Ms));
    let c = Counter::new("tx_bytes", CounterSource::Hw, 7);
    assert_eq!((c.unit, c.bytes), (Unit::Bytes, Some(7)));
    let json = serde_json::to_value(&c).expect("serializes");
    assert_eq!(json["source"], "hw");
    assert_eq!(json["kind"], "counter");
    assert_eq!(json["unit"], "bytes");
}
