//! What the probe engine publishes ([`ProbeSnapshot`], read through
//! `engine::ProbeHandle::snapshot`), and the names it is made of. This module needs no
//! `verbs` feature: rdmad maps a snapshot to its metrics (and tests that mapping) in a build
//! without libibverbs, and only the engine that fills it needs verbs.
//!
//! The snapshot holds no key, rkey or address, so none can reach a metric label.
use crate::stats::LatencySummary;
pub use rdmakit::histogram::Histogram;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Latency buckets, seconds: from hardware RoCE (1-5 us) through Soft-RoCE under emulation
/// (15-50 us) to retransmission territory (milliseconds).
pub const LATENCY_BUCKETS: &[f64] = &[
    1e-6, 2e-6, 5e-6, 10e-6, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 100e-3,
];

/// MR registration buckets, seconds.
pub const REGISTRATION_BUCKETS: &[f64] = &[1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0];

/// Which operation a probe measures.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ProbeOp {
    /// RC SEND/RECV ping-pong (like `ib_send_lat`), one-way = RTT/2.
    Send,
    /// RDMA WRITE ping-pong polling memory (like `ib_write_lat`), one-way = RTT/2.
    Write,
    /// RDMA READ, post to completion (like `ib_read_lat`), a full round trip.
    Read,
}

impl ProbeOp {
    /// Every operation.
    pub const ALL: [ProbeOp; 3] = [ProbeOp::Send, ProbeOp::Write, ProbeOp::Read];

    /// Lower-case name (`send`, `write`, `read`): the `op` label.
    pub fn name(self) -> &'static str {
        match self {
            ProbeOp::Send => "send",
            ProbeOp::Write => "write",
            ProbeOp::Read => "read",
        }
    }

    /// The name perftest prints in its banner.
    pub fn perftest_name(self) -> &'static str {
        match self {
            ProbeOp::Send => "Send",
            ProbeOp::Write => "RDMA_Write",
            ProbeOp::Read => "RDMA_Read",
        }
    }

    /// Divisor from a measured round trip to the reported latency (perftest's rtt_factor).
    pub fn rtt_factor(self) -> f64 {
        match self {
            ProbeOp::Send | ProbeOp::Write => 2.0,
            ProbeOp::Read => 1.0,
        }
    }
}

/// A probe op name that is none of `send`, `write`, `read` (the name, lowercased).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown probe op {0:?} (send, write or read)")]
pub struct UnknownProbeOp(pub String);

impl std::str::FromStr for ProbeOp {
    type Err = UnknownProbeOp;
    fn from_str(s: &str) -> Result<Self, UnknownProbeOp> {
        match s.to_ascii_lowercase().as_str() {
            "send" => Ok(ProbeOp::Send),
            "write" => Ok(ProbeOp::Write),
            "read" => Ok(ProbeOp::Read),
            other => Err(UnknownProbeOp(other.to_string())),
        }
    }
}

impl std::fmt::Display for ProbeOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which source the probe clock (`clock::Clock`, with the `verbs` feature) reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockSource {
    /// The CPU cycle counter, calibrated.
    Tsc,
    /// `clock_gettime(CLOCK_MONOTONIC)` through `Instant`.
    Monotonic,
}

/// What was measured when the clock was chosen.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ClockInfo {
    /// The source in use.
    pub source: ClockSource,
    /// Cost of one read of the source in use, nanoseconds.
    pub read_cost_ns: f64,
    /// Cost of one `Instant::now()`, nanoseconds.
    pub monotonic_cost_ns: f64,
    /// Cost of one cycle-counter read, nanoseconds (`None` where there is none).
    pub tsc_cost_ns: Option<f64>,
    /// Cycle-counter rate, GHz (`None` when not calibrated).
    pub tsc_ghz: Option<f64>,
}

/// How peers are probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PeerTransport {
    /// UD echo requests on one UD QP per local device (the `op` is `send`).
    #[default]
    Ud,
    /// One-sided RDMA READ or WRITE on an RC QP per peer.
    Rc,
}

impl PeerTransport {
    /// `ud` or `rc`: the `transport` label.
    pub fn name(self) -> &'static str {
        match self {
            PeerTransport::Ud => "ud",
            PeerTransport::Rc => "rc",
        }
    }
}

/// A probe transport name that is neither `ud` nor `rc` (the name, lowercased).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown probe transport {0:?} (ud or rc)")]
pub struct UnknownTransport(pub String);

