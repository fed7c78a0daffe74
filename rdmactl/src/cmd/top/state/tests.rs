//! Unit tests of the `top` model: rates from two snapshots, sorting, filtering, selection,
//! devices disappearing, events, probe parsing and QP grouping.

use super::events::Level;
use super::probes::parse_probe_series;
use super::resources::{group_qps, owner_text, QpInfo};
use super::*;
use rdmakit::model::{Counter, Device, Enumerated, Port};
use std::time::Duration;

fn catalog() -> &'static Catalog {
    Catalog::embedded().expect("embedded catalog")
}

fn port(num: u32, state: &str, counters: Vec<Counter>) -> Port {
    Port {
        num,
        state: Some(Enumerated {
            id: if state == "ACTIVE" { 4 } else { 1 },
            name: state.into(),
        }),
        link_layer: Some("Ethernet".into()),
        counters,
        ..Default::default()
    }
}

/// An rxe-like device: packet counters and one warning-level counter.
fn rxe(name: &str, rcvd: u64, sent: u64, dup: u64) -> Device {
    Device {
        name: name.into(),
        ports: vec![port(
            1,
            "ACTIVE",
            vec![
                Counter::new("rcvd_pkts", CounterSource::Hw, rcvd),
                Counter::new("sent_pkts", CounterSource::Hw, sent),
                Counter::new("duplicate_request", CounterSource::Hw, dup),
                Counter::new("lifespan", CounterSource::Hw, 10),
            ],
        )],
        ..Default::default()
    }
}

/// An IB-PMA device: 4-octet-word data counters and packet counters.
fn pma(name: &str, state: &str, words: u64, packets: u64, symbol_errors: u64) -> Device {
    Device {
        name: name.into(),
        driver: Some("mlx5_core".into()),
        ports: vec![port(
            1,
            state,
            vec![
                Counter::new("port_rcv_data", CounterSource::Pma, words),
                Counter::new("port_xmit_data", CounterSource::Pma, words * 2),
                Counter::new("port_rcv_packets", CounterSource::Pma, packets),
                Counter::new("port_xmit_packets", CounterSource::Pma, packets),
                Counter::new("symbol_error", CounterSource::Pma, symbol_errors),
            ],
        )],
        ..Default::default()
    }
}

fn snap(devices: Vec<Device>) -> Snapshot {
    Snapshot {
        devices,
        errors: Vec::new(),
    }
}

fn state_with(first: Snapshot, second: Snapshot, seconds: u64) -> (TopState, Vec<Event>) {
    let mut st = TopState::new(catalog(), Rules::embedded().ok());
    let t0 = Instant::now();
    st.apply_snapshot(first, t0);
    let events = st.apply_snapshot(second, t0 + Duration::from_secs(seconds));
    (st, events)
}

fn row<'a>(st: &'a TopState, dev: &str) -> &'a PortRow {
    st.all_ports()
        .iter()
        .find(|r| r.key.device == dev)
        .unwrap_or_else(|| panic!("no row for {dev}"))
}

#[test]
fn rates_come_from_two_snapshots() {
    let (st, _) = state_with(
        snap(vec![
            pma("mlx5_0", "ACTIVE", 1000, 100, 0),
            rxe("rxe0", 10, 20, 0),
        ]),
        snap(vec![
            pma("mlx5_0", "ACTIVE", 3000, 300, 0),
            rxe("rxe0", 30, 60, 4),
        ]),
        2,
    );
    let m = &row(&st, "mlx5_0").rates;
    // 2000 words in 2 s = 1000 words/s = 4000 bytes/s; xmit moved twice as much.
    assert_eq!(m.rx_bytes, Some(4000.0));
    assert_eq!(m.tx_bytes, Some(8000.0));
    assert_eq!(m.rx_packets, Some(100.0));
    assert_eq!(m.tx_packets, Some(100.0));
    assert_eq!(m.errors, Some(0.0));
    let r = &row(&st, "rxe0").rates;
    assert_eq!(
        r.rx_bytes, None,
        "rxe has no byte counters: absent, not zero"
    );
    assert_eq!(r.rx_packets, Some(10.0));
    assert_eq!(r.tx_packets, Some(20.0));
    // duplicate_request is a warning-level counter in the catalog.
    assert_eq!(r.errors, Some(2.0));
    assert_eq!(r.moving_errors, vec![("duplicate_request".to_owned(), 2.0)]);
}

