//! The per-peer series rdmad exports, as templates rendered by rdmad's own collector and
//! checked against `rdmad --print-metrics json`.

use anyhow::{bail, Context};
use rdma_probe::snapshot::{
    DiscoveryStats, Histogram, PeerState, PeerStatus, PeerTransport, ProbeSnapshot, LATENCY_BUCKETS,
};
use rdma_probe::{LatencySummary, ProbeOp, TargetResult};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

/// Which of rdmad's per-peer series a template line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Role {
    Status,
    Sent,
    LostRequest,
    LostReply,
    Typical,
    P99,
}

/// One per-peer series as rdmad renders it, with the peer's address and rack to fill in.
pub(crate) struct Template {
    pub(crate) role: Role,
    /// `name{labels}` with `@PEER@` and `@RACK@` in place of the peer's.
    pub(crate) text: String,
}

pub(crate) const MARK_PEER: &str = "192.0.2.1:9737";
pub(crate) const MARK_RACK: &str = "rack-mark";
// Values no other series of the snapshot has: they tell the lines apart without naming them.
pub(crate) const MARK_SENT: u64 = 7_000_001;
pub(crate) const MARK_LOST_REQUEST: u64 = 7_000_002;
pub(crate) const MARK_LOST_REPLY: u64 = 7_000_003;
pub(crate) const MARK_TYPICAL_US: f64 = 7_000_004.0;
pub(crate) const MARK_P99_US: f64 = 7_000_005.0;

/// rdmad's per-peer series for one peer, rendered by rdmad's collector from a snapshot with
/// one UD peer, and their names checked against `rdmad --print-metrics json`.
pub(crate) fn templates(rdmad: &Path) -> anyhow::Result<Vec<Template>> {
    let summary = LatencySummary {
        iterations: 100,
        t_min_us: 1.0,
        t_max_us: 2.0,
        t_typical_us: MARK_TYPICAL_US,
        t_avg_us: 1.5,
        t_stdev_us: 0.5,
        p99_us: MARK_P99_US,
        p99_9_us: 3.0,
    };
    let labels = Arc::new(BTreeMap::from([(
        "rack".to_string(),
        MARK_RACK.to_string(),
    )]));
    let snapshot = ProbeSnapshot {
        clock: None,
        rounds_total: 1,
        round_duration_seconds: None,
        rounds_late_total: 0,
        cpu_seconds_total: 0.0,
        uptime_seconds: 1.0,
        targets: vec![TargetResult {
            kind: "peer",
            device: "mlx5_0".into(),
            port: 1,
            peer: Some(MARK_PEER.into()),
            op: ProbeOp::Send,
            transport: PeerTransport::Ud,
            size_bytes: 64,
            latency_seconds: Histogram::new(LATENCY_BUCKETS),
            last: Some(summary),
            runs_total: 1,
            sent_total: MARK_SENT,
            lost_total: MARK_LOST_REQUEST + MARK_LOST_REPLY,
            lost_request_total: MARK_LOST_REQUEST,
            lost_reply_total: MARK_LOST_REPLY,
            failures_total: BTreeMap::new(),
            up: true,
            last_error: None,
        }],
        registrations: Vec::new(),
        peers: vec![PeerState {
            peer: MARK_PEER.into(),
            connected: true,
            connects_total: 1,
            backoff_seconds: 1.0,
            labels,
            planned: true,
            status: Some(PeerStatus::Rdma),
        }],
        handshakes_accepted_total: 0,
        handshakes_refused_total: BTreeMap::new(),
        ud_endpoints: Vec::new(),
        discovery: DiscoveryStats::default(),
        own_labels: BTreeMap::new(),
        own_peers: Vec::new(),
    };
    let mut set = rdmad::metrics::MetricSet::new();
    rdmad::collector::probes::emit(&snapshot, false, &mut set)?;
    let text = set.encode(rdmad::metrics::Format::Text);
    let declared = declared_names(rdmad)?;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || !line.contains(&format!("peer=\"{MARK_PEER}\"")) {
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .with_context(|| format!("no value in {line:?}"))?;
        let value: f64 = value.parse()?;
        let role = if value == f64::from(PeerStatus::Rdma.value() as u32) {
            Role::Status
        } else if value == MARK_SENT as f64 {
            Role::Sent
        } else if value == MARK_LOST_REQUEST as f64 {
            Role::LostRequest
        } else if value == MARK_LOST_REPLY as f64 {
            Role::LostReply
        } else if value == MARK_TYPICAL_US / 1e6 {
            Role::Typical
        } else if value == MARK_P99_US / 1e6 {
            Role::P99
        } else {
            bail!("rdmad renders a per-peer series this bench does not know: {line}");
        };
        let name = series.split('{').next().unwrap_or_default();
        if !declared.contains(name) {
            bail!(
                "{name} is not in `{} --print-metrics json`",
                rdmad.display()
            );
        }
        out.push(Template {
            role,
            text: series
                .replace(MARK_PEER, "@PEER@")
                .replace(MARK_RACK, "@RACK@"),
        });
    }
    let roles: BTreeSet<Role> = out.iter().map(|t| t.role).collect();
    if roles.len() != 6 || out.len() != 6 {
        bail!(
            "expected rdmad's 6 per-peer series, got {}: {text}",
            out.len()
        );
    }
    Ok(out)
}

/// Every series name rdmad declares, from the binary itself.
pub(crate) fn declared_names(rdmad: &Path) -> anyhow::Result<BTreeSet<String>> {
    let out = Command::new(rdmad)
        .args(["--print-metrics", "json"])
        .output()
        .with_context(|| format!("running {}", rdmad.display()))?;
    if !out.status.success() {
        bail!("{} --print-metrics json failed", rdmad.display());
    }
    let text = String::from_utf8(out.stdout)?;
    // "series": ["name", ...] entries: every quoted word after a "series" key.
    let mut names = BTreeSet::new();
    for chunk in text.split("\"series\"").skip(1) {
        let list = chunk
            .split_once('[')
            .and_then(|(_, r)| r.split_once(']'))
            .map(|(l, _)| l)
            .unwrap_or_default();
        for name in list.split(',') {
            let name = name.trim().trim_matches('"');
            if !name.is_empty() {
                names.insert(name.to_string());
            }
        }
    }
    if names.is_empty() {
        bail!("no series in `{} --print-metrics json`", rdmad.display());
    }
    Ok(names)
}
