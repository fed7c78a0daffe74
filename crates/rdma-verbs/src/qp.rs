//! Reliable-connected queue pairs on raw rdma-mummy-sys calls: creation, typed state
//! transitions RESET -> INIT -> RTR -> RTS, GID selection, and posting SEND/RECV/WRITE/READ.
//!
//! The state is always read back with `ibv_query_qp` (sideway's cached state stays RTS after
//! an error). A refused transition returns [`VerbsError::QpTransition`] with the state the QP
//! was really in, the state asked for and the errno. Drop destroys the QP and logs a failure
//! instead of asserting.
use crate::codes::{GidType, QpState};
use crate::cq::CompletionQueue;
use crate::device::Context;
use crate::error::{errno_of, non_null, VerbsError};
use crate::gid::GidEntry;
use crate::pd::ProtectionDomain;
use rdma_mummy_sys::{
    ibv_create_qp, ibv_destroy_qp, ibv_qp, ibv_qp_attr, ibv_qp_attr_mask as M, ibv_qp_init_attr,
    ibv_qp_state, ibv_qp_type, ibv_query_qp,
};
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::Arc;

mod link;
mod params;
mod post;
mod transition;

pub use link::RcLink;
pub use params::{QpCaps, QpEndpoint, RtrAttr, RtrParams, RtsParams};
pub(crate) use post::{sge_storage, EMPTY_SGE, INLINE_SGES};
pub use post::{SendOp, Sge};

/// The transport of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub enum QpType {
    /// Reliable connected (`IBV_QPT_RC`): one QP per peer, RDMA READ/WRITE.
    Rc,
    /// Unreliable datagram (`IBV_QPT_UD`): one QP talks to any number of peers, SEND only,
    /// each message addressed by an [`AddressHandle`](crate::AddressHandle).
    Ud,
}

impl QpType {
    fn raw(self) -> ibv_qp_type::Type {
        match self {
            QpType::Rc => ibv_qp_type::IBV_QPT_RC,
            QpType::Ud => ibv_qp_type::IBV_QPT_UD,
        }
    }

    /// `RC` or `UD`.
    pub fn name(self) -> &'static str {
        match self {
            QpType::Rc => "RC",
            QpType::Ud => "UD",
        }
    }
}

/// A queue pair: reliable connected (this module) or unreliable datagram (`ud.rs`).
pub struct QueuePair {
    qp: NonNull<ibv_qp>,
    qp_num: u32,
    qp_type: QpType,
    /// Inline data bytes the provider granted at creation.
    max_inline: u32,
    // Dropped after the QP (declaration order): the QP must go before its CQs and PD.
    send_cq: Arc<CompletionQueue>,
    recv_cq: Arc<CompletionQueue>,
    pd: Arc<ProtectionDomain>,
}

// SAFETY: libibverbs QP calls (post, modify, query, destroy) are thread-safe; providers lock
// their queues. The raw pointer is owned by this value alone.
unsafe impl Send for QueuePair {}
// SAFETY: as above.
unsafe impl Sync for QueuePair {}

impl std::fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair")
            .field("device", &self.device())
            .field("qp_num", &self.qp_num)
            .finish()
    }
}

pub(crate) fn zeroed_attr() -> ibv_qp_attr {
    // SAFETY: ibv_qp_attr is integers, bytes and a GID union of bytes; all-zero is valid.
    unsafe { MaybeUninit::<ibv_qp_attr>::zeroed().assume_init() }
}

impl ProtectionDomain {
    /// Create an RC QP (`ibv_create_qp`). Both CQs must belong to this PD's device.
    pub fn create_rc_qp(
        self: &Arc<Self>,
        send_cq: &Arc<CompletionQueue>,
        recv_cq: &Arc<CompletionQueue>,
        caps: QpCaps,
    ) -> Result<QueuePair, VerbsError> {
        self.create_qp(QpType::Rc, send_cq, recv_cq, caps)
    }

