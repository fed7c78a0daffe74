//! `roce-v2-gid`: the port has a RoCE v2 GID, so RoCE v2 connections can be addressed.

use super::{Outcome, PortFacts};
use crate::roce::Verdict;

pub(super) fn run(f: &PortFacts<'_>) -> Outcome {
    let (port, netdev) = (f.port, f.netdev);
    let count = |t: &str| {
        port.gids
            .iter()
            .filter(|g| g.gid_type.as_deref() == Some(t))
            .count()
    };
    let (v2, v1) = (count("RoCE v2"), count("IB/RoCE v1"));
    let ev = vec![format!(
        "ports/{}/gid_attrs/types: {v2} RoCE v2, {v1} IB/RoCE v1 of {} populated GIDs",
        port.num,
        port.gids.len()
    )];
    let result = if v2 > 0 {
        (Verdict::Ok, format!("{v2} RoCE v2 GID(s)"))
    } else {
        (Verdict::Fail, "no RoCE v2 GID: RoCE v2 (UDP/IP) connections cannot be addressed; RoCE v2 GIDs come from the netdev's IP addresses".to_string())
    };
    Outcome::new(
        result,
        ev,
        format!("ip addr add <ADDR>/<LEN> dev {netdev} && ip link set dev {netdev} up"),
    )
}
