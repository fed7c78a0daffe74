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
pub mod ethtool;
pub mod exposition;
pub mod histogram;
pub mod model;
pub mod nldev;
pub mod owner;
pub mod rdmacg;
pub mod roce;
#[cfg(feature = "scrape")]
pub mod scrape;
pub mod sysfs;
pub mod uapi;

pub use model::Snapshot;
