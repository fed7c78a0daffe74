//! Reliable-connected queue pairs on raw rdma-mummy-sys calls: creation, typed state
//! transitions RESET -> INIT -> RTR -> RTS, GID selection, and posting SEND/RECV/WRITE/READ.
//!
//! The state is always read back with `ibv_query_qp` (sideway's cached state stays RTS after
//! an error). A refused transition returns [`VerbsError::QpTransition`] with the state the QP
//! was really in, the state asked for and the errno. Drop destroys the QP and logs a failure
//! instead of asserting.
use crate::codes::{GidType, Mtu, QpState};
use crate::cq::CompletionQueue;
use crate::device::Context;
use crate::error::{errno_of, VerbsError};
use crate::gid::GidEntry;
use crate::mr::{AccessFlags, MemoryRegion, RemoteBuffer};
use crate::pd::ProtectionDomain;
use rdma_mummy_sys::{
    ibv_create_qp, ibv_destroy_qp, ibv_modify_qp, ibv_post_recv, ibv_post_send, ibv_qp,
    ibv_qp_attr, ibv_qp_attr_mask as M, ibv_qp_init_attr, ibv_qp_state, ibv_qp_type, ibv_query_qp,
    ibv_recv_wr, ibv_send_flags, ibv_send_wr, ibv_sge, ibv_wr_opcode,
};
use std::mem::MaybeUninit;
use std::net::Ipv6Addr;
use std::ptr::NonNull;
use std::sync::Arc;

/// Queue sizes of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct QpCaps {
    /// Outstanding send WRs.
    pub max_send_wr: u32,
    /// Outstanding receive WRs.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline data bytes.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

/// What the other side needs to connect to a QP (exchanged out of band).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct QpEndpoint {
    /// QP number.
    pub qp_num: u32,
    /// First packet sequence number (24 bits).
    pub psn: u32,
    /// GID to address (RoCE needs it; IB may use LID only).
    pub gid: Ipv6Addr,
    /// LID (0 on RoCE).
    pub lid: u16,
}

/// Parameters for INIT -> RTR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtrParams {
    /// The remote QP.
    pub remote: QpEndpoint,
    /// Local port.
    pub port: u8,
    /// Local GID index to send from (see [`Context::choose_gid`]).
    pub sgid_index: u8,
    /// Path MTU (at most the port's active MTU).
    pub path_mtu: Mtu,
    /// Incoming RDMA READ/atomic in flight.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code (12 = 0.64 ms).
    pub min_rnr_timer: u8,
}

/// The attributes INIT -> RTR must carry (each one bit of the `ibv_modify_qp` mask).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub enum RtrAttr {
    /// `IBV_QP_AV`: the address vector (remote GID or LID, port, SGID index).
    Av,
    /// `IBV_QP_PATH_MTU`.
    PathMtu,
    /// `IBV_QP_DEST_QPN`: the remote QP number.
    DestQpn,
    /// `IBV_QP_RQ_PSN`: the first PSN expected from the peer.
    RqPsn,
    /// `IBV_QP_MAX_DEST_RD_ATOMIC`: incoming READ/atomic resources.
    MaxDestRdAtomic,
    /// `IBV_QP_MIN_RNR_TIMER`: the RNR NAK delay we ask peers to wait.
    MinRnrTimer,
}

impl RtrAttr {
    /// Every attribute RTR needs, in mask-bit order.
    pub const ALL: [RtrAttr; 6] = [
        RtrAttr::Av,
        RtrAttr::PathMtu,
        RtrAttr::DestQpn,
        RtrAttr::RqPsn,
        RtrAttr::MaxDestRdAtomic,
        RtrAttr::MinRnrTimer,
    ];

    /// The `IBV_QP_*` mask bit.
    pub fn mask_bit(self) -> u32 {
        match self {
            RtrAttr::Av => M::IBV_QP_AV.0,
            RtrAttr::PathMtu => M::IBV_QP_PATH_MTU.0,
            RtrAttr::DestQpn => M::IBV_QP_DEST_QPN.0,
            RtrAttr::RqPsn => M::IBV_QP_RQ_PSN.0,
            RtrAttr::MaxDestRdAtomic => M::IBV_QP_MAX_DEST_RD_ATOMIC.0,
            RtrAttr::MinRnrTimer => M::IBV_QP_MIN_RNR_TIMER.0,
        }
    }

