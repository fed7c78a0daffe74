//! Peer discovery: the one peer set the engine probes, merged from three sources and
//! refreshed every round without a restart.
//!
//! - static peers (`--probe.peer HOST:PORT`);
//! - a DNS name (`--probe.peers-dns NAME`): every A and AAAA record of NAME, asked again
//!   every round (the resolver's cache is cleared first), as a Kubernetes headless Service
//!   answers with one address per ready pod. Ports come from the SRV records
//!   `_rdmad-probe._tcp.NAME`: one port shared by all targets applies to every address;
//!   differing ports are mapped per target address; without SRV records the default port
//!   (this engine's own listen port) is used;
//! - a file (`--probe.peers-file FILE`) in Prometheus' file_sd format, JSON (`.json`) or YAML:
//!   a list of `{targets: [HOST:PORT, ...], labels: {rack: r1, zone: z1}}` groups, read again
//!   whenever its size, inode or modification time changes.
//!
//! Bad entries (a target that is not `HOST:PORT`, a label that is not a string) are skipped
//! and the rest of the source is used; each distinct problem is logged once, and the number
//! of skipped entries per source is published ([`DiscoveryStats`]). A failed refresh of a
//! source (an unparsable file, a DNS timeout) keeps that source's last good peers and is
//! counted (DNS: for at most [`DNS_KEEP_LAST_GOOD`], 5 minutes, after the last good answer;
//! then its peers are dropped until the name resolves again); an answer that the name has no records (NXDOMAIN, no data) or a deleted file
//! empties it, so peers removed from DNS or the file go away.
//!
//! The engine's own listen address is never a peer: an entry whose host is one of this
//! machine's addresses (or unspecified) with the listen port is dropped here, and its labels
//! become this host's own (its `rack`, unless one was configured). The engine also drops a
//! peer whose handshake shows this engine's own GID.
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

mod error;

use error::DnsSetupError;
pub use error::{FileSdError, TargetError};

/// The SRV service prefix for a `--probe.peers-dns` name.
pub const SRV_PREFIX: &str = "_rdmad-probe._tcp.";
/// How long the peers of the last good DNS answer are kept while the name cannot be
/// resolved (timeouts, SERVFAIL, no server): long enough to ride out a resolver restart or
/// rollout without the mesh going blind, short enough that a cluster whose DNS is gone does
/// not probe a stale peer list for ever. An answer that the name has no records is not a
/// failure: it empties the DNS peers at once.
pub const DNS_KEEP_LAST_GOOD: Duration = Duration::from_secs(300);
/// Distinct problems logged at most (further ones are only counted).
const MAX_LOGGED: usize = 4096;
/// Targets resolved one by one when SRV ports differ between targets.
const MAX_SRV_TARGET_LOOKUPS: usize = 1024;

pub use crate::snapshot::{DiscoveryStats, Labels};

/// One peer: its `HOST:PORT` (the key, and the `peer` label) and its labels from discovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// `HOST:PORT` (`[v6]:PORT` for IPv6 addresses), canonical for addresses.
    pub addr: String,
    /// Labels from the peers file (`rack`, `zone`, ...); empty for static and DNS peers.
    pub labels: Labels,
}

impl Peer {
    /// The peer's `rack` label, if any.
    pub fn rack(&self) -> Option<&str> {
        self.labels.get("rack").map(String::as_str)
    }
}

/// The merged result of one refresh.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerSet {
    /// Peers by `addr`.
    pub peers: BTreeMap<String, Peer>,
    /// This host's own labels (configured, else those of its own entry in the peers file).
    pub own_labels: BTreeMap<String, String>,
    /// Entries that were this engine itself (by address), dropped from `peers`.
    pub own_addrs: BTreeSet<String>,
}

impl PeerSet {
    /// This host's rack label, if known.
    pub fn own_rack(&self) -> Option<&str> {
        self.own_labels.get("rack").map(String::as_str)
    }
}

