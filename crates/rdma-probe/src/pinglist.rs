//! The pinglist planner: which peers one host probes in a round.
//!
//! Up to `mesh_max` peers every peer is probed every round (full mesh). Above it a round
//! probes at most `mesh_max` peers: every peer sharing this host's `rack` label (rotated too
//! if the rack alone would fill the round), plus the next cross-rack peers of a walk around
//! a ring that every host builds the same way from the same peer set: all hosts, this one
//! included, ordered by a stable hash of their `HOST:PORT`. Each host walks only the half of
//! the ring ahead of itself, so a pair (a, b) is probed by whichever of the two has the other
//! in its forward half, and every pair is covered once the walk has gone round:
//! `ceil(cross-rack peers in the half / sample)` rounds, about `n / (2 * sample)`.
//! A host absent from its own peer set (static peers) is placed on the ring by its own id.
//!
//! The ring is built once per peer set ([`Pinglist::new`]); a round is `O(mesh_max)`.

use std::collections::BTreeMap;

/// Default largest peer count probed as a full mesh (`--probe.mesh-max`).
pub const DEFAULT_MESH_MAX: usize = 64;

/// FNV-1a, 64 bit: stable across hosts, builds and Rust versions (the ring order must be
/// the same on every host).
pub fn stable_hash(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The plan for one peer set, seen from one host.
#[derive(Debug, Clone)]
pub struct Pinglist {
    mesh_max: usize,
    peers: usize,
    /// Indices (into the caller's peer list) of this host's rack.
    rack: Vec<u32>,
    /// Ring positions after this host's, up to half the ring: indices of cross-rack peers.
    forward: Vec<u32>,
    /// How many rack peers a round takes, and how many cross-rack ones.
    rack_take: usize,
    sample: usize,
}

impl Pinglist {
    /// Plan for `peers` (`(HOST:PORT, rack)`, this host excluded) seen from `own_id` (this
    /// host's own `HOST:PORT` as the others know it, or any stable id) in `own_rack`.
    pub fn new(
        mesh_max: usize,
        own_id: &str,
        own_rack: Option<&str>,
        peers: &[(&str, Option<&str>)],
    ) -> Pinglist {
        let mesh_max = mesh_max.max(1);
        let n = peers.len();
        let mut list = Pinglist {
            mesh_max,
            peers: n,
            rack: Vec::new(),
            forward: Vec::new(),
            rack_take: 0,
            sample: 0,
        };
        if n <= mesh_max {
            return list;
        }
        let same_rack = |r: Option<&str>| own_rack.is_some() && r == own_rack;
        list.rack = (0..n as u32)
            .filter(|&i| same_rack(peers[i as usize].1))
            .collect();
        // The ring: every peer and this host, by (hash, id).
        let own_hash = stable_hash(own_id);
        let mut ring: Vec<(u64, u32)> = (0..n as u32)
            .map(|i| (stable_hash(peers[i as usize].0), i))
            .collect();
        ring.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| peers[a.1 as usize].0.cmp(peers[b.1 as usize].0))
        });
        let me = ring.partition_point(|&(h, i)| (h, peers[i as usize].0) < (own_hash, own_id));
        let size = n + 1; // the ring with this host in it
        let half = size / 2; // forward offsets 1..=half cover every pair from one side
        list.forward = (1..=half)
            .map(|off| (me + off - 1) % n) // position `me` is the first peer after us
            .map(|pos| ring[pos].1)
            .filter(|&i| !same_rack(peers[i as usize].1))
            .collect();
        let cross = n - list.rack.len();
        let min_sample = (mesh_max / 4).max(1).min(cross);
        list.rack_take = list.rack.len().min(mesh_max - min_sample.min(mesh_max));
        list.sample = (mesh_max - list.rack_take)
            .min(list.forward.len())
            .max(usize::from(!list.forward.is_empty()));
        list
    }

    /// Whether every peer is probed every round.
    pub fn full_mesh(&self) -> bool {
        self.peers <= self.mesh_max
    }

    /// Rounds after which every pair involving this host was probed from one side or the
    /// other (1 for a full mesh).
    pub fn cycle_rounds(&self) -> u64 {
        if self.full_mesh() {
            return 1;
        }
        let cross = if self.sample == 0 {
            1
        } else {
            self.forward.len().div_ceil(self.sample)
        };
        let rack = if self.rack_take == 0 {
            1
        } else {
            self.rack.len().div_ceil(self.rack_take)
        };
        cross.max(rack).max(1) as u64
    }

    /// The peers (indices into the list given to [`Pinglist::new`]) to probe in `round`,
    /// at most `mesh_max`.
    pub fn round(&self, round: u64) -> Vec<usize> {
        if self.full_mesh() {
            return (0..self.peers).collect();
        }
        let mut out = Vec::with_capacity(self.rack_take + self.sample);
        window(&self.rack, self.rack_take, round, &mut out);
        window(&self.forward, self.sample, round, &mut out);
        out
    }
}

/// The `round`-th window of `take` entries of `list`, wrapping around.
fn window(list: &[u32], take: usize, round: u64, out: &mut Vec<usize>) {
    if list.is_empty() || take == 0 {
        return;
    }
    let len = list.len() as u64;
    let take = take.min(list.len());
    let start = (round % len.div_ceil(take as u64)) * take as u64;
    out.extend(
        (0..take as u64)
            .map(|k| ((start + k) % len) as usize)
            .map(|p| list[p] as usize),
    );
}

