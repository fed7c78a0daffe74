//! The crate's typed error: every failure says which call failed, on which object, and why.
use crate::codes::QpState;
use std::io;
use std::ptr::NonNull;

/// Why the RDMA stack is unusable on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub enum NoStackReason {
    /// `libibverbs.so.1` could not be loaded (rdma-core is not installed).
    LibraryMissing,
    /// libibverbs loaded but the kernel has no uverbs support (`/sys/class/infiniband_verbs`
    /// is missing: no RDMA modules loaded).
    KernelSupportMissing,
}

impl std::fmt::Display for NoStackReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoStackReason::LibraryMissing => write!(
                f,
                "libibverbs.so.1 could not be loaded (install rdma-core: libibverbs1 and ibverbs-providers)"
            ),
            NoStackReason::KernelSupportMissing => write!(
                f,
                "the kernel has no RDMA verbs support (/sys/class/infiniband_verbs is missing; load ib_uverbs and a driver such as rdma_rxe)"
            ),
        }
    }
}

/// Errors of the verbs layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerbsError {
    /// No usable RDMA stack on this host.
    #[error("no RDMA stack: {reason}")]
    NoRdmaStack {
        /// What is missing.
        reason: NoStackReason,
    },
    /// The named device does not exist.
    #[error("RDMA device {name:?} not found (available: {})", if available.is_empty() { "none".to_string() } else { available.join(", ") })]
    DeviceNotFound {
        /// The name asked for.
        name: String,
        /// The devices that do exist.
        available: Vec<String>,
    },
    /// A verbs call failed.
    #[error("{op} failed on {object}: {source}")]
    Call {
        /// The libibverbs function, e.g. `ibv_query_port`.
        op: &'static str,
        /// The object it was called on, e.g. `rxe0 port 1`.
        object: String,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// A QP state transition was refused.
    #[error("QP {qp_num} on {device}: transition {current} -> {requested} failed: {source}")]
    QpTransition {
        /// Device name.
        device: String,
        /// QP number.
        qp_num: u32,
        /// The state the QP was in (queried before the call).
        current: QpState,
        /// The state asked for.
        requested: QpState,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// The library returned a value this layer cannot represent.
    #[error("{op} on {object} returned an invalid {field}: {value}")]
    InvalidValue {
        /// The call.
        op: &'static str,
        /// The object.
        object: String,
        /// The field.
        field: &'static str,
        /// The raw value.
        value: i64,
    },
    /// The caller passed an argument the layer rejects before calling the library.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A work request could not be posted.
    #[error("{op} on QP {qp_num} ({device}) failed: {source}")]
    Post {
        /// `ibv_post_send` or `ibv_post_recv`.
        op: &'static str,
        /// Device name.
        device: String,
        /// QP number.
        qp_num: u32,
        /// The errno returned by the provider.
        #[source]
        source: io::Error,
    },
}

impl VerbsError {
    /// True when the error means "nothing to talk to": no stack, or no such device.
    pub fn is_no_rdma(&self) -> bool {
        matches!(
            self,
            VerbsError::NoRdmaStack { .. } | VerbsError::DeviceNotFound { .. }
        )
    }

    /// Build a `Call` error from a verbs return code: a positive errno, a negated errno, or
    /// `-1` with the errno in `errno`.
    pub(crate) fn call(op: &'static str, object: impl Into<String>, ret: i64) -> Self {
        VerbsError::Call {
            op,
            object: object.into(),
            source: errno_of(ret),
        }
    }
}

/// `p`, or the [`VerbsError::call`] error of a verb that returned NULL with the errno in
/// `errno` (`op` on `object`, built only on failure).
pub(crate) fn non_null<T, S: Into<String>>(
    p: *mut T,
    op: &'static str,
    object: impl FnOnce() -> S,
) -> Result<NonNull<T>, VerbsError> {
    NonNull::new(p).ok_or_else(|| VerbsError::call(op, object(), -1))
}

/// The `io::Error` behind a verbs return code (see [`VerbsError::call`]).
pub(crate) fn errno_of(ret: i64) -> io::Error {
    match ret {
        -1 => io::Error::last_os_error(),
        r if r < 0 => io::Error::from_raw_os_error(i32::try_from(-r).unwrap_or(libc::EINVAL)),
        r => io::Error::from_raw_os_error(i32::try_from(r).unwrap_or(libc::EINVAL)),
    }
}

#[cfg(test)]
mod tests;
