//! The top-owners pane's model: who holds the most queue pairs, and how many of them are in
//! ERR, per owner (process name, cgroup, pod; the pid when known), summed over devices.
//!
//! Two sources give the same rows: rdmad's `rdma_owner_qps` series (`--rdmad`: the host
//! rdmad watches, maybe not this one) through [`from_exposition`], or this host's RDMA
//! netlink dumps tallied by `rdmakit::attribution` (the code rdmad's `netlink_owners`
//! collector runs) through [`from_report`].

use rdmakit::attribution::{Grouping, OwnerKey, OwnerReport, OWNER_QPS_METRIC};
use std::collections::BTreeMap;

/// Rows the pane keeps (the most QPs first).
pub const TOP_OWNERS: usize = 10;

/// One owner's QPs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopOwner {
    /// Who: `comm[pid]` or `comm`, `kernel`, `other`, ...
    pub owner: String,
    /// Where: `pod <uid>` inside Kubernetes, else the cgroup path ("" when none).
    pub place: String,
    /// QPs held, every state.
    pub qps: u64,
    /// Of them, QPs in ERR.
    pub err: u64,
}

/// What the top-owners pane shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerStatus {
    /// Nothing sampled yet.
    NotSampled,
    /// No source: why.
    Unavailable(String),
    /// The owners (at most [`TOP_OWNERS`], most QPs first), where they came from, and how
    /// many owners the source had in all.
    Owners {
        /// The rows.
        rows: Vec<TopOwner>,
        /// `rdmad` or `netlink`.
        source: &'static str,
        /// Owners before the cut to [`TOP_OWNERS`].
        total: usize,
    },
}

fn owner_text(key: &OwnerKey) -> (String, String) {
    let owner = match key.pid {
        Some(pid) => format!("{}[{pid}]", key.comm),
        None => key.comm.clone(),
    };
    let place = if !key.pod_uid.is_empty() {
        format!("pod {}", key.pod_uid)
    } else if !key.job_id.is_empty() {
        format!("job {}", key.job_id)
    } else {
        key.cgroup.clone()
    };
    (owner, place)
}

/// The most QPs first; ties by owner text. Owners without QPs are left out.
fn rank(counts: BTreeMap<OwnerKey, (u64, u64)>, source: &'static str) -> OwnerStatus {
    let mut rows: Vec<TopOwner> = counts
        .into_iter()
        .filter(|(_, (qps, _))| *qps > 0)
        .map(|(key, (qps, err))| {
            let (owner, place) = owner_text(&key);
            TopOwner {
                owner,
                place,
                qps,
                err,
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        b.qps
            .cmp(&a.qps)
            .then_with(|| b.err.cmp(&a.err))
            .then_with(|| (&a.owner, &a.place).cmp(&(&b.owner, &b.place)))
    });
    let total = rows.len();
    rows.truncate(TOP_OWNERS);
    OwnerStatus::Owners {
        rows,
        source,
        total,
    }
}

/// The owners of rdmad's `rdma_owner_qps` series in an exposition; `None` when it has none
/// (rdmad runs without `netlink_owners`).
pub fn from_exposition(exposition: &rdmakit::exposition::Exposition) -> Option<OwnerStatus> {
    let mut counts: BTreeMap<OwnerKey, (u64, u64)> = BTreeMap::new();
    let mut any = false;
    for s in exposition.named(OWNER_QPS_METRIC) {
        any = true;
        let label = |k: &str| s.label(k).unwrap_or_default().to_string();
        let key = OwnerKey {
            comm: label("comm"),
            cgroup: label("cgroup"),
            pod_uid: label("pod_uid"),
            container_id: label("container_id"),
            job_id: label("job_id"),
            job_step: label("job_step"),
            pid: s.label("pid").and_then(|p| p.parse().ok()),
        };
        // Gauges of whole QPs: anything else (NaN, negative) counts as none.
        let n = if s.value.is_finite() && s.value > 0.0 {
            s.value as u64
        } else {
            0
        };
        let entry = counts.entry(key).or_default();
        entry.0 += n;
        if s.label("state") == Some("ERR") {
            entry.1 += n;
        }
    }
    any.then(|| rank(counts, "rdmad"))
}

/// The owners of a tally of this host's dumps (`rdmakit::attribution`).
pub fn from_report(report: &OwnerReport) -> OwnerStatus {
    let mut counts: BTreeMap<OwnerKey, (u64, u64)> = BTreeMap::new();
    for (key, holdings) in report.grouped(Grouping::Process) {
        let qps = holdings.qps.values().sum::<u64>();
        let err = holdings
            .qps
            .iter()
            .filter(|((state, _), _)| state == "ERR")
            .map(|(_, n)| n)
            .sum::<u64>();
        let entry = counts.entry(key).or_default();
        entry.0 += qps;
        entry.1 += err;
    }
    rank(counts, "netlink")
}
