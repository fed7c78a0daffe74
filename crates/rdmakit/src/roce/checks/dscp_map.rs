//! `dscp-map`: the DCB APP table maps some DSCP to a priority.

use super::{Outcome, PortFacts};
use crate::roce::dcb::DcbIeee;
use crate::roce::Verdict;

/// The evidence line of the APP table's DSCP entries (also `tc-protected`'s).
pub(super) fn evidence(d: &DcbIeee) -> String {
    let map = d.dscp_map();
    if map.is_empty() {
        "DCB IEEE APP table: no DSCP entries".to_string()
    } else {
        format!(
            "DCB IEEE APP table: dscp-prio {}",
            map.iter()
                .map(|(d, p)| format!("{d}:{p}"))
                .collect::<Vec<_>>()
                .join(" ")
        )
    }
}

pub(super) fn run(f: &PortFacts<'_>) -> Outcome {
    let d = match f.dcb() {
        Ok(d) => d,
        Err(o) => return o,
    };
    let map = d.dscp_map();
    let r = if map.is_empty() {
        (
            Verdict::Warn,
            "no DSCP -> priority entries: the DSCP of RoCE packets does not select a priority"
                .to_string(),
        )
    } else {
        (
            Verdict::Ok,
            format!(
                "{} DSCP -> priority entr{}",
                map.len(),
                if map.len() == 1 { "y" } else { "ies" }
            ),
        )
    };
    Outcome::new(
        r,
        vec![evidence(d)],
        format!("dcb app add dev {} dscp-prio {}:3", f.netdev, f.dscp()),
    )
}