/// Where the peers come from.
#[derive(Debug, Clone, Default)]
pub struct DiscoveryConfig {
    /// `--probe.peer`, each `HOST:PORT`.
    pub static_peers: Vec<String>,
    /// `--probe.peers-dns NAME`.
    pub dns_name: Option<String>,
    /// The DNS server to ask (default: the system's, from resolv.conf).
    pub dns_server: Option<SocketAddr>,
    /// How long one DNS query may take.
    pub dns_timeout: Option<Duration>,
    /// How long the last good DNS answer is kept while the name cannot be resolved
    /// (default [`DNS_KEEP_LAST_GOOD`]).
    pub dns_keep_last_good: Option<Duration>,
    /// `--probe.peers-file FILE`.
    pub file: Option<PathBuf>,
    /// Port for DNS addresses without an SRV port and for file targets without a port.
    pub default_port: u16,
    /// This engine's listen address: peers at it are this engine.
    pub listen: Option<SocketAddr>,
    /// This host's own labels (`--probe.rack`); override those from the file.
    pub own_labels: BTreeMap<String, String>,
    /// The process's async runtime, which DNS lookups run on (rdmad passes its one runtime).
    /// `None`: a program without one; the DNS source then builds its own.
    pub runtime: Option<tokio::runtime::Handle>,
}

/// A parsed file_sd document: the good entries and a description of each bad one.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FileSd {
    /// `(target, labels)` of every valid target.
    pub targets: Vec<(String, Labels)>,
    /// One message per skipped entry.
    pub invalid: Vec<String>,
}

/// Turn `HOST:PORT` (or `HOST` with `default_port`) into the canonical key, or say why not.
pub fn canonical_target(text: &str, default_port: Option<u16>) -> Result<String, TargetError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(TargetError::Empty);
    }
    if let Ok(sa) = t.parse::<SocketAddr>() {
        if sa.port() == 0 {
            return Err(TargetError::PortZero(t.to_string()));
        }
        return Ok(sa.to_string());
    }
    if let Ok(ip) = t.parse::<IpAddr>() {
        let port = default_port.ok_or_else(|| TargetError::NoPort(t.to_string()))?;
        return Ok(SocketAddr::new(ip, port).to_string());
    }
    let (host, port) =
        match t.rsplit_once(':') {
            Some((h, p)) => {
                let port = p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
                    TargetError::BadPort {
                        target: t.to_string(),
                        port: p.to_string(),
                    }
                })?;
                (h, port)
            }
            None => (
                t,
                default_port.ok_or_else(|| TargetError::NoPort(t.to_string()))?,
            ),
        };
    let valid_name = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    if !valid_name {
        return Err(TargetError::BadHost {
            target: t.to_string(),
            host: host.to_string(),
        });
    }
    Ok(format!("{}:{port}", host.to_ascii_lowercase()))
}

/// Parse a file_sd document (`json`: JSON, else YAML). An unparsable document or one whose
/// top level is not a list is an error; bad groups, targets and labels are skipped.
pub fn parse_file_sd(text: &str, json: bool, default_port: u16) -> Result<FileSd, FileSdError> {
    let doc: Value = if json {
        serde_json::from_str(text).map_err(FileSdError::Json)?
    } else if text.trim().is_empty() {
        Value::Array(Vec::new())
    } else {
        serde_yaml_ng::from_str(text).map_err(FileSdError::Yaml)?
    };
    let Value::Array(groups) = doc else {
        return Err(FileSdError::NotAList);
    };
    let mut out = FileSd::default();
    for (g, group) in groups.iter().enumerate() {
        let Value::Object(fields) = group else {
            out.invalid.push(format!("group {g}: not an object"));
            continue;
        };
        let mut labels = BTreeMap::new();
        match fields.get("labels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    let name_ok = !k.is_empty()
                        && !k.starts_with("__")
                        && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                        && !k.as_bytes()[0].is_ascii_digit();
                    match v {
                        Value::String(s) if name_ok => {
                            labels.insert(k.clone(), s.clone());
                        }
                        _ if !name_ok => out
                            .invalid
                            .push(format!("group {g}: label `{k}`: not a label name")),
                        _ => out
                            .invalid
                            .push(format!("group {g}: label `{k}`: the value is not a string")),
                    }
                }
            }
            Some(_) => {
                out.invalid
                    .push(format!("group {g}: `labels` is not a map; group skipped"));
                continue;
            }
        }
        let labels: Labels = Arc::new(labels);
        let Some(Value::Array(targets)) = fields.get("targets") else {
            out.invalid
                .push(format!("group {g}: no `targets` list; group skipped"));
            continue;
        };
        for t in targets {
            match t {
                Value::String(s) => match canonical_target(s, Some(default_port)) {
                    Ok(key) => out.targets.push((key, labels.clone())),
                    Err(e) => out.invalid.push(format!("group {g}: {e}")),
                },
                other => out
                    .invalid
                    .push(format!("group {g}: target {other} is not a string")),
            }
        }
    }
    Ok(out)
}

