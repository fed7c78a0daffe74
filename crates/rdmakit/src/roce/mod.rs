//! The RoCE configuration doctor (`rdmactl doctor roce`): per Ethernet RDMA port, the checks
//! that decide whether RoCE v2 runs as intended, each with its evidence, a verdict, the
//! command that fixes it and the lesson that explains it.
//!
//! Facts come from where the kernel keeps them: the netdev's MTU (`class/net/<nd>/mtu`) and
//! the port's MTUs, the GID table (types), the rdma_cm configfs group
//! (`kernel/config/rdma_cm/<dev>/ports/<n>/default_roce_mode|default_roce_tos`, under the
//! sysfs root), DCB netlink ([`dcb`]: PFC, the APP table, the APP trust order), mlx5's ECN
//! switches (`class/net/<nd>/ecn/roce_np|roce_rp/enable/<prio>`) and the netdev's driver
//! statistics (pause frames, pause time, discards: [`crate::ethtool::curated`]), read twice,
//! and the port's link and transport counters (the netdev's `carrier_changes`, the port's
//! `link_downed` / `link_error_recovery` and the retransmission counters of the doctor rule
//! `packet-loss`: [`LinkReading`]), read twice.
//! What the driver does not report is [`Verdict::NotAvailable`] with the reason, never a
//! guess.

//!
//! Each check is one file under `checks/`, listed once in `checks::CHECKS`: its id, the
//! lesson it points to and the function that judges one port from the facts read for it.

mod checks;
pub mod dcb;
mod source;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::ethtool::{DriverStats, EthtoolError};
use crate::model::Snapshot;
use dcb::{DcbError, DcbIeee};

pub use source::{parse_mtu, retransmit_counter_names, sysfs_link_reading, sysfs_port_mtu};

/// The kernel's header budget for RoCE (`iboe_get_mtu()`): GRH 40 + UDP 8 + BTH 12 +
/// atomic ETH 28 + XRC ETH 4 + ICRC 4 bytes.
pub const IBOE_HEADER_BUDGET: u32 = 96;

/// The largest IB MTU a netdev MTU leaves room for (`iboe_get_mtu()`); 0 when none fits.
pub fn iboe_mtu(netdev_mtu: u32) -> u32 {
    let room = netdev_mtu.saturating_sub(IBOE_HEADER_BUDGET);
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| room >= *m)
        .unwrap_or(0)
}

/// A check's verdict, most serious first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Verdict {
    /// Wrong: RoCE traffic is hurt.
    #[serde(rename = "fail")]
    Fail,
    /// Works, but not as a lossless RoCE fabric should.
    #[serde(rename = "warn")]
    Warn,
    /// The driver or the machine does not tell.
    #[serde(rename = "not available")]
    NotAvailable,
    /// As it should be.
    #[serde(rename = "ok")]
    Ok,
}

impl Verdict {
    /// How it prints.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Fail => "FAIL",
            Verdict::Warn => "WARN",
            Verdict::NotAvailable => "n/a",
            Verdict::Ok => "ok",
        }
    }
}

/// One check on one port.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    /// Stable id: `mtu`, `roce-v2-gid`, `cm-roce-mode`, `cm-tos`, `pfc`, `dscp-map`,
    /// `trust`, `tc-protected`, `ecn`, `pause`, `discards`, `link-flaps`, `retransmits`.
    pub id: &'static str,
    /// `device/port`.
    pub target: String,
    /// The port's netdev.
    pub netdev: String,
    /// The verdict.
    pub verdict: Verdict,
    /// One sentence: what was found.
    pub finding: String,
    /// The facts read, each naming its source.
    pub evidence: Vec<String>,
    /// The command that fixes it (only for `fail` and `warn`).
    pub fix: Option<String>,
    /// Where the course explains it.
    pub lesson: &'static str,
}

impl Check {
    /// A check of the port `target` (its netdev `netdev`); `fix` is kept only for `fail` and
    /// `warn`.
    fn new(
        id: &'static str,
        target: &str,
        netdev: &str,
        (verdict, finding): (Verdict, String),
        evidence: Vec<String>,
        fix: Option<String>,
        lesson: &'static str,
    ) -> Check {
        Check {
            id,
            target: target.to_string(),
            netdev: netdev.to_string(),
            verdict,
            finding,
            evidence,
            fix: fix.filter(|_| matches!(verdict, Verdict::Fail | Verdict::Warn)),
            lesson,
        }
    }
}

