//! The planned mesh, the injected fault and the pairs that must be evaluated for the rules'
//! verdicts to equal those on the full mesh.

use rdma_probe::pinglist::{stable_hash, Pinglist, DEFAULT_MESH_MAX};
use std::collections::{BTreeMap, BTreeSet};

use crate::{host_ip, rack_of, PROBE_PORT, RACK};

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    Egress,
    Rack,
}

impl Scenario {
    pub(crate) fn title(self) -> &'static str {
        match self {
            Scenario::Egress => "A: 20% egress loss on one host",
            Scenario::Rack => "B: a rack of 32 down",
        }
    }
}

/// The mesh: every host's plan and the pairs each keeps series for.
pub(crate) struct Mesh {
    pub(crate) n: usize,
    pub(crate) plans: Vec<Pinglist>,
    /// `globals[h][k]`: the host index of peer `k` in `h`'s peer list.
    pub(crate) globals: Vec<Vec<u32>>,
    /// The peers each host keeps series for (everything its plan ever probes), sorted.
    pub(crate) kept: Vec<Vec<u32>>,
    /// The planner round each host is at when the simulation starts.
    pub(crate) offset: Vec<u64>,
    pub(crate) cycle: u64,
}

impl Mesh {
    pub(crate) fn new(n: usize) -> Mesh {
        let ids: Vec<String> = (0..n)
            .map(|i| format!("{}:{PROBE_PORT}", host_ip(i)))
            .collect();
        let racks: Vec<String> = (0..n).map(rack_of).collect();
        let mut plans = Vec::with_capacity(n);
        let mut globals = Vec::with_capacity(n);
        let mut kept = Vec::with_capacity(n);
        let mut offset = Vec::with_capacity(n);
        let mut cycle = 1;
        for me in 0..n {
            let peers: Vec<(&str, Option<&str>)> = (0..n)
                .filter(|&i| i != me)
                .map(|i| (ids[i].as_str(), Some(racks[i].as_str())))
                .collect();
            let global: Vec<u32> = (0..n as u32).filter(|&i| i as usize != me).collect();
            let plan = Pinglist::new(DEFAULT_MESH_MAX, &ids[me], Some(&racks[me]), &peers);
            let c = plan.cycle_rounds();
            let mut set = BTreeSet::new();
            for r in 0..c {
                set.extend(plan.round(r).into_iter().map(|k| global[k]));
            }
            cycle = cycle.max(c);
            offset.push(stable_hash(&ids[me]) % c);
            kept.push(set.into_iter().collect());
            plans.push(plan);
            globals.push(global);
        }
        Mesh {
            n,
            plans,
            globals,
            kept,
            offset,
            cycle,
        }
    }

    pub(crate) fn pairs(&self) -> usize {
        self.kept.iter().map(Vec::len).sum()
    }
}

/// The fault: its hosts, and what it does to a run of `prober` towards `target`.
pub(crate) struct Fault {
    pub(crate) scenario: Scenario,
    pub(crate) hosts: BTreeSet<u32>,
}

impl Fault {
    pub(crate) fn new(scenario: Scenario, n: usize) -> Fault {
        let hosts = match scenario {
            // A host in the middle of the fleet.
            Scenario::Egress => BTreeSet::from([(n / 2) as u32]),
            // The last full rack.
            Scenario::Rack => {
                let r = n / RACK - 1;
                ((r * RACK) as u32..((r + 1) * RACK) as u32).collect()
            }
        };
        Fault { scenario, hosts }
    }

    /// Dead hosts are not scraped during the fault.
    pub(crate) fn dead(&self, h: u32) -> bool {
        self.scenario == Scenario::Rack && self.hosts.contains(&h)
    }

    /// Whether the pair's series can ever differ from a healthy pair's.
    pub(crate) fn faultable(&self, p: u32, t: u32) -> bool {
        match self.scenario {
            Scenario::Egress => self.hosts.contains(&p) || self.hosts.contains(&t),
            Scenario::Rack => !self.hosts.contains(&p) && self.hosts.contains(&t),
        }
    }
}

/// The pairs to evaluate, and the counting behind them.
pub(crate) struct Selection {
    pub(crate) pairs: BTreeSet<(u32, u32)>,
    pub(crate) nameable_target: BTreeSet<u32>,
    pub(crate) nameable_prober: BTreeSet<u32>,
    pub(crate) padding: usize,
}

