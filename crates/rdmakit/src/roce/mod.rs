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

pub mod dcb;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::ethtool::curated::{curate, Family};
use crate::ethtool::{DriverStats, EthtoolError};
use crate::model::{Port, Snapshot};
use dcb::{DcbError, DcbIeee};

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

/// Parse an MTU as `ibv_devinfo` / the fixtures write it: `4096 (5)` or `4096`.
pub fn parse_mtu(text: &str) -> Option<u32> {
    text.split_whitespace().next()?.parse().ok()
}

/// The port MTUs from `ports/<n>/active_mtu|max_mtu` files under the device's sysfs
/// directory. The kernel has no such files; captured trees carry `ibv_query_port`'s answer
/// there, so a tree from another machine has its MTUs.
pub fn sysfs_port_mtu(root: &Path, device: &str, port: u32) -> Option<PortMtu> {
    let dir = root
        .join("class/infiniband")
        .join(device)
        .join("ports")
        .join(port.to_string());
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f))
            .ok()
            .and_then(|t| parse_mtu(&t))
    };
    Some(PortMtu {
        active: read("active_mtu")?,
        max: read("max_mtu")?,
        source: "captured ibv_query_port (ports/N/active_mtu, max_mtu)",
    })
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

/// The counters that count retransmissions or sequence errors on any driver: those of the
/// doctor rule `packet-loss` (catalog/rules.toml).
pub fn retransmit_counter_names() -> Result<Vec<String>, crate::doctor::RuleError> {
    Ok(crate::doctor::Rules::embedded()?
        .iter()
        .find(|r| r.id == "packet-loss")
        .map(|r| r.counters.clone())
        .unwrap_or_default())
}

/// The port's link counters besides `carrier_changes` (PMA or driver files).
const LINK_COUNTERS: [&str; 2] = ["link_downed", "link_error_recovery"];

