//! Where the RoCE checks' facts come from when they are files: the port MTUs of a captured
//! tree and the link and transport counters of a port.

use std::path::Path;

use super::{LinkReading, PortMtu};

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

/// A sysfs file's text, trimmed; `None` when it cannot be read.
pub(super) fn read_trim(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}
