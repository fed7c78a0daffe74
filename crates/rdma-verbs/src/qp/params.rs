//! The parameters of a QP's creation and of its INIT -> RTR -> RTS transitions, and what
//! a peer needs to connect to it.

use crate::codes::Mtu;
use rdma_mummy_sys::ibv_qp_attr_mask as M;
use std::net::Ipv6Addr;

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
    /// Local GID index to send from (see
    /// [`Context::choose_gid`](crate::device::Context::choose_gid)).
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
