//! The localization: the faults a pair shows, the culprit hosts (three passes, as the
//! rules), and the paths no culprit explains; the thresholds of dashboards/pingmesh.toml.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// The thresholds the rules use too (dashboards/gen.py reads the same file).
const THRESHOLDS_TOML: &str = include_str!("../../../../dashboards/pingmesh.toml");

/// The localization's thresholds (dashboards/pingmesh.toml).
#[derive(Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// A pair is lossy in one direction above this share of its probes.
    pub loss_ratio: f64,
    /// The rules' loss window, seconds.
    pub window_seconds: u64,
    /// A culprit host needs at least this many counterparts agreeing (and more than half).
    pub min_counterparts: usize,
    /// Latency: slow above this factor of the pair's baseline...
    pub latency_factor: f64,
    /// ...and this many seconds above it.
    pub latency_min_delta_seconds: f64,
}

/// The compiled-in thresholds.
pub fn thresholds() -> Result<Thresholds> {
    toml::from_str(THRESHOLDS_TOML).context("dashboards/pingmesh.toml (compiled in)")
}

/// One probed pair, as the prober measures it.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Pair {
    /// The probing host.
    pub prober: String,
    /// The probed host.
    pub target: String,
    /// rdma_probe_peer_status: 0 ok, 1 agent, 2 host, 3 rdma.
    pub status: u8,
    /// Probes sent in the window (direct mode).
    pub sent: Option<f64>,
    /// Share of the probes lost on the way to the target.
    pub loss_request: Option<f64>,
    /// Share of the probes whose reply was lost on the way back.
    pub loss_reply: Option<f64>,
    /// Typical (median) round trip of the last run, seconds.
    pub latency_typical_seconds: Option<f64>,
}

/// What fails with a pair or a host.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Fault {
    /// The peer's rdmad refuses or is absent.
    Agent,
    /// The host is unreachable (TCP times out).
    Host,
    /// TCP works, UD probes unanswered.
    Rdma,
    /// Packets into the host are lost.
    Ingress,
    /// Packets out of the host are lost.
    Egress,
}

impl Fault {
    pub(super) fn layer(status: u8) -> Option<Fault> {
        match status {
            1 => Some(Fault::Agent),
            2 => Some(Fault::Host),
            3 => Some(Fault::Rdma),
            _ => None,
        }
    }
    pub(super) fn name(self) -> &'static str {
        match self {
            Fault::Agent => "agent",
            Fault::Host => "host",
            Fault::Rdma => "rdma",
            Fault::Ingress => "ingress",
            Fault::Egress => "egress",
        }
    }
    pub(super) fn is_loss(self) -> bool {
        matches!(self, Fault::Ingress | Fault::Egress)
    }
}

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Side {
    Target,
    Prober,
}

pub(super) fn lossy(ratio: Option<f64>, t: &Thresholds) -> bool {
    ratio.is_some_and(|r| r > t.loss_ratio)
}

/// The pair's faults as `side` sees them.
pub(super) fn faults(p: &Pair, side: Side, t: &Thresholds) -> Vec<Fault> {
    if let Some(f) = Fault::layer(p.status) {
        return vec![f];
    }
    let (req, rep) = match side {
        Side::Target => (Fault::Ingress, Fault::Egress),
        Side::Prober => (Fault::Egress, Fault::Ingress),
    };
    let mut out = Vec::new();
    if lossy(p.loss_request, t) {
        out.push(req);
    }
    if lossy(p.loss_reply, t) {
        out.push(rep);
    }
    out
}

/// Whether the pair was probed in the loss window: a loss fault counts only against these
/// pairs, a layer fault (a status every pair keeps) against all (as the rules: above
/// `--probe.mesh-max` a pair is probed once per planner cycle, longer than the window).
fn probed(p: &Pair) -> bool {
    p.loss_request.is_some() || p.loss_reply.is_some()
}

