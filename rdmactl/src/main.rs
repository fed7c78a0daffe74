//! rdmactl: the RDMA command line.
#![forbid(unsafe_code)]
fn main() {}
