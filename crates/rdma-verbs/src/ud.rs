//! Unreliable datagram: UD queue pairs (RESET -> INIT -> RTR -> RTS with a Q_Key), address
//! handles (`ibv_create_ah` from a port, a local GID index and the destination GID: on
//! RoCE v2 always with a GRH), UD sends addressed by AH + remote QPN + remote Q_Key, and the
//! 40-byte GRH area every UD receive buffer starts with.
//!
//! sideway 0.4 has UD QP types but no address handles, so this is raw rdma-mummy-sys, on the
//! same [`QueuePair`] as RC (creation, state read-back, receives and Drop are shared).
//!
//! What a UD receive holds: the device writes 40 bytes of GRH area before the payload, always
//! (IB without a GRH leaves it undefined and clears `IBV_WC_GRH`). On RoCE v2 over IPv6 the
//! area is the IPv6 header; over IPv4 it is 20 bytes of anything followed by the IPv4
//! header (rdma-core's `ibv_init_ah_from_wc` reads it the same way). [`grh_source_gid`]
//! decodes the sender's GID from either.
use crate::codes::QpState;
use crate::error::{errno_of, non_null, VerbsError};
use crate::pd::ProtectionDomain;
use crate::qp::{sge_storage, zeroed_attr, QpCaps, QpType, QueuePair, Sge, EMPTY_SGE, INLINE_SGES};
use crate::CompletionQueue;
use rdma_mummy_sys::{
    ibv_ah, ibv_ah_attr, ibv_create_ah, ibv_destroy_ah, ibv_qp_attr_mask as M, ibv_send_flags,
    ibv_send_wr, ibv_wr_opcode,
};
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::ptr::NonNull;
use std::sync::Arc;

/// Bytes of GRH area in front of every UD receive.
pub const GRH_LEN: usize = 40;

/// Q_Keys with the top bit set are "controlled": a non-privileged QP cannot send with them.
pub const CONTROLLED_QKEY_BIT: u32 = 0x8000_0000;

/// Where a datagram goes: an address handle on one PD, for one destination GID (or LID).
pub struct AddressHandle {
    ah: NonNull<ibv_ah>,
    dgid: Ipv6Addr,
    dlid: u16,
    port: u8,
    sgid_index: u8,
    // Dropped after the AH (declaration order): the AH must go before its PD.
    pd: Arc<ProtectionDomain>,
}

// SAFETY: an ibv_ah is immutable after creation; libibverbs reads it in post_send from any
// thread and destroy is called once, from Drop. The raw pointer is owned by this value alone.
unsafe impl Send for AddressHandle {}
// SAFETY: as above.
unsafe impl Sync for AddressHandle {}

impl std::fmt::Debug for AddressHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressHandle")
            .field("device", &self.pd.context().name())
            .field("port", &self.port)
            .field("sgid_index", &self.sgid_index)
            .field("dgid", &self.dgid)
            .field("dlid", &self.dlid)
            .finish()
    }
}

impl ProtectionDomain {
    /// An address handle towards `dgid` (RoCE, or IB with a GRH) or, with `dgid`
    /// unspecified, towards LID `dlid` on the local subnet (`ibv_create_ah`). `sgid_index`
    /// is the local GID to send from. On RoCE the kernel resolves the destination's MAC
    /// address here, so an unreachable GID fails now, not at the first send.
    pub fn create_ah(
        self: &Arc<Self>,
        port: u8,
        sgid_index: u8,
        dgid: Ipv6Addr,
        dlid: u16,
    ) -> Result<AddressHandle, VerbsError> {
        let mut attr = ah_attr(port, sgid_index, dgid, dlid);
        // SAFETY: the PD is live (we hold an Arc); `attr` is fully initialised and only read.
        let ah = unsafe { ibv_create_ah(self.raw(), &mut attr) };
        let ah = non_null(ah, "ibv_create_ah", || {
            format!("{} port {port} to {dgid}", self.context().name())
        })?;
        Ok(AddressHandle {
            ah,
            dgid,
            dlid,
            port,
            sgid_index,
            pd: Arc::clone(self),
        })
    }
}

