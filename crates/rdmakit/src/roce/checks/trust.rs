//! `trust`: the DCB APP trust order trusts DSCP first.

use super::{na, Outcome, PortFacts};
use crate::roce::dcb;
use crate::roce::Verdict;

pub(super) fn run(f: &PortFacts<'_>) -> Outcome {
    let d = match f.dcb() {
        Ok(d) => d,
        Err(o) => return o,
    };
    let netdev = f.netdev;
    let r = match &d.trust {
        None => na(format!("not available on this driver: {netdev} reports no APP trust order (DCB_ATTR_DCB_APP_TRUST_TABLE)")),
        Some(order) if order.first() == Some(&dcb::SEL_DSCP) => (Verdict::Ok, "DSCP is trusted first".to_string()),
        Some(order) => (Verdict::Warn, format!("trust order [{}]: DSCP is not trusted first, so the DSCP map may not decide the priority", order.iter().map(|s| dcb::selector_name(*s)).collect::<Vec<_>>().join(" "))),
    };
    let ev = d
        .trust
        .as_ref()
        .map(|o| {
            vec![format!(
                "DCB APP trust order: [{}]",
                o.iter()
                    .map(|s| dcb::selector_name(*s))
                    .collect::<Vec<_>>()
                    .join(" ")
            )]
        })
        .unwrap_or_default();
    Outcome::new(r, ev, format!("dcb apptrust set dev {netdev} order dscp"))
}
