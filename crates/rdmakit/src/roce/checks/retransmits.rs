//! `retransmits`: no retransmission or sequence-error counter of the port (those of the
//! doctor rule `packet-loss`) rose between two readings.

use super::link_flaps::{deltas, evidence, Delta};
use super::{na, Outcome, PortFacts};
use crate::roce::Verdict;

pub(super) fn run(f: &PortFacts<'_>) -> Outcome {
    let (netdev, target, secs) = (f.netdev, f.target, f.secs);
    let re = deltas(&f.link_before.retransmits, &f.link_after.retransmits);
    let rising: u64 = re.iter().map(|d| d.2).sum();
    let r = if re.is_empty() {
        na(format!(
            "not available on this driver: {target} has no retransmission or sequence-error counter"
        ))
    } else if rising > 0 {
        (
            Verdict::Warn,
            format!(
                "{rising} retransmission / sequence-error event(s) in {secs:.1} s: packets between {target} and its peers are lost (a lossy link, drops on a priority without PFC, or a slow peer)"
            ),
        )
    } else {
        (
            Verdict::Ok,
            format!("no retransmissions or sequence errors in {secs:.1} s"),
        )
    };
    let moved: Vec<Delta> = re.iter().filter(|d| d.2 > 0).cloned().collect();
    Outcome::new(
        r,
        evidence(if moved.is_empty() { &re } else { &moved }, secs),
        format!("find where packets are lost: the discards and pause checks above, `rdmactl doctor` on both ends, the switch's drop counters for {netdev}'s port"),
    )
}
