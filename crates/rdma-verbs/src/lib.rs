//! rdma-verbs: a safe verbs layer over rdma-mummy-sys, the raw libibverbs bindings.
//!
//! # One route to libibverbs
//!
//! Every call goes through rdma-mummy-sys, each wrapped in a small RAII type (`Drop` frees the
//! handle, an `Arc` to the parent keeps the parent alive). The crate used to reach the device
//! list, the context, PDs and MRs through sideway's safe API and everything else through the
//! raw bindings; sideway is gone because it covered only that part and the rest could not move
//! to it: it has no address handles (UD), no memory windows and no async events, its
//! conversions panic on codes it does not know (transport, port, GID, work-completion
//! status), its extended CQ returns phantom completions on rxe, and its cached QP state is
//! stale. Two routes meant two ownership schemes for one object graph (sideway's `Arc`s
//! inside ours, a raw handle fished out of sideway's types for the raw calls), two error
//! shapes (sideway's open error dropped the errno) and two libraries to audit; one route
//! gives every handle the same shape, and every failure the errno of the C call.
//!
//! This crate is the only place in the workspace with `unsafe`; every block carries a
//! `// SAFETY:` line. libibverbs is loaded at run time (rdma-mummy-sys `dlopen`s
//! `libibverbs.so.1` from a static constructor), so binaries start on hosts without rdma-core
//! and get [`VerbsError::NoRdmaStack`] instead of a crash.
//!
//! Object graph: [`Context`] (an open device) -> [`ProtectionDomain`] -> [`MemoryRegion`] (and
//! [`MemoryWindow`]s over it), [`QueuePair`] (RC, or UD with [`AddressHandle`]s); [`CompletionQueue`]
//! hangs off the context.
//! Every child holds an `Arc` to its parent, so a parent is freed only after all its children.
//! No value read from the library is trusted: unknown enum codes become `Unknown(code)`
//! variants or [`VerbsError::InvalidValue`], never a panic.
//!
//! ```no_run
//! use rdma_verbs::{AccessFlags, GidType, RcLink, SendOp, Sge, WcStatus};
//! # fn main() -> Result<(), rdma_verbs::VerbsError> {
//! let ctx = rdma_verbs::open("rxe0")?;
//! let port = ctx.query_port(1)?;
//! let gid = ctx.choose_gid(1, GidType::RoceV2)?; // ::ffff:10.0.2.15 in the lab
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(16)?;
//! let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
//! let (a, b) = (
//!     pd.create_rc_qp(&cq, &cq, Default::default())?,
//!     pd.create_rc_qp(&cq, &cq, Default::default())?,
//! );
//! // Each QP RESET -> INIT -> RTR -> RTS towards the other.
//! RcLink::new(1, port.active_mtu, access).connect_pair((&a, &gid, 0), (&b, &gid, 0))?;
//! let (mut src, dst) = (pd.register(64, access)?, pd.register(64, access)?);
//! src.write(0, b"hello")?;
//! a.post_send(1, SendOp::Write { remote: dst.remote(), offset: 0 }, &[Sge { mr: &src, offset: 0, len: 5 }])?;
//! let wc = cq.poll_until(1, std::time::Duration::from_secs(1))?;
//! assert_eq!(wc[0].status, WcStatus::Success);
//! assert_eq!(dst.to_vec(0, 5)?, b"hello");
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod codes;
mod cq;
mod cycles;
mod device;
mod error;
mod event;
mod gid;
mod mr;
mod mw;
mod pd;
mod port;
mod qp;
mod stack;
mod ud;

pub use codes::{
    AsyncEventType, AtomicCap, GidType, LinkLayer, Mtu, NodeType, PhysState, PortState, QpState,
    Transport, WcOpcode, WcStatus,
};
pub use cq::{CompletionQueue, WorkCompletion};
pub use cycles::cycles;
pub use device::{devices, open, Context, DeviceAttr, DeviceInfo, Guid};
pub use error::{NoStackReason, VerbsError};
pub use event::{AsyncEvent, EventElement};
pub use gid::GidEntry;
pub use mr::{AccessFlags, MemoryRegion, RemoteBuffer};
pub use mw::MemoryWindow;
pub use pd::ProtectionDomain;
pub use port::{speed_name, width_name, PortAttr};
pub use qp::{
    QpCaps, QpEndpoint, QpType, QueuePair, RcLink, RtrAttr, RtrParams, RtsParams, SendOp, Sge,
};
pub use stack::stack_available;
pub use ud::{grh_source_gid, AddressHandle, UdDest, CONTROLLED_QKEY_BIT, GRH_LEN};
