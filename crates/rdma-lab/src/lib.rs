//! rdma-lab: the project's Soft-RoCE lab.
#![forbid(unsafe_code)]
