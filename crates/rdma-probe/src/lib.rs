//! rdma-probe: active RDMA probes. Counters say what happened; probes say whether RDMA works
//! right now and how fast.
//!
//! - Loopback probes of a port ([`LoopbackProbe`]): two RC QPs on one device connected
//!   through the port's RoCE v2 GID; SEND/RECV and RDMA WRITE ping-pong (one-way = RTT/2)
//!   and RDMA READ (round trip), timed like perftest's `ib_*_lat`: warm-up, one thread per
//!   QP, raw CQ polling, a timestamp per post from the cheapest reliable clock ([`Clock`]),
//!   perftest's statistics ([`LatencySummary`]).
//! - MR registration time for 4 KiB..64 MiB ([`mrreg`]).
//! - Peer probes ([`peer`]): engines exchange QP/GID/PSN/rkey (or a UD QPN and Q_Key) over a
//!   TCP handshake authenticated with HMAC-SHA256 ([`handshake`]) and probe each other with
//!   UD echo requests on one UD QP per device ([`ud`], the default) or with RDMA READ/WRITE
//!   on an RC QP per peer.
//! - [`ProbeEngine`]: all of it on an interval in its own threads, results published through
//!   a [`ProbeHandle`] (histograms for Prometheus, summaries, failures by WC status name,
//!   its own CPU time).
//!
//! The snapshot types ([`snapshot`]: what the engine publishes, with the one histogram of
//! the workspace, `rdmakit::histogram`) and the statistics ([`stats`]) build without the
//! `verbs` feature (on by default); everything that touches a device needs it.
//!
//! Keys and addresses (rkey, lkey, MR addresses) are secrets: they travel only inside the
//! authenticated handshake and are never logged or published.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

// Verbs-free: what the engine publishes and perftest's statistics (rdmad maps them to metrics
// in a build without libibverbs).
pub mod snapshot;
pub mod stats;

#[cfg(feature = "verbs")]
mod affinity;
#[cfg(feature = "verbs")]
pub mod clock;
#[cfg(feature = "verbs")]
pub mod cpu;
#[cfg(feature = "verbs")]
pub mod discovery;
#[cfg(feature = "verbs")]
pub mod engine;
#[cfg(feature = "verbs")]
pub mod failure;
#[cfg(feature = "verbs")]
pub mod handshake;
#[cfg(feature = "verbs")]
pub mod loopback;
#[cfg(feature = "verbs")]
pub mod mrreg;
#[cfg(feature = "verbs")]
pub mod oneshot;
#[cfg(feature = "verbs")]
pub mod peer;
#[cfg(feature = "verbs")]
pub mod pinglist;
#[cfg(feature = "verbs")]
pub mod ratelog;
#[cfg(feature = "verbs")]
mod rc;
#[cfg(feature = "verbs")]
pub mod ud;

/// The peer probe port when none is configured (`--probe.listen=:9737` in deploy/).
pub const DEFAULT_PEER_PORT: u16 = 9737;

pub use snapshot::{
    ClockInfo, ClockSource, DiscoveryStats, Histogram, PeerState, PeerStatus, PeerTransport,
    ProbeOp, ProbeSnapshot, RegistrationResult, TargetResult, UdEndpointState,
};
pub use stats::LatencySummary;

#[cfg(feature = "verbs")]
pub use clock::Clock;
#[cfg(feature = "verbs")]
pub use engine::{EngineConfig, EngineError, ProbeEngine, ProbeHandle};
#[cfg(feature = "verbs")]
pub use failure::{FailureKind, ProbeFailure};
#[cfg(feature = "verbs")]
pub use handshake::{Secret, SecretError};
#[cfg(feature = "verbs")]
pub use loopback::{LoopbackProbe, RunParams};
