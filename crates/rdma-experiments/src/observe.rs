//! What the experiments observe besides verbs results: the device's hardware counters (through
//! rdmakit's `SysfsReader`), its `rdma res` resource counts (through rdmakit's nldev client),
//! and the process's own numbers from `/proc` (pinned memory, thread CPU time, machine CPU).
//!
//! rxe caches its hw_counters for `lifespan` milliseconds: [`CounterProbe`] waits that long
//! since its previous read before reading again, so a delta never reads a stale cache.
use crate::report::CounterChange;
use rdmakit::catalog::Catalog;
use rdmakit::doctor::deltas;
use rdmakit::model::Snapshot;
use rdmakit::nldev::{NldevClient, NldevError};
use rdmakit::sysfs::{DeviceFilter, ReadOptions, SysfsError, SysfsReader};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// Why a device's counters or resource counts could not be observed.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// Reading sysfs failed.
    #[error(transparent)]
    Sysfs(#[from] SysfsError),
    /// The device is not under sysfs.
    #[error("{device} is not in sysfs")]
    NotInSysfs {
        /// The device asked for.
        device: String,
    },
    /// The RDMA netlink socket could not be opened.
    #[error("RDMA netlink: {0}")]
    Netlink(#[source] NldevError),
    /// The resource dump failed.
    #[error("RDMA netlink RES_GET: {0}")]
    ResGet(#[source] NldevError),
    /// The resource dump has no entry for the device.
    #[error("RES_GET has no entry for {device}")]
    NoResources {
        /// The device asked for.
        device: String,
    },
}

/// Reads one device's counters, respecting the driver's cache period.
#[derive(Debug)]
pub struct CounterProbe {
    reader: SysfsReader,
    device: String,
    last_read: Option<Instant>,
    lifespan: Duration,
}

impl CounterProbe {
    /// A probe of `device` under the sysfs root `root`.
    pub fn new(root: &Path, device: &str) -> CounterProbe {
        CounterProbe {
            reader: SysfsReader::new(root)
                .with_filter(DeviceFilter::only(device))
                .with_options(ReadOptions {
                    gids: false,
                    counters: true,
                }),
            device: device.to_string(),
            last_read: None,
            lifespan: Duration::from_millis(10),
        }
    }

    /// A fresh snapshot (waits out the driver's counter cache first).
    pub fn read(&mut self) -> Result<Snapshot, ObserveError> {
        if let Some(last) = self.last_read {
            let wait = self.lifespan + Duration::from_millis(2);
            let since = last.elapsed();
            if since < wait {
                std::thread::sleep(wait - since);
            }
        }
        let snap = self.reader.snapshot()?;
        self.last_read = Some(Instant::now());
        let dev = snap
            .device(&self.device)
            .ok_or_else(|| ObserveError::NotInSysfs {
                device: self.device.clone(),
            })?;
        if let Some(ms) = dev
            .ports
            .iter()
            .flat_map(|p| p.counters.iter())
            .chain(dev.hw_counters.iter())
            .find(|c| &*c.name == "lifespan")
            .map(|c| c.value)
        {
            self.lifespan = Duration::from_millis(ms.clamp(1, 1000));
        }
        Ok(snap)
    }

    /// The device's catalog family (`rxe` for `rxe0`), from its driver or name.
    pub fn family(&self, snap: &Snapshot, catalog: &Catalog) -> Option<String> {
        let dev = snap.device(&self.device)?;
        rdmakit::doctor::family_of(
            catalog,
            rdmakit::model::CounterSource::Hw,
            dev.driver.as_deref(),
            &dev.name,
        )
    }
}

/// Every counter present in both snapshots, with its delta (gauges left out).
pub fn changes(before: &Snapshot, after: &Snapshot, catalog: &Catalog) -> Vec<CounterChange> {
    deltas(before, after, catalog)
        .into_iter()
        .map(|d| CounterChange {
            name: d.name,
            port: d.port,
            source: d.source.as_str(),
            before: d.before,
            after: d.after,
            delta: d.delta,
        })
        .collect()
}

/// The `rdma res` counts (pd, cq, qp, cm_id, mr, ctx, srq) of one device.
pub fn resources(device: &str) -> Result<BTreeMap<String, u64>, ObserveError> {
    let mut client = NldevClient::open().map_err(ObserveError::Netlink)?;
    let all = client.resource_summary().map_err(ObserveError::ResGet)?;
    let dev = all
        .into_iter()
        .find(|s| s.dev_name == device)
        .ok_or_else(|| ObserveError::NoResources {
            device: device.to_string(),
        })?;
    Ok(dev.counts.into_iter().collect())
}

/// A `kB` field of `/proc/self/status` (`VmPin`, `VmLck`, `VmRSS`).
pub fn status_kb(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    kb_field(&text, field)
}

/// A `kB` field of `/proc/meminfo` (`MemAvailable`).
pub fn meminfo_kb(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    kb_field(&text, field)
}

/// `Field:   1234 kB` -> 1234.
pub fn kb_field(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        if k.trim() != field {
            return None;
        }
        v.split_whitespace().next()?.parse().ok()
    })
}

/// The soft `Max locked memory` limit of this process (`None` = unlimited or unreadable).
pub fn memlock_limit() -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max locked memory"))?;
    let soft = line
        .trim_start_matches("Max locked memory")
        .split_whitespace()
        .next()?;
    Some(soft.to_string())
}

/// CPU time this thread has run, in nanoseconds (`/proc/thread-self/schedstat`, first field).
pub fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// Busy and total jiffies of the whole machine (`/proc/stat`, `cpu` line): the kernel's
/// share includes rxe, the software "NIC".
pub fn machine_jiffies() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    parse_cpu_line(text.lines().next()?)
}

/// `cpu  user nice system idle iowait irq softirq steal ...` -> (busy, total).
pub fn parse_cpu_line(line: &str) -> Option<(u64, u64)> {
    let mut it = line.split_whitespace();
    if it.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = it.filter_map(|x| x.parse().ok()).collect();
    if v.len() < 4 {
        return None;
    }
    let total: u64 = v.iter().take(8).sum();
    let idle = v[3] + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kb_fields_parse() {
        let status = "Name:\tx\nVmPin:\t    4096 kB\nVmLck:\t       0 kB\n";
        assert_eq!(kb_field(status, "VmPin"), Some(4096));
        assert_eq!(kb_field(status, "VmLck"), Some(0));
        assert_eq!(kb_field(status, "VmRSS"), None);
    }

    #[test]
    fn cpu_line_parses_busy_and_total() {
        let (busy, total) = parse_cpu_line("cpu  10 0 5 100 3 1 1 0 0 0").unwrap();
        assert_eq!((busy, total), (17, 120));
        assert!(parse_cpu_line("cpu0 1 2 3 4").is_none());
    }

    #[test]
    fn this_process_has_readable_proc_numbers() {
        assert!(status_kb("VmRSS").unwrap_or(0) > 0);
        assert!(meminfo_kb("MemTotal").unwrap_or(0) > 0);
        let a = thread_cpu_ns().expect("schedstat");
        let mut x = 0u64;
        for i in 0..200_000u64 {
            x = x.wrapping_add(i * i);
        }
        assert!(x > 0);
        assert!(thread_cpu_ns().unwrap() >= a);
    }
}
