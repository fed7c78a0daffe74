//! nldev parser tests on bytes captured from the lab kernel (Linux 6.1, rxe0/rxe_a/rxe_b; see
//! tests/data/nldev/README.md for how they were captured): parse == what `rdma -j` and sysfs
//! printed at the same moment, emit == bytes for every captured message and request, and
//! malformed input (truncated, wrong type, missing required, unknown attributes).

use netlink_packet_core::{DefaultNla, NetlinkPayload, NLA_F_NESTED};
use rdmakit::nldev::ids::{attr, cmd};
use rdmakit::nldev::message::{emit, split_messages};
use rdmakit::nldev::monitor::{diff, DeviceState, Topology};
use rdmakit::nldev::{parse, *};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/nldev")
}

/// A captured answer; a missing file is an empty answer (the capture tool skips empty dumps).
fn capture(name: &str) -> Vec<u8> {
    std::fs::read(data_dir().join(name)).unwrap_or_default()
}

fn json(name: &str) -> Value {
    let text = std::fs::read_to_string(data_dir().join(name)).expect(name);
    serde_json::from_str(&text).expect(name)
}

fn messages(name: &str) -> Vec<NldevMessage> {
    split_messages(&capture(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .into_iter()
        .filter_map(|(_, m)| match m.payload {
            NetlinkPayload::InnerMessage(m) => Some(m),
            _ => None,
        })
        .collect()
}

const DEVICES: [(&str, u32); 3] = [("rxe0", 0), ("rxe_a", 1), ("rxe_b", 2)];

fn answer_files() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(data_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".bin") && !n.ends_with(".req.bin"))
        .collect();
    names.sort();
    names
}

#[test]
fn every_captured_message_parses_and_emits_back_to_the_same_bytes() {
    let files = answer_files();
    assert!(files.len() >= 20, "captures missing: {files:?}");
    let mut total = 0;
    for name in &files {
        let bytes = capture(name);
        let mut rebuilt = Vec::new();
        for (raw, msg) in split_messages(&bytes).unwrap_or_else(|e| panic!("{name}: {e}")) {
            assert_eq!(emit(&msg), raw, "{name}: emit != captured bytes");
            rebuilt.extend_from_slice(raw);
            let NetlinkPayload::InnerMessage(m) = msg.payload else {
                panic!("{name}: a control message was captured");
            };
            parse::any(&m).unwrap_or_else(|e| panic!("{name}: {e}"));
            total += 1;
        }
        assert_eq!(rebuilt, bytes, "{name}: messages do not cover the file");
    }
    assert!(total >= 25, "only {total} messages");
}

#[test]
fn requests_emit_the_captured_request_bytes() {
    assert_eq!(Request::devices().to_bytes(1), capture("get_dump.req.bin"));
    assert_eq!(
        Request::resource_summary().to_bytes(1),
        capture("res_get_dump.req.bin")
    );
    for (d, i) in DEVICES {
        let n = Some(d);
        let cases: Vec<(String, Request)> = vec![
            (format!("port_get_{d}"), Request::ports(i, n)),
            (format!("stat_get_{d}_p1"), Request::hw_counters(i, n, 1)),
            (
                format!("stat_get_status_{d}_p1"),
                Request::counter_status(i, n, 1),
            ),
            (
                format!("stat_qp_mode_{d}_p1"),
                Request::qp_counter_mode(i, n, 1),
            ),
            (
                format!("stat_qp_dump_{d}_p1"),
                Request::qp_counters(i, n, 1),
            ),
        ]
        .into_iter()
        .chain(ResourceKind::ALL.iter().map(|k| {
            (
                format!("res_{}_{d}", k.name()),
                Request::resources(*k, i, n),
            )
        }))
        .collect();
        for (name, req) in cases {
            let file = capture(&format!("{name}.req.bin"));
            assert!(!file.is_empty(), "{name}.req.bin missing");
            assert_eq!(req.to_bytes(1), file, "{name}");
        }
    }
    // The flags iproute2 uses: dumps carry NLM_F_DUMP, per-port STAT_GET does not.
    assert!(Request::resources(ResourceKind::Qp, 0, None).is_dump());
    assert!(!Request::hw_counters(0, None, 1).is_dump());
}

