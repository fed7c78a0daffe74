//! The device monitor: devices come and go (`rdma link add/delete`, hot-plug, driver
//! reload). Since nothing is cached, the next scrape simply reads what exists, and a removed
//! device's series are gone from it. A monitor thread (RDMA netlink: kernel notifications
//! where the kernel sends them, device dump comparison every [`MONITOR_INTERVAL`] on 6.1) logs
//! each change (`device rxe9 added`, `device rxe9 removed`) at info level.

use rdmakit::nldev::{Event, EventKind, Monitor, NldevError};
use rdmakit::sysfs::DeviceFilter;

/// How often the device monitor compares device dumps (kernels without notifications).
pub const MONITOR_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

/// Start the device monitor thread (see the module doc). No RDMA netlink: nothing to watch.
pub fn watch_devices(filter: DeviceFilter) {
    let mut monitor = match Monitor::start(MONITOR_INTERVAL) {
        Ok(monitor) => monitor,
        Err(e @ NldevError::NoRdma(_)) => {
            tracing::debug!("no device monitor: {e}");
            return;
        }
        Err(e) => {
            tracing::warn!("no device monitor: {e}");
            return;
        }
    };
    let spawned = std::thread::Builder::new()
        .name("rdma-monitor".into())
        .spawn(move || {
            let mut failing = false;
            loop {
                match monitor.next_event() {
                    Ok(event) => {
                        failing = false;
                        if let Some(line) = event_line(&event, &filter) {
                            tracing::info!("{line}");
                        }
                    }
                    // A failed dump is retried at the next interval; log the first only.
                    Err(e) if !failing => {
                        failing = true;
                        tracing::warn!("device monitor: {e}");
                    }
                    Err(_) => {}
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("no device monitor: {e}");
    }
}

/// The log line for a device event, or `None` for devices the filter drops.
pub fn event_line(event: &Event, filter: &DeviceFilter) -> Option<String> {
    let device = event.dev_name.as_deref().unwrap_or("?");
    if !filter.keeps(device) {
        return None;
    }
    let port = event.port.map(|p| format!(" port {p}")).unwrap_or_default();
    let netdev = event.netdev.as_deref().unwrap_or("?");
    Some(match event.kind {
        EventKind::Register => format!("device {device} added"),
        EventKind::Unregister => {
            format!("device {device} removed; its series are gone from the next scrape")
        }
        EventKind::NetdevAttach => format!("device {device}{port}: netdev {netdev} attached"),
        EventKind::NetdevDetach => format!("device {device}{port}: netdev {netdev} detached"),
        EventKind::Rename => format!("device renamed to {device}"),
        EventKind::NetdevRename => format!("device {device}{port}: netdev renamed to {netdev}"),
        other => format!("device {device}: event {}", other.name()),
    })
}

#[cfg(test)]
mod tests;