impl std::str::FromStr for PeerTransport {
    type Err = UnknownTransport;
    fn from_str(s: &str) -> Result<Self, UnknownTransport> {
        match s.to_ascii_lowercase().as_str() {
            "ud" => Ok(PeerTransport::Ud),
            "rc" => Ok(PeerTransport::Rc),
            other => Err(UnknownTransport(other.to_string())),
        }
    }
}

impl std::fmt::Display for PeerTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Labels of a peer; the targets of one file_sd group share one map.
pub type Labels = Arc<BTreeMap<String, String>>;

/// What discovery publishes (metrics).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DiscoveryStats {
    /// Peers per source (`static`, `dns`, `file`) after the last refresh, self excluded.
    pub peers: BTreeMap<String, u64>,
    /// Entries skipped as invalid in the last refresh, per source.
    pub invalid_entries: BTreeMap<String, u64>,
    /// Failed refreshes by `(source, reason)`: `file`/`missing`, `file`/`read`,
    /// `file`/`parse`, `dns`/`no_records`, `dns`/`resolve`, `dns`/`setup`. Serialized as a
    /// list of `{source, reason, count}` (JSON object keys must be strings).
    #[serde(serialize_with = "errors_as_list")]
    pub errors_total: BTreeMap<(String, String), u64>,
}

fn errors_as_list<S: serde::Serializer>(
    errors: &BTreeMap<(String, String), u64>,
    s: S,
) -> Result<S::Ok, S::Error> {
    #[derive(serde::Serialize)]
    struct Entry<'a> {
        source: &'a str,
        reason: &'a str,
        count: u64,
    }
    s.collect_seq(errors.iter().map(|((source, reason), &count)| Entry {
        source,
        reason,
        count,
    }))
}

/// Results of one probe target (a device port's operation, or a peer's).
#[derive(Debug, Clone, serde::Serialize)]
pub struct TargetResult {
    /// `loopback` or `peer`.
    pub kind: &'static str,
    /// Local device.
    pub device: String,
    /// Local port.
    pub port: u8,
    /// The peer (`HOST:PORT`), for peer probes.
    pub peer: Option<String>,
    /// Operation.
    pub op: ProbeOp,
    /// `rc` (loopback and RC peers) or `ud`.
    pub transport: PeerTransport,
    /// Message size, bytes.
    pub size_bytes: usize,
    /// Latency of every sample so far, seconds (one-way for send/write loopback, RTT for
    /// read and peers).
    pub latency_seconds: Histogram,
    /// perftest summary of the last successful run.
    pub last: Option<LatencySummary>,
    /// Successful runs.
    pub runs_total: u64,
    /// Requests sent (peers; loopback counts none). UD: every request, warmup included; RC:
    /// the timed ones.
    pub sent_total: u64,
    /// Requests without an answer within the timeout (peers): `lost_request_total +
    /// lost_reply_total`.
    pub lost_total: u64,
    /// Of them, requests the peer never received (UD: from the replies' `received` counts;
    /// while the peer is silent every loss counts here; RC: every loss).
    pub lost_request_total: u64,
    /// Of them, replies lost on their way back although the peer received the request (UD).
    pub lost_reply_total: u64,
    /// Failed runs by failure name (`RETRY_EXC_ERR`, `TIMEOUT`, `CONNECT_ERR`, ...).
    pub failures_total: BTreeMap<String, u64>,
    /// Whether the last run succeeded.
    pub up: bool,
    /// The last failure's message.
    pub last_error: Option<String>,
}

impl TargetResult {
    /// A target that has measured nothing yet: no run, no sample (an empty histogram of
    /// [`LATENCY_BUCKETS`]), nothing sent or lost, no failure, not up.
    pub fn empty(
        kind: &'static str,
        device: &str,
        port: u8,
        peer: Option<String>,
        op: ProbeOp,
        transport: PeerTransport,
        size_bytes: usize,
    ) -> TargetResult {
        TargetResult {
            kind,
            device: device.to_string(),
            port,
            peer,
            op,
            transport,
            size_bytes,
            latency_seconds: Histogram::new(LATENCY_BUCKETS),
            last: None,
            runs_total: 0,
            sent_total: 0,
            lost_total: 0,
            lost_request_total: 0,
            lost_reply_total: 0,
            failures_total: BTreeMap::new(),
            up: false,
            last_error: None,
        }
    }