#[test]
fn devices_equal_rdma_dev_show() {
    let ours: Vec<NlDevice> = messages("get_dump.bin")
        .iter()
        .map(|m| parse::device(m).unwrap())
        .collect();
    let theirs = json("rdma_dev_show.json");
    let theirs = theirs.as_array().unwrap();
    assert_eq!(ours.len(), theirs.len());
    for (o, t) in ours.iter().zip(theirs) {
        assert_eq!(Some(u64::from(o.index)), t["ifindex"].as_u64());
        assert_eq!(Some(o.name.as_str()), t["ifname"].as_str());
        assert_eq!(o.node_type.map(|n| n.name()), t["node_type"].as_str());
        assert_eq!(
            o.node_guid.map(format_guid).as_deref(),
            t["node_guid"].as_str()
        );
        assert_eq!(
            o.sys_image_guid.map(format_guid).as_deref(),
            t["sys_image_guid"].as_str()
        );
        assert_eq!(o.port_count, Some(1));
    }
    assert_eq!(ours[0].name, "rxe0");
    assert_eq!(ours[0].protocol.as_deref(), Some("roce"));
}

#[test]
fn ports_carry_state_and_netdev() {
    for (d, netdev) in [("rxe0", "eth0"), ("rxe_a", "veth0"), ("rxe_b", "veth1")] {
        let ports: Vec<NlPort> = messages(&format!("port_get_{d}.bin"))
            .iter()
            .map(|m| parse::port(m).unwrap())
            .collect();
        assert_eq!(ports.len(), 1, "{d}");
        let p = &ports[0];
        assert_eq!((p.dev_name.as_str(), p.port), (d, 1));
        assert_eq!(p.state.map(|s| s.name()), Some("ACTIVE"));
        assert_eq!(p.phys_state.map(|s| s.name()), Some("LINK_UP"));
        assert_eq!(p.netdev.as_deref(), Some(netdev));
        assert!(p.netdev_index.is_some());
    }
}

fn sysfs_values() -> BTreeMap<(String, String), u64> {
    let text = std::fs::read_to_string(data_dir().join("sysfs_hw_counters.txt")).unwrap();
    text.lines()
        .filter_map(|l| {
            let (path, value) = l.split_once(' ')?;
            let parts: Vec<&str> = path.split('/').collect();
            // /sys/class/infiniband/<dev>/ports/<n>/hw_counters/<name>
            Some((
                (parts[4].to_string(), parts[8].to_string()),
                value.parse().ok()?,
            ))
        })
        .collect()
}

#[test]
fn hw_counters_equal_rdma_statistic_show_and_sysfs() {
    let theirs = json("rdma_statistic_show.json");
    let sysfs = sysfs_values();
    assert!(
        sysfs.len() >= 45,
        "sysfs capture too small: {}",
        sysfs.len()
    );
    let mut moved = 0;
    for (d, _) in DEVICES {
        let msgs = messages(&format!("stat_get_{d}_p1.bin"));
        assert_eq!(msgs.len(), 1);
        let ours = parse::port_counters(&msgs[0]).unwrap();
        assert_eq!((ours.dev_name.as_str(), ours.port), (d, 1));
        let t = theirs
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["ifname"] == d)
            .unwrap();
        let t = t.as_object().unwrap();
        // rdma prints ifname, port and one key per counter.
        assert_eq!(ours.counters.len(), t.len() - 2, "{d}");
        for c in &ours.counters {
            let v = c.value.unwrap();
            assert_eq!(t[&c.name].as_u64(), Some(v), "{d} {}", c.name);
            assert_eq!(
                sysfs.get(&(d.to_string(), c.name.clone())),
                Some(&v),
                "{d} {} vs sysfs",
                c.name
            );
            assert_eq!(c.enabled, None, "rxe has no optional counters");
            moved += usize::from(v > 0);
        }
        // sysfs has one more file: lifespan (a period, not a counter; netlink omits it).
        let in_sysfs = sysfs.keys().filter(|(dev, _)| dev == d).count();
        assert_eq!(in_sysfs, ours.counters.len() + 1, "{d}");
    }
    assert!(
        moved >= 4,
        "the capture was not taken after traffic ({moved} non-zero)"
    );
    let a = parse::port_counters(&messages("stat_get_rxe_a_p1.bin")[0]).unwrap();
    let b = parse::port_counters(&messages("stat_get_rxe_b_p1.bin")[0]).unwrap();
    // ib_write_bw from rxe_b to rxe_a: every packet b sent, a received.
    assert_eq!(
        a.get("rcvd_pkts").unwrap().value,
        b.get("sent_pkts").unwrap().value
    );
    assert!(a.get("rcvd_pkts").unwrap().value.unwrap() > 1000);
}

