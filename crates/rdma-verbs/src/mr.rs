//! Memory regions: a zeroed, page-aligned buffer owned by the MR and registered with the
//! device, with typed access flags.
//!
//! # Who touches the buffer, and what the CPU sees
//!
//! Two kinds of agent access an MR's buffer: threads of this program, through the methods of
//! [`MemoryRegion`] only (the buffer is never lent out as a Rust reference or slice), and the
//! device, for local work requests (the source of a SEND or WRITE, the destination of a RECV
//! or READ) and for peers' RDMA WRITE, READ and atomics where the access flags allow them.
//!
//! - **Thread against thread**: [`MemoryRegion::write`] takes `&mut self`, every read takes
//!   `&self`. The borrow checker therefore rules out a write racing with any other access
//!   from another thread, and `MemoryRegion` is `Sync` only for concurrent reads.
//! - **CPU against device**: the device's accesses are outside the program. Every CPU access
//!   here is a volatile byte copy, the defined way to touch memory that something outside the
//!   program may change at any moment: a byte read while the device writes it is the old or
//!   the new value (any bit pattern is a valid `u8`), never undefined behaviour, and the
//!   compiler neither caches nor elides it.
//! - **When the bytes mean something**: what the device wrote for a local work request is in
//!   the buffer once its completion has been polled (the provider orders the DMA before the
//!   completion it returns); a peer's RDMA WRITE is complete once the peer says so (a later
//!   SEND on the same QP, or a marker byte polled with [`MemoryRegion::load_u8_volatile`],
//!   which also fences the reads after it). The device reads a SEND/WRITE source at any time
//!   between `post_send` and its completion: write the bytes before posting and not again
//!   until the completion, or the peer gets a mix. Between completions the buffer as the CPU
//!   sees it is unspecified bytes, not a contract.
//!
//! Keys and addresses are secrets: `Debug` never shows them and nothing here logs them.
use crate::error::{errno_of, non_null, VerbsError};
use crate::pd::ProtectionDomain;
use rdma_mummy_sys::{ibv_access_flags as F, ibv_dereg_mr, ibv_mr, ibv_reg_mr};
use std::alloc::Layout;
use std::io;
use std::mem::ManuallyDrop;
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
    /// One byte read with a volatile load and no fence. The caller checked `offset < len`.
    fn load_volatile_relaxed(&self, offset: usize) -> u8 {
        assert!(offset < self.layout.size());
        // SAFETY: `offset` is inside the live allocation (asserted); a u8 has no alignment
        // requirement; volatile because the device may change the byte at any time.
        unsafe { std::ptr::read_volatile(self.ptr.as_ptr().add(offset)) }
    }

    /// One byte read with a volatile load, so a polling loop re-reads memory the device
    /// writes behind the compiler's back. The caller checked `offset < len`.
    fn load_volatile(&self, offset: usize) -> u8 {
        let v = self.load_volatile_relaxed(offset);
        // Later reads of the buffer (the message body) must not be reordered before this one.
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        v
    }

    /// One byte written with a volatile store. Needs `&mut self`: the only CPU writer.
    fn store_volatile(&mut self, offset: usize, value: u8) {
        assert!(offset < self.layout.size());
        // SAFETY: `offset` is inside the live allocation (asserted); `&mut self` excludes any
        // other CPU access; volatile because the device may read the byte at any time.
        unsafe { std::ptr::write_volatile(self.ptr.as_ptr().add(offset), value) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: allocated in Buffer::new with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// A registered memory region over a buffer it owns.
///
/// Drop deregisters (`ibv_dereg_mr`) first, then frees the buffer, then releases the PD: the
/// device can never reach freed memory through this MR. Should the deregistration fail, the
/// buffer is leaked rather than freed under a live registration.
pub struct MemoryRegion {
    mr: NonNull<ibv_mr>,
    /// Read once at registration: the keys of an MR never change (no `ibv_rereg_mr` here).
    lkey: u32,
    rkey: u32,
    /// Freed by Drop, only after a successful deregistration.
    buf: ManuallyDrop<Buffer>,
    access: AccessFlags,
    pd: Arc<ProtectionDomain>,
}

// SAFETY: the buffer is only accessed through volatile copies (never references), the device
// handle is thread-safe in libibverbs, and nothing is tied to the creating thread.
unsafe impl Send for MemoryRegion {}
// SAFETY: through `&MemoryRegion` the buffer can only be read (writes need `&mut self`), so
// threads sharing it never race with each other; the device's own accesses are the external
// modification the volatile copies are made for (see the module documentation).
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
        // SAFETY: the PD is live (we hold an Arc); the buffer is `len` valid bytes owned by the
        // MemoryRegion built below, whose Drop deregisters before freeing it. NULL with errno
        // set on failure.
        let mr = unsafe {
            ibv_reg_mr(
                self.raw(),
                buf.ptr.as_ptr().cast(),
                len,
                access.bits() as std::ffi::c_int,
            )
        };
        let mr = non_null(mr, "ibv_reg_mr", || {
            format!("{} ({len} bytes, {access})", self.context().name())
        })?;
        // SAFETY: `mr` was just returned by ibv_reg_mr and is live; the keys are plain integers.
        let (lkey, rkey) = unsafe { (mr.as_ref().lkey, mr.as_ref().rkey) };
        Ok(MemoryRegion {
            mr,
            lkey,
            rkey,
            buf: ManuallyDrop::new(buf),
            access,
            pd: Arc::clone(self),
        })
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: the registration is live and owned by self; memory windows borrow the MR,
        // so none is left. The PD (`pd`, released after this body) is still allocated.
        let ret = unsafe { ibv_dereg_mr(self.mr.as_ptr()) };
        if ret != 0 {
            tracing::warn!(device = self.pd.context().name(), error = %errno_of(ret.into()), len = self.len(), "ibv_dereg_mr failed; the buffer is leaked, not freed under a live registration");
            return;
        }
        // SAFETY: the buffer is dropped exactly once, here, after the device lost access to it;
        // `self` is never used again.
        unsafe { ManuallyDrop::drop(&mut self.buf) };
    }
}

