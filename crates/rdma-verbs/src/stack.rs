//! Is there an RDMA stack at all? rdma-mummy-sys `dlopen`s `libibverbs.so.1` in a static
//! constructor and, when that fails, every wrapper returns an error with `errno = EOPNOTSUPP`
//! (measured: no abort, no panic). This module tells that case apart from "library present,
//! no kernel support" (`ibv_get_device_list` fails with `ENOSYS`).
use crate::error::NoStackReason;

/// The soname rdma-mummy-sys loads.
const LIBIBVERBS: &std::ffi::CStr = c"libibverbs.so.1";

/// True when `libibverbs.so.1` is loaded into this process.
pub(crate) fn library_loaded() -> bool {
    // SAFETY: dlopen with RTLD_NOLOAD never loads or initialises anything: it only returns a
    // handle (with a reference count we release right away) when the library is already
    // mapped. The name is a valid NUL-terminated C string.
    unsafe {
        let handle = libc::dlopen(LIBIBVERBS.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if handle.is_null() {
            false
        } else {
            libc::dlclose(handle);
            true
        }
    }
}

/// Classify a failed `ibv_get_device_list` (its errno) into "no stack" or `None` (a real error).
pub(crate) fn no_stack_reason(errno: Option<i32>) -> Option<NoStackReason> {
    if !library_loaded() {
        return Some(NoStackReason::LibraryMissing);
    }
    match errno {
        Some(libc::ENOSYS) => Some(NoStackReason::KernelSupportMissing),
        _ => None,
    }
}

/// `Ok(())` when libibverbs is loaded and the kernel exposes uverbs; otherwise why not.
/// Cheap; does not open any device.
pub fn stack_available() -> Result<(), NoStackReason> {
    if !library_loaded() {
        return Err(NoStackReason::LibraryMissing);
    }
    if !std::path::Path::new("/sys/class/infiniband_verbs").exists() {
        return Err(NoStackReason::KernelSupportMissing);
    }
    Ok(())
}
