//! One-shot probes for the command line (`rdmactl ping`): calibrate the clock, run one probe
//! with perftest's defaults, return a report that prints like perftest or as JSON.
use crate::clock::{Clock, ClockInfo};
use crate::failure::{FailureKind, ProbeFailure};
use crate::handshake::Secret;
use crate::loopback::{LoopbackProbe, RunParams};
use crate::peer::PeerConn;
use crate::snapshot::ProbeOp;
use crate::stats::LatencySummary;

/// The result of one probe.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PingReport {
    /// Local device.
    pub device: String,
    /// Local port.
    pub port: u8,
    /// Local GID index.
    pub gid_index: Option<u32>,
    /// The peer (`HOST:PORT`), or `None` for loopback.
    pub peer: Option<String>,
    /// Operation.
    pub op: ProbeOp,
    /// Message size, bytes.
    pub size_bytes: usize,
    /// Untimed exchanges.
    pub warmup: u64,
    /// Whether the numbers are one-way (RTT/2) or round trips.
    pub one_way: bool,
    /// perftest's statistics.
    pub summary: LatencySummary,
    /// The clock used.
    pub clock: ClockInfo,
}

/// The first device with an ACTIVE port 1, if any.
pub fn first_active_device() -> Result<Option<String>, rdma_verbs::VerbsError> {
    for d in rdma_verbs::devices()? {
        if let Ok(ctx) = rdma_verbs::open(&d.name) {
            if ctx
                .query_port(1)
                .is_ok_and(|a| a.state == rdma_verbs::PortState::Active)
            {
                return Ok(Some(d.name));
            }
        }
    }
    Ok(None)
}

fn summarize(mut samples: Vec<f64>) -> Result<LatencySummary, ProbeFailure> {
    LatencySummary::from_ns(&mut samples)
        .ok_or_else(|| ProbeFailure::new(FailureKind::Setup, "no samples"))
}

/// Loopback probe of `device` port `port`.
pub fn ping_loopback(
    device: &str,
    port: u8,
    gid_index: Option<u8>,
    op: ProbeOp,
    p: &RunParams,
) -> Result<PingReport, ProbeFailure> {
    let clock = Clock::calibrate();
    let mut probe = LoopbackProbe::new(device, port, gid_index, p.size);
    let samples = probe.run(op, p, &clock)?;
    Ok(PingReport {
        device: device.to_string(),
        port,
        gid_index: probe.gid_index(),
        peer: None,
        op,
        size_bytes: p.size,
        warmup: p.warmup,
        one_way: op != ProbeOp::Read,
        summary: summarize(samples)?,
        clock: clock.info(),
    })
}

/// Peer probe of the engine listening at `peer` (READ or WRITE round trips).
pub fn ping_peer(
    peer: &str,
    secret: &Secret,
    device: Option<&str>,
    gid_index: Option<u8>,
    op: ProbeOp,
    p: &RunParams,
) -> Result<PingReport, ProbeFailure> {
    let clock = Clock::calibrate();
    let conn = PeerConn::connect(peer, secret, device, gid_index, p.size)?;
    let samples = conn.run(op, p.warmup, p.iterations, &clock, p.timeout)?;
    Ok(PingReport {
        device: conn.device().to_string(),
        port: 1,
        gid_index: Some(conn.gid_index()),
        peer: Some(peer.to_string()),
        op,
        size_bytes: p.size,
        warmup: p.warmup,
        one_way: false,
        summary: summarize(samples)?,
        clock: clock.info(),
    })
}