    /// Whether the target ever answered: a successful run (or a latency measured), or (UD)
    /// a request answered in a failed run. Once true it stays true: a failed run counts
    /// every request it left unanswered as lost, so `sent_total - lost_total` is at least
    /// the requests answered. A peer that never answered (every connect timed out or was
    /// refused, or its UD requests all went unanswered) has measured nothing: rdmad exports
    /// only its status.
    pub fn ever_answered(&self) -> bool {
        self.runs_total > 0 || self.last.is_some() || self.sent_total > self.lost_total
    }
}

/// MR registration timings of one device and size.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RegistrationResult {
    /// Device.
    pub device: String,
    /// Buffer size, bytes.
    pub size_bytes: usize,
    /// The last registration's duration, seconds.
    pub last_seconds: Option<f64>,
    /// All registrations, seconds.
    pub seconds: Histogram,
    /// Failed registrations.
    pub failures_total: u64,
}

/// A peer's connection state.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PeerState {
    /// `HOST:PORT`.
    pub peer: String,
    /// Connected (handshake done, QP in RTS).
    pub connected: bool,
    /// Successful connections so far.
    pub connects_total: u64,
    /// Current reconnect delay, seconds.
    pub backoff_seconds: f64,
    /// Labels from discovery (`rack`, `zone`, ...), shared with discovery's peer set.
    pub labels: Labels,
    /// Whether the planner picked it in the last round.
    pub planned: bool,
    /// The last outcome's verdict (None until the first attempt ended).
    pub status: Option<PeerStatus>,
}

/// A peer's verdict: OK, or which layer failed (the `rdma_probe_peer_status` value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerStatus {
    /// The last run succeeded.
    Ok = 0,
    /// The peer's agent (rdmad) refused or is absent: TCP refused at once, or the handshake
    /// failed, or it closed the control connection.
    Agent = 1,
    /// The host is unreachable: the TCP connect timed out (or an ICMP unreachable).
    Host = 2,
    /// TCP and the handshake work but the RDMA probes go unanswered or fail (the RDMA path,
    /// the peer's or this host's device).
    Rdma = 3,
}

impl PeerStatus {
    /// The gauge value.
    pub fn value(self) -> u64 {
        self as u64
    }

    /// The lower-case name (`ok`, `agent`, `host`, `rdma`).
    pub fn name(self) -> &'static str {
        match self {
            PeerStatus::Ok => "ok",
            PeerStatus::Agent => "agent",
            PeerStatus::Host => "host",
            PeerStatus::Rdma => "rdma",
        }
    }
}

/// The UD endpoint of one local device (one UD QP, whatever the number of peers).
#[derive(Debug, Clone, serde::Serialize)]
pub struct UdEndpointState {
    /// Device.
    pub device: String,
    /// Sessions now (peers we probe plus peers probing us).
    pub sessions: usize,
    /// Address handles now (one per peer GID).
    pub address_handles: usize,
    /// Requests answered.
    pub answered_total: u64,
    /// Datagrams dropped, by reason (`malformed`, `unknown_session`, `bad_tag`, ...; every
    /// reason present, zeros included).
    pub dropped_total: BTreeMap<String, u64>,
}

/// Everything the engine publishes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProbeSnapshot {
    /// The clock in use and what it costs.
    pub clock: Option<ClockInfo>,
    /// Rounds completed (peer rounds when peers are configured, loopback rounds otherwise).
    pub rounds_total: u64,
    /// How long the last peer round took (start to its last run's end), seconds.
    pub round_duration_seconds: Option<f64>,
    /// Peer rounds that took longer than the interval.
    pub rounds_late_total: u64,
    /// CPU time of all engine threads, seconds.
    pub cpu_seconds_total: f64,
    /// Seconds since the engine started.
    pub uptime_seconds: f64,
    /// One entry per target.
    pub targets: Vec<TargetResult>,
    /// MR registration timings.
    pub registrations: Vec<RegistrationResult>,
    /// Peers.
    pub peers: Vec<PeerState>,
    /// Handshakes this engine's listener accepted.
    pub handshakes_accepted_total: u64,
    /// Handshakes it refused, by reason (`bad_mac`, `replay`, `malformed`, ...).
    pub handshakes_refused_total: BTreeMap<String, u64>,
    /// The UD endpoints in use.
    pub ud_endpoints: Vec<UdEndpointState>,
    /// Peer discovery: peers per source, skipped entries, failed refreshes.
    pub discovery: DiscoveryStats,
    /// This host's own labels (`rack`, ...).
    pub own_labels: BTreeMap<String, String>,
    /// Peers found to be this engine itself (by address or by GID).
    pub own_peers: Vec<String>,
}