    /// The mask bit's name, e.g. `IBV_QP_AV`.
    pub fn ibv_name(self) -> &'static str {
        match self {
            RtrAttr::Av => "IBV_QP_AV",
            RtrAttr::PathMtu => "IBV_QP_PATH_MTU",
            RtrAttr::DestQpn => "IBV_QP_DEST_QPN",
            RtrAttr::RqPsn => "IBV_QP_RQ_PSN",
            RtrAttr::MaxDestRdAtomic => "IBV_QP_MAX_DEST_RD_ATOMIC",
            RtrAttr::MinRnrTimer => "IBV_QP_MIN_RNR_TIMER",
        }
    }
}

/// Parameters for RTR -> RTS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsParams {
    /// Our first PSN (what the peer got as `remote.psn`).
    pub psn: u32,
    /// Local ACK timeout code (14 = 67 ms).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// Outgoing RDMA READ/atomic in flight.
    pub max_rd_atomic: u8,
}

impl Default for RtsParams {
    fn default() -> Self {
        RtsParams {
            psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
        }
    }
}

/// How an RC connection is brought up: the one RESET -> INIT -> RTR -> RTS sequence of the
/// workspace (probes, experiments, `rdmactl wire`, the live tests), with the parameters that
/// differ between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcLink {
    /// Local port of both ends.
    pub port: u8,
    /// Path MTU (at most the ports' active MTU).
    pub path_mtu: Mtu,
    /// Remote access rights granted to the peer (set at INIT).
    pub access: AccessFlags,
    /// Incoming RDMA READ/atomic in flight.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code (12 = 0.64 ms).
    pub min_rnr_timer: u8,
    /// Timeouts and retries of RTS; its `psn` is replaced by each end's own first PSN.
    pub rts: RtsParams,
}

impl RcLink {
    /// A link on `port` with perftest's defaults: one READ in flight, RNR timer 12, and
    /// [`RtsParams::default`].
    pub fn new(port: u8, path_mtu: Mtu, access: AccessFlags) -> RcLink {
        RcLink {
            port,
            path_mtu,
            access,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            rts: RtsParams::default(),
        }
    }

    /// Bring `qp` from RESET to RTS towards `remote`, sending from `gid` with first PSN
    /// `psn` (what the peer must get as `remote.psn`). The error names the transition that
    /// failed.
    pub fn connect(
        &self,
        qp: &QueuePair,
        gid: &GidEntry,
        psn: u32,
        remote: QpEndpoint,
    ) -> Result<(), VerbsError> {
        qp.to_init(self.port, self.access)?;
        qp.to_rtr(&RtrParams {
            remote,
            port: self.port,
            sgid_index: u8::try_from(gid.index).map_err(|_| {
                VerbsError::InvalidArgument(format!("GID index {} over 255", gid.index))
            })?,
            path_mtu: self.path_mtu,
            max_dest_rd_atomic: self.max_dest_rd_atomic,
            min_rnr_timer: self.min_rnr_timer,
        })?;
        qp.to_rts(&RtsParams { psn, ..self.rts })
    }

    /// Connect two QPs to each other (on one device or two): each end is the QP, the GID it
    /// sends from and its first PSN.
    pub fn connect_pair(
        &self,
        a: (&QueuePair, &GidEntry, u32),
        b: (&QueuePair, &GidEntry, u32),
    ) -> Result<(), VerbsError> {
        let ep_a = a.0.endpoint(a.1, a.2);
        let ep_b = b.0.endpoint(b.1, b.2);
        self.connect(a.0, a.1, ep_a.psn, ep_b)?;
        self.connect(b.0, b.1, ep_b.psn, ep_a)
    }
}

/// A scatter/gather element: a range of a local MR.
#[derive(Debug, Clone, Copy)]
pub struct Sge<'a> {
    /// The MR.
    pub mr: &'a MemoryRegion,
    /// Offset into it.
    pub offset: usize,
    /// Length in bytes.
    pub len: u32,
}