#[test]
fn one_snapshot_has_no_rates_and_a_reset_is_not_negative() {
    let mut st = TopState::new(catalog(), None);
    let t0 = Instant::now();
    st.apply_snapshot(snap(vec![rxe("rxe0", 100, 100, 0)]), t0);
    assert_eq!(row(&st, "rxe0").rates, PortRates::default());
    // The device was re-created: counters start again from small values.
    st.apply_snapshot(
        snap(vec![rxe("rxe0", 5, 7, 0)]),
        t0 + Duration::from_secs(1),
    );
    let r = &row(&st, "rxe0").rates;
    assert_eq!(r.rx_packets, Some(5.0), "a reset counts from zero");
    assert_eq!(r.tx_packets, Some(7.0));
}

#[test]
fn sorting_by_each_key() {
    let (mut st, _) = state_with(
        snap(vec![
            pma("a_dev", "ACTIVE", 0, 0, 0),
            pma("b_dev", "ACTIVE", 0, 0, 0),
            pma("c_dev", "ACTIVE", 0, 0, 0),
        ]),
        snap(vec![
            pma("a_dev", "ACTIVE", 10, 50, 0),
            pma("b_dev", "ACTIVE", 30, 10, 9),
            pma("c_dev", "ACTIVE", 20, 90, 1),
        ]),
        1,
    );
    let names = |st: &TopState| -> Vec<String> {
        st.visible_ports()
            .iter()
            .map(|r| r.key.device.clone())
            .collect()
    };
    assert_eq!(names(&st), ["a_dev", "b_dev", "c_dev"]);
    st.cycle_sort();
    assert_eq!(st.port_sort, PortSort::RxBytes);
    assert_eq!(names(&st), ["b_dev", "c_dev", "a_dev"]);
    st.cycle_sort();
    assert_eq!(names(&st), ["b_dev", "c_dev", "a_dev"], "tx = 2 x rx");
    st.cycle_sort();
    assert_eq!(st.port_sort, PortSort::Packets);
    assert_eq!(names(&st), ["c_dev", "a_dev", "b_dev"]);
    st.cycle_sort();
    assert_eq!(st.port_sort, PortSort::Errors);
    assert_eq!(names(&st), ["b_dev", "c_dev", "a_dev"]);
    st.cycle_sort();
    assert_eq!(st.port_sort, PortSort::Name);
}

#[test]
fn filtering_hides_rows_and_keeps_the_selection_valid() {
    let (mut st, _) = state_with(
        snap(vec![pma("mlx5_0", "ACTIVE", 0, 0, 0), rxe("rxe0", 0, 0, 0)]),
        snap(vec![pma("mlx5_0", "ACTIVE", 0, 0, 0), rxe("rxe0", 0, 0, 0)]),
        1,
    );
    st.move_selection(1);
    assert_eq!(st.selected_port().unwrap().key.device, "rxe0");
    st.filter = "MLX".into();
    let visible = st.visible_ports();
    assert_eq!(visible.len(), 1);
    assert_eq!(visible[0].key.device, "mlx5_0");
    // The selected row is filtered out: the first visible row is selected instead.
    assert_eq!(st.selected_port().unwrap().key.device, "mlx5_0");
    st.filter = "DOWN".into();
    assert!(st.visible_ports().is_empty());
    assert!(st.selected_port().is_none());
    assert_eq!(st.explanation(), Explanation::Nothing);
    // The driver matches too.
    st.filter = "mlx5_core".into();
    assert_eq!(st.visible_ports().len(), 1);
}

#[test]
fn selection_follows_the_row_across_sorts_and_clamps() {
    let (mut st, _) = state_with(
        snap(vec![
            pma("a", "ACTIVE", 0, 0, 0),
            pma("b", "ACTIVE", 0, 0, 0),
        ]),
        snap(vec![
            pma("a", "ACTIVE", 1, 0, 0),
            pma("b", "ACTIVE", 5, 0, 0),
        ]),
        1,
    );
    st.move_selection(-3);
    assert_eq!(st.selected_port_index(), Some(0));
    st.move_selection(7);
    assert_eq!(st.selected_port().unwrap().key.device, "b");
    st.cycle_sort(); // rx bytes: b first
    assert_eq!(st.selected_port().unwrap().key.device, "b");
    assert_eq!(st.selected_port_index(), Some(0));
}