#[test]
fn counter_status_lists_names_and_indexes_without_values() {
    let s = parse::counter_status(&messages("stat_get_status_rxe_a_p1.bin")[0]).unwrap();
    assert_eq!(s.counters.len(), 15);
    assert_eq!(s.counters[0].name, "sent_pkts");
    for (i, c) in s.counters.iter().enumerate() {
        assert_eq!(c.index, Some(i as u32));
        assert_eq!(c.value, None);
    }
}

#[test]
fn qp_counter_mode_is_none_and_no_counter_is_bound() {
    for (d, _) in DEVICES {
        let m = parse::qp_counter_mode(&messages(&format!("stat_qp_mode_{d}_p1.bin"))[0]).unwrap();
        assert_eq!(
            (m.dev_name.as_str(), m.port, m.mode, m.auto_mode_mask),
            (d, 1, 0, None)
        );
        assert!(messages(&format!("stat_qp_dump_{d}_p1.bin")).is_empty());
    }
}

#[test]
fn summary_equals_rdma_res_show() {
    let theirs = json("rdma_res_show.json");
    let ours: Vec<ResourceSummary> = messages("res_get_dump.bin")
        .iter()
        .map(|m| parse::resource_summary(m).unwrap())
        .collect();
    assert_eq!(ours.len(), 3);
    for (o, t) in ours.iter().zip(theirs.as_array().unwrap()) {
        assert_eq!(Some(o.dev_name.as_str()), t["ifname"].as_str());
        assert_eq!(o.counts.len(), 7);
        for (name, count) in &o.counts {
            assert_eq!(t[name].as_u64(), Some(*count), "{} {name}", o.dev_name);
        }
    }
    assert_eq!(ours[2].count("qp"), Some(17));
}

fn resources(kind: ResourceKind) -> Vec<Resource> {
    DEVICES
        .iter()
        .flat_map(|(d, _)| messages(&format!("res_{}_{d}.bin", kind.name())))
        .flat_map(|m| parse::resources(kind, &m).unwrap())
        .collect()
}

#[test]
fn qps_equal_rdma_res_show_qp() {
    let theirs = json("rdma_res_show_qp.json");
    let theirs = theirs.as_array().unwrap();
    let ours = resources(ResourceKind::Qp);
    assert_eq!(ours.len(), theirs.len());
    for (o, t) in ours.iter().zip(theirs) {
        let Resource::Qp(q) = o else {
            panic!("not a QP")
        };
        assert_eq!(Some(q.dev_name.as_str()), t["ifname"].as_str());
        assert_eq!(q.port.map(u64::from), t["port"].as_u64());
        assert_eq!(Some(u64::from(q.lqpn)), t["lqpn"].as_u64());
        assert_eq!(q.rqpn.map(u64::from), t["rqpn"].as_u64());
        assert_eq!(Some(q.qp_type.name()), t["type"].as_str());
        assert_eq!(Some(q.state.name()), t["state"].as_str());
        assert_eq!(q.rq_psn.map(u64::from), t["rq-psn"].as_u64());
        assert_eq!(Some(u64::from(q.sq_psn)), t["sq-psn"].as_u64());
        assert_eq!(
            q.path_mig_state.map(|p| p.name()),
            t["path-mig-state"].as_str()
        );
        assert_eq!(q.pdn.map(u64::from), t["pdn"].as_u64());
        assert_eq!(q.owner.pid.map(u64::from), t["pid"].as_u64());
        if q.owner.pid.is_none() {
            // Kernel QPs: comm is the kernel owner; user comm comes from /proc at run time.
            assert_eq!(q.owner.comm.as_deref(), t["comm"].as_str());
        }
    }
}

