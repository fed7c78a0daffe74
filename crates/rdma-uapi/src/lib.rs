//! Names of kernel ABI codes that several crates print: errnos, QP states, port states.
//!
//! Declared here once, in a crate with no dependencies, so rdma-verbs, rdma-trace,
//! rdma-experiments and rdmakit's nldev parsers spell a code the same way without the verbs
//! layer or the tracer depending on rdmakit's sources. Unknown codes give `None`; each caller
//! keeps its own placeholder for them.
//!
//! [`code_names!`] declares, once for every crate, the types whose values have names: verbs
//! codes with an `Unknown` catch-all, nldev's `u8` codes, closed sets spelled one way.
#![deny(unsafe_code)]
#![deny(missing_docs)]

// The errno table is the kernel's generic one; these architectures number errnos their own way.
#[cfg(any(
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64"
))]
compile_error!("rdma-uapi's errno table is asm-generic's; this architecture has its own errno.h");

mod code_names;

/// `enum ib_qp_state` (= `ibv_qp_state`, = nldev `RES_STATE` on QPs), indexed by code, in the
/// spelling of rdma-core and iproute2.
pub const QP_STATE_NAMES: [&str; 7] = ["RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"];

/// The name of QP state `code` (`RTS`), `None` for a code the kernel does not define.
pub fn qp_state_name(code: u32) -> Option<&'static str> {
    QP_STATE_NAMES.get(usize::try_from(code).ok()?).copied()
}

/// Logical port state (IBTA PortState, `enum ib_port_state`), indexed by code, as sysfs and
/// iproute2 print it (`ACTIVE`).
pub const PORT_STATE_NAMES: [&str; 6] = ["NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"];

/// The same states as libibverbs prints them (`ibv_port_state_str`: `PORT_ACTIVE`). The
/// prefix is the only difference (checked by a test).
pub const PORT_STATE_VERBS_NAMES: [&str; 6] = [
    "PORT_NOP",
    "PORT_DOWN",
    "PORT_INIT",
    "PORT_ARMED",
    "PORT_ACTIVE",
    "PORT_ACTIVE_DEFER",
];

/// The name of logical port state `code` (`ACTIVE`).
pub fn port_state_name(code: u32) -> Option<&'static str> {
    PORT_STATE_NAMES.get(usize::try_from(code).ok()?).copied()
}

/// Physical port state (IBTA PortPhysicalState), code 1 to 7, as sysfs and iproute2 print it.
pub const PHYS_STATE_NAMES: [&str; 7] = [
    "SLEEP",
    "POLLING",
    "DISABLED",
    "PORT_CONFIGURATION_TRAINING",
    "LINK_UP",
    "LINK_ERROR_RECOVERY",
    "PHY_TEST",
];

/// The name of physical port state `code` (`LINK_UP` for 5).
pub fn phys_state_name(code: u32) -> Option<&'static str> {
    let i = usize::try_from(code.checked_sub(1)?).ok()?;
    PHYS_STATE_NAMES.get(i).copied()
}

