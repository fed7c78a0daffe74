//! rdmakit: the one model of RDMA devices that rdmad and rdmactl share.
//!
//! Sources (sysfs, RDMA netlink) fill a [`Snapshot`]-shaped model; faces (the exporter, the CLI)
//! only read it. Sources never print; faces never read sysfs or sockets themselves.
// `unsafe` only in the ethtool ioctl module (ethtool/ioctl.rs, allowed there alone).
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod attribution;
pub mod catalog;
pub mod doctor;
pub mod duration;
pub mod ethtool;
/// The exposition parser (prom-text, re-exported under its old path).
pub use prom_text::exposition;
/// The histogram (prom-text, re-exported under its old path).
pub use prom_text::histogram;
pub mod model;
pub mod nldev;
/// Process owners from /proc (rdma-procfs, re-exported under its old path).
pub use rdma_procfs::owner;
/// The RDMA cgroup controller (rdma-procfs, re-exported under its old path).
pub use rdma_procfs::rdmacg;
pub mod roce;
#[cfg(feature = "scrape")]
pub mod scrape;
pub mod sysfs;
/// The names of kernel codes (rdma-uapi, re-exported under its old path).
pub use rdma_uapi as uapi;

pub use model::Snapshot;