#[test]
fn a_device_disappearing_is_an_event_and_not_a_crash() {
    let mut st = TopState::new(catalog(), Rules::embedded().ok());
    let t0 = Instant::now();
    st.apply_snapshot(
        snap(vec![pma("mlx5_0", "ACTIVE", 0, 0, 0), rxe("rxe0", 0, 0, 0)]),
        t0,
    );
    st.move_selection(1);
    st.enter();
    assert_eq!(
        st.screen,
        Screen::Counters(PortKey {
            device: "rxe0".into(),
            port: 1
        })
    );
    let events = st.apply_snapshot(
        snap(vec![pma("mlx5_0", "ACTIVE", 0, 0, 0)]),
        t0 + Duration::from_secs(1),
    );
    assert!(
        events
            .iter()
            .any(|e| e.level == Level::Warn && e.message == "device rxe0 removed"),
        "{events:?}"
    );
    assert_eq!(st.all_ports().len(), 1);
    assert_eq!(
        st.screen,
        Screen::Ports,
        "the counters of a gone port close"
    );
    assert_eq!(st.selected_port().unwrap().key.device, "mlx5_0");
    // Everything gone (the class directory vanished).
    let events = st.apply_snapshot(snap(vec![]), t0 + Duration::from_secs(2));
    assert!(events.iter().any(|e| e.message == "device mlx5_0 removed"));
    assert!(st.visible_ports().is_empty());
    assert!(st.selected_port().is_none());
    st.move_selection(1);
    st.enter();
    assert_eq!(st.screen, Screen::Ports);
    // It comes back.
    let events = st.apply_snapshot(
        snap(vec![rxe("rxe0", 0, 0, 0)]),
        t0 + Duration::from_secs(3),
    );
    assert!(events.iter().any(|e| e.message == "device rxe0 added"));
}

#[test]
fn port_state_changes_and_anomalies_are_logged_once() {
    let (mut st, events) = state_with(
        snap(vec![pma("mlx5_0", "ACTIVE", 0, 0, 0)]),
        snap(vec![pma("mlx5_0", "DOWN", 0, 0, 5)]),
        1,
    );
    assert!(
        events
            .iter()
            .any(|e| e.level == Level::Error && e.message == "port mlx5_0/1 state ACTIVE -> DOWN"),
        "{events:?}"
    );
    let doctor: Vec<&Event> = events.iter().filter(|e| e.target == "doctor").collect();
    assert!(
        doctor.iter().any(|e| e.message.contains("mlx5_0/1")),
        "symbol_error moved: the doctor should say so: {events:?}"
    );
    // Still moving: nothing new to say.
    let t = Instant::now() + Duration::from_secs(5);
    let again = st.apply_snapshot(snap(vec![pma("mlx5_0", "DOWN", 0, 0, 9)]), t);
    assert!(
        again.iter().all(|e| e.target != "doctor"),
        "a steady anomaly is logged once: {again:?}"
    );
    // Stopped moving: one info line.
    let calm = st.apply_snapshot(
        snap(vec![pma("mlx5_0", "DOWN", 0, 0, 9)]),
        t + Duration::from_secs(1),
    );
    assert!(calm
        .iter()
        .any(|e| e.target == "doctor" && e.level == Level::Info && e.message.contains("stopped")));
}

#[test]
fn enter_opens_the_port_counters_at_the_moving_error_and_explains_it() {
    let (mut st, _) = state_with(
        snap(vec![rxe("rxe0", 0, 0, 0)]),
        snap(vec![rxe("rxe0", 10, 10, 3)]),
        1,
    );
    match st.explanation() {
        Explanation::Port(row, infos) => {
            assert_eq!(row.key.device, "rxe0");
            assert_eq!(infos.len(), 1);
            assert_eq!(infos[0].0.name, "duplicate_request");
        }
        other => panic!("expected a port explanation, got {other:?}"),
    }
    st.enter();
    match st.explanation() {
        Explanation::Counter(row, Some(info)) => {
            assert_eq!(row.name, "duplicate_request");
            assert_eq!(info.driver, "rxe");
            assert!(!info.meaning.is_empty());
        }
        other => panic!("expected the catalog entry of duplicate_request, got {other:?}"),
    }
    assert!(st.explain_full);
    st.move_selection(-10);
    match st.explanation() {
        Explanation::Counter(row, _) => assert_eq!(row.name, "rcvd_pkts"),
        other => panic!("{other:?}"),
    }
    st.counter_sort = CounterSort::Rate;
    let rows = st.counter_rows(&PortKey {
        device: "rxe0".into(),
        port: 1,
    });
    assert_eq!(rows[0].rate.as_ref().unwrap().per_second, 10.0);
    assert_eq!(rows.last().unwrap().name, "lifespan", "gauges have no rate");
    st.back();
    assert_eq!(st.screen, Screen::Ports);
}