/// The whole answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoceReport {
    /// Seconds between the two readings of the driver statistics.
    pub interval_seconds: f64,
    /// The most serious verdict (`ok` when there are no checks).
    pub worst: Verdict,
    /// Every check, most serious first (then by port, then in check order).
    pub checks: Vec<Check>,
    /// Ports skipped, and why (InfiniBand link layer, no netdev).
    pub skipped: Vec<String>,
}

/// The MTUs of a port (`ibv_query_port`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortMtu {
    /// `active_mtu` in bytes.
    pub active: u32,
    /// `max_mtu` in bytes.
    pub max: u32,
    /// Where they came from.
    pub source: &'static str,
}

/// Everything the checks read, besides the sysfs tree.
pub struct Inputs<'a> {
    /// The sysfs root (`/sys`, or a fixture tree).
    pub root: &'a Path,
    /// The devices, with their GID tables.
    pub snapshot: &'a Snapshot,
    /// Only this device (`None`: all).
    pub device: Option<&'a str>,
    /// The MTUs of a port.
    pub port_mtu: &'a dyn Fn(&str, u32) -> Option<PortMtu>,
    /// DCB answers.
    pub dcb: &'a dyn Fn(&str) -> Result<DcbIeee, DcbError>,
    /// The driver statistics, first reading.
    pub stats_before: &'a dyn Fn(&str) -> Result<DriverStats, EthtoolError>,
    /// The driver statistics, second reading.
    pub stats_after: &'a dyn Fn(&str) -> Result<DriverStats, EthtoolError>,
    /// Seconds between the readings.
    pub interval_seconds: f64,
    /// The port's link and transport counters (device, port, netdev), first reading.
    pub link_before: &'a dyn Fn(&str, u32, &str) -> LinkReading,
    /// The same, second reading.
    pub link_after: &'a dyn Fn(&str, u32, &str) -> LinkReading,
}

/// Counters of a port that move when its link flaps or its packets are lost, by the name
/// the evidence prints (`class/net/<nd>/carrier_changes`, `hw_counters/<name>`,
/// `counters/<name>`); a file that is absent or unreadable has no entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkReading {
    /// Link counters: carrier changes, link downs, link error recoveries.
    pub link: BTreeMap<String, u64>,
    /// Retransmission and sequence-error counters (the doctor rule `packet-loss`).
    pub retransmits: BTreeMap<String, u64>,
}

const LESSON_MTU: &str = "rdmactl lesson show 7 (InfiniBand and RoCE v2 in practice: MTU)";
const LESSON_GID: &str =
    "rdmactl lesson show 7 (InfiniBand and RoCE v2 in practice: The GID table)";
const LESSON_LOSSLESS: &str =
    "rdmactl lesson show 13 (Design patterns: RoCE without loss: PFC, ECN and the ToS)";

const LESSON_RETRY: &str = "rdmactl lesson show 8 (Error handling: The retry parameters)";
const LESSON_COUNTERS: &str =
    "rdmactl lesson show 11 (Observing RDMA in production: Where the numbers are)";

/// Every lesson a check points to: `rdmactl lesson show N (Chapter: Section)`, where Section
/// is a `## ` heading of chapter N (a test holds them to the course's text).
pub const LESSONS: [&str; 5] = [
    LESSON_MTU,
    LESSON_GID,
    LESSON_LOSSLESS,
    LESSON_RETRY,
    LESSON_COUNTERS,
];

/// Run every check.
pub fn diagnose(inputs: &Inputs<'_>) -> RoceReport {
    let mut checks = Vec::new();
    let mut skipped = Vec::new();
    for device in &inputs.snapshot.devices {
        if inputs.device.is_some_and(|d| d != device.name) {
            continue;
        }
        for port in &device.ports {
            let target = format!("{}/{}", device.name, port.num);
            if port.link_layer.as_deref() != Some("Ethernet") {
                skipped.push(format!(
                    "{target}: link layer {}, not RoCE",
                    port.link_layer.as_deref().unwrap_or("unknown")
                ));
                continue;
            }
            let Some(netdev) = port.netdev.clone().filter(|n| !n.contains('/')) else {
                skipped.push(format!("{target}: no netdev in the GID table"));
                continue;
            };
            checks.extend(checks::port_checks(
                inputs,
                &device.name,
                port,
                &target,
                &netdev,
            ));
        }
    }
    checks.sort_by_key(|c| c.verdict); // stable: port order, then check order
    let worst = checks
        .iter()
        .map(|c| c.verdict)
        .min()
        .unwrap_or(Verdict::Ok);
    RoceReport {
        interval_seconds: inputs.interval_seconds,
        worst,
        checks,
        skipped,
    }
}

#[cfg(test)]
mod tests;
