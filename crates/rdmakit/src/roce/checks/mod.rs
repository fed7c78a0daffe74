//! The registry of RoCE checks: one file per check, each judging one port from the
//! [`PortFacts`] read for it, listed once in [`CHECKS`] in the order they report.

mod cm_roce_mode;
mod cm_tos;
mod discards;
mod dscp_map;
mod ecn;
mod link_flaps;
mod mtu;
mod pause;
mod pfc;
mod retransmits;
mod roce_v2_gid;
mod tc_protected;
mod trust;

use std::path::{Path, PathBuf};

use super::dcb::{DcbError, DcbIeee};
use super::source::read_trim;
use super::{
    Check, Inputs, LinkReading, PortMtu, Verdict, LESSON_COUNTERS, LESSON_GID, LESSON_LOSSLESS,
    LESSON_MTU, LESSON_RETRY,
};
use crate::ethtool::{DriverStats, EthtoolError};
use crate::model::Port;

/// One check: its stable id, the lesson that explains it, and its judgement of a port.
pub(super) struct RoceCheck {
    /// The id a [`Check`] carries.
    pub id: &'static str,
    /// Where the course explains it.
    pub lesson: &'static str,
    /// The verdict on one port.
    pub run: fn(&PortFacts<'_>) -> Outcome,
}

/// Every check, in the order a port's checks are reported (before sorting by verdict).
pub(super) const CHECKS: [RoceCheck; 13] = [
    RoceCheck {
        id: "mtu",
        lesson: LESSON_MTU,
        run: mtu::run,
    },
    RoceCheck {
        id: "roce-v2-gid",
        lesson: LESSON_GID,
        run: roce_v2_gid::run,
    },
    RoceCheck {
        id: "cm-roce-mode",
        lesson: LESSON_GID,
        run: cm_roce_mode::run,
    },
    RoceCheck {
        id: "cm-tos",
        lesson: LESSON_LOSSLESS,
        run: cm_tos::run,
    },
    RoceCheck {
        id: "pfc",
        lesson: LESSON_LOSSLESS,
        run: pfc::run,
    },
    RoceCheck {
        id: "dscp-map",
        lesson: LESSON_LOSSLESS,
        run: dscp_map::run,
    },
    RoceCheck {
        id: "trust",
        lesson: LESSON_LOSSLESS,
        run: trust::run,
    },
    RoceCheck {
        id: "tc-protected",
        lesson: LESSON_LOSSLESS,
        run: tc_protected::run,
    },
    RoceCheck {
        id: "ecn",
        lesson: LESSON_LOSSLESS,
        run: ecn::run,
    },
    RoceCheck {
        id: "pause",
        lesson: LESSON_LOSSLESS,
        run: pause::run,
    },
    RoceCheck {
        id: "discards",
        lesson: LESSON_LOSSLESS,
        run: discards::run,
    },
    RoceCheck {
        id: "link-flaps",
        lesson: LESSON_COUNTERS,
        run: link_flaps::run,
    },
    RoceCheck {
        id: "retransmits",
        lesson: LESSON_RETRY,
        run: retransmits::run,
    },
];

/// What a check found on one port: the verdict with its sentence, the evidence, and the
/// fix (kept only for `fail` and `warn`).
pub(super) struct Outcome {
    pub result: (Verdict, String),
    pub evidence: Vec<String>,
    pub fix: Option<String>,
}

impl Outcome {
    fn new(result: (Verdict, String), evidence: Vec<String>, fix: impl Into<String>) -> Outcome {
        Outcome {
            result,
            evidence,
            fix: Some(fix.into()),
        }
    }