#[test]
fn read_errors_are_logged_once_while_they_last() {
    let err = rdmakit::model::SourceError {
        origin: rdmakit::model::ErrorOrigin::Sysfs,
        device: Some("mlx5_0".into()),
        port: Some(1),
        path: "class/infiniband/mlx5_0/ports/1/counters/VL15_dropped".into(),
        kind: rdmakit::model::SourceErrorKind::InvalidArgument,
        detail: "Invalid argument".into(),
    };
    let mut with_err = snap(vec![pma("mlx5_0", "ACTIVE", 0, 0, 0)]);
    with_err.errors.push(err);
    let mut st = TopState::new(catalog(), None);
    let t0 = Instant::now();
    let first = st.apply_snapshot(with_err.clone(), t0);
    assert_eq!(first.iter().filter(|e| e.target == "sysfs").count(), 1);
    let second = st.apply_snapshot(with_err, t0 + Duration::from_secs(1));
    assert_eq!(second.iter().filter(|e| e.target == "sysfs").count(), 0);
    let failed = st.apply_sample_error("cannot list".into());
    assert_eq!(failed.len(), 1);
    assert_eq!(st.sample_error.as_deref(), Some("cannot list"));
    assert!(st.apply_sample_error("cannot list".into()).is_empty());
    assert_eq!(st.all_ports().len(), 1, "the last good data stays");
}

#[test]
fn probe_series_are_picked_out_of_an_exposition() {
    let text = "# HELP rdma_probe_latency_seconds Probe latency.\n\
                # TYPE rdma_probe_latency_seconds gauge\n\
                rdma_probe_latency_seconds{device=\"rxe0\",quantile=\"0.5\"} 1.8e-05\n\
                rdma_probe_success{device=\"rxe0\"} 1 1700000000\n\
                rdma_port_state{device=\"rxe0\"} 4\n\
                rdma_probe_odd{device=\"rx}e0\",peer=\"a,b\"} 2\n\
                rdma_probe_runs_total 12\n";
    let series = parse_probe_series(text).unwrap();
    assert_eq!(series.len(), 4, "{series:?}");
    assert_eq!(series[0].name, "rdma_probe_latency_seconds");
    assert_eq!(series[0].labels, "device=\"rxe0\",quantile=\"0.5\"");
    assert_eq!(series[0].value, 1.8e-05);
    assert_eq!(series[1].value, 1.0);
    // A brace or comma inside a label value is part of it (no `rfind('}')` guessing).
    assert_eq!(series[2].labels, "device=\"rx}e0\",peer=\"a,b\"");
    assert_eq!(series[2].value, 2.0);
    assert_eq!(series[3].name, "rdma_probe_runs_total");
    assert_eq!(series[3].labels, "");
    assert!(parse_probe_series("rdma_devices 2\n").unwrap().is_empty());
    let e = parse_probe_series("rdma_probe_broken{device=\"rxe0\"} notanumber\n").unwrap_err();
    assert_eq!(e.line, 1);
}

#[test]
fn qps_are_grouped_by_device_state_and_process() {
    let qp = |d: &str, s: &str, p: &str| QpInfo {
        device: d.into(),
        state: s.into(),
        process: p.into(),
    };
    let groups = group_qps(&[
        qp("rxe_b", "RTS", "ib_write_bw[7]"),
        qp("rxe_a", "RTS", "ib_write_bw[8]"),
        qp("rxe_a", "RTS", "ib_write_bw[8]"),
        qp("rxe_a", "RTS", "[ib_core]"),
    ]);
    let flat: Vec<(&str, &str, &str, usize)> = groups
        .iter()
        .map(|g| {
            (
                g.device.as_str(),
                g.state.as_str(),
                g.process.as_str(),
                g.count,
            )
        })
        .collect();
    assert_eq!(
        flat,
        [
            ("rxe_a", "RTS", "[ib_core]", 1),
            ("rxe_a", "RTS", "ib_write_bw[8]", 2),
            ("rxe_b", "RTS", "ib_write_bw[7]", 1),
        ]
    );
    assert_eq!(owner_text(Some(8), Some("perf"), None), "perf[8]");
    assert_eq!(owner_text(Some(8), None, None), "[8]");
    assert_eq!(
        owner_text(None, Some("ib_core"), Some("ib_core")),
        "[ib_core]"
    );
}

