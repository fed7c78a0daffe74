//! The sampler: the one thread of `rdmactl top` that does I/O besides the terminal.
//!
//! Every interval it reads a sysfs snapshot, dumps QPs over RDMA netlink (only when the sysfs
//! root is the live `/sys`: netlink describes this kernel, not a fixture tree) and scrapes
//! rdmad's `/metrics` when `--rdmad` is given (`rdmakit::scrape`: HTTP or HTTPS, a CA file,
//! basic auth), then sends one [`Sample`] to the UI loop over a
//! channel. It never prints and never fails: problems travel inside the sample. It stops when
//! the UI loop drops the receiver or raises the stop flag.

use super::state::probes::{parse_probe_series, ProbeStatus};
use super::state::resources::{group_qps, owner_text, QpInfo, ResourceStatus};
use rdmakit::nldev::{NldevClient, Resource, ResourceKind};
use rdmakit::scrape::Scraper;
use rdmakit::sysfs::SysfsReader;
use rdmakit::Snapshot;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    let probes = match &config.rdmad {
        None => ProbeStatus::NotConfigured,
        Some(scraper) => match scraper.fetch() {
            Ok(text) => match parse_probe_series(&text) {
                Ok(series) => ProbeStatus::Series(series),
                Err(e) => ProbeStatus::Unreachable(format!("{}: {e}", scraper.url())),
            },
            Err(e) => ProbeStatus::Unreachable(e.to_string()),
        },
    };
    Sample {
        at,
        snapshot,
        resources,
        probes,
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
