//! Protection domains: allocated through sideway (its PD frees itself on drop and never
//! panics), wrapped so MRs and QPs can hold an `Arc` to it and reach the raw handle.
use crate::device::Context;
use crate::error::VerbsError;
use rdma_mummy_sys::ibv_pd;
use sideway::ibverbs::device_context::AllocateProtectionDomainErrorKind;
use sideway::ibverbs::protection_domain::ProtectionDomain as SidewayPd;
use std::io;
use std::sync::Arc;

/// A protection domain. MRs and QPs keep it (and through it the device) alive.
pub struct ProtectionDomain {
    inner: Arc<SidewayPd>,
    ctx: Arc<Context>,
}

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
        let inner = self.sideway().alloc_pd().map_err(|e| {
            let source = match e.0 {
                AllocateProtectionDomainErrorKind::Ibverbs(io) => io,
                other => io::Error::other(other.to_string()),
            };
            VerbsError::Call {
                op: "ibv_alloc_pd",
                object: self.name().to_string(),
                source,
            }
        })?;
        Ok(Arc::new(ProtectionDomain {
            inner,
            ctx: Arc::clone(self),
        }))
    }
}

impl ProtectionDomain {
    /// The device this PD belongs to.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The sideway PD (for MR registration).
    pub(crate) fn sideway(&self) -> &Arc<SidewayPd> {
        &self.inner
    }

    /// The raw `ibv_pd`, valid while `self` lives.
    pub(crate) fn raw(&self) -> *mut ibv_pd {
        // SAFETY: sideway marks this unsafe only because it returns the raw handle; it is
        // non-null and valid until `inner` (owned by self) is dropped.
        unsafe { self.inner.pd().as_ptr() }
    }
}
