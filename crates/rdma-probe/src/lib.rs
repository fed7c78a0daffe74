//! rdma-probe: active RDMA probes. Counters say what happened; probes say whether RDMA works
//! right now and how fast.
//!
//! - Loopback probes of a port ([`LoopbackProbe`]): two RC QPs on one device connected
//!   through the port's RoCE v2 GID; SEND/RECV and RDMA WRITE ping-pong (one-way = RTT/2)
//!   and RDMA READ (round trip), timed like perftest's `ib_*_lat`: warm-up, one thread per
//!   QP, raw CQ polling, a timestamp per post from the cheapest reliable clock ([`Clock`]),
//!   perftest's statistics ([`LatencySummary`]).
//! - MR registration time for 4 KiB..64 MiB ([`mrreg`]).
//! - Peer probes ([`peer`]): engines exchange QP/GID/PSN/rkey over a TCP handshake
//!   authenticated with HMAC-SHA256 ([`handshake`]) and probe each other with RDMA READ.
//! - [`ProbeEngine`]: all of it on an interval in its own threads, results published through
//!   a [`ProbeHandle`] (histograms for Prometheus, summaries, failures by WC status name,
//!   its own CPU time).
//!
//! Keys and addresses (rkey, lkey, MR addresses) are secrets: they travel only inside the
//! authenticated handshake and are never logged or published.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod affinity;
pub mod clock;
pub mod cpu;
pub mod discovery;
pub mod engine;
pub mod failure;
pub mod handshake;
pub mod histogram;
pub mod loopback;
pub mod mrreg;
pub mod oneshot;
pub mod peer;
pub mod pinglist;
mod rc;
pub mod stats;

/// The peer probe port when none is configured (`--probe.listen=:9737` in deploy/).
pub const DEFAULT_PEER_PORT: u16 = 9737;

pub use clock::{Clock, ClockInfo, ClockSource};
pub use engine::{
    EngineConfig, EngineError, PeerState, ProbeEngine, ProbeHandle, ProbeSnapshot,
    RegistrationResult, TargetResult,
};
pub use failure::{FailureKind, ProbeFailure};
pub use handshake::Secret;
pub use histogram::Histogram;
pub use loopback::{LoopbackProbe, RunParams};
pub use rc::ProbeOp;
pub use stats::LatencySummary;