impl<'a> Sge<'a> {
    /// The whole MR.
    pub fn whole(mr: &'a MemoryRegion) -> Self {
        Sge {
            mr,
            offset: 0,
            len: u32::try_from(mr.len()).unwrap_or(u32::MAX),
        }
    }
}

/// A send-queue operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendOp {
    /// SEND: consumes a receive on the peer.
    Send,
    /// SEND with 32-bit immediate data.
    SendWithImm(u32),
    /// RDMA WRITE into `remote` at `offset`.
    Write {
        /// Target MR.
        remote: RemoteBuffer,
        /// Offset into it.
        offset: u64,
    },
    /// RDMA WRITE with immediate (consumes a receive on the peer).
    WriteWithImm {
        /// Target MR.
        remote: RemoteBuffer,
        /// Offset into it.
        offset: u64,
        /// Immediate data.
        imm: u32,
    },
    /// RDMA READ from `remote` at `offset`.
    Read {
        /// Source MR.
        remote: RemoteBuffer,
        /// Offset into it.
        offset: u64,
    },
}

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

/// SGE lists up to this long are built on the stack (posting does not allocate).
pub(crate) const INLINE_SGES: usize = 4;

pub(crate) const EMPTY_SGE: ibv_sge = ibv_sge {
    addr: 0,
    length: 0,
    lkey: 0,
};