/// With `full`, every kept pair is evaluated (the counting still says who is nameable): what
/// one Prometheus costs on a whole mesh of that size.
pub(crate) fn select(mesh: &Mesh, fault: &Fault, full: bool) -> Selection {
    let n = mesh.n;
    // Per host: target pairs by prober.
    let mut probers: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (p, list) in mesh.kept.iter().enumerate() {
        for &t in list {
            probers[t as usize].push(p as u32);
        }
    }
    let nameable = |f: usize, d: usize| f >= 2 && 2 * f > d;
    // 1. Raw target culprits can only be these.
    let rc: BTreeSet<u32> = (0..n as u32)
        .filter(|&h| {
            let live = probers[h as usize].iter().filter(|&&p| !fault.dead(p));
            let (mut f, mut d) = (0, 0);
            for &p in live {
                d += 1;
                f += usize::from(fault.faultable(p, h));
            }
            nameable(f, d)
        })
        .collect();
    // 2. Prober culprits: every faultable pair counts, the denominator leaves out RC.
    let pc: BTreeSet<u32> = (0..n as u32)
        .filter(|&h| {
            if fault.dead(h) {
                return false; // not scraped during the fault: no prober series
            }
            let kept = &mesh.kept[h as usize];
            let f = kept.iter().filter(|&&t| fault.faultable(h, t)).count();
            let d = kept.iter().filter(|&&t| !rc.contains(&t)).count();
            nameable(f, d)
        })
        .collect();
    // 3. Target culprits, the denominator without PC's pairs.
    let tc: BTreeSet<u32> = (0..n as u32)
        .filter(|&h| {
            let (mut f, mut d) = (0, 0);
            for &p in probers[h as usize].iter().filter(|&&p| !fault.dead(p)) {
                f += usize::from(fault.faultable(p, h));
                d += usize::from(!pc.contains(&p));
            }
            nameable(f, d)
        })
        .collect();
    let nameable_target: BTreeSet<u32> = rc.union(&tc).copied().collect();
    let candidates: BTreeSet<u32> = nameable_target
        .union(&pc)
        .chain(fault.hosts.iter())
        .copied()
        .collect();
    let mut pairs = BTreeSet::new();
    for (p, list) in mesh.kept.iter().enumerate() {
        let p = p as u32;
        for &t in list {
            if pc.contains(&p) || nameable_target.contains(&t) || fault.faultable(p, t) {
                pairs.insert((p, t));
            }
        }
    }
    // Padding: healthy pairs of the other hosts present, until their faultable pairs in a
    // role are at most half of their healthy ones there (or all of the role's pairs are in).
    let mut need_prober: BTreeMap<u32, (usize, usize)> = BTreeMap::new(); // (faultable, healthy)
    let mut need_target: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
    let healthy =
        |p: u32, t: u32| !fault.dead(p) && !candidates.contains(&p) && !candidates.contains(&t);
    for &(p, t) in &pairs {
        let f = usize::from(fault.faultable(p, t));
        let h = usize::from(healthy(p, t));
        let e = need_prober.entry(p).or_default();
        e.0 += f;
        e.1 += h;
        let e = need_target.entry(t).or_default();
        e.0 += f;
        e.1 += h;
    }
    let before = pairs.len();
    for (&h, &(f, mut have)) in &need_prober {
        if pc.contains(&h) || f < 2 {
            continue;
        }
        for &t in &mesh.kept[h as usize] {
            if have >= 2 * f {
                break;
            }
            if healthy(h, t) && pairs.insert((h, t)) {
                have += 1;
            }
        }
        if have < 2 * f {
            pairs.extend(mesh.kept[h as usize].iter().map(|&t| (h, t)));
        }
    }
    for (&h, &(f, mut have)) in &need_target {
        if nameable_target.contains(&h) || f < 2 {
            continue;
        }
        for &p in &probers[h as usize] {
            if have >= 2 * f {
                break;
            }
            if healthy(p, h) && pairs.insert((p, h)) {
                have += 1;
            }
        }
        if have < 2 * f {
            pairs.extend(probers[h as usize].iter().map(|&p| (p, h)));
        }
    }
    if full {
        for (p, list) in mesh.kept.iter().enumerate() {
            pairs.extend(list.iter().map(|&t| (p as u32, t)));
        }
    }
    let padding = pairs.len() - before;
    Selection {
        pairs,
        nameable_target,
        nameable_prober: pc,
        padding,
    }
}
