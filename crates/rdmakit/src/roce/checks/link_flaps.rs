//! `link-flaps`: the port's link stayed up between two readings of its link counters
//! (carrier changes, link downs, link error recoveries).

use std::collections::BTreeMap;

use super::{na, Outcome, PortFacts};
use crate::roce::Verdict;

/// A counter read both times: its name, its value now and its rise over the interval.
pub(super) type Delta = (String, u64, u64);

/// The counters read both times, by name.
pub(super) fn deltas(b: &BTreeMap<String, u64>, a: &BTreeMap<String, u64>) -> Vec<Delta> {
    a.iter()
        .filter_map(|(n, v)| Some((n.clone(), *v, v.saturating_sub(*b.get(n)?))))
        .collect()
}

/// One evidence line per counter.
pub(super) fn evidence(d: &[Delta], secs: f64) -> Vec<String> {
    d.iter()
        .map(|(n, v, r)| format!("{n} = {v} (+{r} in {secs:.1} s)"))
        .collect()
}

pub(super) fn run(f: &PortFacts<'_>) -> Outcome {
    let (netdev, target, secs) = (f.netdev, f.target, f.secs);
    let link = deltas(&f.link_before.link, &f.link_after.link);
    let rose: Vec<&Delta> = link.iter().filter(|d| d.2 > 0).collect();
    let r = if link.is_empty() {
        na(format!(
            "not available: neither class/net/{netdev}/carrier_changes nor a link_downed counter of {target} is readable"
        ))
    } else if rose.is_empty() {
        (Verdict::Ok, format!("the link stayed up for {secs:.1} s"))
    } else {
        let what: Vec<String> = rose
            .iter()
            .map(|(n, _, r)| format!("{} +{r}", n.rsplit('/').next().unwrap_or(n)))
            .collect();
        (
            Verdict::Warn,
            format!(
                "the link of {netdev} flapped in {secs:.1} s ({}): traffic on it stalled and connections may have timed out",
                what.join(", ")
            ),
        )
    };
    Outcome::new(
        r,
        evidence(&link, secs),
        format!("look at the cable, optic and switch port of {netdev} (`ip -s link show {netdev}`, the switch's log); a link that keeps flapping should be taken out of service"),
    )
}
