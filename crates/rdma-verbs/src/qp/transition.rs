//! The typed state transitions of a QP, each checked against the state read back.

use super::params::{RtrAttr, RtrParams, RtsParams};
use super::{zeroed_attr, QueuePair};
use crate::codes::{Mtu, QpState};
use crate::error::{errno_of, VerbsError};
use crate::mr::AccessFlags;
use rdma_mummy_sys::{ibv_modify_qp, ibv_qp_attr, ibv_qp_attr_mask as M};

impl QueuePair {
    pub(crate) fn modify(
        &self,
        requested: QpState,
        attr: &mut ibv_qp_attr,
        mask: u32,
    ) -> Result<(), VerbsError> {
        let current = self.state()?;
        attr.qp_state = requested.raw();
        // SAFETY: the QP is live; `attr` is initialised for every bit set in `mask`.
        let ret = unsafe { ibv_modify_qp(self.qp.as_ptr(), attr, mask as i32) };
        if ret != 0 {
            return Err(VerbsError::QpTransition {
                device: self.device().to_string(),
                qp_num: self.qp_num,
                current,
                requested,
                source: errno_of(ret.into()),
            });
        }
        Ok(())
    }

    /// RESET -> INIT on `port`, letting peers do what `access` allows.
    pub fn to_init(&self, port: u8, access: AccessFlags) -> Result<(), VerbsError> {
        access.validate()?;
        let mut a = zeroed_attr();
        a.pkey_index = 0;
        a.port_num = port;
        a.qp_access_flags = access.bits();
        let mask = M::IBV_QP_STATE.0
            | M::IBV_QP_PKEY_INDEX.0
            | M::IBV_QP_PORT.0
            | M::IBV_QP_ACCESS_FLAGS.0;
        self.modify(QpState::Init, &mut a, mask)
    }

    /// INIT -> RTR: connect to the remote QP (RoCE: through a GRH to `remote.gid`).
    pub fn to_rtr(&self, p: &RtrParams) -> Result<(), VerbsError> {
        self.to_rtr_omitting(p, &[])
    }

    /// INIT -> RTR with some required attributes left out of the mask: the device refuses
    /// (EINVAL) and the error names the transition. For teaching what RTR needs; `omit` empty
    /// is exactly [`to_rtr`](Self::to_rtr).
    pub fn to_rtr_omitting(&self, p: &RtrParams, omit: &[RtrAttr]) -> Result<(), VerbsError> {
        if let Mtu::Unknown(code) = p.path_mtu {
            return Err(VerbsError::InvalidArgument(format!("path MTU code {code}")));
        }
        let mut a = zeroed_attr();
        a.path_mtu = p.path_mtu.raw();
        a.dest_qp_num = p.remote.qp_num;
        a.rq_psn = p.remote.psn & 0x00ff_ffff;
        a.max_dest_rd_atomic = p.max_dest_rd_atomic;
        a.min_rnr_timer = p.min_rnr_timer;
        a.ah_attr.dlid = p.remote.lid;
        a.ah_attr.sl = 0;
        a.ah_attr.src_path_bits = 0;
        a.ah_attr.port_num = p.port;
        if !p.remote.gid.is_unspecified() {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid.raw = p.remote.gid.octets();
            a.ah_attr.grh.sgid_index = p.sgid_index;
            a.ah_attr.grh.hop_limit = 64;
            a.ah_attr.grh.traffic_class = 0;
            a.ah_attr.grh.flow_label = 0;
        }
        let mask = RtrAttr::ALL
            .iter()
            .filter(|attr| !omit.contains(attr))
            .fold(M::IBV_QP_STATE.0, |m, attr| m | attr.mask_bit());
        self.modify(QpState::Rtr, &mut a, mask)
    }

    /// RTR -> RTS.
    pub fn to_rts(&self, p: &RtsParams) -> Result<(), VerbsError> {
        let mut a = zeroed_attr();
        a.sq_psn = p.psn & 0x00ff_ffff;
        a.timeout = p.timeout;
        a.retry_cnt = p.retry_cnt;
        a.rnr_retry = p.rnr_retry;
        a.max_rd_atomic = p.max_rd_atomic;
        let mask = M::IBV_QP_STATE.0
            | M::IBV_QP_TIMEOUT.0
            | M::IBV_QP_RETRY_CNT.0
            | M::IBV_QP_RNR_RETRY.0
            | M::IBV_QP_SQ_PSN.0
            | M::IBV_QP_MAX_QP_RD_ATOMIC.0;
        self.modify(QpState::Rts, &mut a, mask)
    }

    /// Any state -> ERR (flushes outstanding work requests).
    pub fn to_error(&self) -> Result<(), VerbsError> {
        let mut a = zeroed_attr();
        self.modify(QpState::Err, &mut a, M::IBV_QP_STATE.0)
    }

    /// RTS -> SQD (send queue drain), asking for the `SQ_DRAINED` async event when the
    /// outstanding sends are done. Back to RTS with [`resume_from_sqd`](Self::resume_from_sqd).
    pub fn to_sqd(&self) -> Result<(), VerbsError> {
        let mut a = zeroed_attr();
        a.en_sqd_async_notify = 1;
        self.modify(
            QpState::Sqd,
            &mut a,
            M::IBV_QP_STATE.0 | M::IBV_QP_EN_SQD_ASYNC_NOTIFY.0,
        )
    }

    /// SQD -> RTS.
    pub fn resume_from_sqd(&self) -> Result<(), VerbsError> {
        let mut a = zeroed_attr();
        self.modify(QpState::Rts, &mut a, M::IBV_QP_STATE.0)
    }

    /// Any state -> RESET.
    pub fn reset(&self) -> Result<(), VerbsError> {
        let mut a = zeroed_attr();
        self.modify(QpState::Reset, &mut a, M::IBV_QP_STATE.0)
    }
}
