//! Protection domains: `ibv_alloc_pd` on an open [`Context`], `ibv_dealloc_pd` on drop. MRs,
//! QPs, AHs and MWs hold an `Arc` to their PD, and the PD holds its context, so the PD is
//! deallocated after all of them and before the device closes.
use crate::device::Context;
use crate::error::{errno_of, non_null, VerbsError};
use rdma_mummy_sys::{ibv_alloc_pd, ibv_dealloc_pd, ibv_pd};
use std::ptr::NonNull;
use std::sync::Arc;

/// A protection domain. MRs and QPs keep it (and through it the device) alive.
pub struct ProtectionDomain {
    pd: NonNull<ibv_pd>,
    ctx: Arc<Context>,
}

// SAFETY: libibverbs calls taking an ibv_pd (reg_mr, create_qp, create_ah, alloc_mw) are
// thread-safe and not tied to the allocating thread; the pointer is owned by this value alone
// and deallocated once, in Drop.
unsafe impl Send for ProtectionDomain {}
// SAFETY: as above; `&ProtectionDomain` only passes the pointer to those thread-safe calls.
unsafe impl Sync for ProtectionDomain {}

impl std::fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtectionDomain")
            .field("device", &self.ctx.name())
            .finish()
    }
}

impl Context {
    /// Allocate a protection domain (`ibv_alloc_pd`).
    pub fn alloc_pd(self: &Arc<Self>) -> Result<Arc<ProtectionDomain>, VerbsError> {
        // SAFETY: the context is open (we hold an Arc to it); NULL with errno set on failure.
        let pd = unsafe { ibv_alloc_pd(self.raw()) };
        let pd = non_null(pd, "ibv_alloc_pd", || self.name())?;
        Ok(Arc::new(ProtectionDomain {
            pd,
            ctx: Arc::clone(self),
        }))
    }
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        // SAFETY: the PD is live and owned by self; every object on it (MR, QP, AH, MW) holds
        // an `Arc<ProtectionDomain>`, so none is left. `ctx` is released after this body, so
        // the device is still open.
        let ret = unsafe { ibv_dealloc_pd(self.pd.as_ptr()) };
        if ret != 0 {
            tracing::warn!(device = self.ctx.name(), error = %errno_of(ret.into()), "ibv_dealloc_pd failed");
        }
    }
}

impl ProtectionDomain {
    /// The device this PD belongs to.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The raw `ibv_pd`, valid while `self` lives.
    pub(crate) fn raw(&self) -> *mut ibv_pd {
        self.pd.as_ptr()
    }
}