#[test]
fn cm_id_srq_mr_pd_ctx_cq_parse_to_what_rdma_printed() {
    let cm = resources(ResourceKind::CmId);
    let t = &json("rdma_res_show_cm_id.json")[0];
    let [Resource::CmId(c)] = cm.as_slice() else {
        panic!("{cm:?}")
    };
    assert_eq!(c.state.name(), t["state"].as_str().unwrap());
    assert_eq!(c.ps, 0x106, "TCP port space");
    assert_eq!(
        c.src_addr.map(|a| a.to_string()).as_deref(),
        t["src-addr"].as_str()
    );
    assert_eq!(
        c.dst_addr.map(|a| a.to_string()).as_deref(),
        t["dst-addr"].as_str()
    );
    assert_eq!(c.owner.pid.map(u64::from), t["pid"].as_u64());

    let srq = resources(ResourceKind::Srq);
    let [Resource::Srq(s)] = srq.as_slice() else {
        panic!("{srq:?}")
    };
    assert_eq!((s.dev_name.as_str(), s.srqn, s.pdn), ("rxe_b", 0, Some(2)));
    assert_eq!(s.qps, vec![QpnRange { min: 18, max: 33 }]);

    let mr_json = json("rdma_res_show_mr.json");
    let mrs = resources(ResourceKind::Mr);
    assert_eq!(mrs.len(), 2);
    for (o, t) in mrs.iter().zip(mr_json.as_array().unwrap()) {
        let Resource::Mr(m) = o else { panic!() };
        assert_eq!(Some(m.mrlen), t["mrlen"].as_u64());
        assert_eq!(m.mrn.map(u64::from), t["mrn"].as_u64());
        let lkey = m.lkey.as_ref().unwrap().reveal();
        assert_eq!(format!("{lkey:x}"), t["lkey"].as_str().unwrap());
        // Keys never leak through Debug or JSON.
        let text = serde_json::to_string(o).unwrap() + &format!("{o:?}");
        assert!(!text.contains(&format!("{lkey}")) || *lkey < 10, "{text}");
        assert!(text.contains("<hidden>"));
        assert_eq!(serde_json::to_value(m).unwrap()["lkey"], "<hidden>");
    }
    let summary: Vec<ResourceSummary> = messages("res_get_dump.bin")
        .iter()
        .map(|m| parse::resource_summary(m).unwrap())
        .collect();
    for kind in [ResourceKind::Pd, ResourceKind::Ctx, ResourceKind::Cq] {
        let total: u64 = summary.iter().map(|s| s.count(kind.name()).unwrap()).sum();
        assert_eq!(resources(kind).len() as u64, total, "{}", kind.name());
    }
    for r in resources(ResourceKind::Pd) {
        let Resource::Pd(p) = r else { panic!() };
        assert!(p.local_dma_lkey.is_some());
        assert_eq!(
            serde_json::to_value(&p).unwrap()["local_dma_lkey"],
            "<hidden>"
        );
    }
}

// ---- malformed input -------------------------------------------------------------------

fn u32_nla(id: u16, v: u32) -> DefaultNla {
    DefaultNla::new(id, v.to_ne_bytes().to_vec())
}

fn str_nla(id: u16, s: &str) -> DefaultNla {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    DefaultNla::new(id, v)
}

fn nested(id: u16, children: &[DefaultNla]) -> DefaultNla {
    let mut m = NldevMessage::new(0);
    m.attrs = children.to_vec();
    DefaultNla::new(id | NLA_F_NESTED, m.attr_bytes())
}

fn msg(command: u8, attrs: Vec<DefaultNla>) -> NldevMessage {
    NldevMessage { command, attrs }
}

#[test]
fn truncated_captures_error_and_never_panic() {
    for name in answer_files() {
        let bytes = capture(&name);
        for cut in 1..bytes.len() {
            let prefix = &bytes[..cut];
            if let Ok(msgs) = split_messages(prefix) {
                // A cut on a message boundary is a shorter, valid capture.
                let covered: usize = msgs.iter().map(|(raw, _)| (raw.len() + 3) & !3).sum();
                assert!(covered >= cut, "{name} cut at {cut} silently dropped bytes");
            }
        }
    }
}

