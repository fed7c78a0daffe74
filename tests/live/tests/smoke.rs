//! Live smoke test, run INSIDE the Soft-RoCE lab VM (never on the host): rxe0 as seen through
//! `rdma-verbs` and through `rdmactl verbs --json` must agree with the real `ibv_devinfo -v`.
//!
//! No device is a failure, never a skip: the lab always has rxe0.
use live_tests::{ibv_devinfo, parse_num, rdmactl_bin, DevinfoDevice, LAB_DEVICE};
use rdma_verbs::{GidType, LinkLayer, PortState};
use std::net::Ipv6Addr;
use std::sync::Arc;

/// Open rxe0 or fail with everything a human needs to see why.
fn open_lab_device() -> Arc<rdma_verbs::Context> {
    let listed = rdma_verbs::devices();
    let names: Vec<String> = match &listed {
        Ok(list) => list.iter().map(|d| d.name.clone()).collect(),
        Err(e) => panic!(
            "FAIL: no RDMA stack in the lab ({e}); stack check: {:?}. The live suite must run inside `rdmactl lab run`.",
            rdma_verbs::stack_available()
        ),
    };
    assert!(
        names.iter().any(|n| n == LAB_DEVICE),
        "FAIL: device {LAB_DEVICE} not found through rdma-verbs (devices: {names:?}). Is rdma_rxe loaded and `rdma link add rxe0 type rxe netdev eth0` done?"
    );
    rdma_verbs::open(LAB_DEVICE).unwrap_or_else(|e| panic!("FAIL: open {LAB_DEVICE}: {e}"))
}

fn devinfo() -> DevinfoDevice {
    ibv_devinfo(LAB_DEVICE).unwrap_or_else(|e| panic!("FAIL: {e}"))
}

fn devinfo_num(d: &DevinfoDevice, key: &str) -> u64 {
    d.field(key)
        .and_then(parse_num)
        .unwrap_or_else(|| panic!("ibv_devinfo has no numeric {key}: {:?}", d.field(key)))
}

#[test]
fn device_attributes_match_ibv_devinfo() {
    let ctx = open_lab_device();
    let info = rdma_verbs::devices()
        .unwrap()
        .into_iter()
        .find(|d| d.name == LAB_DEVICE)
        .unwrap();
    let attr = ctx.query_device().expect("query_device");
    let d = devinfo();
    assert_eq!(d.hca_id, LAB_DEVICE);
    assert_eq!(
        d.field("transport"),
        Some(format!("{} ({})", info.transport, info.transport.raw()).as_str())
    );
    assert_eq!(
        d.field("node_guid"),
        Some(attr.node_guid.to_string().as_str())
    );
    assert_eq!(info.guid, attr.node_guid, "list GUID vs query_device GUID");
    assert_eq!(
        d.field("sys_image_guid"),
        Some(attr.sys_image_guid.to_string().as_str())
    );
    assert_eq!(devinfo_num(&d, "vendor_id"), u64::from(attr.vendor_id));
    assert_eq!(
        devinfo_num(&d, "vendor_part_id"),
        u64::from(attr.vendor_part_id)
    );
    assert_eq!(
        devinfo_num(&d, "phys_port_cnt"),
        u64::from(attr.phys_port_cnt)
    );
    assert!(attr.phys_port_cnt >= 1);
    for (key, ours) in [
        ("max_qp", attr.max_qp),
        ("max_qp_wr", attr.max_qp_wr),
        ("max_cq", attr.max_cq),
        ("max_cqe", attr.max_cqe),
        ("max_mr", attr.max_mr),
        ("max_pd", attr.max_pd),
        ("max_sge", attr.max_sge),
        ("max_srq", attr.max_srq),
    ] {
        assert_eq!(devinfo_num(&d, key), ours as u64, "{key}");
    }
    assert_eq!(devinfo_num(&d, "max_mr_size"), attr.max_mr_size);
    assert_eq!(
        devinfo_num(&d, "device_cap_flags"),
        u64::from(attr.device_cap_flags)
    );
    if let Some(fw) = d.field("fw_ver") {
        assert_eq!(fw, attr.fw_ver);
    }
    assert_eq!(
        d.field("atomic_cap"),
        Some(format!("{} ({})", attr.atomic_cap, attr.atomic_cap.raw()).as_str())
    );
}