/// Room for `n` raw SGEs: the stack array when it fits, else the (then filled) vector.
pub(crate) fn sge_storage<'a>(
    stack: &'a mut [ibv_sge; INLINE_SGES],
    heap: &'a mut Vec<ibv_sge>,
    n: usize,
) -> &'a mut [ibv_sge] {
    if n <= INLINE_SGES {
        &mut stack[..n]
    } else {
        heap.resize(n, EMPTY_SGE);
        heap.as_mut_slice()
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
        let qp = NonNull::new(qp).ok_or_else(|| {
            VerbsError::call(
                "ibv_create_qp",
                format!("{} ({})", self.context().name(), qp_type.name()),
                -1,
            )
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

    /// Check SGEs against their MRs and this QP's PD and write the raw entries into `out`
    /// (which has room for exactly `sges.len()` entries).
    pub(crate) fn fill_sges(
        &self,
        sges: &[Sge<'_>],
        out: &mut [ibv_sge],
    ) -> Result<(), VerbsError> {
        for (s, raw) in sges.iter().zip(out.iter_mut()) {
            if !Arc::ptr_eq(s.mr.pd(), &self.pd) {
                return Err(VerbsError::InvalidArgument(
                    "SGE refers to an MR of another PD".into(),
                ));
            }
            let end = s.offset.checked_add(s.len as usize);
            if end.is_none_or(|e| e > s.mr.len()) {
                return Err(VerbsError::InvalidArgument(format!(
                    "SGE {}+{} outside an MR of {} bytes",
                    s.offset,
                    s.len,
                    s.mr.len()
                )));
            }
            *raw = ibv_sge {
                addr: s.mr.addr() + s.offset as u64,
                length: s.len,
                lkey: s.mr.lkey(),
            };
        }
        Ok(())
    }

    /// Post one signaled send-queue work request.
    ///
    /// The MRs must stay alive until its completion; dropping one earlier deregisters it and
    /// the device reports a protection error instead of touching freed memory.
    pub fn post_send(&self, wr_id: u64, op: SendOp, sges: &[Sge<'_>]) -> Result<(), VerbsError> {
        self.post_send_inner(wr_id, op, sges, None, false)
    }

    /// Post one signaled SEND or WRITE with its data inline (`IBV_SEND_INLINE`): the provider
    /// copies the bytes into the work request at post time, as perftest does for small
    /// latency messages. The total must fit [`max_inline_data`](Self::max_inline_data).
    pub fn post_send_inline(
        &self,
        wr_id: u64,
        op: SendOp,
        sges: &[Sge<'_>],
    ) -> Result<(), VerbsError> {
        self.post_send_inner(wr_id, op, sges, None, true)
    }

    /// Inline data bytes this QP accepts (what the provider granted for
    /// [`QpCaps::max_inline_data`]).
    pub fn max_inline_data(&self) -> u32 {
        self.max_inline
    }

    /// Post one signaled send WR whose SGEs carry `lkey` instead of their MR's key: the
    /// address range stays inside the (live) MRs, only the key is forged. A wrong key makes
    /// the device complete the WR with `LOC_PROT_ERR` instead of reading the memory.
    pub fn post_send_with_lkey(
        &self,
        wr_id: u64,
        op: SendOp,
        sges: &[Sge<'_>],
        lkey: u32,
    ) -> Result<(), VerbsError> {
        self.post_send_inner(wr_id, op, sges, Some(lkey), false)
    }

    fn post_send_inner(
        &self,
        wr_id: u64,
        op: SendOp,
        sges: &[Sge<'_>],
        lkey: Option<u32>,
        inline: bool,
    ) -> Result<(), VerbsError> {
        let mut stack = [EMPTY_SGE; INLINE_SGES];
        let mut heap = Vec::new();
        let list = sge_storage(&mut stack, &mut heap, sges.len());
        self.fill_sges(sges, list)?;
        if let Some(lkey) = lkey {
            for s in list.iter_mut() {
                s.lkey = lkey;
            }
        }
        let total: u64 = list.iter().map(|s| u64::from(s.length)).sum();
        // SAFETY: ibv_send_wr is integers, pointers and unions of those; all-zero is valid.
        let mut wr: ibv_send_wr = unsafe { MaybeUninit::zeroed().assume_init() };
        wr.wr_id = wr_id;
        wr.next = std::ptr::null_mut();
        wr.sg_list = if list.is_empty() {
            std::ptr::null_mut()
        } else {
            list.as_mut_ptr()
        };
        wr.num_sge = list.len() as i32;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        if inline {
            check_inline(&op, total, self.max_inline)?;
            wr.send_flags |= ibv_send_flags::IBV_SEND_INLINE.0;
        }
        let remote_range = |remote: &RemoteBuffer, offset: u64| -> Result<u64, VerbsError> {
            let target = remote.addr.checked_add(offset);
            match (offset.checked_add(total), target) {
                (Some(end), Some(target)) if end <= remote.len => Ok(target),
                _ => Err(VerbsError::InvalidArgument(format!(
                    "remote range {offset}+{total} outside a remote buffer of {} bytes",
                    remote.len
                ))),
            }
        };
        match op {
            SendOp::Send => wr.opcode = ibv_wr_opcode::IBV_WR_SEND,
            SendOp::SendWithImm(imm) => {
                wr.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_IMM;
                wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
            }
            SendOp::Write { remote, offset } => {
                wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
                wr.wr.rdma.remote_addr = remote_range(&remote, offset)?;
                wr.wr.rdma.rkey = remote.rkey;
            }
            SendOp::WriteWithImm {
                remote,
                offset,
                imm,
            } => {
                wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
                wr.wr.rdma.remote_addr = remote_range(&remote, offset)?;
                wr.wr.rdma.rkey = remote.rkey;
                wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
            }
            SendOp::Read { remote, offset } => {
                wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
                wr.wr.rdma.remote_addr = remote_range(&remote, offset)?;
                wr.wr.rdma.rkey = remote.rkey;
            }
        }
        self.post_raw_send(&mut wr)
    }

    /// Post one fully built send WR.
    pub(crate) fn post_raw_send(&self, wr: &mut ibv_send_wr) -> Result<(), VerbsError> {
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the QP is live; `wr` and its SGE list are valid for the call (the provider
        // copies them into its queue before returning).
        let ret = unsafe { ibv_post_send(self.qp.as_ptr(), wr, &mut bad) };
        if ret != 0 {
            return Err(VerbsError::Post {
                op: "ibv_post_send",
                device: self.device().to_string(),
                qp_num: self.qp_num,
                source: errno_of(ret.into()),
            });
        }
        Ok(())
    }

    /// Post one receive work request.
    pub fn post_recv(&self, wr_id: u64, sges: &[Sge<'_>]) -> Result<(), VerbsError> {
        let mut stack = [EMPTY_SGE; INLINE_SGES];
        let mut heap = Vec::new();
        let list = sge_storage(&mut stack, &mut heap, sges.len());
        self.fill_sges(sges, list)?;
        let mut wr = ibv_recv_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: if list.is_empty() {
                std::ptr::null_mut()
            } else {
                list.as_mut_ptr()
            },
            num_sge: list.len() as i32,
        };
        let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: the QP is live; `wr` and its SGE list are valid for the call.
        let ret = unsafe { ibv_post_recv(self.qp.as_ptr(), &mut wr, &mut bad) };
        if ret != 0 {
            return Err(VerbsError::Post {
                op: "ibv_post_recv",
                device: self.device().to_string(),
                qp_num: self.qp_num,
                source: errno_of(ret.into()),
            });
        }
        Ok(())
    }
}

/// Inline data: only SEND and WRITE carry it, and at most `max` bytes.
fn check_inline(op: &SendOp, total: u64, max: u32) -> Result<(), VerbsError> {
    if matches!(op, SendOp::Read { .. }) {
        return Err(VerbsError::InvalidArgument(
            "an RDMA READ cannot carry inline data".into(),
        ));
    }
    if total > u64::from(max) {
        return Err(VerbsError::InvalidArgument(format!(
            "{total} bytes inline on a QP that takes {max}"
        )));
    }
    Ok(())
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
mod tests {
    use super::*;

    #[test]
    fn short_sge_lists_live_on_the_stack() {
        let mut stack = [EMPTY_SGE; INLINE_SGES];
        let mut heap = Vec::new();
        assert_eq!(sge_storage(&mut stack, &mut heap, 3).len(), 3);
        assert!(heap.is_empty(), "no allocation for 3 SGEs");
        assert_eq!(sge_storage(&mut stack, &mut heap, 9).len(), 9);
        assert_eq!(heap.len(), 9);
    }

    #[test]
    fn inline_data_is_bounded_and_never_on_a_read() {
        assert!(check_inline(&SendOp::Send, 64, 64).is_ok());
        assert!(check_inline(&SendOp::Send, 65, 64).is_err());
        assert!(check_inline(&SendOp::SendWithImm(1), 0, 0).is_ok());
        let remote = RemoteBuffer {
            addr: 0,
            rkey: 0,
            len: 64,
        };
        assert!(check_inline(&SendOp::Write { remote, offset: 0 }, 32, 64).is_ok());
        assert!(check_inline(&SendOp::Read { remote, offset: 0 }, 8, 64).is_err());
    }

    #[test]
    fn default_caps_and_rts_params_are_sane() {
        let c = QpCaps::default();
        assert!(c.max_send_wr > 0 && c.max_recv_wr > 0);
        let r = RtsParams::default();
        assert_eq!((r.retry_cnt, r.rnr_retry, r.timeout), (7, 7, 14));
    }

    #[test]
    fn qp_state_codes_follow_the_transition_order() {
        let order = [QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts];
        for pair in order.windows(2) {
            assert_eq!(pair[0].raw() + 1, pair[1].raw());
        }
        assert_eq!(QpState::from_raw(6), QpState::Err);
    }

    #[test]
    fn rtr_attributes_are_distinct_mask_bits_matching_the_full_rtr_mask() {
        let all = RtrAttr::ALL.iter().fold(0u32, |m, a| {
            assert_eq!(m & a.mask_bit(), 0, "{a:?} shares a bit");
            assert!(a.ibv_name().starts_with("IBV_QP_"));
            m | a.mask_bit()
        });
        let rtr = M::IBV_QP_AV.0
            | M::IBV_QP_PATH_MTU.0
            | M::IBV_QP_DEST_QPN.0
            | M::IBV_QP_RQ_PSN.0
            | M::IBV_QP_MAX_DEST_RD_ATOMIC.0
            | M::IBV_QP_MIN_RNR_TIMER.0;
        assert_eq!(all, rtr);
    }

    #[test]
    fn transition_errors_name_both_states_and_the_errno() {
        let e = VerbsError::QpTransition {
            device: "rxe0".into(),
            qp_num: 17,
            current: QpState::Reset,
            requested: QpState::Rts,
            source: std::io::Error::from_raw_os_error(libc::EINVAL),
        };
        let s = e.to_string();
        assert!(s.contains("RESET -> RTS"), "{s}");
        assert!(s.contains("QP 17"), "{s}");
        assert!(s.contains("Invalid argument"), "{s}");
    }
}