/// rdmad's exposition captured in the lab with two holders in two cgroups
/// (rdmactl/tests/data/README.md).
const CAPTURED_OWNERS: &str = include_str!("../../../../tests/data/owners.prom");

#[test]
fn top_owners_from_a_captured_exposition_rank_by_qps_with_their_err_qps() {
    use super::owners::{from_exposition, OwnerStatus, TopOwner};
    let exposition = rdmakit::exposition::parse(CAPTURED_OWNERS).unwrap();
    let Some(OwnerStatus::Owners {
        rows,
        source,
        total,
    }) = from_exposition(&exposition)
    else {
        panic!("no owners in the captured exposition");
    };
    assert_eq!(source, "rdmad");
    assert_eq!(total, 3);
    let row = |owner: &str, place: &str, qps: u64, err: u64| TopOwner {
        owner: owner.into(),
        place: place.into(),
        qps,
        err,
    };
    assert_eq!(
        rows,
        vec![
            // ERR and INIT QPs of the same holder are one row: 3 INIT + 2 ERR.
            row("owners_scale[158]", "/job-a.scope", 5, 2),
            row("owners_scale[161]", "/job-b.scope", 3, 0),
            row("kernel", "", 1, 0),
        ]
    );
    // An exposition without the family (netlink_owners off) is no owners, not zero owners.
    let without = rdmakit::exposition::parse("rdma_devices 1\n").unwrap();
    assert!(from_exposition(&without).is_none());
}

#[test]
fn top_owners_keep_the_ten_largest_and_say_how_many_there_were() {
    use super::owners::{from_exposition, OwnerStatus, TOP_OWNERS};
    let mut text = String::new();
    for i in 0..15u64 {
        text.push_str(&format!(
            "rdma_owner_qps{{device=\"mlx5_0\",state=\"RTS\",qp_type=\"RC\",comm=\"job{i}\",cgroup=\"\",pod_uid=\"{}\",container_id=\"\"}} {}\n",
            if i == 14 { "1b2c3d4e-5f60-4718-92a3-b4c5d6e7f809" } else { "" },
            i + 1
        ));
    }
    let exposition = rdmakit::exposition::parse(&text).unwrap();
    let Some(OwnerStatus::Owners { rows, total, .. }) = from_exposition(&exposition) else {
        panic!("no owners");
    };
    assert_eq!(total, 15);
    assert_eq!(rows.len(), TOP_OWNERS);
    assert_eq!(rows[0].owner, "job14");
    assert_eq!(rows[0].place, "pod 1b2c3d4e-5f60-4718-92a3-b4c5d6e7f809");
    assert_eq!(rows[0].qps, 15);
    assert_eq!(rows[TOP_OWNERS - 1].qps, 6);
}

#[test]
fn top_owners_from_a_tally_of_captured_dumps_match_the_exposition_path() {
    use super::owners::{from_report, OwnerStatus};
    use rdmakit::attribution::{Tally, TallyOptions, KINDS};
    let data =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crates/rdmakit/tests/data");
    let mut tally = Tally::new(TallyOptions {
        proc_root: data.join("proc-captured"),
        pids: true,
        ..TallyOptions::default()
    });
    for dev in ["rxe0", "rxe_a", "rxe_b"] {
        for kind in KINDS {
            let path = data.join(format!("nldev/res_{}_{dev}.bin", kind.name()));
            let bytes = std::fs::read(path).unwrap_or_default();
            tally.add_answer(kind, &bytes).unwrap();
        }
    }
    let OwnerStatus::Owners { rows, source, .. } = from_report(&tally.finish(256)) else {
        panic!("no owners");
    };
    assert_eq!(source, "netlink");
    // rdma -j res show qp of the same capture: 16 QPs of pid 170 on rxe_b, 1 of pid 168,
    // and the kernel's GSI QP on each of the three devices.
    assert_eq!(rows[0].owner, "ibv_srq_pingpon[170]");
    assert_eq!((rows[0].qps, rows[0].err), (16, 0));
    assert_eq!(rows[0].place, "/lab.slice/job-b.scope");
    let kernel = rows.iter().find(|r| r.owner == "kernel").unwrap();
    assert_eq!(kernel.qps, 3);
}
