//! Memory regions: a zeroed, page-aligned buffer owned by the MR and registered with the
//! device, with typed access flags.
//!
//! The buffer is only touched through copies ([`MemoryRegion::read`], [`MemoryRegion::write`]),
//! never through Rust references, because the device writes into it behind the compiler's back.
//! Keys and addresses are secrets: `Debug` never shows them and nothing here logs them.
use crate::error::VerbsError;
use crate::pd::ProtectionDomain;
use rdma_mummy_sys::ibv_access_flags as F;
use sideway::ibverbs::memory_region::{MemoryRegion as SidewayMr, RegisterMemoryRegionErrorKind};
use std::alloc::Layout;
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

/// MR (and QP) access rights. Local read is always allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AccessFlags(u32);

impl AccessFlags {
    /// No remote access; local read only.
    pub const NONE: AccessFlags = AccessFlags(0);
    /// The device may write locally (needed to receive, and for any remote write/atomic).
    pub const LOCAL_WRITE: AccessFlags = AccessFlags(F::IBV_ACCESS_LOCAL_WRITE.0);
    /// Peers may RDMA WRITE.
    pub const REMOTE_WRITE: AccessFlags = AccessFlags(F::IBV_ACCESS_REMOTE_WRITE.0);
    /// Peers may RDMA READ.
    pub const REMOTE_READ: AccessFlags = AccessFlags(F::IBV_ACCESS_REMOTE_READ.0);
    /// Peers may run atomics.
    pub const REMOTE_ATOMIC: AccessFlags = AccessFlags(F::IBV_ACCESS_REMOTE_ATOMIC.0);
    /// Memory windows may be bound to the MR.
    pub const MW_BIND: AccessFlags = AccessFlags(F::IBV_ACCESS_MW_BIND.0);
    /// Relaxed ordering of incoming writes.
    pub const RELAXED_ORDERING: AccessFlags = AccessFlags(F::IBV_ACCESS_RELAXED_ORDERING.0);

    const NAMES: [(AccessFlags, &'static str); 6] = [
        (Self::LOCAL_WRITE, "LOCAL_WRITE"),
        (Self::REMOTE_WRITE, "REMOTE_WRITE"),
        (Self::REMOTE_READ, "REMOTE_READ"),
        (Self::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
        (Self::MW_BIND, "MW_BIND"),
        (Self::RELAXED_ORDERING, "RELAXED_ORDERING"),
    ];

    /// The raw `IBV_ACCESS_*` bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// True when every bit of `other` is set.
    pub fn contains(self, other: AccessFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Reject combinations the verbs spec forbids: remote write or atomic without local write.
    pub fn validate(self) -> Result<(), VerbsError> {
        let needs_local = AccessFlags(Self::REMOTE_WRITE.0 | Self::REMOTE_ATOMIC.0);
        if self.0 & needs_local.0 != 0 && !self.contains(Self::LOCAL_WRITE) {
            return Err(VerbsError::InvalidArgument(format!(
                "access {self}: REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE"
            )));
        }
        let known = Self::NAMES.iter().fold(0, |acc, (f, _)| acc | f.0);
        if self.0 & !known != 0 {
            return Err(VerbsError::InvalidArgument(format!(
                "unknown access bits {:#x}",
                self.0 & !known
            )));
        }
        Ok(())
    }
}

impl std::ops::BitOr for AccessFlags {
    type Output = AccessFlags;
    fn bitor(self, rhs: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 | rhs.0)
    }
}

impl std::fmt::Display for AccessFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = Self::NAMES
            .iter()
            .filter(|(flag, _)| self.contains(*flag))
            .map(|(_, n)| *n)
            .collect();
        if names.is_empty() {
            f.write_str("LOCAL_READ")
        } else {
            f.write_str(&names.join("|"))
        }
    }
}

impl serde::Serialize for AccessFlags {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What a peer needs to RDMA WRITE/READ into a remote MR. Secret: `Debug` hides the key and
/// address.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RemoteBuffer {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length in bytes.
    pub len: u64,
}

impl std::fmt::Debug for RemoteBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteBuffer")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

