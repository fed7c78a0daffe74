//! rdma-procfs: who holds RDMA resources, read from files under a configurable root: the
//! owner of a process ([`owner`]: cgroup, pod, container, Slurm job, from /proc) and the RDMA
//! cgroup controller ([`rdmacg`]: `rdma.current`, `rdma.max`).
//!
//! A source library in the manner of prometheus/procfs: it never prints. rdmakit re-exports
//! both modules under their old paths; rdmad and rdmactl label the tracer's events with
//! [`owner::cgroup_owner`] (rdma-trace itself depends on neither).
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod file;
pub mod owner;
pub mod rdmacg;