/// (host, fault) -> (counterparts seeing it, counterparts) for the hosts `end` names, over the
/// pairs `keep` admits, where the fault has a majority.
pub(super) fn culprits(
    pairs: &[Pair],
    side: Side,
    keep: impl Fn(&Pair) -> bool,
    t: &Thresholds,
) -> BTreeMap<(String, Fault), (usize, usize)> {
    let end = |p: &Pair| match side {
        Side::Target => p.target.clone(),
        Side::Prober => p.prober.clone(),
    };
    // Per host: (every pair, the pairs probed in the window).
    let mut total: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut count: BTreeMap<(String, Fault), usize> = BTreeMap::new();
    for p in pairs.iter().filter(|p| keep(p)) {
        let entry = total.entry(end(p)).or_default();
        entry.0 += 1;
        entry.1 += usize::from(probed(p));
        for f in faults(p, side, t) {
            *count.entry((end(p), f)).or_default() += 1;
        }
    }
    count
        .into_iter()
        .filter_map(|((h, f), c)| {
            let (all, probed) = total[&h];
            let n = if f.is_loss() { probed } else { all };
            (c >= t.min_counterparts && 2 * c > n).then_some(((h, f), (c, n)))
        })
        .collect()
}

/// A named fault: a culprit host or a path.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Verdict {
    /// "host" or "path".
    pub kind: &'static str,
    /// The alert of dashboards/rules/rdma.rules.yml that says the same.
    pub alert: &'static str,
    /// The culprit host (kind host).
    pub host: Option<String>,
    /// The path's ends: for loss, the lossy leg goes a -> b (kind path).
    pub a: Option<String>,
    /// See `a`.
    pub b: Option<String>,
    /// Both directions of the path fail (kind path, down).
    pub two_way: bool,
    /// The layer or the direction.
    pub fault: Fault,
    /// Mean loss of the failing pairs in that direction (loss faults).
    pub loss: Option<f64>,
    /// Counterparts that see the fault (kind host).
    pub pairs_failing: usize,
    /// Counterparts (kind host).
    pub pairs_total: usize,
    /// Hosts that reach both ends of a path.
    pub witnesses: Vec<String>,
    /// When the alert became active (Prometheus mode), RFC 3339.
    pub since: Option<String>,
    /// The verdict in words.
    pub text: String,
}