/// The buffer behind an MR: zeroed, page aligned, freed after deregistration.
struct Buffer {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Buffer {
    fn new(len: usize) -> Result<Self, VerbsError> {
        let layout = Layout::from_size_align(len, 4096)
            .map_err(|e| VerbsError::InvalidArgument(format!("MR of {len} bytes: {e}")))?;
        // SAFETY: the layout has a non-zero size (checked by the caller).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| VerbsError::Call {
            op: "alloc",
            object: format!("MR buffer of {len} bytes"),
            source: io::Error::from(io::ErrorKind::OutOfMemory),
        })?;
        Ok(Buffer { ptr, layout })
    }
}

impl Buffer {
    /// One byte read with a volatile load, so a polling loop re-reads memory the device
    /// writes behind the compiler's back. The caller checked `offset < len`.
    fn load_volatile(&self, offset: usize) -> u8 {
        debug_assert!(offset < self.layout.size());
        // SAFETY: `offset` is inside the live allocation (checked by the caller); a u8 has no
        // alignment requirement; volatile keeps the compiler from caching the value.
        let v = unsafe { std::ptr::read_volatile(self.ptr.as_ptr().add(offset)) };
        // Later reads of the buffer (the message body) must not be reordered before this one.
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        v
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: allocated in Buffer::new with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// A registered memory region over a buffer it owns.
pub struct MemoryRegion {
    // Field order matters: the registration is dropped (ibv_dereg_mr) before the buffer is
    // freed, so the device can never reach freed memory through this MR.
    inner: Arc<SidewayMr>,
    buf: Buffer,
    access: AccessFlags,
    pd: Arc<ProtectionDomain>,
}

// SAFETY: the buffer is only accessed through raw copies (never references), the device handle
// is thread-safe in libibverbs, and nothing is tied to the creating thread.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above; concurrent copies race only like DMA does, on plain bytes.
unsafe impl Sync for MemoryRegion {}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("len", &self.len())
            .field("access", &self.access)
            .finish_non_exhaustive()
    }
}

impl ProtectionDomain {
    /// Allocate a zeroed buffer of `len` bytes and register it (`ibv_reg_mr`).
    pub fn register(
        self: &Arc<Self>,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion, VerbsError> {
        access.validate()?;
        self.register_unvalidated(len, access)
    }

    /// Like [`register`](Self::register) but without checking `access` first, so the library
    /// and the kernel judge it: REMOTE_WRITE without LOCAL_WRITE comes back as the kernel's
    /// EINVAL in [`VerbsError::Call`]. For experiments that show the real errno.
    pub fn register_unvalidated(
        self: &Arc<Self>,
        len: usize,
        access: AccessFlags,
    ) -> Result<MemoryRegion, VerbsError> {
        if len == 0 {
            return Err(VerbsError::InvalidArgument(
                "a memory region needs at least 1 byte".into(),
            ));
        }
        let buf = Buffer::new(len)?;
        let flags = sideway::ibverbs::AccessFlags::from(access.bits() as i32);
        // SAFETY: the buffer is `len` valid bytes owned by the MemoryRegion we build, and the
        // struct's field order deregisters before the buffer is freed.
        let inner = unsafe { self.sideway().reg_mr(buf.ptr.as_ptr() as usize, len, flags) }
            .map_err(|e| {
                let source = match e.0 {
                    RegisterMemoryRegionErrorKind::Ibverbs(io) => io,
                    other => io::Error::other(other.to_string()),
                };
                VerbsError::Call {
                    op: "ibv_reg_mr",
                    object: format!("{} ({len} bytes, {access})", self.context().name()),
                    source,
                }
            })?;
        Ok(MemoryRegion {
            inner,
            buf,
            access,
            pd: Arc::clone(self),
        })
    }
}

impl MemoryRegion {
    /// The raw `ibv_mr`, valid while `self` lives.
    pub(crate) fn raw(&self) -> *mut rdma_mummy_sys::ibv_mr {
        // SAFETY: sideway marks this unsafe only because it returns the raw handle; it stays
        // valid until `inner` (owned by self) is dropped.
        unsafe { self.inner.mr().as_ptr() }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.buf.layout.size()
    }

    /// Never true (a zero-length MR is refused); here for clippy's `len` convention.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The access rights it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// The PD it belongs to.
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }

