//! The sampler: the one thread of `rdmactl top` that does I/O besides the terminal.
//!
//! Every interval it reads a sysfs snapshot, dumps QPs over RDMA netlink (only when the sysfs
//! root is the live `/sys`: netlink describes this kernel, not a fixture tree) and scrapes
//! rdmad's `/metrics` when `--rdmad` is given (`rdmakit::scrape`: HTTP or HTTPS, a CA file,
//! basic auth), then sends one [`Sample`] to the UI loop over a
//! channel. It never prints and never fails: problems travel inside the sample. It stops when
//! the UI loop drops the receiver or raises the stop flag.

use super::state::owners::{self, OwnerStatus};
use super::state::probes::{probe_series, ProbeStatus};
use super::state::resources::{group_qps, owner_text, QpInfo, ResourceStatus};
use rdmakit::attribution::{Tally, TallyOptions};
use rdmakit::nldev::{NldevClient, Resource, ResourceKind};
use rdmakit::scrape::Scraper;
use rdmakit::sysfs::SysfsReader;
use rdmakit::Snapshot;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Owners described per sample (as rdmad's default `--collector.netlink_owners.max-owners`);
/// the rest fold into `other`.
const DEFAULT_MAX_OWNERS: usize = 256;

/// How often the stop flag is checked while waiting for the next sample.
const STOP_POLL: Duration = Duration::from_millis(50);

/// One round of sampling.
#[derive(Debug)]
pub struct Sample {
    /// When the sysfs snapshot was taken.
    pub at: Instant,
    /// The snapshot, or why it failed.
    pub snapshot: Result<Snapshot, String>,
    /// QPs from netlink, or why not.
    pub resources: ResourceStatus,
    /// rdmad probe series, or why not.
    pub probes: ProbeStatus,
    /// The owners holding the most QPs (rdmad's series, else this host's netlink dumps).
    pub owners: OwnerStatus,
}

/// What the sampler reads.
#[derive(Debug, Clone)]
pub struct SamplerConfig {
    /// The sysfs reader (`--path.sysfs`).
    pub reader: SysfsReader,
    /// Time between samples.
    pub interval: Duration,
    /// The client for rdmad's `/metrics`, if `--rdmad` was given.
    pub rdmad: Option<Scraper>,
}

/// Take one sample.
pub fn sample(config: &SamplerConfig) -> Sample {
    let at = Instant::now();
    let snapshot = config.reader.snapshot().map_err(|e| {
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            text.push_str(": ");
            text.push_str(&s.to_string());
            source = s.source();
        }
        text
    });
    let resources = resources(config.reader.root());
    let (probes, owners) = match &config.rdmad {
        None => (
            ProbeStatus::NotConfigured,
            local_owners(config.reader.root()),
        ),
        Some(scraper) => {
            let parsed = scraper.fetch().map_err(|e| e.to_string()).and_then(|text| {
                rdmakit::exposition::parse(&text).map_err(|e| format!("{}: {e}", scraper.url()))
            });
            match parsed {
                Ok(exposition) => (
                    ProbeStatus::Series(probe_series(&exposition)),
                    owners::from_exposition(&exposition).unwrap_or_else(|| {
                        OwnerStatus::Unavailable(
                            "rdmad answered, but exports no rdma_owner_qps series \
                             (its netlink_owners collector is off?)"
                                .to_owned(),
                        )
                    }),
                ),
                Err(why) => (
                    ProbeStatus::Unreachable(why.clone()),
                    OwnerStatus::Unavailable(format!("rdmad unreachable: {why}")),
                ),
            }
        }
    };
    Sample {
        at,
        snapshot,
        resources,
        probes,
        owners,
    }
}

/// Sample every interval until `stop` is raised or the receiver is gone.
pub fn run(config: SamplerConfig, tx: Sender<Sample>, stop: Arc<AtomicBool>) {
    loop {
        let started = Instant::now();
        if tx.send(sample(&config)).is_err() {
            return;
        }
        let deadline = started + config.interval;
        loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            std::thread::sleep(STOP_POLL.min(deadline - now));
        }
    }
}

/// The owners of this host's RDMA objects, tallied from the netlink dumps as rdmad's
/// `netlink_owners` collector does (only when the sysfs root is this host's `/sys`).
fn local_owners(root: &Path) -> OwnerStatus {
    if root != Path::new("/sys") {
        return OwnerStatus::Unavailable(format!(
            "owners come from RDMA netlink (or --rdmad), which describes this host's kernel, \
             not the sysfs tree at {}",
            root.display()
        ));
    }
    let mut client = match NldevClient::open() {
        Ok(c) => c,
        Err(e) => return OwnerStatus::Unavailable(format!("RDMA netlink unavailable ({e})")),
    };
    let devices = match client.devices() {
        Ok(d) => d,
        Err(e) => return OwnerStatus::Unavailable(format!("RDMA netlink: {e}")),
    };
    let mut tally = Tally::new(TallyOptions {
        pids: true,
        ..TallyOptions::default()
    });
    if let Err(e) = tally.dump(&mut client, &devices) {
        return OwnerStatus::Unavailable(format!("RDMA netlink resource dump: {e}"));
    }
    owners::from_report(&tally.finish(DEFAULT_MAX_OWNERS))
}

/// QPs by state and process over RDMA netlink, when the sysfs root is this host's `/sys`.
fn resources(root: &Path) -> ResourceStatus {
    if root != Path::new("/sys") {
        return ResourceStatus::Unavailable(format!(
            "QPs come from RDMA netlink, which describes this host's kernel, not the sysfs \
             tree at {}; sysfs has no QP information",
            root.display()
        ));
    }
    let mut client = match NldevClient::open() {
        Ok(c) => c,
        Err(e) => {
            return ResourceStatus::Unavailable(format!(
                "RDMA netlink unavailable ({e}); sysfs has no QP information"
            ))
        }
    };
    let summaries = match client.resource_summary() {
        Ok(list) => list
            .into_iter()
            .map(|s| {
                let text = s
                    .counts
                    .iter()
                    .map(|(n, c)| format!("{n} {c}"))
                    .collect::<Vec<_>>()
                    .join(" ");
                (s.dev_name, text)
            })
            .collect(),
        Err(e) => return ResourceStatus::Unavailable(format!("RDMA netlink: {e}")),
    };
    let qps = match client.all_resources(ResourceKind::Qp) {
        Ok(list) => list,
        Err(e) => return ResourceStatus::Unavailable(format!("RDMA netlink QP dump: {e}")),
    };
    let infos: Vec<QpInfo> = qps
        .iter()
        .filter_map(|r| match r {
            Resource::Qp(qp) => Some(QpInfo {
                device: qp.dev_name.clone(),
                state: qp.state.name().to_owned(),
                process: owner_text(
                    qp.owner.pid,
                    qp.owner.comm.as_deref(),
                    qp.owner.kern_name.as_deref(),
                ),
            }),
            _ => None,
        })
        .collect();
    ResourceStatus::Qps {
        groups: group_qps(&infos),
        summaries,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fixture_root_never_asks_netlink() {
        match resources(Path::new("/nonexistent/fixture")) {
            ResourceStatus::Unavailable(why) => assert!(why.contains("/nonexistent/fixture")),
            other => panic!("{other:?}"),
        }
    }
}