#[test]
fn wrong_type_is_rejected_with_command_attribute_and_device() {
    let m = msg(
        cmd::GET,
        vec![
            u32_nla(attr::DEV_INDEX, 0),
            str_nla(attr::DEV_NAME, "rxe0"),
            DefaultNla::new(attr::NODE_GUID, vec![1, 2, 3, 4]),
        ],
    );
    let err = parse::device(&m).unwrap_err();
    assert_eq!(err.attr, Some(attr::NODE_GUID));
    assert_eq!(err.command, Some(cmd::GET));
    assert_eq!(
        err.kind,
        ParseErrorKind::WrongLength {
            expected: 8,
            found: 4
        }
    );
    let text = err.to_string();
    assert!(
        text.contains("GET") && text.contains("NODE_GUID") && text.contains("rxe0"),
        "{text}"
    );

    let m = msg(
        cmd::GET,
        vec![
            u32_nla(attr::DEV_INDEX, 0),
            DefaultNla::new(attr::DEV_NAME, b"rxe0".to_vec()),
        ],
    );
    assert_eq!(
        parse::device(&m).unwrap_err().kind,
        ParseErrorKind::NotNulTerminated
    );

    // A wrong type inside a nested entry names the entry's attribute and the device.
    let entry = nested(
        attr::RES_QP_ENTRY,
        &[DefaultNla::new(attr::RES_LQPN, vec![1])],
    );
    let m = msg(
        cmd::RES_QP_GET,
        vec![
            u32_nla(attr::DEV_INDEX, 3),
            str_nla(attr::DEV_NAME, "mlx5_0"),
            nested(attr::RES_QP, &[entry]),
        ],
    );
    let err = parse::resources(ResourceKind::Qp, &m).unwrap_err();
    assert_eq!(
        (err.attr, err.device.as_deref()),
        (Some(attr::RES_LQPN), Some("mlx5_0"))
    );
}

#[test]
fn missing_required_attributes_are_reported() {
    let m = msg(cmd::GET, vec![u32_nla(attr::DEV_INDEX, 0)]);
    let err = parse::device(&m).unwrap_err();
    assert_eq!(
        (err.attr, &err.kind),
        (Some(attr::DEV_NAME), &ParseErrorKind::Missing)
    );

    let entry = nested(
        attr::STAT_HWCOUNTER_ENTRY,
        &[str_nla(attr::STAT_HWCOUNTER_ENTRY_NAME, "x")],
    );
    let m = msg(
        cmd::STAT_GET,
        vec![
            u32_nla(attr::DEV_INDEX, 0),
            str_nla(attr::DEV_NAME, "rxe0"),
            u32_nla(attr::PORT_INDEX, 1),
            nested(attr::STAT_HWCOUNTERS, &[entry]),
        ],
    );
    let err = parse::port_counters(&m).unwrap_err();
    assert_eq!(err.attr, Some(attr::STAT_HWCOUNTER_ENTRY_VALUE));
    assert!(
        err.to_string().contains("STAT_HWCOUNTER_ENTRY_VALUE"),
        "{err}"
    );

    // A QP without its state is rejected (iproute2 requires LQPN, SQ_PSN, TYPE, STATE).
    let entry = nested(
        attr::RES_QP_ENTRY,
        &[
            u32_nla(attr::RES_LQPN, 5),
            u32_nla(attr::RES_SQ_PSN, 0),
            DefaultNla::new(attr::RES_TYPE, vec![2]),
        ],
    );
    let m = msg(
        cmd::RES_QP_GET,
        vec![
            u32_nla(attr::DEV_INDEX, 0),
            str_nla(attr::DEV_NAME, "rxe0"),
            nested(attr::RES_QP, &[entry]),
        ],
    );
    assert_eq!(
        parse::resources(ResourceKind::Qp, &m).unwrap_err().attr,
        Some(attr::RES_STATE)
    );

    // The answer of another command is not taken for this one.
    let m = msg(
        cmd::PORT_GET,
        vec![u32_nla(attr::DEV_INDEX, 0), str_nla(attr::DEV_NAME, "rxe0")],
    );
    assert!(parse::device(&m).is_err());
}

#[test]
fn unknown_attributes_from_newer_kernels_are_skipped() {
    let mut m = messages("get_dump.bin").remove(0);
    let before = parse::device(&m).unwrap();
    m.attrs.push(DefaultNla::new(250, vec![9, 9, 9]));
    m.attrs
        .push(DefaultNla::new(attr::PARENT_NAME, b"pci\0".to_vec()));
    assert_eq!(parse::device(&m).unwrap(), before);
}

