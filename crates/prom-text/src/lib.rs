//! prom-text: the Prometheus text exposition as the workspace reads it back ([`exposition`])
//! and the histogram the probe engine, the tracer and rdmad share ([`histogram`]).
//!
//! No RDMA knowledge and no I/O: rdma-probe and rdma-trace use the histogram without
//! depending on rdmakit's sources; rdmakit re-exports both modules under their old paths.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod exposition;
pub mod histogram;
