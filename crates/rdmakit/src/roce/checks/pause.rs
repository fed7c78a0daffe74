//! `pause`: pause frames and pause time between two readings of the driver statistics
//! (a pause storm fails, heavy pausing warns).

use super::{Outcome, PortFacts};
use crate::ethtool::curated::{curate, Family};
use crate::ethtool::DriverStats;
use crate::roce::Verdict;

/// A counter of one curated family: its name, its labels, its value in the second reading
/// and its rise since the first (a counter absent from the first reading has not risen).
pub(super) type Delta = (String, Vec<String>, u64, u64);

/// The counters of `family` in two readings of the driver statistics.
pub(super) fn deltas(before: &DriverStats, after: &DriverStats, family: Family) -> Vec<Delta> {
    let fam = |s: &DriverStats| -> Vec<(String, Vec<String>, u64)> {
        s.stats
            .iter()
            .filter_map(|(n, v)| {
                let c = curate(&s.info.driver, n)?;
                (c.family == family).then(|| (n.clone(), c.labels, *v))
            })
            .collect()
    };
    let old = fam(before);
    fam(after)
        .into_iter()
        .map(|(n, l, v)| {
            let was = old.iter().find(|o| o.0 == n).map(|o| o.2).unwrap_or(v);
            (n, l, v, v.saturating_sub(was))
        })
        .collect()
}

pub(super) fn run(f: &PortFacts<'_>) -> Outcome {
    let (b, a) = match f.stats() {
        Ok(s) => s,
        Err(o) => return o,
    };
    let (netdev, secs) = (f.netdev, f.secs);
    let driver = a.info.driver.clone();
    let frames = deltas(b, a, Family::PauseFrames);
    let duration = deltas(b, a, Family::PauseDuration);
    if frames.is_empty() && duration.is_empty() {
        return Outcome::na(format!(
            "not available on this driver: {driver} reports no pause counters"
        ));
    }
    let mut ev: Vec<String> = frames
        .iter()
        .chain(duration.iter())
        .filter(|(_, _, v, d)| *v > 0 || *d > 0)
        .map(|(n, _, v, d)| format!("ethtool {n} = {v} (+{d} in {secs:.1} s)"))
        .collect();
    if ev.is_empty() {
        ev.push(format!("every pause counter of {driver} is 0"));
    }
    let rising: u64 = frames.iter().map(|f| f.3).sum();
    let paused_us = duration.iter().map(|f| f.3).max().unwrap_or(0);
    let fraction = if secs > 0.0 {
        paused_us as f64 / (secs * 1e6)
    } else {
        0.0
    };
    let rate = if secs > 0.0 {
        rising as f64 / secs
    } else {
        0.0
    };
    let r = if fraction >= 0.5 {
        (
            Verdict::Fail,
            format!(
                "pause storm: a priority was paused {:.0}% of the interval",
                fraction * 100.0
            ),
        )
    } else if fraction >= 0.1 || rate >= 10_000.0 {
        (
            Verdict::Warn,
            format!(
                "heavy pausing: {rate:.0} pause frames/s, paused up to {:.0}% of the interval",
                fraction * 100.0
            ),
        )
    } else if rising > 0 {
        (
            Verdict::Ok,
            format!("{rising} pause frame(s) in {secs:.1} s: ordinary PFC back-pressure"),
        )
    } else {
        (Verdict::Ok, format!("no pause frames in {secs:.1} s"))
    };
    Outcome::new(r, ev, format!("find the receiver that cannot keep up (its rx_out_of_buffer / discards) or a stuck peer; watch `rdmactl counters` on {netdev}'s link partner"))
}
