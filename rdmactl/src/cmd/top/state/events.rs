//! Events worth a line in the log pane, computed from two snapshots.
//!
//! Topology (devices and ports appearing or vanishing, port state changes) comes from a plain
//! comparison; counter anomalies come from the doctor (`rdmakit::doctor::diagnose`, the rules
//! in `catalog/rules.toml` plus the catalog's severities) and are logged when they start and
//! when they stop, not on every sample; read errors from the snapshot are logged once each.

use rdmakit::catalog::{Catalog, Severity};
use rdmakit::doctor::{diagnose, Rules};
use rdmakit::model::SourceError;
use rdmakit::Snapshot;
use std::collections::HashSet;

/// How loud an event is (maps onto the log levels of the log pane).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Something failed.
    Error,
    /// Worth a look.
    Warn,
    /// For the record.
    Info,
}

/// One log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Level.
    pub level: Level,
    /// What it is about (`devices`, `ports`, `doctor`, `sysfs`, `rdmad`, `netlink`).
    pub target: &'static str,
    /// The line.
    pub message: String,
}

impl Event {
    /// An info event.
    pub fn info(target: &'static str, message: String) -> Event {
        Event {
            level: Level::Info,
            target,
            message,
        }
    }

    /// A warning.
    pub fn warn(target: &'static str, message: String) -> Event {
        Event {
            level: Level::Warn,
            target,
            message,
        }
    }

    /// An error.
    pub fn error(target: &'static str, message: String) -> Event {
        Event {
            level: Level::Error,
            target,
            message,
        }
    }
}

/// Devices and ports that appeared or vanished, and port state changes.
pub fn topology_events(before: &Snapshot, after: &Snapshot) -> Vec<Event> {
    let mut out = Vec::new();
    for dev in &before.devices {
        match after.device(&dev.name) {
            None => out.push(Event::warn(
                "devices",
                format!("device {} removed", dev.name),
            )),
            Some(now) => {
                for port in &dev.ports {
                    let Some(p) = now.port(port.num) else {
                        out.push(Event::warn(
                            "ports",
                            format!("port {}/{} removed", dev.name, port.num),
                        ));
                        continue;
                    };
                    let old = port.state.as_ref().map(|s| s.name.as_str());
                    let new = p.state.as_ref().map(|s| s.name.as_str());
                    if old != new {
                        let message = format!(
                            "port {}/{} state {} -> {}",
                            dev.name,
                            port.num,
                            old.unwrap_or("?"),
                            new.unwrap_or("?")
                        );
                        out.push(if new == Some("ACTIVE") {
                            Event::info("ports", message)
                        } else {
                            Event::error("ports", message)
                        });
                    }
                }
                for p in &now.ports {
                    if dev.port(p.num).is_none() {
                        out.push(Event::info(
                            "ports",
                            format!("port {}/{} added", dev.name, p.num),
                        ));
                    }
                }
            }
        }
    }
    for dev in &after.devices {
        if before.device(&dev.name).is_none() {
            out.push(Event::info("devices", format!("device {} added", dev.name)));
        }
    }
    out
}

/// Counter anomalies from the doctor. `active` holds the findings seen on the previous
/// sample (`id target`): a finding is logged when it appears, and an info line when it stops.
pub fn anomaly_events(
    before: &Snapshot,
    after: &Snapshot,
    seconds: f64,
    catalog: &Catalog,
    rules: &Rules,
    active: &mut HashSet<String>,
) -> Vec<Event> {
    let diagnosis = diagnose(before, after, Some(seconds), catalog, rules);
    let mut out = Vec::new();
    let mut now = HashSet::new();
    for f in &diagnosis.findings {
        // Topology findings are reported by `topology_events`.
        if matches!(f.id.as_str(), "device-gone" | "device-new" | "port-state") {
            continue;
        }
        if f.severity == Severity::Info {
            continue;
        }
        let key = format!("{} {}", f.id, f.target);
        if !active.contains(&key) {
            let rate = f
                .rate_per_second
                .map(|r| format!(" ({r:.1}/s)"))
                .unwrap_or_default();
            let message = format!("{}: {}{rate}", f.target, f.finding);
            out.push(match f.severity {
                Severity::Error => Event::error("doctor", message),
                _ => Event::warn("doctor", message),
            });
        }
        now.insert(key);
    }
    let mut stopped: Vec<&String> = active.difference(&now).collect();
    stopped.sort();
    for key in stopped {
        let (id, target) = key.split_once(' ').unwrap_or((key.as_str(), ""));
        out.push(Event::info(
            "doctor",
            format!("{target}: {id} stopped moving"),
        ));
    }
    *active = now;
    out
}

/// Read errors not logged yet; `seen` remembers them (and forgets the ones that went away,
/// so a problem that comes back is logged again).
pub fn read_error_events(errors: &[SourceError], seen: &mut HashSet<String>) -> Vec<Event> {
    let mut out = Vec::new();
    let mut now = HashSet::new();
    for e in errors {
        let key = format!("{} {}", e.path, e.kind);
        if !seen.contains(&key) {
            out.push(Event::warn("sysfs", format!("read error: {e}")));
        }
        now.insert(key);
    }
    *seen = now;
    out
}
