//! rdma-procfs: who holds RDMA resources, read from files under a configurable root: the
//! owner of a process ([`owner`]: cgroup, pod, container, Slurm job, from /proc) and the RDMA
//! cgroup controller ([`rdmacg`]: `rdma.current`, `rdma.max`).
//!
//! A source library in the manner of prometheus/procfs: it never prints. The tracer
//! (rdma-trace) labels its events with it without depending on rdmakit; rdmakit re-exports
//! both modules under their old paths.
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod file;
pub mod owner;
pub mod rdmacg;
