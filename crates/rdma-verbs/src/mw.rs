//! Memory windows (type 2): a narrower, revocable rkey over part of a memory region.
//!
//! A window is allocated on a PD for one MR ([`ProtectionDomain::alloc_mw`]) and borrows that
//! MR for its whole life, so the MR cannot be deregistered while a window may still be bound
//! to it (rxe refuses the deregistration then, and the buffer would be freed under a live
//! registration). Binding ([`QueuePair::bind_mw`]) and invalidating
//! ([`QueuePair::invalidate`]) are work requests on the QP that owns the window; their
//! completions (`BIND_MW`, `LOCAL_INV`) arrive on its send CQ. The window's rkey is a secret.
//!
//! Drop (deallocate) a bound window before the QP it was bound through: the binding holds a
//! reference on that QP, and rxe's `ibv_destroy_qp` waits tens of seconds for it otherwise.
use crate::error::{non_null, VerbsError};
use crate::mr::{AccessFlags, MemoryRegion, RemoteBuffer};
use crate::pd::ProtectionDomain;
use crate::qp::QueuePair;
use rdma_mummy_sys::{
    ibv_alloc_mw, ibv_dealloc_mw, ibv_inc_rkey, ibv_mw, ibv_mw_bind_info, ibv_mw_type,
    ibv_send_flags, ibv_send_wr, ibv_wr_opcode,
};
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::Arc;

/// A type-2 memory window over one MR.
pub struct MemoryWindow<'mr> {
    mw: NonNull<ibv_mw>,
    mr: &'mr MemoryRegion,
    /// The rkey of the last bind WR posted (the window's current key once it completed).
    rkey: u32,
    /// The bound range, as the last bind asked for it.
    bound: Option<(u64, u64)>,
    pd: Arc<ProtectionDomain>,
    _not_send: PhantomData<*mut ibv_mw>,
}

impl std::fmt::Debug for MemoryWindow<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryWindow")
            .field("bound_len", &self.bound.map(|(_, len)| len))
            .finish_non_exhaustive()
    }
}

impl ProtectionDomain {
    /// Allocate a type-2 memory window (`ibv_alloc_mw`) for binding to `mr` (which must have
    /// been registered with [`AccessFlags::MW_BIND`]).
    pub fn alloc_mw<'mr>(
        self: &Arc<Self>,
        mr: &'mr MemoryRegion,
    ) -> Result<MemoryWindow<'mr>, VerbsError> {
        if !Arc::ptr_eq(mr.pd(), self) {
            return Err(VerbsError::InvalidArgument(
                "a memory window must be on the PD of its MR".into(),
            ));
        }
        // SAFETY: the PD is live (we hold it); the wrapper sets errno to EOPNOTSUPP when the
        // provider has no alloc_mw.
        let mw = unsafe { ibv_alloc_mw(self.raw(), ibv_mw_type::IBV_MW_TYPE_2) };
        let mw = non_null(mw, "ibv_alloc_mw", || {
            format!("{} (type 2)", self.context().name())
        })?;
        // SAFETY: `mw` is live; rkey is a plain integer set at allocation.
        let rkey = unsafe { mw.as_ref().rkey };
        Ok(MemoryWindow {
            mw,
            mr,
            rkey,
            bound: None,
            pd: Arc::clone(self),
            _not_send: PhantomData,
        })
    }
}

impl MemoryWindow<'_> {
    /// The window's current rkey (secret: do not log).
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// What a peer needs to reach the bound range through the window (`None` before a bind).
    pub fn remote(&self) -> Option<RemoteBuffer> {
        self.bound.map(|(addr, len)| RemoteBuffer {
            addr,
            rkey: self.rkey,
            len,
        })
    }
}

impl Drop for MemoryWindow<'_> {
    fn drop(&mut self) {
        // SAFETY: the window is live and owned by self; deallocating also unbinds it.
        let ret = unsafe { ibv_dealloc_mw(self.mw.as_ptr()) };
        if ret != 0 {
            tracing::warn!(device = self.pd.context().name(), error = %crate::error::errno_of(ret.into()), "ibv_dealloc_mw failed");
        }
    }
}

fn zeroed_send_wr() -> ibv_send_wr {
    // SAFETY: ibv_send_wr is integers, pointers and unions of those; all-zero is valid.
    unsafe { MaybeUninit::zeroed().assume_init() }
}

impl QueuePair {
    /// Post a signaled BIND_MW WR binding `mw` to `len` bytes of its MR at `offset`, with
    /// `access` (remote rights only). The window gets a fresh rkey (its 8-bit key part
    /// incremented); [`MemoryWindow::remote`] returns it. The bind takes effect when its
    /// `BIND_MW` completion arrives; a failed bind completes with an error status.
    pub fn bind_mw(
        &self,
        wr_id: u64,
        mw: &mut MemoryWindow<'_>,
        offset: u64,
        len: u64,
        access: AccessFlags,
    ) -> Result<(), VerbsError> {
        if !Arc::ptr_eq(&mw.pd, self.pd()) {
            return Err(VerbsError::InvalidArgument(
                "a type-2 window must be bound through a QP of its PD".into(),
            ));
        }
        match offset.checked_add(len) {
            Some(end) if end <= mw.mr.len() as u64 => {}
            _ => {
                return Err(VerbsError::InvalidArgument(format!(
                    "window {offset}+{len} outside an MR of {} bytes",
                    mw.mr.len()
                )))
            }
        }
        // SAFETY: pure arithmetic on the key (the binding marks it unsafe needlessly).
        let new_rkey = unsafe { ibv_inc_rkey(mw.rkey) };
        let addr = mw.mr.addr() + offset;
        let mut wr = zeroed_send_wr();
        wr.wr_id = wr_id;
        wr.opcode = ibv_wr_opcode::IBV_WR_BIND_MW;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.bind_mw_tso_union.bind_mw.mw = mw.mw.as_ptr();
        wr.bind_mw_tso_union.bind_mw.rkey = new_rkey;
        wr.bind_mw_tso_union.bind_mw.bind_info = ibv_mw_bind_info {
            mr: mw.mr.raw(),
            addr,
            length: len,
            mw_access_flags: access.bits(),
        };
        self.post_raw_send(&mut wr)?;
        mw.rkey = new_rkey;
        mw.bound = Some((addr, len));
        Ok(())
    }

    /// Post a signaled LOCAL_INV WR invalidating `rkey` (a window's or an MR's): once its
    /// `LOCAL_INV` completion arrives, peers using the key get REM_ACCESS_ERR.
    pub fn invalidate(&self, wr_id: u64, rkey: u32) -> Result<(), VerbsError> {
        let mut wr = zeroed_send_wr();
        wr.wr_id = wr_id;
        wr.opcode = ibv_wr_opcode::IBV_WR_LOCAL_INV;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
        self.post_raw_send(&mut wr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inc_rkey_changes_only_the_key_byte() {
        // SAFETY: pure arithmetic.
        let next = unsafe { ibv_inc_rkey(0x0000_12ff) };
        assert_eq!(next, 0x0000_1200);
        // SAFETY: pure arithmetic.
        assert_eq!(unsafe { ibv_inc_rkey(0xabcd_0001) }, 0xabcd_0002);
    }

    #[test]
    fn a_zeroed_bind_wr_has_no_signal_and_no_mw() {
        let wr = zeroed_send_wr();
        assert_eq!(wr.send_flags, 0);
        // SAFETY: reading the pointer member of an all-zero union.
        assert!(unsafe { wr.bind_mw_tso_union.bind_mw.mw }.is_null());
    }
}