    /// Create a QP of `qp_type` (`ibv_create_qp`); every send WR is signaled. Both CQs must
    /// belong to this PD's device.
    pub(crate) fn create_qp(
        self: &Arc<Self>,
        qp_type: QpType,
        send_cq: &Arc<CompletionQueue>,
        recv_cq: &Arc<CompletionQueue>,
        caps: QpCaps,
    ) -> Result<QueuePair, VerbsError> {
        for cq in [send_cq, recv_cq] {
            if !Arc::ptr_eq(cq.context(), self.context()) {
                return Err(VerbsError::InvalidArgument(format!(
                    "CQ of {} used with a PD of {}",
                    cq.context().name(),
                    self.context().name()
                )));
            }
        }
        // SAFETY: ibv_qp_init_attr is pointers and integers; all-zero (NULL, 0) is valid.
        let mut init: ibv_qp_init_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        init.send_cq = send_cq.raw();
        init.recv_cq = recv_cq.raw();
        init.cap.max_send_wr = caps.max_send_wr;
        init.cap.max_recv_wr = caps.max_recv_wr;
        init.cap.max_send_sge = caps.max_send_sge;
        init.cap.max_recv_sge = caps.max_recv_sge;
        init.cap.max_inline_data = caps.max_inline_data;
        init.qp_type = qp_type.raw();
        init.sq_sig_all = 1;
        // SAFETY: the PD and both CQs are live (we hold Arcs); `init` is fully initialised.
        let qp = unsafe { ibv_create_qp(self.raw(), &mut init) };
        let qp = non_null(qp, "ibv_create_qp", || {
            format!("{} ({})", self.context().name(), qp_type.name())
        })?;
        // SAFETY: `qp` is live; qp_num is a plain integer set at creation.
        let qp_num = unsafe { qp.as_ref().qp_num };
        Ok(QueuePair {
            qp,
            qp_num,
            qp_type,
            // ibv_create_qp writes the granted sizes back into `init.cap`.
            max_inline: init.cap.max_inline_data,
            send_cq: Arc::clone(send_cq),
            recv_cq: Arc::clone(recv_cq),
            pd: Arc::clone(self),
        })
    }
}

impl Context {
    /// Pick the GID to use on `port`: a RoCE v2 IPv4-mapped GID first (what rdma_cm and
    /// perftest pick), then any RoCE v2, then any GID of `prefer`'s type, then index 0.
    pub fn choose_gid(&self, port: u8, prefer: GidType) -> Result<GidEntry, VerbsError> {
        let table = self.gid_table(port)?;
        let pick = table
            .iter()
            .find(|g| g.gid_type == prefer && prefer == GidType::RoceV2 && g.is_ipv4_mapped())
            .or_else(|| table.iter().find(|g| g.gid_type == prefer))
            .or_else(|| table.first());
        pick.cloned().ok_or_else(|| {
            VerbsError::InvalidArgument(format!("{} port {port} has no GID", self.name()))
        })
    }
}

impl QueuePair {
    /// QP number.
    pub fn qp_num(&self) -> u32 {
        self.qp_num
    }

    /// RC or UD.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    pub(crate) fn device(&self) -> &str {
        self.pd.context().name()
    }

    /// The PD.
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }

    /// The send CQ.
    pub fn send_cq(&self) -> &Arc<CompletionQueue> {
        &self.send_cq
    }

    /// The receive CQ.
    pub fn recv_cq(&self) -> &Arc<CompletionQueue> {
        &self.recv_cq
    }

    /// The current state, read from the device (`ibv_query_qp`).
    pub fn state(&self) -> Result<QpState, VerbsError> {
        let mut attr = zeroed_attr();
        // SAFETY: ibv_qp_init_attr is plain data; zeroed is valid.
        let mut init: ibv_qp_init_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        // SAFETY: the QP is live; both out structs are valid and writable.
        let ret = unsafe {
            ibv_query_qp(
                self.qp.as_ptr(),
                &mut attr,
                M::IBV_QP_STATE.0 as i32,
                &mut init,
            )
        };
        if ret != 0 {
            return Err(VerbsError::call(
                "ibv_query_qp",
                format!("{} QP {}", self.device(), self.qp_num),
                ret.into(),
            ));
        }
        Ok(QpState::from_raw(attr.qp_state))
    }

    /// An endpoint description for the peer, using GID `gid` and first PSN `psn`.
    pub fn endpoint(&self, gid: &GidEntry, psn: u32) -> QpEndpoint {
        QpEndpoint {
            qp_num: self.qp_num,
            psn: psn & 0x00ff_ffff,
            gid: gid.gid,
            lid: 0,
        }
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // SAFETY: the QP is live and owned by self; its CQs and PD outlive it (fields below).
        let ret = unsafe { ibv_destroy_qp(self.qp.as_ptr()) };
        if ret != 0 {
            tracing::warn!(device = self.device(), qp_num = self.qp_num, error = %errno_of(ret.into()), "ibv_destroy_qp failed");
        }
    }
}

// Keep the binding's state numbering and ours in lock step.
const _: () = assert!(ibv_qp_state::IBV_QPS_RTS == 3);

/// The context a QP lives on (for tests and probes).
impl QueuePair {
    /// The device context.
    pub fn context(&self) -> &Arc<Context> {
        self.pd.context()
    }
}

#[cfg(test)]
mod tests;