#[test]
fn port_one_matches_ibv_devinfo() {
    let ctx = open_lab_device();
    let p = ctx.query_port(1).expect("query_port(1)");
    let d = devinfo();
    let dp = d.port(1).expect("ibv_devinfo shows port 1");

    assert_eq!(
        p.state,
        PortState::Active,
        "rxe0 port 1 must be ACTIVE in the lab"
    );
    assert_eq!(dp.field("state"), Some("PORT_ACTIVE (4)"));
    assert_eq!(dp.code("state"), Some(i64::from(p.state.raw())));
    assert_eq!(dp.code("max_mtu"), Some(i64::from(p.max_mtu.raw())));
    assert_eq!(dp.code("active_mtu"), Some(i64::from(p.active_mtu.raw())));
    assert_eq!(
        dp.field("active_mtu")
            .and_then(|v| v.split_whitespace().next()),
        p.active_mtu.bytes().map(|b| b.to_string()).as_deref()
    );
    assert_eq!(p.link_layer, LinkLayer::Ethernet);
    assert_eq!(dp.field("link_layer"), Some("Ethernet"));
    assert_eq!(
        dp.field("sm_lid").and_then(parse_num),
        Some(u64::from(p.sm_lid))
    );
    assert_eq!(
        dp.field("port_lid").and_then(parse_num),
        Some(u64::from(p.lid))
    );
    assert_eq!(
        dp.field("port_lmc").and_then(parse_num),
        Some(u64::from(p.lmc))
    );
    assert_eq!(
        dp.field("gid_tbl_len").and_then(parse_num),
        Some(u64::from(p.gid_tbl_len))
    );
    assert_eq!(
        dp.field("pkey_tbl_len").and_then(parse_num),
        Some(u64::from(p.pkey_tbl_len))
    );
    assert_eq!(
        dp.field("port_cap_flags").and_then(parse_num),
        Some(u64::from(p.port_cap_flags))
    );
    assert_eq!(
        dp.field("max_msg_sz").and_then(parse_num),
        Some(u64::from(p.max_msg_sz))
    );
    assert_eq!(
        dp.code("active_width"),
        Some(i64::from(p.active_width_code))
    );
    assert_eq!(
        dp.code("active_speed"),
        Some(i64::from(p.active_speed_code))
    );
    if let Some(width) = p.active_width {
        assert!(dp.field("active_width").unwrap().starts_with(width));
    }
    if let Some(speed) = p.active_speed {
        assert!(dp.field("active_speed").unwrap().starts_with(speed));
    }
    // ibv_devinfo prints phys_state only for the InfiniBand transport (which rxe reports).
    if let Some(code) = dp.code("phys_state") {
        assert_eq!(code, i64::from(p.phys_state.raw()));
    }
}

