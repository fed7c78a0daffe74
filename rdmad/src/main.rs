//! rdmad: the RDMA exporter.
#![forbid(unsafe_code)]
fn main() {}