/// `asm-generic/errno-base.h` and `asm-generic/errno.h` of the kernel's uapi, indexed by
/// errno: the primary symbol of each number (aliases such as `EWOULDBLOCK` and `EDEADLOCK`
/// are `#define`s of another symbol and not listed), `None` for the holes (0, 41, 58).
/// Generated from the headers (`#define E<NAME> <number>` lines); a test checks it against
/// nix's table of this platform.
const ERRNO_NAMES: [Option<&str>; 134] = [
    None,
    Some("EPERM"),
    Some("ENOENT"),
    Some("ESRCH"),
    Some("EINTR"),
    Some("EIO"),
    Some("ENXIO"),
    Some("E2BIG"),
    Some("ENOEXEC"),
    Some("EBADF"),
    Some("ECHILD"),
    Some("EAGAIN"),
    Some("ENOMEM"),
    Some("EACCES"),
    Some("EFAULT"),
    Some("ENOTBLK"),
    Some("EBUSY"),
    Some("EEXIST"),
    Some("EXDEV"),
    Some("ENODEV"),
    Some("ENOTDIR"),
    Some("EISDIR"),
    Some("EINVAL"),
    Some("ENFILE"),
    Some("EMFILE"),
    Some("ENOTTY"),
    Some("ETXTBSY"),
    Some("EFBIG"),
    Some("ENOSPC"),
    Some("ESPIPE"),
    Some("EROFS"),
    Some("EMLINK"),
    Some("EPIPE"),
    Some("EDOM"),
    Some("ERANGE"),
    Some("EDEADLK"),
    Some("ENAMETOOLONG"),
    Some("ENOLCK"),
    Some("ENOSYS"),
    Some("ENOTEMPTY"),
    Some("ELOOP"),
    None,
    Some("ENOMSG"),
    Some("EIDRM"),
    Some("ECHRNG"),
    Some("EL2NSYNC"),
    Some("EL3HLT"),
    Some("EL3RST"),
    Some("ELNRNG"),
    Some("EUNATCH"),
    Some("ENOCSI"),
    Some("EL2HLT"),
    Some("EBADE"),
    Some("EBADR"),
    Some("EXFULL"),
    Some("ENOANO"),
    Some("EBADRQC"),
    Some("EBADSLT"),
    None,
    Some("EBFONT"),
    Some("ENOSTR"),
    Some("ENODATA"),
    Some("ETIME"),
    Some("ENOSR"),
    Some("ENONET"),
    Some("ENOPKG"),
    Some("EREMOTE"),
    Some("ENOLINK"),
    Some("EADV"),
    Some("ESRMNT"),
    Some("ECOMM"),
    Some("EPROTO"),
    Some("EMULTIHOP"),
    Some("EDOTDOT"),
    Some("EBADMSG"),
    Some("EOVERFLOW"),
    Some("ENOTUNIQ"),
    Some("EBADFD"),
    Some("EREMCHG"),
    Some("ELIBACC"),
    Some("ELIBBAD"),
    Some("ELIBSCN"),
    Some("ELIBMAX"),
    Some("ELIBEXEC"),
    Some("EILSEQ"),
    Some("ERESTART"),
    Some("ESTRPIPE"),
    Some("EUSERS"),
    Some("ENOTSOCK"),
    Some("EDESTADDRREQ"),
    Some("EMSGSIZE"),
    Some("EPROTOTYPE"),
    Some("ENOPROTOOPT"),
    Some("EPROTONOSUPPORT"),
    Some("ESOCKTNOSUPPORT"),
    Some("EOPNOTSUPP"),
    Some("EPFNOSUPPORT"),
    Some("EAFNOSUPPORT"),
    Some("EADDRINUSE"),
    Some("EADDRNOTAVAIL"),
    Some("ENETDOWN"),
    Some("ENETUNREACH"),
    Some("ENETRESET"),
    Some("ECONNABORTED"),
    Some("ECONNRESET"),
    Some("ENOBUFS"),
    Some("EISCONN"),
    Some("ENOTCONN"),
    Some("ESHUTDOWN"),
    Some("ETOOMANYREFS"),
    Some("ETIMEDOUT"),
    Some("ECONNREFUSED"),
    Some("EHOSTDOWN"),
    Some("EHOSTUNREACH"),
    Some("EALREADY"),
    Some("EINPROGRESS"),
    Some("ESTALE"),
    Some("EUCLEAN"),
    Some("ENOTNAM"),
    Some("ENAVAIL"),
    Some("EISNAM"),
    Some("EREMOTEIO"),
    Some("EDQUOT"),
    Some("ENOMEDIUM"),
    Some("EMEDIUMTYPE"),
    Some("ECANCELED"),
    Some("ENOKEY"),
    Some("EKEYEXPIRED"),
    Some("EKEYREVOKED"),
    Some("EKEYREJECTED"),
    Some("EOWNERDEAD"),
    Some("ENOTRECOVERABLE"),
    Some("ERFKILL"),
    Some("EHWPOISON"),
];

/// The symbol of errno `code` (`EINVAL` for 22), `None` for a number the kernel does not
/// define. Takes a positive errno.
pub fn errno_name(code: i32) -> Option<&'static str> {
    ERRNO_NAMES
        .get(usize::try_from(code).ok()?)
        .copied()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos_come_from_the_platform_table() {
        assert_eq!(errno_name(22), Some("EINVAL"));
        assert_eq!(errno_name(11), Some("EAGAIN"));
        assert_eq!(errno_name(61), Some("ENODATA"));
        assert_eq!(errno_name(95), Some("EOPNOTSUPP"));
        assert_eq!(errno_name(110), Some("ETIMEDOUT"));
        assert_eq!(errno_name(0), None);
        assert_eq!(errno_name(-22), None);
        assert_eq!(errno_name(4242), None);
        // Linux numbers its errnos 1 to 133 with two holes (41 and 58); each has an E-symbol.
        assert_eq!(errno_name(41), None);
        assert_eq!(errno_name(58), None);
        for n in (1..=133).filter(|n| ![41, 58].contains(n)) {
            let name = errno_name(n).unwrap_or_else(|| panic!("errno {n} has no name"));
            assert!(name.starts_with('E') && name.len() > 2, "{n}: {name}");
        }
    }

    #[test]
    fn errno_table_is_the_platforms() {
        // nix's Debug is the primary symbol of each errno this platform defines.
        for n in 0..=255 {
            let e = nix::errno::Errno::from_raw(n);
            let platform =
                (n != 0 && e != nix::errno::Errno::UnknownErrno).then(|| format!("{e:?}"));
            assert_eq!(errno_name(n).map(str::to_string), platform, "errno {n}");
        }
    }

    #[test]
    fn states_are_indexed_by_their_kernel_codes() {
        assert_eq!(qp_state_name(0), Some("RESET"));
        assert_eq!(qp_state_name(3), Some("RTS"));
        assert_eq!(qp_state_name(6), Some("ERR"));
        assert_eq!(qp_state_name(7), None);
        assert_eq!(port_state_name(4), Some("ACTIVE"));
        assert_eq!(port_state_name(6), None);
        assert_eq!(phys_state_name(0), None);
        assert_eq!(phys_state_name(5), Some("LINK_UP"));
        assert_eq!(phys_state_name(8), None);
    }

    #[test]
    fn verbs_port_state_names_are_the_ibta_names_prefixed() {
        for (verbs, ibta) in PORT_STATE_VERBS_NAMES.iter().zip(PORT_STATE_NAMES) {
            assert_eq!(*verbs, format!("PORT_{ibta}"));
        }
    }
}
