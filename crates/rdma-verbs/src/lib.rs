//! rdma-verbs: a safe verbs layer over sideway (and rdma-mummy-sys where sideway lacks a call).
//!
//! This crate is the only place in the workspace with `unsafe`; every block carries a
//! `// SAFETY:` line. libibverbs is loaded at run time, so binaries start on hosts without
//! rdma-core and get a typed "no RDMA stack" error instead.
#![deny(missing_docs)]