    /// Not available, with the reason; no evidence, no fix.
    fn na(reason: impl Into<String>) -> Outcome {
        Outcome {
            result: na(reason),
            evidence: Vec::new(),
            fix: None,
        }
    }
}

/// Everything read about one RoCE port, once, before the checks judge it. The inputs are
/// asked in a fixed order: the port MTUs, DCB, the driver statistics (first, then second
/// reading), the link counters (first, then second reading).
pub(super) struct PortFacts<'a> {
    /// The sysfs root.
    pub root: &'a Path,
    /// The port (its number and GID table).
    pub port: &'a Port,
    /// `device/port`.
    pub target: &'a str,
    /// The port's netdev.
    pub netdev: &'a str,
    /// `<root>/class/net/<netdev>`.
    pub net: PathBuf,
    /// The port MTUs, when known.
    pub port_mtu: Option<PortMtu>,
    /// `/sys/kernel/config/rdma_cm/<dev>/ports/<n>` as the evidence prints it.
    pub cm_path: String,
    /// The command that creates the rdma_cm configfs group, prefixed to its fixes.
    pub make_group: String,
    /// `default_roce_mode`, when the configfs group exists.
    pub cm_mode: Option<String>,
    /// `default_roce_tos`, when the configfs group exists.
    pub cm_tos: Option<u8>,
    /// The DCB answer.
    pub dcb: Result<DcbIeee, DcbError>,
    /// The driver statistics, first reading.
    pub stats_before: Result<DriverStats, EthtoolError>,
    /// The driver statistics, second reading.
    pub stats_after: Result<DriverStats, EthtoolError>,
    /// Seconds between the readings.
    pub secs: f64,
    /// The link and transport counters, first reading.
    pub link_before: LinkReading,
    /// The same, second reading.
    pub link_after: LinkReading,
}

impl PortFacts<'_> {
    /// The ToS rdma_cm connections leave with (0 when not configured).
    fn tos(&self) -> u8 {
        self.cm_tos.unwrap_or(0)
    }

    /// The DSCP of that ToS.
    fn dscp(&self) -> u8 {
        self.tos() >> 2
    }

    /// The priority DCB maps RDMA traffic's DSCP to, when DCB answered and has an entry.
    fn rdma_priority(&self) -> Option<u8> {
        self.dcb.as_ref().ok()?.dscp_priority(self.dscp())
    }

    /// The DCB answer, or the not-available outcome every DCB check reports without one.
    fn dcb(&self) -> Result<&DcbIeee, Outcome> {
        self.dcb.as_ref().map_err(|e| {
            let netdev = self.netdev;
            Outcome::na(if e.is_unsupported() {
                format!("not available on this driver: {netdev} has no DCB (RTM_GETDCB answered EOPNOTSUPP)")
            } else {
                format!("DCB of {netdev} unreadable: {e}")
            })
        })
    }

    /// Both readings of the driver statistics, or the not-available outcome of the checks
    /// that compare them.
    fn stats(&self) -> Result<(&DriverStats, &DriverStats), Outcome> {
        match (&self.stats_before, &self.stats_after) {
            (Ok(b), Ok(a)) => Ok((b, a)),
            (Err(e), _) | (_, Err(e)) => {
                let netdev = self.netdev;
                Err(Outcome::na(if e.is_unsupported() {
                    format!("not available on this driver: {netdev} has no driver statistics (EOPNOTSUPP)")
                } else {
                    format!("driver statistics of {netdev} unreadable: {e}")
                }))
            }
        }
    }
}

/// Read the facts of one port and run every check on it.
pub(super) fn port_checks(
    inputs: &Inputs<'_>,
    device: &str,
    port: &Port,
    target: &str,
    netdev: &str,
) -> Vec<Check> {
    let root = inputs.root;
    let cm = root
        .join("kernel/config/rdma_cm")
        .join(device)
        .join("ports")
        .join(port.num.to_string());
    let port_mtu = (inputs.port_mtu)(device, port.num);
    let facts = PortFacts {
        root,
        port,
        target,
        netdev,
        net: root.join("class/net").join(netdev),
        port_mtu,
        cm_path: format!("/sys/kernel/config/rdma_cm/{device}/ports/{}", port.num),
        make_group: format!("mkdir -p /sys/kernel/config/rdma_cm/{device} && "),
        cm_mode: read_trim(&cm.join("default_roce_mode")),
        cm_tos: read_trim(&cm.join("default_roce_tos")).and_then(|t| t.parse::<u8>().ok()),
        dcb: (inputs.dcb)(netdev),
        stats_before: (inputs.stats_before)(netdev),
        stats_after: (inputs.stats_after)(netdev),
        secs: inputs.interval_seconds,
        link_before: (inputs.link_before)(device, port.num, netdev),
        link_after: (inputs.link_after)(device, port.num, netdev),
    };
    CHECKS
        .iter()
        .map(|c| {
            let o = (c.run)(&facts);
            Check::new(c.id, target, netdev, o.result, o.evidence, o.fix, c.lesson)
        })
        .collect()
}

fn na(reason: impl Into<String>) -> (Verdict, String) {
    (Verdict::NotAvailable, reason.into())
}

fn join(p: &[u8]) -> String {
    p.iter().map(u8::to_string).collect::<Vec<_>>().join(", ")
}