/// The addresses of this machine's interfaces.
fn local_ips() -> BTreeSet<IpAddr> {
    let mut out: BTreeSet<IpAddr> = BTreeSet::new();
    if let Ok(list) = nix::ifaddrs::getifaddrs() {
        for a in list {
            let Some(addr) = a.address else { continue };
            if let Some(v4) = addr.as_sockaddr_in() {
                out.insert(IpAddr::V4(v4.ip()));
            } else if let Some(v6) = addr.as_sockaddr_in6() {
                out.insert(IpAddr::V6(v6.ip()));
            }
        }
    }
    out
}

/// Whether `key` (canonical `HOST:PORT`) is the listener at `listen` on a machine with
/// `ips`. Host names are not resolved here (the handshake's GID check covers them).
pub fn is_own_address(key: &str, listen: Option<SocketAddr>, ips: &BTreeSet<IpAddr>) -> bool {
    let (Some(listen), Ok(target)) = (listen, key.parse::<SocketAddr>()) else {
        return false;
    };
    if target.port() != listen.port() {
        return false;
    }
    if listen.ip().is_unspecified() {
        let ip = target.ip();
        ip.is_unspecified() || ip.is_loopback() || ips.contains(&ip)
    } else {
        target.ip() == listen.ip()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
    ino: u64,
}

/// What DNS lookups run on: the process's runtime, or one of the source's own.
enum Lookups {
    Shared(tokio::runtime::Handle),
    Own(tokio::runtime::Runtime),
}

impl Lookups {
    /// Run `f` on the runtime for at most `limit`; `None` when it did not finish in time (or
    /// the process's runtime is shutting down: its task is cancelled, nothing panics). Called
    /// from the discovery thread, never from inside the runtime.
    fn run<F>(&self, limit: Duration, f: F) -> Option<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match self {
            Lookups::Shared(handle) => {
                let (tx, rx) = std::sync::mpsc::sync_channel(1);
                handle.spawn(async move {
                    if let Ok(out) = tokio::time::timeout(limit, f).await {
                        let _ = tx.send(out);
                    }
                });
                // The task's own timeout ends it; this one is the margin for a runtime too
                // busy to poll it.
                rx.recv_timeout(limit + Duration::from_secs(1)).ok()
            }
            // The timer is made inside the runtime (a sleep needs its context).
            Lookups::Own(runtime) => runtime
                .block_on(async { tokio::time::timeout(limit, f).await })
                .ok(),
        }
    }
}

struct DnsSource {
    name: String,
    runtime: Lookups,
    resolver: hickory_resolver::TokioResolver,
    /// The last good answer: `(address, port)` keys.
    last: Vec<String>,
    /// When it came.
    last_at: Option<std::time::Instant>,
    /// The longest a refresh waits for the resolver: a lookup its own timeouts do not end
    /// fails then (an engine test against a server that accepts TCP and never answers
    /// once sat in one lookup for over 13 minutes).
    limit: Duration,
}

/// The discovery state kept between refreshes (one per engine).
pub struct Discovery {
    cfg: DiscoveryConfig,
    dns: Option<DnsSource>,
    file_stamp: Option<FileStamp>,
    file_last: Vec<(String, Labels)>,
    file_invalid: u64,
    stats: DiscoveryStats,
    logged: HashSet<String>,
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery")
            .field("dns", &self.cfg.dns_name)
            .field("file", &self.cfg.file)
            .field("static", &self.cfg.static_peers.len())
            .finish()
    }
}

impl Discovery {
    /// Set up the sources (nothing is resolved or read until [`Discovery::refresh`]). A
    /// resolver that cannot be set up is counted as a `dns`/`setup` error on each refresh.
    pub fn new(cfg: DiscoveryConfig) -> Discovery {
        let mut d = Discovery {
            dns: None,
            file_stamp: None,
            file_last: Vec::new(),
            file_invalid: 0,
            stats: DiscoveryStats::default(),
            logged: HashSet::new(),
            cfg,
        };
        if let Some(name) = d.cfg.dns_name.clone() {
            match dns_source(&name, &d.cfg) {
                Ok(s) => d.dns = Some(s),
                Err(e) => d.log_once("dns", &format!("--probe.peers-dns {name}: {e}")),
            }
        }
        d
    }

    /// Counters and gauges of the last refresh.
    pub fn stats(&self) -> &DiscoveryStats {
        &self.stats
    }

    fn log_once(&mut self, source: &str, message: &str) {
        if self.logged.len() < MAX_LOGGED && self.logged.insert(message.to_string()) {
            tracing::warn!(source, "peer discovery: {message}");
        }
    }