    /// Local key (secret: do not log).
    pub fn lkey(&self) -> u32 {
        self.inner.lkey()
    }

    /// Remote key (secret: do not log).
    pub fn rkey(&self) -> u32 {
        self.inner.rkey()
    }

    /// Address of the first byte as the device sees it (secret: do not log).
    pub fn addr(&self) -> u64 {
        self.buf.ptr.as_ptr() as u64
    }

    /// What a peer needs to access this MR remotely.
    pub fn remote(&self) -> RemoteBuffer {
        RemoteBuffer {
            addr: self.addr(),
            rkey: self.rkey(),
            len: self.len() as u64,
        }
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), VerbsError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(VerbsError::InvalidArgument(format!(
                "range {offset}+{len} outside an MR of {} bytes",
                self.len()
            ))),
        }
    }

    /// Copy `data` into the buffer at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), VerbsError> {
        self.check(offset, data.len())?;
        // SAFETY: the range is inside the live buffer (checked) and `data` cannot overlap it
        // (the buffer is never lent out as a Rust slice).
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.buf.ptr.as_ptr().add(offset),
                data.len(),
            )
        };
        Ok(())
    }

    /// Copy `out.len()` bytes from the buffer at `offset` into `out`.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), VerbsError> {
        self.check(offset, out.len())?;
        // SAFETY: as in `write`, with source and destination swapped.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.buf.ptr.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            )
        };
        Ok(())
    }

    /// Read the byte at `offset` with a volatile load (then an acquire fence): the way to
    /// busy-poll for an incoming RDMA WRITE, as perftest's write latency test does. Cheap:
    /// a bounds check and one load, no allocation.
    #[inline]
    pub fn load_u8_volatile(&self, offset: usize) -> Result<u8, VerbsError> {
        if offset >= self.len() {
            return Err(VerbsError::InvalidArgument(format!(
                "byte {offset} outside an MR of {} bytes",
                self.len()
            )));
        }
        Ok(self.buf.load_volatile(offset))
    }

    /// A copy of `len` bytes at `offset`.
    pub fn to_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>, VerbsError> {
        let mut v = vec![0u8; len];
        self.read(offset, &mut v)?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_flags_match_ibverbs_bits_and_print_names() {
        let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        assert_eq!(rw.bits(), 0b111);
        assert_eq!(rw.to_string(), "LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ");
        assert_eq!(AccessFlags::NONE.to_string(), "LOCAL_READ");
        assert!(rw.validate().is_ok());
    }

    #[test]
    fn remote_write_without_local_write_is_refused() {
        assert!(AccessFlags::REMOTE_WRITE.validate().is_err());
        assert!(AccessFlags::REMOTE_ATOMIC.validate().is_err());
        assert!(AccessFlags::REMOTE_READ.validate().is_ok());
        assert!(AccessFlags(1 << 30).validate().is_err());
    }

    #[test]
    fn remote_buffer_debug_hides_keys_and_addresses() {
        let r = RemoteBuffer {
            addr: 0xdead_beef,
            rkey: 0x1234,
            len: 64,
        };
        let s = format!("{r:?}");
        assert!(!s.contains("3735928559") && !s.contains("deadbeef"), "{s}");
        assert!(!s.contains("4660") && !s.contains("1234"), "{s}");
        assert!(s.contains("64"));
    }

    #[test]
    fn volatile_loads_see_writes_made_behind_the_compilers_back() {
        let b = Buffer::new(64).unwrap();
        assert_eq!(b.load_volatile(63), 0);
        // SAFETY: byte 63 of a live 64-byte buffer; stands in for a DMA write.
        unsafe { b.ptr.as_ptr().add(63).write(0x5a) };
        assert_eq!(b.load_volatile(63), 0x5a);
    }

    #[test]
    fn buffers_are_page_aligned_and_zeroed() {
        let b = Buffer::new(100).unwrap();
        assert_eq!(b.ptr.as_ptr() as usize % 4096, 0);
        // SAFETY: 100 bytes were allocated and zeroed.
        let bytes = unsafe { std::slice::from_raw_parts(b.ptr.as_ptr(), 100) };
        assert!(bytes.iter().all(|b| *b == 0));
    }
}