/// The attributes of an AH (a GRH whenever a GID is given, as RoCE needs).
fn ah_attr(port: u8, sgid_index: u8, dgid: Ipv6Addr, dlid: u16) -> ibv_ah_attr {
    // SAFETY: ibv_ah_attr is integers and a GID union of bytes; all-zero is valid.
    let mut a: ibv_ah_attr = unsafe { MaybeUninit::zeroed().assume_init() };
    a.port_num = port;
    a.dlid = dlid;
    if !dgid.is_unspecified() {
        a.is_global = 1;
        a.grh.dgid.raw = dgid.octets();
        a.grh.sgid_index = sgid_index;
        a.grh.hop_limit = 64;
    }
    a
}

impl AddressHandle {
    /// The destination GID.
    pub fn dgid(&self) -> Ipv6Addr {
        self.dgid
    }

    /// The PD it was created on.
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        // SAFETY: the AH is live and owned by self; no WR can still use it once its owner
        // drops it (UD sends copy the address vector at post time on every provider we use).
        let ret = unsafe { ibv_destroy_ah(self.ah.as_ptr()) };
        if ret != 0 {
            tracing::warn!(device = self.pd.context().name(), error = %errno_of(ret.into()), "ibv_destroy_ah failed");
        }
    }
}

/// Where one UD send goes.
#[derive(Debug, Clone, Copy)]
pub struct UdDest<'a> {
    /// The address handle (same PD as the QP).
    pub ah: &'a AddressHandle,
    /// The remote UD QP number.
    pub qp_num: u32,
    /// The remote QP's Q_Key.
    pub qkey: u32,
}

impl ProtectionDomain {
    /// Create a UD QP (`ibv_create_qp`, `IBV_QPT_UD`); bring it up with
    /// [`QueuePair::ud_ready`]. Its receives must leave [`GRH_LEN`] bytes in front of the
    /// largest payload.
    pub fn create_ud_qp(
        self: &Arc<Self>,
        send_cq: &Arc<CompletionQueue>,
        recv_cq: &Arc<CompletionQueue>,
        caps: QpCaps,
    ) -> Result<QueuePair, VerbsError> {
        self.create_qp(QpType::Ud, send_cq, recv_cq, caps)
    }
}

impl QueuePair {
    fn require_ud(&self) -> Result<(), VerbsError> {
        if self.qp_type() != QpType::Ud {
            return Err(VerbsError::InvalidArgument(format!(
                "QP {} is {}, not UD",
                self.qp_num(),
                self.qp_type().name()
            )));
        }
        Ok(())
    }

    /// UD RESET -> INIT -> RTR -> RTS on `port`, receiving datagrams sent with `qkey` (the
    /// device drops any other), first send PSN `psn`. A Q_Key with the controlled bit is
    /// refused here: a non-privileged process could not use it.
    pub fn ud_ready(&self, port: u8, qkey: u32, psn: u32) -> Result<(), VerbsError> {
        self.require_ud()?;
        if qkey & CONTROLLED_QKEY_BIT != 0 {
            return Err(VerbsError::InvalidArgument(format!(
                "Q_Key {qkey:#x} is a controlled Q_Key (top bit set)"
            )));
        }
        let mut a = zeroed_attr();
        a.pkey_index = 0;
        a.port_num = port;
        a.qkey = qkey;
        let mask = M::IBV_QP_STATE.0 | M::IBV_QP_PKEY_INDEX.0 | M::IBV_QP_PORT.0 | M::IBV_QP_QKEY.0;
        self.modify(QpState::Init, &mut a, mask)?;
        let mut a = zeroed_attr();
        self.modify(QpState::Rtr, &mut a, M::IBV_QP_STATE.0)?;
        let mut a = zeroed_attr();
        a.sq_psn = psn & 0x00ff_ffff;
        self.modify(QpState::Rts, &mut a, M::IBV_QP_STATE.0 | M::IBV_QP_SQ_PSN.0)
    }

