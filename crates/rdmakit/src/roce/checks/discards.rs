//! `discards`: frames discarded between two readings of the driver statistics.

use super::pause::deltas;
use super::{Outcome, PortFacts};
use crate::ethtool::curated::Family;
use crate::roce::Verdict;

pub(super) fn run(f: &PortFacts<'_>) -> Outcome {
    let (b, a) = match f.stats() {
        Ok(s) => s,
        Err(o) => return o,
    };
    let (netdev, secs) = (f.netdev, f.secs);
    let discards = deltas(b, a, Family::Discards);
    if discards.is_empty() {
        return Outcome::na(format!(
            "not available on this driver: {} reports no discard counters",
            a.info.driver
        ));
    }
    let mut ev: Vec<String> = discards
        .iter()
        .map(|(n, l, v, d)| format!("ethtool {n} = {v} (+{d} in {secs:.1} s; {})", l.join(" ")))
        .collect();
    ev.dedup();
    let rising: u64 = discards.iter().map(|f| f.3).sum();
    let total: u64 = discards.iter().map(|f| f.2).sum();
    let r = if rising > 0 {
        (Verdict::Warn, format!("{rising} frame(s) discarded in {secs:.1} s: on a lossless priority these are retransmissions (out of buffer: the host is slow; port: the NIC's buffers)"))
    } else if total > 0 {
        (
            Verdict::Ok,
            format!("no discards in {secs:.1} s ({total} since the counters started)"),
        )
    } else {
        (Verdict::Ok, "no discards".to_string())
    };
    Outcome::new(r, ev, format!("check PFC on the RDMA priority (`rdmactl doctor roce`), the receiver's CPU/memory pressure, and the switch's buffer profile for {netdev}'s port"))
}