/// Rounds until every unordered pair of `hosts` (`(id, rack)`) was probed by one side or the
/// other when each plans with [`Pinglist`], or `None` within `max_rounds`; with the largest
/// number of probes any host sent in one round. The simulation behind the planner bench and
/// its tests.
pub fn simulate(
    mesh_max: usize,
    hosts: &[(String, Option<String>)],
    max_rounds: u64,
) -> (Option<u64>, usize) {
    let n = hosts.len();
    let index: BTreeMap<&str, usize> = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| (h.0.as_str(), i))
        .collect();
    let plans: Vec<(Pinglist, Vec<usize>)> = (0..n)
        .map(|me| {
            let peers: Vec<(&str, Option<&str>)> = hosts
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != me)
                .map(|(_, h)| (h.0.as_str(), h.1.as_deref()))
                .collect();
            let global: Vec<usize> = peers.iter().map(|p| index[p.0]).collect();
            (
                Pinglist::new(mesh_max, &hosts[me].0, hosts[me].1.as_deref(), &peers),
                global,
            )
        })
        .collect();
    let mut covered = vec![false; n * n];
    let mut missing = n * n.saturating_sub(1) / 2;
    let mut max_probes = 0;
    for round in 0..max_rounds {
        for (me, (plan, global)) in plans.iter().enumerate() {
            let picks = plan.round(round);
            max_probes = max_probes.max(picks.len());
            for p in picks {
                let other = global[p];
                let (a, b) = (me.min(other), me.max(other));
                let cell = &mut covered[a * n + b];
                if !*cell {
                    *cell = true;
                    missing -= 1;
                }
            }
        }
        if missing == 0 {
            return (Some(round + 1), max_probes);
        }
    }
    (None, max_probes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(n: usize, rack_size: usize) -> Vec<(String, Option<String>)> {
        (0..n)
            .map(|i| {
                (
                    format!("10.{}.{}.{}:9736", i / 65536, (i / 256) % 256, i % 256),
                    Some(format!("r{}", i / rack_size)),
                )
            })
            .collect()
    }

    #[test]
    fn up_to_mesh_max_every_peer_every_round() {
        let peers: Vec<(&str, Option<&str>)> = vec![("a:1", None), ("b:1", None), ("c:1", None)];
        let p = Pinglist::new(3, "me:1", None, &peers);
        assert!(p.full_mesh());
        assert_eq!(p.round(0), vec![0, 1, 2]);
        assert_eq!(p.round(7), vec![0, 1, 2]);
        assert_eq!(p.cycle_rounds(), 1);
        let (rounds, max) = simulate(64, &hosts(12, 4), 10);
        assert_eq!(
            (rounds, max),
            (Some(1), 11),
            "12 hosts: a full mesh in one round"
        );
    }

    #[test]
    fn above_mesh_max_rack_peers_every_round_and_a_bounded_sample() {
        let all = hosts(200, 32);
        let me = &all[40];
        let peers: Vec<(&str, Option<&str>)> = all
            .iter()
            .filter(|h| h.0 != me.0)
            .map(|h| (h.0.as_str(), h.1.as_deref()))
            .collect();
        let p = Pinglist::new(64, &me.0, me.1.as_deref(), &peers);
        assert!(!p.full_mesh());
        let rack: Vec<usize> = (0..peers.len())
            .filter(|&i| peers[i].1 == me.1.as_deref())
            .collect();
        assert_eq!(rack.len(), 31);
        for round in 0..20 {
            let picks = p.round(round);
            assert!(picks.len() <= 64, "round {round}: {} probes", picks.len());
            assert!(rack.iter().all(|r| picks.contains(r)), "round {round}");
            let mut dedup = picks.clone();
            dedup.sort();
            dedup.dedup();
            assert_eq!(dedup.len(), picks.len(), "no peer twice in a round");
        }
    }

    #[test]
    fn every_pair_is_covered_within_the_bound() {
        // 1,000 hosts in racks of 32: the bound is ceil(1000 / 64) = 16 rounds.
        let all = hosts(1000, 32);
        let (rounds, max) = simulate(64, &all, 64);
        assert!(max <= 64, "{max} probes in one round");
        let rounds = rounds.expect("not covered in 64 rounds");
        assert!(rounds <= 16, "{rounds} rounds to cover every pair");
        // Without rack labels: a plain rotating sample.
        let flat: Vec<_> = all.iter().map(|h| (h.0.clone(), None)).collect();
        let (rounds, max) = simulate(64, &flat, 64);
        assert!(max <= 64);
        assert!(rounds.expect("flat: covered") <= 16);
    }

    #[test]
    fn a_rack_larger_than_the_round_is_rotated_too() {
        let all = hosts(300, 200);
        let (rounds, max) = simulate(64, &all, 64);
        assert!(max <= 64, "{max}");
        assert!(rounds.is_some(), "every pair covered");
    }

    #[test]
    fn the_hash_is_stable() {
        // FNV-1a test vectors.
        assert_eq!(stable_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(stable_hash("a"), 0xaf63_dc4c_8601_ec8c);
    }
}