impl ProbeSnapshot {
    /// The UD endpoint of `device`.
    pub fn ud_endpoint(&self, device: &str) -> Option<&UdEndpointState> {
        self.ud_endpoints.iter().find(|e| e.device == device)
    }

    /// The target for `op` on `device` (loopback) or towards `peer`.
    pub fn target(&self, device_or_peer: &str, op: ProbeOp) -> Option<&TargetResult> {
        self.targets.iter().find(|t| {
            t.op == op
                && (t.peer.as_deref() == Some(device_or_peer)
                    || (t.peer.is_none() && t.device == device_or_peer))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(device: &str, peer: Option<&str>, op: ProbeOp) -> TargetResult {
        TargetResult::empty(
            if peer.is_some() { "peer" } else { "loopback" },
            device,
            1,
            peer.map(str::to_string),
            op,
            PeerTransport::Rc,
            64,
        )
    }

    #[test]
    fn an_empty_target_has_measured_nothing() {
        let t = target("rxe0", Some("10.0.0.2:9737"), ProbeOp::Write);
        assert_eq!(
            (t.kind, t.device.as_str(), t.port, t.peer.as_deref()),
            ("peer", "rxe0", 1, Some("10.0.0.2:9737"))
        );
        assert_eq!(
            (t.op, t.transport, t.size_bytes),
            (ProbeOp::Write, PeerTransport::Rc, 64)
        );
        assert_eq!(t.latency_seconds.bounds(), LATENCY_BUCKETS);
        assert_eq!(t.latency_seconds.count(), 0);
        assert!(t.last.is_none() && t.last_error.is_none() && t.failures_total.is_empty());
        assert_eq!(
            [
                t.runs_total,
                t.sent_total,
                t.lost_total,
                t.lost_request_total,
                t.lost_reply_total
            ],
            [0; 5]
        );
        assert!(!t.up);
        assert!(!t.ever_answered());
    }

    #[test]
    fn a_target_is_found_by_device_for_loopback_and_by_peer_otherwise() {
        let s = ProbeSnapshot {
            clock: None,
            rounds_total: 0,
            round_duration_seconds: None,
            rounds_late_total: 0,
            cpu_seconds_total: 0.0,
            uptime_seconds: 0.0,
            targets: vec![
                target("rxe0", None, ProbeOp::Write),
                target("rxe0", Some("h2:9737"), ProbeOp::Read),
            ],
            registrations: vec![],
            peers: vec![],
            handshakes_accepted_total: 0,
            handshakes_refused_total: BTreeMap::new(),
            ud_endpoints: vec![],
            discovery: DiscoveryStats::default(),
            own_labels: BTreeMap::new(),
            own_peers: vec![],
        };
        assert_eq!(s.target("rxe0", ProbeOp::Write).unwrap().kind, "loopback");
        assert_eq!(s.target("h2:9737", ProbeOp::Read).unwrap().kind, "peer");
        // The peer target is not the device's loopback target, nor another op's.
        assert!(s.target("rxe0", ProbeOp::Read).is_none());
        assert!(s.target("h2:9737", ProbeOp::Write).is_none());
        // The histogram the engine fills: the probe latency bounds and +Inf.
        let h = &s.targets[0].latency_seconds;
        assert_eq!(h.bounds(), LATENCY_BUCKETS);
        assert_eq!(h.cumulative().len(), LATENCY_BUCKETS.len() + 1);
    }
}

#[cfg(test)]
mod discovery_stats_json {
    use super::*;

    #[test]
    fn discovery_stats_serialize_to_json_with_errors_as_a_list() {
        let d = DiscoveryStats {
            peers: BTreeMap::from([("dns".to_string(), 3)]),
            invalid_entries: BTreeMap::new(),
            errors_total: BTreeMap::from([(("dns".to_string(), "no_records".to_string()), 2)]),
        };
        let v = serde_json::to_value(&d).expect("DiscoveryStats is JSON");
        assert_eq!(
            v["errors_total"],
            serde_json::json!([{"source": "dns", "reason": "no_records", "count": 2}])
        );
        assert_eq!(v["peers"]["dns"], 3);
    }
}