    fn error(&mut self, source: &str, reason: &str, message: &str) {
        *self
            .stats
            .errors_total
            .entry((source.to_string(), reason.to_string()))
            .or_insert(0) += 1;
        self.log_once(source, message);
    }

    /// Ask every source again and merge: static, then DNS, then the file (whose labels win).
    pub fn refresh(&mut self) -> PeerSet {
        let ips = local_ips();
        let mut merged: BTreeMap<String, Peer> = BTreeMap::new();
        let mut add = |key: String, labels: &Labels| {
            let e = merged.entry(key.clone()).or_insert_with(|| Peer {
                addr: key,
                labels: Labels::default(),
            });
            if e.labels.is_empty() {
                e.labels = Arc::clone(labels);
            } else if !labels.is_empty() {
                Arc::make_mut(&mut e.labels)
                    .extend(labels.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        };
        let none = Labels::default();
        let mut counts: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut invalid: BTreeMap<String, u64> = BTreeMap::new();

        let statics = self.cfg.static_peers.clone();
        for s in &statics {
            match canonical_target(s, None) {
                Ok(k) => {
                    counts.entry("static".into()).or_default().insert(k.clone());
                    add(k, &none);
                }
                Err(e) => {
                    *invalid.entry("static".into()).or_insert(0) += 1;
                    self.log_once("static", &format!("--probe.peer {e}; skipped"));
                }
            }
        }
        if self.cfg.dns_name.is_some() {
            counts.entry("dns".into()).or_default();
            for k in self.refresh_dns() {
                counts.entry("dns".into()).or_default().insert(k.clone());
                add(k, &none);
            }
        }
        if self.cfg.file.is_some() {
            counts.entry("file".into()).or_default();
            self.refresh_file();
            invalid.insert("file".into(), self.file_invalid);
            for (k, labels) in &self.file_last {
                counts.entry("file".into()).or_default().insert(k.clone());
                add(k.clone(), labels);
            }
        }

        let mut set = PeerSet::default();
        let mut own_from_file = BTreeMap::new();
        for (key, peer) in merged {
            if is_own_address(&key, self.cfg.listen, &ips) {
                own_from_file.extend(peer.labels.as_ref().clone());
                set.own_addrs.insert(key);
            } else {
                set.peers.insert(key, peer);
            }
        }
        set.own_labels = own_from_file;
        set.own_labels.extend(self.cfg.own_labels.clone());
        self.stats.peers = counts
            .into_iter()
            .map(|(source, keys)| {
                let n = keys.iter().filter(|k| !set.own_addrs.contains(*k)).count();
                (source, n as u64)
            })
            .collect();
        self.stats.invalid_entries = invalid;
        set
    }

    fn refresh_file(&mut self) {
        let Some(path) = self.cfg.file.clone() else {
            return;
        };
        let shown = path.display().to_string();
        let meta = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(e) => {
                // A deleted file has no targets (as in Prometheus' file_sd).
                self.error(
                    "file",
                    "missing",
                    &format!("--probe.peers-file {shown}: {e}"),
                );
                self.file_stamp = None;
                self.file_last.clear();
                self.file_invalid = 0;
                return;
            }
        };
        let stamp = FileStamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            ino: std::os::unix::fs::MetadataExt::ino(&meta),
        };
        if self.file_stamp.as_ref() == Some(&stamp) {
            return;
        }
        // Bounded read: a file_sd document of 10,000 targets is well under 4 MiB.
        let text = match read_limited(&path, 16 << 20) {
            Ok(t) => t,
            Err(e) => {
                self.error("file", "read", &format!("--probe.peers-file {shown}: {e}"));
                return;
            }
        };
        let json = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"));
        match parse_file_sd(&text, json, self.cfg.default_port) {
            Ok(sd) => {
                for why in &sd.invalid {
                    self.log_once(
                        "file",
                        &format!("--probe.peers-file {shown}: {why}; skipped"),
                    );
                }
                self.file_invalid = sd.invalid.len() as u64;
                self.file_last = sd.targets;
                self.file_stamp = Some(stamp);
                tracing::info!(
                    file = %shown,
                    targets = self.file_last.len(),
                    skipped = self.file_invalid,
                    "peers file read"
                );
            }
            Err(e) => {
                // Keep the last good targets; try again when the file changes.
                self.file_stamp = Some(stamp);
                self.error(
                    "file",
                    "parse",
                    &format!("--probe.peers-file {shown}: {e}; keeping the previous peers"),
                );
            }
        }
    }