    /// Post one signaled UD SEND of `sges` to `dest` (inline when `inline`: the bytes are
    /// copied at post time and must fit [`max_inline_data`](Self::max_inline_data)).
    pub fn post_ud_send(
        &self,
        wr_id: u64,
        dest: UdDest<'_>,
        sges: &[Sge<'_>],
        inline: bool,
    ) -> Result<(), VerbsError> {
        self.require_ud()?;
        if !Arc::ptr_eq(dest.ah.pd(), self.pd()) {
            return Err(VerbsError::InvalidArgument(
                "address handle of another PD".into(),
            ));
        }
        let mut stack = [EMPTY_SGE; INLINE_SGES];
        let mut heap = Vec::new();
        let list = sge_storage(&mut stack, &mut heap, sges.len());
        self.fill_sges(sges, list)?;
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
        wr.opcode = ibv_wr_opcode::IBV_WR_SEND;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        if inline {
            if total > u64::from(self.max_inline_data()) {
                return Err(VerbsError::InvalidArgument(format!(
                    "{total} bytes inline on a QP that takes {}",
                    self.max_inline_data()
                )));
            }
            wr.send_flags |= ibv_send_flags::IBV_SEND_INLINE.0;
        }
        wr.wr.ud.ah = dest.ah.ah.as_ptr();
        wr.wr.ud.remote_qpn = dest.qp_num & 0x00ff_ffff;
        wr.wr.ud.remote_qkey = dest.qkey;
        // The AH outlives the call (borrowed); the provider copies the address vector.
        self.post_raw_send(&mut wr)
    }
}

/// The sender's GID from the 40-byte GRH area of a UD receive: the IPv6 header's source
/// (RoCE v2 over IPv6, or IB's GRH), or `::ffff:a.b.c.d` from the IPv4 header in the last
/// 20 bytes (RoCE v2 over IPv4). `None` when neither header is there.
pub fn grh_source_gid(grh: &[u8]) -> Option<Ipv6Addr> {
    let grh: &[u8; GRH_LEN] = grh.get(..GRH_LEN)?.try_into().ok()?;
    let ip4 = &grh[20..40];
    // IPv4, header length 5 words (no options fit in 20 bytes), protocol UDP (RoCE v2).
    if ip4[0] == 0x45 && ip4[9] == 17 {
        let src = Ipv4Addr::new(ip4[12], ip4[13], ip4[14], ip4[15]);
        return Some(src.to_ipv6_mapped());
    }
    if grh[0] >> 4 == 6 {
        let src: [u8; 16] = grh[8..24].try_into().ok()?;
        return Some(Ipv6Addr::from(src));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ah_to_a_gid_carries_a_grh_and_one_to_a_lid_does_not() {
        let gid: Ipv6Addr = "::ffff:10.1.0.2".parse().unwrap();
        let a = ah_attr(1, 3, gid, 0);
        assert_eq!((a.is_global, a.port_num, a.grh.sgid_index), (1, 1, 3));
        // SAFETY: reading the byte view of a GID union.
        assert_eq!(unsafe { a.grh.dgid.raw }, gid.octets());
        assert!(a.grh.hop_limit > 1, "RoCE v2 is routable");
        let a = ah_attr(1, 0, Ipv6Addr::UNSPECIFIED, 7);
        assert_eq!((a.is_global, a.dlid), (0, 7));
    }

    /// The GRH area of a RoCE v2 IPv4 datagram as rxe writes it (rxe_b -> rxe_a): 20 zero
    /// bytes, then the IPv4 header 10.1.0.2 -> 10.1.0.1, protocol UDP.
    fn roce4() -> [u8; GRH_LEN] {
        let mut g = [0u8; GRH_LEN];
        g[20..40].copy_from_slice(&[
            0x45, 0x00, 0x00, 0x7c, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 10, 1, 0, 2,
            10, 1, 0, 1,
        ]);
        g
    }

    #[test]
    fn the_source_gid_comes_from_the_ipv4_or_the_ipv6_header() {
        assert_eq!(
            grh_source_gid(&roce4()),
            Some("::ffff:10.1.0.2".parse().unwrap())
        );
        let mut v6 = [0u8; GRH_LEN];
        v6[0] = 0x60;
        v6[6] = 17;
        let src: Ipv6Addr = "fe80::5054:ff:fe02:3".parse().unwrap();
        v6[8..24].copy_from_slice(&src.octets());
        v6[24..40].copy_from_slice(&"fe80::1".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(grh_source_gid(&v6), Some(src));
        // Garbage, zeros, short input: no GID, no panic.
        assert_eq!(grh_source_gid(&[0u8; GRH_LEN]), None);
        assert_eq!(grh_source_gid(&[0x45u8; 12]), None);
        let mut not_udp = roce4();
        not_udp[29] = 6;
        assert_eq!(grh_source_gid(&not_udp), None);
    }

    #[test]
    fn controlled_qkeys_are_the_top_bit() {
        assert_eq!(CONTROLLED_QKEY_BIT, 1 << 31);
    }
}