#[test]
fn gid_table_matches_ibv_devinfo_and_the_lab_layout() {
    let ctx = open_lab_device();
    let gids = ctx.gid_table(1).expect("gid_table(1)");
    assert!(gids.len() >= 2, "expected at least 2 GIDs, got {gids:?}");

    let g0 = &gids[0];
    assert_eq!(g0.index, 0);
    assert_eq!(
        g0.gid.segments()[0],
        0xfe80,
        "gid0 must be link-local: {}",
        g0.gid
    );
    assert_eq!(g0.gid_type, GidType::RoceV2);
    assert_eq!(g0.netdev.as_deref(), Some("eth0"));

    let g1 = &gids[1];
    assert_eq!(g1.index, 1);
    assert_eq!(g1.gid, "::ffff:10.0.2.15".parse::<Ipv6Addr>().unwrap());
    assert_eq!(g1.gid_type, GidType::RoceV2);
    assert_eq!(g1.netdev.as_deref(), Some("eth0"));

    let d = devinfo();
    let dgids = &d.port(1).expect("port 1").gids;
    let ours: Vec<(u32, Ipv6Addr)> = gids.iter().map(|g| (g.index, g.gid)).collect();
    let theirs: Vec<(u32, Ipv6Addr)> = dgids.iter().map(|g| (g.index, g.gid)).collect();
    assert_eq!(ours, theirs, "GID tables differ");
    for (g, dg) in gids.iter().zip(dgids) {
        if let Some(t) = &dg.gid_type {
            assert_eq!(t, g.gid_type.name(), "type of GID[{}]", g.index);
        }
    }

    // sysfs agrees too (types are spelled "RoCE v2" there as well).
    let sys_type = std::fs::read_to_string(format!(
        "/sys/class/infiniband/{LAB_DEVICE}/ports/1/gid_attrs/types/1"
    ))
    .expect("sysfs gid type");
    assert_eq!(sys_type.trim(), "RoCE v2");
}

#[test]
fn bad_port_numbers_are_errors_not_panics() {
    let ctx = open_lab_device();
    assert!(ctx.query_port(0).is_err());
    let err = ctx
        .query_port(9)
        .expect_err("port 9 does not exist on rxe0");
    assert!(err.to_string().contains("port 9"), "{err}");
    assert!(ctx.gid_table(9).is_err());
}

fn rdmactl(args: &[&str]) -> std::process::Output {
    let bin = rdmactl_bin();
    std::process::Command::new(&bin)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("FAIL: cannot run {} (set RDMACTL_BIN): {e}", bin.display()))
}

#[test]
fn rdmactl_verbs_json_matches_the_library() {
    let ctx = open_lab_device();
    let out = rdmactl(&["verbs", "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "rdmactl verbs --json failed ({}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("valid JSON");
    let devs = doc["devices"].as_array().expect("devices array");
    let dev = devs
        .iter()
        .find(|d| d["name"] == LAB_DEVICE)
        .unwrap_or_else(|| panic!("{LAB_DEVICE} missing from rdmactl output: {stdout}"));

    let attr = ctx.query_device().unwrap();
    assert_eq!(dev["attr"], serde_json::to_value(&attr).unwrap());
    assert_eq!(dev["transport"], "InfiniBand");
    assert_eq!(dev["node_type"], "CA");

    let port = &dev["ports"][0];
    let p = ctx.query_port(1).unwrap();
    assert_eq!(port["port"], 1);
    assert_eq!(port["state"], "PORT_ACTIVE");
    assert_eq!(port["link_layer"], "Ethernet");
    assert_eq!(port["active_mtu"], p.active_mtu.name());
    assert_eq!(port["gid_tbl_len"], p.gid_tbl_len);
    let gids = ctx.gid_table(1).unwrap();
    assert_eq!(port["gids"], serde_json::to_value(&gids).unwrap());
    assert_eq!(port["gids"][1]["gid"], "::ffff:10.0.2.15");
    assert_eq!(port["gids"][1]["gid_type"], "RoCE v2");
}

#[test]
fn rdmactl_verbs_table_and_exit_codes() {
    let out = rdmactl(&["verbs", "--device", LAB_DEVICE]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.starts_with(LAB_DEVICE), "{stdout}");
    assert!(stdout.contains("PORT_ACTIVE (4)"), "{stdout}");
    assert!(stdout.contains("::ffff:10.0.2.15"), "{stdout}");

    let missing = rdmactl(&["verbs", "--device", "nosuch0"]);
    assert_eq!(missing.status.code(), Some(3), "missing device must exit 3");
    assert!(String::from_utf8_lossy(&missing.stderr).contains("nosuch0"));
}
