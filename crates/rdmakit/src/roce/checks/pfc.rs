//! `pfc`: priority flow control is on for some priority (DCB IEEE PFC).

use super::{join, na, Outcome, PortFacts};
use crate::roce::dcb::DcbIeee;
use crate::roce::Verdict;

/// The evidence line of the PFC answer (also `tc-protected`'s).
pub(super) fn evidence(d: &DcbIeee) -> String {
    match d.pfc_enabled {
        Some(en) => format!(
            "DCB IEEE PFC: pfc_en {en:#04x} (priorities {:?}), pfc_cap {}",
            d.pfc_priorities(),
            d.pfc_cap.unwrap_or(0)
        ),
        None => "DCB IEEE PFC: no PFC attribute in the answer".to_string(),
    }
}

pub(super) fn run(f: &PortFacts<'_>) -> Outcome {
    let d = match f.dcb() {
        Ok(d) => d,
        Err(o) => return o,
    };
    let netdev = f.netdev;
    let pfc = d.pfc_priorities();
    let r = match d.pfc_enabled {
        None => na(format!("not available on this driver: {netdev} reports no IEEE PFC")),
        Some(_) if pfc.is_empty() => (Verdict::Warn, "PFC is off on every priority: RoCE runs lossy (fine only with a congestion-controlled, loss-tolerant setup)".to_string()),
        Some(_) => (Verdict::Ok, format!("PFC on priority {}", join(&pfc))),
    };
    Outcome::new(
        r,
        vec![evidence(d)],
        format!("dcb pfc set dev {netdev} prio-pfc 3:on   (the priority RDMA traffic uses)"),
    )
}