#[test]
fn optional_counters_carry_index_and_enabled_state() {
    let entry = |name: &str, index: u32, dynamic: Option<u8>, value: Option<u64>| {
        let mut c = vec![
            str_nla(attr::STAT_HWCOUNTER_ENTRY_NAME, name),
            u32_nla(attr::STAT_HWCOUNTER_INDEX, index),
        ];
        if let Some(d) = dynamic {
            c.push(DefaultNla::new(attr::STAT_HWCOUNTER_DYNAMIC, vec![d]));
        }
        if let Some(v) = value {
            c.push(DefaultNla::new(
                attr::STAT_HWCOUNTER_ENTRY_VALUE,
                v.to_ne_bytes().to_vec(),
            ));
        }
        nested(attr::STAT_HWCOUNTER_ENTRY, &c)
    };
    let head = || {
        vec![
            u32_nla(attr::DEV_INDEX, 4),
            str_nla(attr::DEV_NAME, "mlx5_0"),
            u32_nla(attr::PORT_INDEX, 1),
        ]
    };
    let mut attrs = head();
    attrs.push(nested(
        attr::STAT_HWCOUNTERS,
        &[
            entry("cc_rx_ce_pkts", 40, Some(1), None),
            entry("cc_tx_cnp_pkts", 41, Some(0), None),
        ],
    ));
    let s = parse::counter_status(&msg(cmd::STAT_GET_STATUS, attrs)).unwrap();
    assert_eq!(s.counters[0].enabled, Some(true));
    assert_eq!(s.counters[1].enabled, Some(false));
    assert_eq!(s.counters[1].index, Some(41));

    let mut attrs = head();
    attrs.push(nested(
        attr::STAT_HWCOUNTERS,
        &[
            entry("rx_write_requests", 3, None, Some(7)),
            entry("cc_rx_ce_pkts", 40, Some(1), Some(12)),
        ],
    ));
    let c = parse::port_counters(&msg(cmd::STAT_GET, attrs)).unwrap();
    assert_eq!(c.get("cc_rx_ce_pkts").unwrap().value, Some(12));
    assert_eq!(c.get("cc_rx_ce_pkts").unwrap().enabled, Some(true));
    assert_eq!(c.get("rx_write_requests").unwrap().enabled, None);
}

#[test]
fn bound_qp_counters_and_auto_mode_parse() {
    let hw = nested(
        attr::STAT_HWCOUNTERS,
        &[nested(
            attr::STAT_HWCOUNTER_ENTRY,
            &[
                str_nla(attr::STAT_HWCOUNTER_ENTRY_NAME, "rx_write_requests"),
                DefaultNla::new(
                    attr::STAT_HWCOUNTER_ENTRY_VALUE,
                    99u64.to_ne_bytes().to_vec(),
                ),
            ],
        )],
    );
    let qps = nested(
        attr::RES_QP,
        &[
            nested(attr::RES_QP_ENTRY, &[u32_nla(attr::RES_LQPN, 17)]),
            nested(attr::RES_QP_ENTRY, &[u32_nla(attr::RES_LQPN, 18)]),
        ],
    );
    let entry = nested(
        attr::STAT_COUNTER_ENTRY,
        &[
            u32_nla(attr::PORT_INDEX, 1),
            u32_nla(attr::STAT_COUNTER_ID, 3),
            DefaultNla::new(attr::RES_TYPE, vec![2]),
            u32_nla(attr::RES_PID, 77),
            hw,
            qps,
        ],
    );
    let m = msg(
        cmd::STAT_GET,
        vec![
            u32_nla(attr::DEV_INDEX, 4),
            str_nla(attr::DEV_NAME, "mlx5_0"),
            nested(attr::STAT_COUNTER, &[entry]),
        ],
    );
    let b = parse::bound_counters(&m).unwrap();
    assert_eq!(b.len(), 1);
    assert_eq!(
        (b[0].counter_id, b[0].port, b[0].pid, b[0].lqpns.clone()),
        (3, Some(1), Some(77), vec![17, 18])
    );
    assert_eq!(b[0].qp_type.map(|t| t.name()), Some("RC"));
    assert_eq!(b[0].counters[0].value, Some(99));

    let auto = msg(
        cmd::STAT_GET,
        vec![
            u32_nla(attr::DEV_INDEX, 4),
            str_nla(attr::DEV_NAME, "mlx5_0"),
            u32_nla(attr::PORT_INDEX, 1),
            u32_nla(attr::STAT_MODE, 1),
        ],
    );
    assert_eq!(
        parse::qp_counter_mode(&auto).unwrap_err().attr,
        Some(attr::STAT_AUTO_MODE_MASK)
    );
    let mut auto = auto;
    auto.attrs.push(u32_nla(attr::STAT_AUTO_MODE_MASK, 1));
    assert_eq!(
        parse::qp_counter_mode(&auto).unwrap().auto_mode_mask,
        Some(1)
    );
}