    fn refresh_dns(&mut self) -> Vec<String> {
        let name = self.cfg.dns_name.clone().unwrap_or_default();
        let default_port = self.cfg.default_port;
        let Some(dns) = self.dns.as_mut() else {
            self.error(
                "dns",
                "setup",
                &format!("--probe.peers-dns {name}: no resolver"),
            );
            return Vec::new();
        };
        dns.resolver.clear_cache();
        let limit = dns.limit;
        let (resolver, dns_name) = (dns.resolver.clone(), dns.name.clone());
        let outcome = dns
            .runtime
            .run(limit, async move {
                resolve(&resolver, &dns_name, default_port).await
            })
            .unwrap_or_else(|| {
                Err(DnsError::Failed(format!(
                    "no answer within {} ms",
                    limit.as_millis()
                )))
            });
        match outcome {
            Ok(keys) => {
                dns.last = keys.clone();
                dns.last_at = Some(std::time::Instant::now());
                keys
            }
            Err(DnsError::NoRecords(e)) => {
                dns.last.clear();
                dns.last_at = None;
                self.error(
                    "dns",
                    "no_records",
                    &format!("--probe.peers-dns {name}: {e}; no DNS peers"),
                );
                Vec::new()
            }
            Err(DnsError::Failed(e)) => {
                let keep = self.cfg.dns_keep_last_good.unwrap_or(DNS_KEEP_LAST_GOOD);
                let fresh = dns.last_at.is_some_and(|t| t.elapsed() < keep);
                if fresh {
                    let last = dns.last.clone();
                    self.error(
                        "dns",
                        "resolve",
                        &format!(
                            "--probe.peers-dns {name}: {e}; keeping the last good answer for up to {} s",
                            keep.as_secs()
                        ),
                    );
                    return last;
                }
                let had = dns.last.len();
                dns.last.clear();
                dns.last_at = None;
                self.error("dns", "resolve", &format!("--probe.peers-dns {name}: {e}"));
                if had > 0 {
                    self.log_once(
                        "dns",
                        &format!(
                            "--probe.peers-dns {name}: unresolvable for longer than {} s: its {had} peers are dropped until it resolves again",
                            keep.as_secs()
                        ),
                    );
                }
                Vec::new()
            }
        }
    }
}

fn read_limited(path: &std::path::Path, limit: u64) -> std::io::Result<String> {
    use std::io::Read;
    let mut s = String::new();
    std::fs::File::open(path)?
        .take(limit)
        .read_to_string(&mut s)?;
    Ok(s)
}

fn dns_source(name: &str, cfg: &DiscoveryConfig) -> Result<DnsSource, DnsSetupError> {
    let (server, timeout) = (cfg.dns_server, cfg.dns_timeout);
    use hickory_resolver::config::{
        LookupIpStrategy, NameServerConfigGroup, ResolveHosts, ResolverConfig, ResolverOpts,
    };
    use hickory_resolver::name_server::TokioConnectionProvider;
    use hickory_resolver::Resolver;
    let runtime = match &cfg.runtime {
        Some(handle) => Lookups::Shared(handle.clone()),
        None => Lookups::Own(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(DnsSetupError::Runtime)?,
        ),
    };
    let mut builder = match server {
        Some(addr) => Resolver::builder_with_config(
            ResolverConfig::from_parts(
                None,
                vec![],
                NameServerConfigGroup::from_ips_clear(&[addr.ip()], addr.port(), true),
            ),
            TokioConnectionProvider::default(),
        ),
        None => Resolver::builder_tokio().map_err(DnsSetupError::ResolvConf)?,
    };
    let opts: &mut ResolverOpts = builder.options_mut();
    opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
    opts.use_hosts_file = ResolveHosts::Never;
    opts.timeout = timeout.unwrap_or(Duration::from_secs(2));
    opts.attempts = 2;
    // Two attempts at the name's lookups, two at its SRV targets', and one spare.
    let limit = opts.timeout * 5;
    // A short name ("rdmad") is tried with the search domains; a full one as it is.
    let resolver = builder.build();
    Ok(DnsSource {
        name: name.to_string(),
        runtime,
        resolver,
        last: Vec::new(),
        last_at: None,
        limit,
    })
}

enum DnsError {
    NoRecords(String),
    Failed(String),
}

fn classify(e: &hickory_resolver::ResolveError) -> DnsError {
    if e.is_no_records_found() || e.is_nx_domain() {
        DnsError::NoRecords(e.to_string())
    } else {
        DnsError::Failed(e.to_string())
    }
}

