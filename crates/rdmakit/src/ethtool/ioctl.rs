//! The OS boundary of the ethtool source: the `SIOCETHTOOL` ioctl, the only `unsafe` of
//! rdmakit.
//!
//! Driver statistics (what `ethtool -S` prints) exist only behind the legacy ioctl: ethtool
//! netlink carries their names (string sets) but not their values. Three calls, each filling
//! a caller buffer the kernel writes through `ifr_data`: `ETHTOOL_GDRVINFO` (the driver name
//! and the number of statistics), `ETHTOOL_GSTRINGS` for `ETH_SS_STATS` (the names, 32 bytes
//! each) and `ETHTOOL_GSTATS` (the values, one u64 each). The kernel sizes its answers by the
//! driver's count at the time of each call, not by the count the caller passes, so a driver
//! whose count grows between calls (channels added with `ethtool -L`) would write past a
//! buffer sized from the first answer. Every buffer here is therefore an anonymous mapping
//! followed by one inaccessible guard page: such a write ends in `EFAULT` at the guard page
//! instead of overwriting memory, and the parser ([`super::parse`]) rejects answers whose
//! counts disagree.
//!
//! Nothing here interprets the bytes: the callers get them raw, exactly as the kernel wrote
//! them, so the same parser reads live answers and captured fixtures.
#![deny(clippy::undocumented_unsafe_blocks)]

use std::os::fd::{AsRawFd, OwnedFd};

use nix::errno::Errno;
use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};

/// `SIOCETHTOOL` (include/uapi/linux/sockios.h).
const SIOCETHTOOL: libc::c_ulong = 0x8946;
/// `IFNAMSIZ` (include/uapi/linux/if.h), the terminating NUL included.
pub const IFNAMSIZ: usize = 16;

/// `struct ifreq` as the ethtool ioctl reads it: the name, then the `ifr_data` pointer of
/// the union, padded to the union's size (`struct ifmap`, 24 bytes on 64-bit targets).
#[repr(C)]
struct IfReq {
    name: [u8; IFNAMSIZ],
    data: *mut libc::c_void,
    pad: [u8; 24 - std::mem::size_of::<*mut libc::c_void>()],
}

/// A zeroed, writable buffer of at least `len` bytes followed by an inaccessible guard page.
pub struct GuardedBuffer {
    base: std::ptr::NonNull<u8>,
    /// The writable part (a whole number of pages, at least `len`).
    usable: usize,
    /// The whole mapping: `usable` plus the guard page.
    mapped: usize,
}

impl GuardedBuffer {
    /// Map a buffer of at least `len` bytes.
    pub fn new(len: usize) -> std::io::Result<GuardedBuffer> {
        // SAFETY: sysconf has no memory effects; a negative answer is handled below.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let page = usize::try_from(page).unwrap_or(4096).max(4096);
        let usable = len
            .max(1)
            .checked_next_multiple_of(page)
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
        let mapped = usable
            .checked_add(page)
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
        // SAFETY: an anonymous private mapping at an address the kernel chooses touches no
        // existing memory; the result is checked against MAP_FAILED before any use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let Some(base) = std::ptr::NonNull::new(ptr.cast::<u8>()) else {
            return Err(std::io::Error::from(std::io::ErrorKind::OutOfMemory));
        };
        let buffer = GuardedBuffer {
            base,
            usable,
            mapped,
        };
        // SAFETY: [base + usable, base + mapped) is the last page of the mapping made above,
        // owned by `buffer` and not referenced by anything; removing access to it is what
        // makes it a guard page.
        let rc = unsafe {
            libc::mprotect(
                base.as_ptr().add(usable).cast::<libc::c_void>(),
                page,
                libc::PROT_NONE,
            )
        };
        if rc != 0 {
            // Dropping `buffer` unmaps it.
            return Err(std::io::Error::last_os_error());
        }
        Ok(buffer)
    }

    /// The writable bytes (zeroed when mapped, then whatever the kernel wrote).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the first `usable` bytes of the mapping are readable and writable, live as
        // long as `self`, and are only written through `&mut self` (bytes_mut, or the ioctl
        // in `call`, which borrows `self` mutably).
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.usable) }
    }

    /// The writable bytes, for the request header.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr(), self.usable) }
    }
}

impl Drop for GuardedBuffer {
    fn drop(&mut self) {
        // SAFETY: `base`/`mapped` describe exactly the mapping made in `new`, unmapped once
        // here; no slice of it outlives `self`.
        unsafe {
            libc::munmap(self.base.as_ptr().cast::<libc::c_void>(), self.mapped);
        }
    }
}

/// A socket to address ethtool ioctls to (any family works; AF_INET as ethtool(8) uses).
pub fn control_socket() -> Result<OwnedFd, Errno> {
    socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .or_else(|_| {
        socket(
            AddressFamily::Unix,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
    })
}

/// Issue one ethtool command on `netdev`: `buffer` holds the command's struct (its first u32
/// is the command number, written by the caller) and receives the kernel's answer.
/// `EINVAL` for a name the kernel cannot take (empty, too long, a NUL inside).
pub fn call(socket: &OwnedFd, netdev: &str, buffer: &mut GuardedBuffer) -> Result<(), Errno> {
    let bytes = netdev.as_bytes();
    if bytes.is_empty() || bytes.len() >= IFNAMSIZ || bytes.contains(&0) {
        return Err(Errno::EINVAL);
    }
    let mut request = IfReq {
        name: [0; IFNAMSIZ],
        data: buffer.bytes_mut().as_mut_ptr().cast::<libc::c_void>(),
        pad: [0; 24 - std::mem::size_of::<*mut libc::c_void>()],
    };
    request.name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: `request` is a valid `struct ifreq` (NUL-terminated name, `ifr_data` pointing
    // at `buffer`), alive for the call. The kernel reads the command struct from `buffer`
    // and writes its answer there; `buffer` is borrowed mutably, so nothing else reads or
    // writes it meanwhile, and any write past its usable part hits the guard page and fails
    // with EFAULT instead of touching other memory.
    let rc = unsafe {
        libc::ioctl(
            socket.as_raw_fd(),
            SIOCETHTOOL as _,
            &mut request as *mut IfReq,
        )
    };
    if rc < 0 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifreq_has_the_kernel_size() {
        assert_eq!(std::mem::size_of::<IfReq>(), 40);
    }

    #[test]
    fn guarded_buffer_is_zeroed_and_page_sized() {
        let mut b = GuardedBuffer::new(196).unwrap();
        assert!(b.bytes().len() >= 196);
        assert_eq!(b.bytes().len() % 4096, 0);
        assert!(b.bytes().iter().all(|&x| x == 0));
        b.bytes_mut()[195] = 7;
        assert_eq!(b.bytes()[195], 7);
    }

    #[test]
    fn bad_names_are_refused_before_the_kernel() {
        let socket = control_socket().unwrap();
        let mut b = GuardedBuffer::new(16).unwrap();
        for name in ["", "a-very-long-netdev-name", "eth\0x"] {
            assert_eq!(call(&socket, name, &mut b), Err(Errno::EINVAL), "{name:?}");
        }
    }

    #[test]
    fn a_missing_netdev_is_enodev() {
        let socket = control_socket().unwrap();
        let mut b = GuardedBuffer::new(196).unwrap();
        b.bytes_mut()[..4].copy_from_slice(&3u32.to_ne_bytes()); // ETHTOOL_GDRVINFO
        assert_eq!(call(&socket, "rdmad-nonexist", &mut b), Err(Errno::ENODEV));
    }
}