impl MemoryRegion {
    /// The raw `ibv_mr`, valid while `self` lives.
    pub(crate) fn raw(&self) -> *mut ibv_mr {
        self.mr.as_ptr()
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
        self.lkey
    }

    /// Remote key (secret: do not log).
    pub fn rkey(&self) -> u32 {
        self.rkey
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

    /// Copy `data` into the buffer at `offset` (volatile byte stores).
    ///
    /// Takes `&mut self`: no other thread can read or write the buffer meanwhile, so safe code
    /// cannot race on it. The device may still read it (an outstanding SEND or WRITE, a peer's
    /// READ): write a work request's source before posting it (see the module documentation).
    ///
    /// The contract, as doctests (stable rustdoc does not check a `compile_fail` test's error
    /// code, so each refused snippet has a twin that compiles and differs only in the point
    /// being made). Writing through `&mut` compiles:
    ///
    /// ```no_run
    /// fn stamp(mr: &mut rdma_verbs::MemoryRegion) {
    ///     mr.write(0, b"x").unwrap();
    /// }
    /// ```
    ///
    /// through a shared reference it does not (E0596):
    ///
    /// ```compile_fail,E0596
    /// fn stamp(mr: &rdma_verbs::MemoryRegion) {
    ///     mr.write(0, b"x").unwrap();
    /// }
    /// ```
    ///
    /// One thread writing while the others wait compiles:
    ///
    /// ```no_run
    /// fn writer(mr: &mut rdma_verbs::MemoryRegion) {
    ///     std::thread::scope(|s| {
    ///         s.spawn(|| mr.write(0, b"a"));
    ///     });
    /// }
    /// ```
    ///
    /// two threads writing at once do not (E0499):
    ///
    /// ```compile_fail,E0499
    /// fn race(mr: &mut rdma_verbs::MemoryRegion) {
    ///     std::thread::scope(|s| {
    ///         s.spawn(|| mr.write(0, b"a"));
    ///         s.spawn(|| mr.write(0, b"b"));
    ///     });
    /// }
    /// ```
    ///
    /// nor does a write while another thread reads (E0502):
    ///
    /// ```compile_fail,E0502
    /// fn race(mr: &mut rdma_verbs::MemoryRegion) {
    ///     std::thread::scope(|s| {
    ///         s.spawn(|| mr.to_vec(0, 1));
    ///         s.spawn(|| mr.write(0, b"b"));
    ///     });
    /// }
    /// ```
    ///
    /// while reading from several threads at once does compile (`MemoryRegion` is `Sync`):
    ///
    /// ```no_run
    /// fn readers(mr: &rdma_verbs::MemoryRegion) {
    ///     std::thread::scope(|s| {
    ///         s.spawn(|| mr.to_vec(0, 1));
    ///         s.spawn(|| mr.load_u8_volatile(0));
    ///     });
    /// }
    /// ```
    pub fn write(&mut self, offset: usize, data: &[u8]) -> Result<(), VerbsError> {
        self.check(offset, data.len())?;
        for (i, b) in data.iter().enumerate() {
            self.buf.store_volatile(offset + i, *b);
        }
        Ok(())
    }

    /// Copy `out.len()` bytes from the buffer at `offset` into `out` (volatile byte loads,
    /// then an acquire fence). Bytes the device is writing meanwhile read as old or new.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), VerbsError> {
        self.check(offset, out.len())?;
        for (i, b) in out.iter_mut().enumerate() {
            *b = self.buf.load_volatile_relaxed(offset + i);
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
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
