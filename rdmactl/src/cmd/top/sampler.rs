//! The sampler: the one thread of `rdmactl top` that does I/O besides the terminal.
//!
//! Every interval it reads a sysfs snapshot, dumps QPs over RDMA netlink (only when the sysfs
//! root is the live `/sys`: netlink describes this kernel, not a fixture tree) and scrapes
//! rdmad's `/metrics` when `--rdmad` is given, then sends one [`Sample`] to the UI loop over a
//! channel. It never prints and never fails: problems travel inside the sample. It stops when
//! the UI loop drops the receiver or raises the stop flag.

use super::state::probes::{parse_probe_series, ProbeStatus};
use super::state::resources::{group_qps, owner_text, QpInfo, ResourceStatus};
use rdmakit::nldev::{NldevClient, Resource, ResourceKind};
use rdmakit::sysfs::SysfsReader;
use rdmakit::Snapshot;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most of a `/metrics` answer read.
const SCRAPE_LIMIT: u64 = 8 << 20;
/// Connect and read timeout of a scrape.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);
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
    /// rdmad's base URL (`http://host:port`), if any.
    pub rdmad: Option<String>,
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
        Some(url) => match scrape(url) {
            Ok(text) => ProbeStatus::Series(parse_probe_series(&text)),
            Err(e) => ProbeStatus::Unreachable(e),
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

/// `http://host[:port][/path]` split into (address to connect to, Host header, path);
/// port 80 and path `/metrics` are the defaults.
pub fn parse_url(url: &str) -> Result<(String, String, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http:// URLs are supported"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if authority.is_empty() {
        return Err(format!("{url}: no host"));
    }
    let port = if authority.starts_with('[') {
        authority.split_once("]:").map(|(_, p)| p)
    } else {
        authority.rsplit_once(':').map(|(_, p)| p)
    };
    let addr = match port {
        Some(p) => {
            p.parse::<u16>()
                .map_err(|_| format!("{url}: bad port {p:?}"))?;
            authority.to_owned()
        }
        None => format!("{authority}:80"),
    };
    let path = if path.is_empty() || path == "/" {
        "/metrics".to_owned()
    } else {
        path.to_owned()
    };
    Ok((addr, authority.to_owned(), path))
}

/// GET the metrics page; the body on a 200 answer, else why not.
fn scrape(url: &str) -> Result<String, String> {
    let (addr, host, path) = parse_url(url)?;
    let sock = addr
        .to_socket_addrs()
        .map_err(|e| format!("{addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr}: no address"))?;
    let mut stream = TcpStream::connect_timeout(&sock, SCRAPE_TIMEOUT)
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(SCRAPE_TIMEOUT))
        .and_then(|_| stream.set_write_timeout(Some(SCRAPE_TIMEOUT)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {host}\r\nAccept: text/plain\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("send to {addr}: {e}"))?;
    let mut body = Vec::new();
    stream
        .take(SCRAPE_LIMIT)
        .read_to_end(&mut body)
        .map_err(|e| format!("read from {addr}: {e}"))?;
    let text = String::from_utf8_lossy(&body);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{addr}: not an HTTP answer"))?;
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("GET {path}: {status}"));
    }
    Ok(body.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_get_a_port_and_a_path() {
        assert_eq!(
            parse_url("http://127.0.0.1:9736").unwrap(),
            (
                "127.0.0.1:9736".into(),
                "127.0.0.1:9736".into(),
                "/metrics".into()
            )
        );
        assert_eq!(
            parse_url("http://lab/custom").unwrap(),
            ("lab:80".into(), "lab".into(), "/custom".into())
        );
        assert_eq!(parse_url("http://[::1]:9/").unwrap().0, "[::1]:9");
        assert_eq!(parse_url("http://[::1]/").unwrap().0, "[::1]:80");
        assert!(parse_url("https://x").is_err());
        assert!(parse_url("http://x:port").is_err());
        assert!(parse_url("http:///metrics").is_err());
    }

    #[test]
    fn a_fixture_root_never_asks_netlink() {
        match resources(Path::new("/nonexistent/fixture")) {
            ResourceStatus::Unavailable(why) => assert!(why.contains("/nonexistent/fixture")),
            other => panic!("{other:?}"),
        }
    }
}
