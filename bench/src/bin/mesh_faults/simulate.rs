//! The probes' outcomes over time for the evaluated pairs.

use rdma_probe::snapshot::PeerStatus;
use std::collections::{BTreeMap, HashMap};

use crate::mesh::{Fault, Mesh, Scenario, Selection};
use crate::{INTERVAL, LOSS, STEP, WARM};

/// splitmix64: a reproducible stream for the losses.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn lost(&mut self, n: u64, p: f64) -> u64 {
        (0..n)
            .filter(|_| (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p)
            .count() as u64
    }
}

/// One pair's samples, one per scrape.
#[derive(Default, Clone)]
pub(crate) struct PairSeries {
    pub(crate) status: Vec<u64>,
    pub(crate) sent: Vec<u64>,
    pub(crate) lost_request: Vec<u64>,
    pub(crate) lost_reply: Vec<u64>,
}

pub(crate) struct Timeline {
    /// Seconds of the fault's start and end, and of the last scrape.
    pub(crate) fault_start: u64,
    pub(crate) fault_end: u64,
    pub(crate) end: u64,
}

impl Timeline {
    /// A minute of health, the fault for the planner's cycle plus the rules' `for:` plus a
    /// minute, then the cycle plus a minute to resolve.
    pub(crate) fn new(cycle: u64, for_s: u64) -> Timeline {
        let cycle_s = cycle * INTERVAL;
        let fault_start = WARM;
        let fault_end = fault_start + (cycle_s + for_s + 60).div_ceil(STEP) * STEP;
        let end = fault_end + (cycle_s + 60).div_ceil(STEP) * STEP;
        Timeline {
            fault_start,
            fault_end,
            end,
        }
    }

    pub(crate) fn samples(&self) -> usize {
        (self.end / STEP) as usize + 1
    }

    pub(crate) fn faulty(&self, t: u64) -> bool {
        t >= self.fault_start && t < self.fault_end
    }
}

/// Runs the rounds of every prober of a selected pair and records the scrapes.
pub(crate) fn simulate(
    mesh: &Mesh,
    fault: &Fault,
    sel: &Selection,
    time: &Timeline,
    sent_per_run: u64,
) -> HashMap<(u32, u32), PairSeries> {
    let mut by_prober: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for &(p, t) in &sel.pairs {
        by_prober.entry(p).or_default().push(t);
    }
    let samples = time.samples();
    let mut out = HashMap::with_capacity(sel.pairs.len());
    let mut rng = Rng(0x5eed);
    for (&p, targets) in &by_prober {
        // State per target: (status, sent, lost request, lost reply).
        let mut state: HashMap<u32, (u64, u64, u64, u64)> =
            targets.iter().map(|&t| (t, (0, 0, 0, 0))).collect();
        let mut series: HashMap<u32, PairSeries> = targets
            .iter()
            .map(|&t| (t, PairSeries::default()))
            .collect();
        let plan = &mesh.plans[p as usize];
        let global = &mesh.globals[p as usize];
        let mut round = 0u64;
        for s in 0..samples as u64 {
            let now = s * STEP;
            // The rounds that ended before this scrape.
            while round * INTERVAL < now {
                let t_round = round * INTERVAL;
                let faulty = time.faulty(t_round);
                if !(faulty && fault.dead(p)) {
                    for k in plan.round(round + mesh.offset[p as usize]) {
                        let t = global[k];
                        let Some(st) = state.get_mut(&t) else {
                            continue;
                        };
                        st.1 += sent_per_run;
                        if !faulty {
                            st.0 = 0;
                            continue;
                        }
                        match fault.scenario {
                            Scenario::Rack if fault.dead(t) => {
                                st.0 = PeerStatus::Host.value();
                                st.2 += sent_per_run;
                            }
                            Scenario::Egress if fault.hosts.contains(&p) => {
                                st.0 = 0;
                                st.2 += rng.lost(sent_per_run, LOSS);
                            }
                            Scenario::Egress if fault.hosts.contains(&t) => {
                                st.0 = 0;
                                st.3 += rng.lost(sent_per_run, LOSS);
                            }
                            _ => st.0 = 0,
                        }
                    }
                }
                round += 1;
            }
            for (t, st) in &state {
                let ps = series.get_mut(t).expect("every target has series");
                ps.status.push(st.0);
                ps.sent.push(st.1);
                ps.lost_request.push(st.2);
                ps.lost_reply.push(st.3);
            }
        }
        out.extend(series.into_iter().map(|(t, s)| ((p, t), s)));
    }
    out
}