/// Read a [`LinkReading`] of `device` port `port` and its `netdev` under a sysfs root;
/// `retransmit_names` are the counter names that count retransmissions or sequence errors
/// (the `packet-loss` rule's counters).
pub fn sysfs_link_reading(
    root: &Path,
    device: &str,
    port: u32,
    netdev: &str,
    retransmit_names: &[String],
) -> LinkReading {
    let num = |p: &Path| read_trim(p).and_then(|t| t.parse::<u64>().ok());
    let mut r = LinkReading::default();
    if !netdev.is_empty() && !netdev.contains('/') {
        let f = root.join("class/net").join(netdev).join("carrier_changes");
        if let Some(v) = num(&f) {
            r.link
                .insert(format!("class/net/{netdev}/carrier_changes"), v);
        }
    }
    let dir = root
        .join("class/infiniband")
        .join(device)
        .join("ports")
        .join(port.to_string());
    for sub in ["hw_counters", "counters"] {
        for name in LINK_COUNTERS {
            if let Some(v) = num(&dir.join(sub).join(name)) {
                r.link.insert(format!("{sub}/{name}"), v);
            }
        }
        for name in retransmit_names {
            if name.contains('/') {
                continue;
            }
            if let Some(v) = num(&dir.join(sub).join(name)) {
                r.retransmits.insert(format!("{sub}/{name}"), v);
            }
        }
    }
    r
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

fn na(reason: impl Into<String>) -> (Verdict, String) {
    (Verdict::NotAvailable, reason.into())
}

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
            checks.extend(port_checks(inputs, &device.name, port, &target, &netdev));
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

fn read_trim(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn port_checks(
    inputs: &Inputs<'_>,
    device: &str,
    port: &Port,
    target: &str,
    netdev: &str,
) -> Vec<Check> {
    let root = inputs.root;
    let net = root.join("class/net").join(netdev);
    let mut out = Vec::new();
    let mut push = |id: &'static str,
                    result: (Verdict, String),
                    evidence: Vec<String>,
                    fix: Option<String>,
                    lesson: &'static str| {
        out.push(Check::new(
            id, target, netdev, result, evidence, fix, lesson,
        ))
    };

    // 1. MTU.
    {
        let mut ev = Vec::new();
        let nd_mtu = read_trim(&net.join("mtu")).and_then(|t| t.parse::<u32>().ok());
        let pm = (inputs.port_mtu)(device, port.num);
        let result = match nd_mtu {
            None => na(format!(
                "the MTU of {netdev} is unreadable (class/net/{netdev}/mtu)"
            )),
            Some(m) => {
                let budget = iboe_mtu(m);
                ev.push(format!(
                    "class/net/{netdev}/mtu = {m}: minus the {IBOE_HEADER_BUDGET}-byte RoCE header budget leaves room for IB MTU {budget}"
                ));
                match pm {
                    Some(p) => {
                        ev.push(format!(
                            "port active_mtu {}, max_mtu {} ({})",
                            p.active, p.max, p.source
                        ));
                        if p.active > budget {
                            (Verdict::Fail, format!("the port's active MTU {} does not fit the netdev MTU {m} (room for {budget}): full-size RoCE packets exceed the netdev MTU", p.active))
                        } else if budget < p.max {
                            (Verdict::Warn, format!("netdev MTU {m} limits RoCE to {budget} bytes; the port supports {}", p.max))
                        } else {
                            (
                                Verdict::Ok,
                                format!("RoCE MTU {} fits netdev MTU {m}", p.active),
                            )
                        }
                    }
                    None => {
                        ev.push("port MTUs not available (no ibv_query_port answer)".into());
                        if budget < 4096 {
                            (
                                Verdict::Warn,
                                format!(
                                    "netdev MTU {m} limits RoCE to {budget} bytes (4096 needs {})",
                                    4096 + IBOE_HEADER_BUDGET
                                ),
                            )
                        } else {
                            (
                                Verdict::Ok,
                                format!("netdev MTU {m} leaves room for RoCE MTU 4096"),
                            )
                        }
                    }
                }
            }
        };
        let want = pm.map(|p| p.max).unwrap_or(4096) + IBOE_HEADER_BUDGET;
        push(
            "mtu",
            result,
            ev,
            Some(format!(
                "ip link set dev {netdev} mtu {want}   (on every hop: the same MTU end to end)"
            )),
            LESSON_MTU,
        );
    }

    // 2. RoCE v2 GIDs.
    {
        let count = |t: &str| {
            port.gids
                .iter()
                .filter(|g| g.gid_type.as_deref() == Some(t))
                .count()
        };
        let (v2, v1) = (count("RoCE v2"), count("IB/RoCE v1"));
        let ev = vec![format!(
            "ports/{}/gid_attrs/types: {v2} RoCE v2, {v1} IB/RoCE v1 of {} populated GIDs",
            port.num,
            port.gids.len()
        )];
        let result = if v2 > 0 {
            (Verdict::Ok, format!("{v2} RoCE v2 GID(s)"))
        } else {
            (Verdict::Fail, "no RoCE v2 GID: RoCE v2 (UDP/IP) connections cannot be addressed; RoCE v2 GIDs come from the netdev's IP addresses".to_string())
        };
        push(
            "roce-v2-gid",
            result,
            ev,
            Some(format!(
                "ip addr add <ADDR>/<LEN> dev {netdev} && ip link set dev {netdev} up"
            )),
            LESSON_GID,
        );
    }

    // 3./4. rdma_cm defaults (configfs).
    let cm = root
        .join("kernel/config/rdma_cm")
        .join(device)
        .join("ports")
        .join(port.num.to_string());
    let cm_path = format!("/sys/kernel/config/rdma_cm/{device}/ports/{}", port.num);
    let cm_mode = read_trim(&cm.join("default_roce_mode"));
    let cm_tos = read_trim(&cm.join("default_roce_tos")).and_then(|t| t.parse::<u8>().ok());
    let make_group = format!("mkdir -p /sys/kernel/config/rdma_cm/{device} && ");
    {
        let (result, ev) = match &cm_mode {
            Some(m) if m == "RoCE v2" => ((Verdict::Ok, "rdma_cm uses RoCE v2 by default".to_string()), vec![format!("{cm_path}/default_roce_mode = {m}")]),
            Some(m) => ((Verdict::Warn, format!("rdma_cm uses {m} by default: RoCE v1 is not routable and carries no DSCP")), vec![format!("{cm_path}/default_roce_mode = {m}")]),
            None => ((Verdict::Ok, "no rdma_cm configfs group for the device: the kernel default applies (RoCE v2 where the port supports it)".to_string()), vec![format!("{cm_path}/default_roce_mode absent (configfs group not created, or configfs not mounted)")]),
        };
        push(
            "cm-roce-mode",
            result,
            ev,
            Some(format!(
                "{make_group}echo 'RoCE v2' > {cm_path}/default_roce_mode"
            )),
            LESSON_GID,
        );
    }
    let tos = cm_tos.unwrap_or(0);
    let dscp = tos >> 2;
    {
        let ev = vec![match cm_tos {
            Some(t) => format!("{cm_path}/default_roce_tos = {t} (DSCP {})", t >> 2),
            None => format!("{cm_path}/default_roce_tos absent: the kernel default ToS 0"),
        }];
        let result = if tos == 0 {
            (Verdict::Warn, "rdma_cm connections leave with ToS 0 (DSCP 0, best effort) unless the application sets RDMA_OPTION_ID_TOS".to_string())
        } else {
            (
                Verdict::Ok,
                format!("rdma_cm connections use ToS {tos} (DSCP {dscp})"),
            )
        };
        push(
            "cm-tos",
            result,
            ev,
            Some(format!("{make_group}echo 106 > {cm_path}/default_roce_tos   (DSCP 26; pick the DSCP your fabric maps to the PFC priority)")),
            LESSON_LOSSLESS,
        );
    }

    // 5.-8. DCB.
    let dcb = (inputs.dcb)(netdev);
    let dcb_na = |e: &DcbError| {
        if e.is_unsupported() {
            na(format!("not available on this driver: {netdev} has no DCB (RTM_GETDCB answered EOPNOTSUPP)"))
        } else {
            na(format!("DCB of {netdev} unreadable: {e}"))
        }
    };
    let mut rdma_priority: Option<u8> = None;
    match &dcb {
        Err(e) => {
            let r = dcb_na(e);
            for id in ["pfc", "dscp-map", "trust", "tc-protected"] {
                push(id, r.clone(), Vec::new(), None, LESSON_LOSSLESS);
            }
        }
        Ok(d) => {
            let pfc = d.pfc_priorities();
            let pfc_text = match d.pfc_enabled {
                Some(en) => format!(
                    "DCB IEEE PFC: pfc_en {en:#04x} (priorities {pfc:?}), pfc_cap {}",
                    d.pfc_cap.unwrap_or(0)
                ),
                None => "DCB IEEE PFC: no PFC attribute in the answer".to_string(),
            };
            let r = match d.pfc_enabled {
                None => na(format!("not available on this driver: {netdev} reports no IEEE PFC")),
                Some(_) if pfc.is_empty() => (Verdict::Warn, "PFC is off on every priority: RoCE runs lossy (fine only with a congestion-controlled, loss-tolerant setup)".to_string()),
                Some(_) => (Verdict::Ok, format!("PFC on priority {}", join(&pfc))),
            };
            push(
                "pfc",
                r,
                vec![pfc_text.clone()],
                Some(format!(
                    "dcb pfc set dev {netdev} prio-pfc 3:on   (the priority RDMA traffic uses)"
                )),
                LESSON_LOSSLESS,
            );

            let map = d.dscp_map();
            let map_text = if map.is_empty() {
                "DCB IEEE APP table: no DSCP entries".to_string()
            } else {
                format!(
                    "DCB IEEE APP table: dscp-prio {}",
                    map.iter()
                        .map(|(d, p)| format!("{d}:{p}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                )
            };
            let r = if map.is_empty() {
                (Verdict::Warn, "no DSCP -> priority entries: the DSCP of RoCE packets does not select a priority".to_string())
            } else {
                (
                    Verdict::Ok,
                    format!(
                        "{} DSCP -> priority entr{}",
                        map.len(),
                        if map.len() == 1 { "y" } else { "ies" }
                    ),
                )
            };
            push(
                "dscp-map",
                r,
                vec![map_text.clone()],
                Some(format!("dcb app add dev {netdev} dscp-prio {dscp}:3")),
                LESSON_LOSSLESS,
            );

            let r = match &d.trust {
                None => na(format!("not available on this driver: {netdev} reports no APP trust order (DCB_ATTR_DCB_APP_TRUST_TABLE)")),
                Some(order) if order.first() == Some(&dcb::SEL_DSCP) => (Verdict::Ok, "DSCP is trusted first".to_string()),
                Some(order) => (Verdict::Warn, format!("trust order [{}]: DSCP is not trusted first, so the DSCP map may not decide the priority", order.iter().map(|s| dcb::selector_name(*s)).collect::<Vec<_>>().join(" "))),
            };
            let ev = d
                .trust
                .as_ref()
                .map(|o| {
                    vec![format!(
                        "DCB APP trust order: [{}]",
                        o.iter()
                            .map(|s| dcb::selector_name(*s))
                            .collect::<Vec<_>>()
                            .join(" ")
                    )]
                })
                .unwrap_or_default();
            push(
                "trust",
                r,
                ev,
                Some(format!("dcb apptrust set dev {netdev} order dscp")),
                LESSON_LOSSLESS,
            );

            rdma_priority = d.dscp_priority(dscp);
            let mut ev = vec![
                format!("rdma_cm ToS {tos} -> DSCP {dscp}"),
                map_text,
                pfc_text,
            ];
            let r = match (rdma_priority, d.pfc_enabled) {
                (_, None) => na(format!("not available on this driver: {netdev} reports no IEEE PFC")),
                (Some(p), Some(en)) if en & (1 << p) != 0 => (Verdict::Ok, format!("DSCP {dscp} maps to priority {p}, which PFC protects")),
                (Some(p), Some(_)) if pfc.is_empty() => (Verdict::Warn, format!("DSCP {dscp} maps to priority {p}; PFC protects no priority")),
                (Some(p), Some(_)) => (Verdict::Fail, format!("RDMA traffic (DSCP {dscp}) maps to priority {p}, but PFC protects priority {}: it is not lossless", join(&pfc))),
                (None, Some(_)) => {
                    ev.push(format!("no APP entry for DSCP {dscp}: the driver's default map decides (not reported over DCB netlink)"));
                    (Verdict::Warn, format!("DSCP {dscp} has no APP entry: which priority RDMA traffic lands on is not known"))
                }
            };
            let fix = match pfc.first() {
                Some(p) => format!("dcb app add dev {netdev} dscp-prio {dscp}:{p}   (or change the ToS to a DSCP mapped to priority {p})"),
                None => format!("dcb pfc set dev {netdev} prio-pfc 3:on && dcb app add dev {netdev} dscp-prio {dscp}:3"),
            };
            push("tc-protected", r, ev, Some(fix), LESSON_LOSSLESS);
        }
    }

    // 9. ECN (mlx5 sysfs).
    {
        let ecn = net.join("ecn");
        let which: Vec<u8> = match (rdma_priority, &dcb) {
            (Some(p), _) => vec![p],
            (None, Ok(d)) if !d.pfc_priorities().is_empty() => d.pfc_priorities(),
            _ => (0..8).collect(),
        };
        if !ecn.is_dir() {
            push("ecn", na(format!("not available on this driver: no ECN switches (class/net/{netdev}/ecn/, an mlx5 feature)")), Vec::new(), None, LESSON_LOSSLESS);
        } else {
            let mut ev = Vec::new();
            let mut off = Vec::new();
            let mut unknown = 0;
            for p in &which {
                for side in ["roce_np", "roce_rp"] {
                    let f = format!("class/net/{netdev}/ecn/{side}/enable/{p}");
                    match read_trim(&root.join(&f)) {
                        Some(v) => {
                            if v != "1" {
                                off.push(format!("{side} priority {p}"));
                            }
                            ev.push(format!("{f} = {v}"));
                        }
                        None => unknown += 1,
                    }
                }
            }
            let r = if ev.is_empty() {
                na(format!(
                    "ECN switches for priority {} unreadable under class/net/{netdev}/ecn/",
                    join(&which)
                ))
            } else if off.is_empty() && unknown == 0 {
                (
                    Verdict::Ok,
                    format!(
                        "ECN (DCQCN notification and reaction point) on for priority {}",
                        join(&which)
                    ),
                )
            } else if off.is_empty() {
                (
                    Verdict::Warn,
                    format!(
                        "ECN switches partly unreadable for priority {}",
                        join(&which)
                    ),
                )
            } else {
                (Verdict::Warn, format!("ECN off for {}: no DCQCN congestion control there, congestion is left to PFC pauses", off.join(", ")))
            };
            let p = which.first().copied().unwrap_or(3);
            push("ecn", r, ev, Some(format!("echo 1 > /sys/class/net/{netdev}/ecn/roce_np/enable/{p}; echo 1 > /sys/class/net/{netdev}/ecn/roce_rp/enable/{p}")), LESSON_LOSSLESS);
        }
    }

    // 10./11. Pause storms and discards, from two readings of the driver statistics.
    let before = (inputs.stats_before)(netdev);
    let after = (inputs.stats_after)(netdev);
    let secs = inputs.interval_seconds;
    match (&before, &after) {
        (Err(e), _) | (_, Err(e)) => {
            let r = if e.is_unsupported() {
                na(format!(
                    "not available on this driver: {netdev} has no driver statistics (EOPNOTSUPP)"
                ))
            } else {
                na(format!("driver statistics of {netdev} unreadable: {e}"))
            };
            push("pause", r.clone(), Vec::new(), None, LESSON_LOSSLESS);
            push("discards", r, Vec::new(), None, LESSON_LOSSLESS);
        }
        (Ok(b), Ok(a)) => {
            let fam = |s: &DriverStats, f: Family| -> Vec<(String, Vec<String>, u64)> {
                s.stats
                    .iter()
                    .filter_map(|(n, v)| {
                        let c = curate(&s.info.driver, n)?;
                        (c.family == f).then(|| (n.clone(), c.labels, *v))
                    })
                    .collect()
            };
            let delta = |f: Family| -> Vec<(String, Vec<String>, u64, u64)> {
                let old = fam(b, f);
                fam(a, f)
                    .into_iter()
                    .map(|(n, l, v)| {
                        let was = old.iter().find(|o| o.0 == n).map(|o| o.2).unwrap_or(v);
                        (n, l, v, v.saturating_sub(was))
                    })
                    .collect()
            };
            let driver = a.info.driver.clone();
            let frames = delta(Family::PauseFrames);
            let duration = delta(Family::PauseDuration);
            if frames.is_empty() && duration.is_empty() {
                push(
                    "pause",
                    na(format!(
                        "not available on this driver: {driver} reports no pause counters"
                    )),
                    Vec::new(),
                    None,
                    LESSON_LOSSLESS,
                );
            } else {
                let mut ev: Vec<String> = frames
                    .iter()
                    .chain(duration.iter())
                    .filter(|(_, _, v, d)| *v > 0 || *d > 0)
                    .map(|(n, _, v, d)| format!("ethtool {n} = {v} (+{d} in {secs:.1} s)"))
                    .collect();
                if ev.is_empty() {
                    ev.push(format!("every pause counter of {driver} is 0"));
                }
                let rising: u64 = frames.iter().map(|f| f.3).sum();
                let paused_us = duration.iter().map(|f| f.3).max().unwrap_or(0);
                let fraction = if secs > 0.0 {
                    paused_us as f64 / (secs * 1e6)
                } else {
                    0.0
                };
                let rate = if secs > 0.0 {
                    rising as f64 / secs
                } else {
                    0.0
                };
                let r = if fraction >= 0.5 {
                    (
                        Verdict::Fail,
                        format!(
                            "pause storm: a priority was paused {:.0}% of the interval",
                            fraction * 100.0
                        ),
                    )
                } else if fraction >= 0.1 || rate >= 10_000.0 {
                    (Verdict::Warn, format!("heavy pausing: {rate:.0} pause frames/s, paused up to {:.0}% of the interval", fraction * 100.0))
                } else if rising > 0 {
                    (
                        Verdict::Ok,
                        format!(
                            "{rising} pause frame(s) in {secs:.1} s: ordinary PFC back-pressure"
                        ),
                    )
                } else {
                    (Verdict::Ok, format!("no pause frames in {secs:.1} s"))
                };
                push("pause", r, ev, Some(format!("find the receiver that cannot keep up (its rx_out_of_buffer / discards) or a stuck peer; watch `rdmactl counters` on {netdev}'s link partner")), LESSON_LOSSLESS);
            }
            let discards = delta(Family::Discards);
            if discards.is_empty() {
                push(
                    "discards",
                    na(format!(
                        "not available on this driver: {driver} reports no discard counters"
                    )),
                    Vec::new(),
                    None,
                    LESSON_LOSSLESS,
                );
            } else {
                let mut ev: Vec<String> = discards
                    .iter()
                    .map(|(n, l, v, d)| {
                        format!("ethtool {n} = {v} (+{d} in {secs:.1} s; {})", l.join(" "))
                    })
                    .collect();
                ev.dedup();
                let rising: u64 = discards.iter().map(|f| f.3).sum();
                let total: u64 = discards.iter().map(|f| f.2).sum();
                let r = if rising > 0 {
                    (Verdict::Warn, format!("{rising} frame(s) discarded in {secs:.1} s: on a lossless priority these are retransmissions (out of buffer: the host is slow; port: the NIC's buffers)"))
                } else if total > 0 {
                    (
                        Verdict::Ok,
                        format!("no discards in {secs:.1} s ({total} since the counters started)"),
                    )
                } else {
                    (Verdict::Ok, "no discards".to_string())
                };
                push("discards", r, ev, Some(format!("check PFC on the RDMA priority (`rdmactl doctor roce`), the receiver's CPU/memory pressure, and the switch's buffer profile for {netdev}'s port")), LESSON_LOSSLESS);
            }
        }
    }
    out.extend(link_checks(inputs, device, port.num, target, netdev));
    out
}

/// 12./13. Link flaps and retransmissions, from two readings of the port's counters.
fn link_checks(
    inputs: &Inputs<'_>,
    device: &str,
    port: u32,
    target: &str,
    netdev: &str,
) -> Vec<Check> {
    let before = (inputs.link_before)(device, port, netdev);
    let after = (inputs.link_after)(device, port, netdev);
    let secs = inputs.interval_seconds;
    // (name, value now, rise over the interval) of every counter read both times.
    let deltas =
        |b: &BTreeMap<String, u64>, a: &BTreeMap<String, u64>| -> Vec<(String, u64, u64)> {
            a.iter()
                .filter_map(|(n, v)| Some((n.clone(), *v, v.saturating_sub(*b.get(n)?))))
                .collect()
        };
    let check = |id, result, evidence, fix: String, lesson| {
        Check::new(id, target, netdev, result, evidence, Some(fix), lesson)
    };
    let evidence = |d: &[(String, u64, u64)]| -> Vec<String> {
        d.iter()
            .map(|(n, v, r)| format!("{n} = {v} (+{r} in {secs:.1} s)"))
            .collect()
    };
    let mut out = Vec::new();

    let link = deltas(&before.link, &after.link);
    let rose: Vec<&(String, u64, u64)> = link.iter().filter(|d| d.2 > 0).collect();
    let r = if link.is_empty() {
        na(format!(
            "not available: neither class/net/{netdev}/carrier_changes nor a link_downed counter of {target} is readable"
        ))
    } else if rose.is_empty() {
        (Verdict::Ok, format!("the link stayed up for {secs:.1} s"))
    } else {
        let what: Vec<String> = rose
            .iter()
            .map(|(n, _, r)| format!("{} +{r}", n.rsplit('/').next().unwrap_or(n)))
            .collect();
        (
            Verdict::Warn,
            format!(
                "the link of {netdev} flapped in {secs:.1} s ({}): traffic on it stalled and connections may have timed out",
                what.join(", ")
            ),
        )
    };
    out.push(check(
        "link-flaps",
        r,
        evidence(&link),
        format!("look at the cable, optic and switch port of {netdev} (`ip -s link show {netdev}`, the switch's log); a link that keeps flapping should be taken out of service"),
        LESSON_COUNTERS,
    ));

    let re = deltas(&before.retransmits, &after.retransmits);
    let rising: u64 = re.iter().map(|d| d.2).sum();
    let r = if re.is_empty() {
        na(format!(
            "not available on this driver: {target} has no retransmission or sequence-error counter"
        ))
    } else if rising > 0 {
        (
            Verdict::Warn,
            format!(
                "{rising} retransmission / sequence-error event(s) in {secs:.1} s: packets between {target} and its peers are lost (a lossy link, drops on a priority without PFC, or a slow peer)"
            ),
        )
    } else {
        (
            Verdict::Ok,
            format!("no retransmissions or sequence errors in {secs:.1} s"),
        )
    };
    let moved: Vec<(String, u64, u64)> = re.iter().filter(|d| d.2 > 0).cloned().collect();
    out.push(check(
        "retransmits",
        r,
        evidence(if moved.is_empty() { &re } else { &moved }),
        format!("find where packets are lost: the discards and pause checks above, `rdmactl doctor` on both ends, the switch's drop counters for {netdev}'s port"),
        LESSON_RETRY,
    ));
    out
}

fn join(p: &[u8]) -> String {
    p.iter().map(u8::to_string).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iboe_budget() {
        assert_eq!(iboe_mtu(1500), 1024);
        assert_eq!(iboe_mtu(4191), 2048);
        assert_eq!(iboe_mtu(4192), 4096);
        assert_eq!(iboe_mtu(9000), 4096);
        assert_eq!(iboe_mtu(300), 0);
        assert_eq!(iboe_mtu(0), 0);
    }

    #[test]
    fn verdicts_rank_fail_first() {
        let mut v = vec![
            Verdict::Ok,
            Verdict::NotAvailable,
            Verdict::Fail,
            Verdict::Warn,
        ];
        v.sort();
        assert_eq!(
            v,
            vec![
                Verdict::Fail,
                Verdict::Warn,
                Verdict::NotAvailable,
                Verdict::Ok
            ]
        );
        assert_eq!(parse_mtu("4096 (5)"), Some(4096));
        assert_eq!(parse_mtu("junk"), None);
    }
}
