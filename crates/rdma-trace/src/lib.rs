//! rdma-trace: what the kernel sees of RDMA.
//!
//! The data path of RDMA bypasses the kernel, so no tracer sees a WRITE or a completion;
//! the control path does not: every `reg_mr`, `create_qp`, `modify_qp` and destroy of a
//! user-space program goes through ib_uverbs and ib_core. With the `bpf` feature this crate
//! loads BPF programs (kprobes on those functions, and the rdma_cma tracepoints) and streams
//! [`TraceEvent`]s: pid, comm, device, QP transitions with errno, MR sizes and latencies.
//! Without the feature every tracer returns [`TraceError::NoBpfSupport`] at run time.
//!
//! The other half, [`wire`], decodes RoCE v2 packets (BTH, RETH, AETH) captured on a
//! netdev ([`capture`]) to show what a sniffer on the path learns about RDMA traffic.
//!
//! Modules: [`event`] (records and their text/JSON), [`resolve`] (BTF / kallsyms),
//! [`probes`] (the probe table and planning), [`tracer`] (load, attach, stream),
//! [`collector`] (aggregated counts and histograms for rdmad), [`owner`] (the process
//! behind an event, as the caller resolves it), [`wire`], [`capture`],
//! [`fuzz`] (the fuzz targets' bodies).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod capture;
pub mod collector;
pub mod event;
pub mod fuzz;
pub mod owner;
pub mod probes;
pub mod resolve;
pub mod tracer;
pub mod wire;

pub use collector::{TraceCollector, TraceStats};
pub use event::{EventKind, TraceEvent};
pub use owner::{Owner, OwnerResolver};
pub use probes::{ProbeReport, ProbeStatus};
pub use tracer::{Selection, TraceError, Tracer};

/// A family of probes a selection turns on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    /// QP create / modify / destroy and QP async events.
    Qp,
    /// MR registration and deregistration.
    Mr,
    /// CQ and device/port async events.
    Async,
    /// rdma_cma tracepoints.
    Cma,
}

impl Group {
    /// Every group.
    pub const ALL: [Group; 4] = [Group::Qp, Group::Mr, Group::Async, Group::Cma];
}

/// True when this build can load BPF programs (the `bpf` feature).
pub const fn bpf_support() -> bool {
    cfg!(feature = "bpf")
}
