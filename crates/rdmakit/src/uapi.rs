//! Names of kernel ABI codes that several crates print: errnos, QP states, port states.
//!
//! Declared here once, in the crate every face and tracer already depends on (no verbs, no
//! BPF), so rdma-verbs, rdma-trace, rdma-experiments and the nldev parsers spell a code the
//! same way. Unknown codes give `None`; each caller keeps its own placeholder for them.
use std::sync::OnceLock;

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

/// The largest errno looked up (Linux defines 1 to 133; the table has room to spare).
const ERRNO_MAX: i32 = 255;

/// The symbol of errno `code` (`EINVAL` for 22) from nix's table of this platform's errnos,
/// `None` for a number it does not define. Takes a positive errno.
pub fn errno_name(code: i32) -> Option<&'static str> {
    static NAMES: OnceLock<Vec<Option<&'static str>>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        (0..=ERRNO_MAX)
            .map(|n| {
                let e = nix::errno::Errno::from_raw(n);
                // nix's Debug is the symbol; computed once per errno, kept for the process.
                (n != 0 && e != nix::errno::Errno::UnknownErrno)
                    .then(|| &*Box::leak(format!("{e:?}").into_boxed_str()))
            })
            .collect()
    });
    names.get(usize::try_from(code).ok()?).copied().flatten()
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
