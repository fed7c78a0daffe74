//! Posting work requests: SGEs checked against their MRs and the QP's PD, SEND/WRITE/READ
//! with or without inline data, RECV.

use super::QueuePair;
use crate::error::{errno_of, VerbsError};
use crate::mr::{MemoryRegion, RemoteBuffer};
use rdma_mummy_sys::{
    ibv_post_recv, ibv_post_send, ibv_recv_wr, ibv_send_flags, ibv_send_wr, ibv_sge, ibv_wr_opcode,
};
use std::mem::MaybeUninit;
use std::sync::Arc;

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

impl QueuePair {
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
    /// [`QpCaps::max_inline_data`](super::QpCaps::max_inline_data)).
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
pub(super) fn check_inline(op: &SendOp, total: u64, max: u32) -> Result<(), VerbsError> {
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
