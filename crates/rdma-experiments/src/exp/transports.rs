//! `transports`: what addressing looks like on this device, read from it: node type and
//! transport, link layer, port state, MTU (active vs max, and the netdev's MTU behind it),
//! LID and SM LID, and the GID table with types (RoCE v1, v2, IB), IPv4-mapped GIDs and
//! netdevs, compared with sysfs. Then what would differ on InfiniBand.
use crate::harness::{ExpError, Run, Vals};
use rdma_verbs::{GidType, LinkLayer};
use rdmakit::sysfs::{DeviceFilter, SysfsReader};
use serde_json::json;

pub(crate) fn run(run: &mut Run<'_>) -> Result<(), ExpError> {
    let name = run.opts.device.clone();
    run.part("addressing", None)?;
    let ctx = run.must("ibv_open_device", name.clone(), || rdma_verbs::open(&name))?;
    let info = ctx.info().clone();
    let attr = run.must_with(
        "ibv_query_device",
        name.clone(),
        || ctx.query_device(),
        |a| {
            Vals::new()
                .with("node_type", info.node_type.name())
                .with("transport", info.transport.name())
                .with("phys_port_cnt", a.phys_port_cnt)
                .with("node_guid", a.node_guid.to_string())
        },
    )?;
    let port = run.must_with(
        "ibv_query_port",
        format!("{name} port 1"),
        || ctx.query_port(1),
        |p| {
            Vals::new()
                .with("state", p.state.name())
                .with("link_layer", p.link_layer.name())
                .with("active_mtu", p.active_mtu.bytes().unwrap_or(0))
                .with("max_mtu", p.max_mtu.bytes().unwrap_or(0))
                .with("lid", p.lid)
                .with("sm_lid", p.sm_lid)
                .with("lmc", p.lmc)
                .with("gid_tbl_len", p.gid_tbl_len)
                .with("pkey_tbl_len", p.pkey_tbl_len)
                .with("port_cap_flags", format!("{:#x}", p.port_cap_flags))
        },
    )?;
    let gids = run.must("ibv_query_gid_table", format!("{name} port 1"), || {
        ctx.gid_table(1)
    })?;
    let mut rows = Vec::new();
    for g in &gids {
        let v4 = g.gid.to_ipv4_mapped();
        let kind = match (g.gid_type, v4) {
            (GidType::RoceV2, Some(_)) => "RoCE v2 over IPv4: IP/UDP port 4791, routable",
            (GidType::RoceV2, None) if g.gid.segments()[0] == 0xfe80 => {
                "RoCE v2, IPv6 link-local (from the netdev's MAC): stays on the link"
            }
            (GidType::RoceV2, None) => "RoCE v2 over IPv6",
            (GidType::RoceV1, _) => "RoCE v1: raw Ethernet (ethertype 0x8915), not routable",
            (GidType::Ib, _) => "InfiniBand GID: subnet prefix + port GUID",
            _ => "unknown type",
        };
        run.info(
            "GID entry",
            format!(
                "GID[{}] {} {} on {}: {kind}",
                g.index,
                g.gid,
                g.gid_type.name(),
                g.netdev.as_deref().unwrap_or("-")
            ),
            Vals::new()
                .with("index", g.index)
                .with("gid", g.gid.to_string())
                .with("gid_type", g.gid_type.name())
                .with("ipv4", v4.map(|a| a.to_string()))
                .with("netdev", g.netdev.clone()),
        );
        rows.push(json!({
            "index": g.index,
            "gid": g.gid.to_string(),
            "gid_type": g.gid_type.name(),
            "ipv4_mapped": v4.map(|a| a.to_string()),
            "netdev": g.netdev,
        }));
    }
    // Cross-check the types against sysfs (gid_attrs/types).
    let snap = SysfsReader::new(&run.opts.sysfs_root)
        .with_filter(DeviceFilter::only(&name))
        .snapshot()
        .map_err(|e| ExpError::Failed(e.to_string()))?;
    let sysfs_gids: Vec<(u32, String, Option<String>)> = snap
        .device(&name)
        .and_then(|d| d.port(1))
        .map(|p| {
            p.gids
                .iter()
                .map(|g| (g.index, g.gid.clone(), g.gid_type.clone()))
                .collect()
        })
        .unwrap_or_default();
    let agree = gids.iter().all(|g| {
        sysfs_gids.iter().any(|(i, gid, t)| {
            *i == g.index
                && gid.parse::<std::net::Ipv6Addr>().ok() == Some(g.gid)
                && t.as_deref().map(normalize) == Some(normalize(g.gid_type.name()))
        })
    }) && !gids.is_empty();
    run.info(
        "read sysfs ports/1/gids, gid_attrs/types",
        format!(
            "sysfs lists {} GIDs; verbs and sysfs agree on index, address and type: {agree}",
            sysfs_gids.len()
        ),
        Vals::new().with("agree", agree),
    );
    let netdev = gids.iter().find_map(|g| g.netdev.clone());
    let netdev_mtu = netdev.as_deref().and_then(|n| {
        std::fs::read_to_string(format!("/sys/class/net/{n}/mtu"))
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
    });
    let active = port.active_mtu.bytes().unwrap_or(0);
    run.info(
        "read /sys/class/net/<netdev>/mtu",
        format!(
            "netdev {} MTU {}: the RoCE active MTU is the largest IB MTU (256..4096) that fits in it with the RoCE headers: {active}",
            netdev.as_deref().unwrap_or("-"),
            netdev_mtu.map_or("unknown".into(), |m| m.to_string())
        ),
        Vals::new()
            .with("netdev", netdev.clone())
            .with("netdev_mtu", netdev_mtu)
            .with("active_mtu", active),
    );
    match port.link_layer {
        LinkLayer::Ethernet => run.info(
            "compare with InfiniBand",
            format!(
                "this port is Ethernet (RoCE): lid={} sm_lid={} (no subnet manager, no LIDs); every QP needs a GRH with a GID (is_global=1, sgid_index). On InfiniBand a subnet manager (opensm or a switch) assigns each port a LID and sm_lid points to it; QPs inside a subnet are addressed by LID (dlid) and need no GRH; the port stays INIT until the SM brings it ACTIVE; GIDs are subnet prefix + port GUID (type IB).",
                port.lid, port.sm_lid
            ),
            Vals::new()
                .with("lid", port.lid)
                .with("sm_lid", port.sm_lid)
                .with("grh_required", true),
        ),
        _ => run.info(
            "InfiniBand",
            format!(
                "this port is {}: lid={} sm_lid={} lmc={}: addressed by LID inside the subnet, GRH only across subnets",
                port.link_layer.name(),
                port.lid,
                port.sm_lid,
                port.lmc
            ),
            Vals::new().with("lid", port.lid).with("sm_lid", port.sm_lid),
        ),
    }
    let has_v1 = gids.iter().any(|g| g.gid_type == GidType::RoceV1);
    if !has_v1 && port.link_layer == LinkLayer::Ethernet {
        run.finding(
            "roce_v2_only",
            format!("{name} lists only RoCE v2 GIDs: rxe implements RoCE v2 (UDP) only; hardware RoCE NICs usually list each address twice, as RoCE v1 and v2"),
        );
    }
    run.data.insert("gids".into(), json!(rows));
    run.data.insert(
        "port".into(),
        json!({
            "link_layer": port.link_layer.name(),
            "state": port.state.name(),
            "active_mtu": active,
            "max_mtu": port.max_mtu.bytes(),
            "lid": port.lid,
            "sm_lid": port.sm_lid,
            "netdev": netdev,
            "netdev_mtu": netdev_mtu,
            "phys_port_cnt": attr.phys_port_cnt,
            "transport": info.transport.name(),
        }),
    );
    run.end_part(Some(&ctx));
    Ok(())
}

/// `RoCE v2` and `RoCE V2` compare equal.
fn normalize(t: &str) -> String {
    t.to_ascii_lowercase()
}
