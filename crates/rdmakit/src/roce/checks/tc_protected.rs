//! `tc-protected`: the priority RDMA traffic's DSCP maps to is one PFC protects.

use super::{dscp_map, join, na, pfc, Outcome, PortFacts};
use crate::roce::Verdict;

pub(super) fn run(f: &PortFacts<'_>) -> Outcome {
    let d = match f.dcb() {
        Ok(d) => d,
        Err(o) => return o,
    };
    let (netdev, tos, dscp) = (f.netdev, f.tos(), f.dscp());
    let pfc = d.pfc_priorities();
    let mut ev = vec![
        format!("rdma_cm ToS {tos} -> DSCP {dscp}"),
        dscp_map::evidence(d),
        pfc::evidence(d),
    ];
    let r = match (f.rdma_priority(), d.pfc_enabled) {
        (_, None) => na(format!("not available on this driver: {netdev} reports no IEEE PFC")),
        (Some(p), Some(en)) if en & (1 << p) != 0 => (Verdict::Ok, format!("DSCP {dscp} maps to priority {p}, which PFC protects")),
        (Some(p), Some(_)) if pfc.is_empty() => (Verdict::Warn, format!("DSCP {dscp} maps to priority {p}; PFC protects no priority")),
        (Some(p), Some(_)) => (Verdict::Fail, format!("RDMA traffic (DSCP {dscp}) maps to priority {p}, but PFC protects priority {}: it is not lossless", join(&pfc))),
        (None, Some(_)) => {
            ev.push(format!("no APP entry for DSCP {dscp}: the driver's default map decides (not reported over DCB netlink)"));
            (Verdict::Warn, format!("DSCP {dscp} has no APP entry: which priority RDMA traffic lands on is not known"))
        }
    };
    let fix = match pfc.first() {
        Some(p) => format!("dcb app add dev {netdev} dscp-prio {dscp}:{p}   (or change the ToS to a DSCP mapped to priority {p})"),
        None => format!("dcb pfc set dev {netdev} prio-pfc 3:on && dcb app add dev {netdev} dscp-prio {dscp}:3"),
    };
    Outcome::new(r, ev, fix)
}