pub(super) fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// The verdicts of the localization on `pairs`.
pub fn verdicts(pairs: &[Pair], t: &Thresholds) -> Vec<Verdict> {
    let raw = culprits(pairs, Side::Target, |_| true, t);
    let raw_hosts: BTreeSet<String> = raw.keys().map(|(h, _)| h.clone()).collect();
    let probers = culprits(pairs, Side::Prober, |p| !raw_hosts.contains(&p.target), t);
    let prober_hosts: BTreeSet<String> = probers.keys().map(|(h, _)| h.clone()).collect();
    let targets = culprits(
        pairs,
        Side::Target,
        |p| !prober_hosts.contains(&p.prober),
        t,
    );
    // A host its counterparts blame is named by their view only, as the rules do: its own
    // probes may fail at another layer (its fabric link down: its peers time out, while its
    // own UD probes fail at its DOWN port first).
    let target_hosts: BTreeSet<String> = targets.keys().map(|(h, _)| h.clone()).collect();
    let mut hosts: BTreeMap<(String, Fault), (usize, usize)> = targets;
    for (k, v) in probers {
        if target_hosts.contains(&k.0) {
            continue;
        }
        let e = hosts.entry(k).or_insert(v);
        if v.0 > e.0 {
            *e = v;
        }
    }
    let culprit_hosts: BTreeSet<String> = hosts.keys().map(|(h, _)| h.clone()).collect();
    let mut out = Vec::new();
    for ((host, fault), (failing, total)) in &hosts {
        // The loss of the pairs that show it: as target (request = ingress) and as prober.
        let mut ratios = Vec::new();
        for p in pairs {
            let (req, rep) = (p.loss_request, p.loss_reply);
            let r = match (fault, &p.target == host, &p.prober == host) {
                (Fault::Ingress, true, _) => req,
                (Fault::Egress, true, _) => rep,
                (Fault::Ingress, _, true) => rep,
                (Fault::Egress, _, true) => req,
                _ => None,
            };
            if let Some(r) = r.filter(|&r| r > t.loss_ratio && p.status == 0) {
                ratios.push(r);
            }
        }
        let loss = if fault.is_loss() { mean(&ratios) } else { None };
        let (alert, what) = match fault {
            Fault::Host => ("RdmaHostUnreachable", "unreachable (host)".to_string()),
            Fault::Agent => (
                "RdmaAgentDown",
                "rdmad refuses or is absent (agent)".to_string(),
            ),
            Fault::Rdma => (
                "RdmaHostRdmaDown",
                "RDMA does not answer (rdma)".to_string(),
            ),
            Fault::Ingress | Fault::Egress => (
                "RdmaHostLinkLossy",
                format!("{} loss {:.0}%", fault.name(), loss.unwrap_or(0.0) * 100.0),
            ),
        };
        out.push(Verdict {
            kind: "host",
            alert,
            host: Some(host.clone()),
            a: None,
            b: None,
            two_way: false,
            fault: *fault,
            loss,
            pairs_failing: *failing,
            pairs_total: *total,
            witnesses: Vec::new(),
            since: None,
            text: format!("{host}: {what} on {failing} of {total} pairs"),
        });
    }
    // Paths: what no culprit host explains.
    let ok = |a: &str, b: &str| {
        pairs
            .iter()
            .any(|p| p.prober == a && p.target == b && faults(p, Side::Target, t).is_empty())
    };
    let hosts_all: BTreeSet<&str> = pairs
        .iter()
        .flat_map(|p| [p.prober.as_str(), p.target.as_str()])
        .collect();
    let witnesses = |a: &str, b: &str| -> Vec<String> {
        hosts_all
            .iter()
            .filter(|&&c| c != a && c != b && ok(c, a) && ok(c, b))
            .map(|c| c.to_string())
            .collect()
    };
    let mut down: BTreeMap<(String, String), Fault> = BTreeMap::new();
    let mut legs: BTreeMap<(String, String), f64> = BTreeMap::new();
    for p in pairs {
        if culprit_hosts.contains(&p.prober) || culprit_hosts.contains(&p.target) {
            continue;
        }
        for f in faults(p, Side::Target, t) {
            match f {
                Fault::Ingress => {
                    let e = legs
                        .entry((p.prober.clone(), p.target.clone()))
                        .or_default();
                    *e = e.max(p.loss_request.unwrap_or(0.0));
                }
                Fault::Egress => {
                    let e = legs
                        .entry((p.target.clone(), p.prober.clone()))
                        .or_default();
                    *e = e.max(p.loss_reply.unwrap_or(0.0));
                }
                layer => {
                    down.insert((p.prober.clone(), p.target.clone()), layer);
                }
            }
        }
    }
    let mut done = BTreeSet::new();
    for ((a, b), layer) in &down {
        if done.contains(&(a.clone(), b.clone())) {
            continue;
        }
        let two_way = down.get(&(b.clone(), a.clone())) == Some(layer);
        let (a, b) = if two_way && b < a { (b, a) } else { (a, b) };
        done.insert((a.clone(), b.clone()));
        done.insert((b.clone(), a.clone()));
        let w = witnesses(a, b);
        let arrow = if two_way { "<->" } else { "->" };
        let mut text = format!("{a}{arrow}{b}: path down ({})", layer.name());
        if !w.is_empty() {
            text += &format!(
                ", {} reach{} both",
                w.join(" and "),
                if w.len() == 1 { "es" } else { "" }
            );
        }
        out.push(Verdict {
            kind: "path",
            alert: "RdmaPathDown",
            host: None,
            a: Some(a.clone()),
            b: Some(b.clone()),
            two_way,
            fault: *layer,
            loss: None,
            pairs_failing: 0,
            pairs_total: 0,
            witnesses: w,
            since: None,
            text,
        });
    }
    for ((a, b), loss) in &legs {
        let w = witnesses(a, b);
        let mut text = format!("{a}->{b}: loss {:.0}% on the way", loss * 100.0);
        if !w.is_empty() {
            text += &format!(
                ", {} reach{} both",
                w.join(" and "),
                if w.len() == 1 { "es" } else { "" }
            );
        }
        out.push(Verdict {
            kind: "path",
            alert: "RdmaPathLossy",
            host: None,
            a: Some(a.clone()),
            b: Some(b.clone()),
            two_way: false,
            fault: Fault::Egress,
            loss: Some(*loss),
            pairs_failing: 0,
            pairs_total: 0,
            witnesses: w,
            since: None,
            text,
        });
    }
    out
}