/// Every address of `name` with its port from `_rdmad-probe._tcp.NAME`, as canonical keys.
async fn resolve(
    resolver: &hickory_resolver::TokioResolver,
    name: &str,
    default_port: u16,
) -> Result<Vec<String>, DnsError> {
    let srv_name = format!("{SRV_PREFIX}{name}");
    let (ips, srv) = tokio::join!(resolver.lookup_ip(name), resolver.srv_lookup(srv_name));
    let ips: Vec<IpAddr> = ips.map_err(|e| classify(&e))?.iter().collect();
    // (target, port) of the SRV records; none (or a failed lookup) means the default port.
    let srv: Vec<(String, u16)> = match srv {
        Ok(l) => l
            .iter()
            .map(|r| (r.target().to_ascii(), r.port()))
            .collect(),
        Err(_) => Vec::new(),
    };
    let ports: BTreeSet<u16> = srv.iter().map(|(_, p)| *p).collect();
    let mut by_ip: BTreeMap<IpAddr, u16> = BTreeMap::new();
    let fallback = match ports.len() {
        0 => default_port,
        1 => *ports.iter().next().expect("one port"),
        _ => {
            // Ports differ: map each target's addresses to its port; the most common port
            // for the rest.
            let mut freq: BTreeMap<u16, usize> = BTreeMap::new();
            for (target, port) in srv.iter().take(MAX_SRV_TARGET_LOOKUPS) {
                *freq.entry(*port).or_insert(0) += 1;
                if let Ok(l) = resolver.lookup_ip(target.as_str()).await {
                    for ip in l.iter() {
                        by_ip.insert(ip, *port);
                    }
                }
            }
            freq.into_iter()
                .max_by_key(|(_, n)| *n)
                .map_or(default_port, |(p, _)| p)
        }
    };
    let mut keys: Vec<String> = ips
        .into_iter()
        .map(|ip| SocketAddr::new(ip, by_ip.get(&ip).copied().unwrap_or(fallback)).to_string())
        .collect();
    keys.sort();
    keys.dedup();
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_canonical_or_refused_with_a_reason() {
        assert_eq!(
            canonical_target("10.0.0.2:9736", None).unwrap(),
            "10.0.0.2:9736"
        );
        assert_eq!(
            canonical_target(" 10.0.0.2 ", Some(7)).unwrap(),
            "10.0.0.2:7"
        );
        assert_eq!(
            canonical_target("[fd00::2]:9736", None).unwrap(),
            "[fd00::2]:9736"
        );
        assert_eq!(canonical_target("fd00::2", Some(9)).unwrap(), "[fd00::2]:9");
        assert_eq!(canonical_target("H2.Lab:80", None).unwrap(), "h2.lab:80");
        assert_eq!(canonical_target("h2.lab", Some(81)).unwrap(), "h2.lab:81");
        for bad in [
            "",
            "h2:0",
            "h2:99999",
            "h2:x",
            "bad host:1",
            "a..b:1",
            ":80",
        ] {
            assert!(canonical_target(bad, Some(1)).is_err(), "{bad:?} accepted");
        }
        assert!(canonical_target("h2.lab", None)
            .unwrap_err()
            .to_string()
            .contains("no port"));
    }

    #[test]
    fn own_address_is_the_listen_port_on_a_local_address() {
        let ips: BTreeSet<IpAddr> = ["10.2.0.1".parse().unwrap()].into();
        let any: SocketAddr = "0.0.0.0:9736".parse().unwrap();
        assert!(is_own_address("10.2.0.1:9736", Some(any), &ips));
        assert!(is_own_address("127.0.0.1:9736", Some(any), &ips));
        assert!(
            !is_own_address("10.2.0.1:9737", Some(any), &ips),
            "another port"
        );
        assert!(
            !is_own_address("10.2.0.2:9736", Some(any), &ips),
            "another host"
        );
        assert!(
            !is_own_address("h1.lab:9736", Some(any), &ips),
            "names: the GID check"
        );
        assert!(!is_own_address("10.2.0.1:9736", None, &ips), "no listener");
        let one: SocketAddr = "10.1.0.1:9736".parse().unwrap();
        assert!(is_own_address("10.1.0.1:9736", Some(one), &ips));
        assert!(
            !is_own_address("10.1.0.2:9736", Some(one), &ips),
            "a second engine on another local address is a peer"
        );
    }
}