#[test]
fn monitor_events_parse_and_topology_diffs_become_events() {
    let m = msg(
        cmd::MONITOR,
        vec![
            DefaultNla::new(attr::EVENT_TYPE, vec![2]),
            u32_nla(attr::DEV_INDEX, 7),
            str_nla(attr::DEV_NAME, "rxe9"),
            u32_nla(attr::PORT_INDEX, 1),
            u32_nla(attr::NDEV_INDEX, 2),
            str_nla(attr::NDEV_NAME, "eth0"),
        ],
    );
    let e = parse::event(&m).unwrap();
    assert_eq!(
        (e.kind, e.dev_name.as_deref(), e.netdev.as_deref(), e.source),
        (
            EventKind::NetdevAttach,
            Some("rxe9"),
            Some("eth0"),
            EventSource::Kernel
        )
    );
    assert!(parse::event(&msg(cmd::MONITOR, vec![u32_nla(attr::DEV_INDEX, 7)])).is_err());

    let dev = |name: &str, nd: Option<(u32, &str)>| DeviceState {
        name: name.into(),
        ports: [(1, nd.map(|(i, n)| (i, n.to_string())))]
            .into_iter()
            .collect(),
    };
    let before: Topology = [(0, dev("rxe0", Some((2, "eth0"))))].into_iter().collect();
    let mut after = before.clone();
    after.insert(5, dev("rxe9", Some((2, "eth0"))));
    let added = diff(&before, &after);
    assert_eq!(
        added.iter().map(|e| e.kind).collect::<Vec<_>>(),
        vec![EventKind::Register, EventKind::NetdevAttach]
    );
    assert_eq!(added[0].dev_name.as_deref(), Some("rxe9"));
    let removed = diff(&after, &before);
    assert_eq!(
        removed.iter().map(|e| e.kind).collect::<Vec<_>>(),
        vec![EventKind::NetdevDetach, EventKind::Unregister]
    );
    let mut detached = before.clone();
    detached.insert(0, dev("rxe0", None));
    assert_eq!(diff(&before, &detached)[0].kind, EventKind::NetdevDetach);
    assert!(diff(&before, &before).is_empty());
}

#[test]
fn errors_become_snapshot_problems_with_device_and_kind() {
    use rdmakit::model::{ErrorOrigin, SourceErrorKind};
    let m = msg(
        cmd::GET,
        vec![
            u32_nla(attr::DEV_INDEX, 0),
            str_nla(attr::DEV_NAME, "mlx5_1"),
            DefaultNla::new(attr::LID, vec![1]),
        ],
    );
    let err = NldevError::from(parse::device(&m).unwrap_err());
    let s = err.to_source_error("GET", None);
    assert_eq!(
        (s.origin, s.kind, s.device.as_deref()),
        (
            ErrorOrigin::Netlink,
            SourceErrorKind::Unparsable,
            Some("mlx5_1")
        )
    );
    assert!(s.detail.contains("LID"), "{}", s.detail);
    let err = NldevError::Kernel {
        command: "STAT_GET".into(),
        device: Some("siw0".into()),
        errno: 22,
    };
    let s = err.to_source_error("STAT_GET siw0/1", Some(1));
    assert_eq!(
        (s.kind, s.port),
        (SourceErrorKind::InvalidArgument, Some(1))
    );
    assert!(err.to_string().contains("siw0"), "{err}");
    assert!(!err.is_no_rdma());
}
