//! `rdmactl mesh`: the pingmesh as a matrix (typical latency, loss by direction, the layer a
//! pair fails at) and the localization's verdicts: which host, which path, which direction,
//! and since when ("h2: egress loss 31% on 3 of 3 pairs since 12:03:10", "h1<->h3: path down
//! (host), h2 reaches both").
//!
//! Two sources, one verdict code:
//! - `--prometheus URL`: the recording rules of dashboards/rules/rdma.rules.yml
//!   (`rdma:probe_pair_status`, `rdma:probe_pair_loss_direction:ratio30s`, the typical
//!   latency) through the HTTP API, and the firing alerts for "since";
//! - `--target [NAME=]URL` (repeated): each rdmad's `/metrics`, scraped twice `--interval`
//!   apart (loss is the counters' increase in between).
//!
//! The classification is the rules' (dashboards/gen.py), with the same thresholds
//! (dashboards/pingmesh.toml, compiled in): a failing pair's fault is its layer
//! (rdma_probe_peer_status: agent, host, rdma) or its lossy direction, read from the target's
//! side (request loss = its ingress, reply loss = its egress) and from the prober's (request
//! loss = its egress); a host is the culprit when at least `min_counterparts`, and more than
//! half, of its counterparts see the same fault, in three passes (targets; probers leaving
//! those targets out; targets leaving those probers out); what no culprit host explains is a
//! path. Latency baselines need the day of history only Prometheus has: the direct mode shows
//! latency and leaves latency verdicts to the rules.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rdmakit::exposition::{self, Exposition};
use rdmakit::scrape::{ScrapeConfig, Scraper};
use serde::{Deserialize, Serialize};

/// Exit code when a fault is named.
pub const FAULT_FOUND: u8 = 4;

/// The thresholds the rules use too (dashboards/gen.py reads the same file).
const THRESHOLDS_TOML: &str = include_str!("../../../dashboards/pingmesh.toml");

/// The localization's thresholds (dashboards/pingmesh.toml).
#[derive(Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// A pair is lossy in one direction above this share of its probes.
    pub loss_ratio: f64,
    /// The rules' loss window, seconds.
    pub window_seconds: u64,
    /// A culprit host needs at least this many counterparts agreeing (and more than half).
    pub min_counterparts: usize,
    /// Latency: slow above this factor of the pair's baseline...
    pub latency_factor: f64,
    /// ...and this many seconds above it.
    pub latency_min_delta_seconds: f64,
}

/// The compiled-in thresholds.
pub fn thresholds() -> Result<Thresholds> {
    toml::from_str(THRESHOLDS_TOML).context("dashboards/pingmesh.toml (compiled in)")
}

/// Colour of the matrix.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Color {
    /// On a terminal, unless NO_COLOR is set.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

/// Where the pingmesh comes from: `rdmactl mesh` and `rdmactl top` take the same options.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Source {
    /// Read the pingmesh from this Prometheus (one that runs dashboards/rules/rdma.rules.yml).
    #[arg(long, value_name = "URL", conflicts_with = "targets")]
    pub prometheus: Option<String>,
    /// Scrape this rdmad's /metrics directly; repeat for every host. NAME (default: the URL's
    /// host) is how the verdicts call the host, and should be what its peers call it.
    #[arg(long = "target", value_name = "[NAME=]URL")]
    pub targets: Vec<String>,
    /// Call the peer at address ADDR (without the port) NAME, as the rules' peer_host label.
    #[arg(long = "peer-name", value_name = "ADDR=NAME")]
    pub peer_names: Vec<String>,
}

impl Source {
    /// Whether a Prometheus or a target was given.
    pub fn is_set(&self) -> bool {
        self.prometheus.is_some() || !self.targets.is_empty()
    }
}

/// Seconds between the two scrapes of every rdmad (direct mode), by default.
pub const DEFAULT_INTERVAL: f64 = 10.0;

/// Arguments of `rdmactl mesh`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Exit codes: 0 no fault, 4 a fault named (the verdicts), 1 an error \
    (e.g. no rdmad or Prometheus answered)."
)]
pub struct Args {
    /// The pingmesh's source.
    #[command(flatten)]
    pub source: Source,
    /// Seconds between the two scrapes of every rdmad (direct mode).
    #[arg(long, default_value_t = DEFAULT_INTERVAL)]
    pub interval: f64,
    /// Print the matrix and the verdicts as JSON.
    #[arg(long)]
    pub json: bool,
    /// Colour the matrix.
    #[arg(long, value_enum, default_value_t = Color::Auto)]
    pub color: Color,
}

/// One probed pair, as the prober measures it.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Pair {
    /// The probing host.
    pub prober: String,
    /// The probed host.
    pub target: String,
    /// rdma_probe_peer_status: 0 ok, 1 agent, 2 host, 3 rdma.
    pub status: u8,
    /// Probes sent in the window (direct mode).
    pub sent: Option<f64>,
    /// Share of the probes lost on the way to the target.
    pub loss_request: Option<f64>,
    /// Share of the probes whose reply was lost on the way back.
    pub loss_reply: Option<f64>,
    /// Typical (median) round trip of the last run, seconds.
    pub latency_typical_seconds: Option<f64>,
}

/// What fails with a pair or a host.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Fault {
    /// The peer's rdmad refuses or is absent.
    Agent,
    /// The host is unreachable (TCP times out).
    Host,
    /// TCP works, UD probes unanswered.
    Rdma,
    /// Packets into the host are lost.
    Ingress,
    /// Packets out of the host are lost.
    Egress,
}

impl Fault {
    fn layer(status: u8) -> Option<Fault> {
        match status {
            1 => Some(Fault::Agent),
            2 => Some(Fault::Host),
            3 => Some(Fault::Rdma),
            _ => None,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Fault::Agent => "agent",
            Fault::Host => "host",
            Fault::Rdma => "rdma",
            Fault::Ingress => "ingress",
            Fault::Egress => "egress",
        }
    }
    fn is_loss(self) -> bool {
        matches!(self, Fault::Ingress | Fault::Egress)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Side {
    Target,
    Prober,
}

fn lossy(ratio: Option<f64>, t: &Thresholds) -> bool {
    ratio.is_some_and(|r| r > t.loss_ratio)
}

/// The pair's faults as `side` sees them.
fn faults(p: &Pair, side: Side, t: &Thresholds) -> Vec<Fault> {
    if let Some(f) = Fault::layer(p.status) {
        return vec![f];
    }
    let (req, rep) = match side {
        Side::Target => (Fault::Ingress, Fault::Egress),
        Side::Prober => (Fault::Egress, Fault::Ingress),
    };
    let mut out = Vec::new();
    if lossy(p.loss_request, t) {
        out.push(req);
    }
    if lossy(p.loss_reply, t) {
        out.push(rep);
    }
    out
}

/// (host, fault) -> (counterparts seeing it, counterparts) for the hosts `end` names, over the
/// pairs `keep` admits, where the fault has a majority.
fn culprits(
    pairs: &[Pair],
    side: Side,
    keep: impl Fn(&Pair) -> bool,
    t: &Thresholds,
) -> BTreeMap<(String, Fault), (usize, usize)> {
    let end = |p: &Pair| match side {
        Side::Target => p.target.clone(),
        Side::Prober => p.prober.clone(),
    };
    let mut total: BTreeMap<String, usize> = BTreeMap::new();
    let mut count: BTreeMap<(String, Fault), usize> = BTreeMap::new();
    for p in pairs.iter().filter(|p| keep(p)) {
        *total.entry(end(p)).or_default() += 1;
        for f in faults(p, side, t) {
            *count.entry((end(p), f)).or_default() += 1;
        }
    }
    count
        .into_iter()
        .filter_map(|((h, f), c)| {
            let n = total[&h];
            (c >= t.min_counterparts && 2 * c > n).then_some(((h, f), (c, n)))
        })
        .collect()
}

/// A named fault: a culprit host or a path.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct Verdict {
    /// "host" or "path".
    pub kind: &'static str,
    /// The alert of dashboards/rules/rdma.rules.yml that says the same.
    pub alert: &'static str,
    /// The culprit host (kind host).
    pub host: Option<String>,
    /// The path's ends: for loss, the lossy leg goes a -> b (kind path).
    pub a: Option<String>,
    /// See `a`.
    pub b: Option<String>,
    /// Both directions of the path fail (kind path, down).
    pub two_way: bool,
    /// The layer or the direction.
    pub fault: Fault,
    /// Mean loss of the failing pairs in that direction (loss faults).
    pub loss: Option<f64>,
    /// Counterparts that see the fault (kind host).
    pub pairs_failing: usize,
    /// Counterparts (kind host).
    pub pairs_total: usize,
    /// Hosts that reach both ends of a path.
    pub witnesses: Vec<String>,
    /// When the alert became active (Prometheus mode), RFC 3339.
    pub since: Option<String>,
    /// The verdict in words.
    pub text: String,
}

fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// The verdicts of the localization on `pairs`.
pub fn verdicts(pairs: &[Pair], t: &Thresholds) -> Vec<Verdict> {
    let raw = culprits(pairs, Side::Target, |_| true, t);
    let raw_hosts: BTreeSet<String> = raw.keys().map(|(h, _)| h.clone()).collect();
    let probers = culprits(pairs, Side::Prober, |p| !raw_hosts.contains(&p.target), t);
    let prober_hosts: BTreeSet<String> = probers.keys().map(|(h, _)| h.clone()).collect();
    let targets = culprits(
        pairs,
        Side::Target,
        |p| !prober_hosts.contains(&p.prober),
        t,
    );
    let mut hosts: BTreeMap<(String, Fault), (usize, usize)> = targets;
    for (k, v) in probers {
        let e = hosts.entry(k).or_insert(v);
        if v.0 > e.0 {
            *e = v;
        }
    }
    let culprit_hosts: BTreeSet<String> = hosts.keys().map(|(h, _)| h.clone()).collect();
    let mut out = Vec::new();
    for ((host, fault), (failing, total)) in &hosts {
        // The loss of the pairs that show it: as target (request = ingress) and as prober.
        let mut ratios = Vec::new();
        for p in pairs {
            let (req, rep) = (p.loss_request, p.loss_reply);
            let r = match (fault, &p.target == host, &p.prober == host) {
                (Fault::Ingress, true, _) => req,
                (Fault::Egress, true, _) => rep,
                (Fault::Ingress, _, true) => rep,
                (Fault::Egress, _, true) => req,
                _ => None,
            };
            if let Some(r) = r.filter(|&r| r > t.loss_ratio && p.status == 0) {
                ratios.push(r);
            }
        }
        let loss = if fault.is_loss() { mean(&ratios) } else { None };
        let (alert, what) = match fault {
            Fault::Host => ("RdmaHostUnreachable", "unreachable (host)".to_string()),
            Fault::Agent => (
                "RdmaAgentDown",
                "rdmad refuses or is absent (agent)".to_string(),
            ),
            Fault::Rdma => (
                "RdmaHostRdmaDown",
                "RDMA does not answer (rdma)".to_string(),
            ),
            Fault::Ingress | Fault::Egress => (
                "RdmaHostLinkLossy",
                format!("{} loss {:.0}%", fault.name(), loss.unwrap_or(0.0) * 100.0),
            ),
        };
        out.push(Verdict {
            kind: "host",
            alert,
            host: Some(host.clone()),
            a: None,
            b: None,
            two_way: false,
            fault: *fault,
            loss,
            pairs_failing: *failing,
            pairs_total: *total,
            witnesses: Vec::new(),
            since: None,
            text: format!("{host}: {what} on {failing} of {total} pairs"),
        });
    }
    // Paths: what no culprit host explains.
    let ok = |a: &str, b: &str| {
        pairs
            .iter()
            .any(|p| p.prober == a && p.target == b && faults(p, Side::Target, t).is_empty())
    };
    let hosts_all: BTreeSet<&str> = pairs
        .iter()
        .flat_map(|p| [p.prober.as_str(), p.target.as_str()])
        .collect();
    let witnesses = |a: &str, b: &str| -> Vec<String> {
        hosts_all
            .iter()
            .filter(|&&c| c != a && c != b && ok(c, a) && ok(c, b))
            .map(|c| c.to_string())
            .collect()
    };
    let mut down: BTreeMap<(String, String), Fault> = BTreeMap::new();
    let mut legs: BTreeMap<(String, String), f64> = BTreeMap::new();
    for p in pairs {
        if culprit_hosts.contains(&p.prober) || culprit_hosts.contains(&p.target) {
            continue;
        }
        for f in faults(p, Side::Target, t) {
            match f {
                Fault::Ingress => {
                    let e = legs
                        .entry((p.prober.clone(), p.target.clone()))
                        .or_default();
                    *e = e.max(p.loss_request.unwrap_or(0.0));
                }
                Fault::Egress => {
                    let e = legs
                        .entry((p.target.clone(), p.prober.clone()))
                        .or_default();
                    *e = e.max(p.loss_reply.unwrap_or(0.0));
                }
                layer => {
                    down.insert((p.prober.clone(), p.target.clone()), layer);
                }
            }
        }
    }
    let mut done = BTreeSet::new();
    for ((a, b), layer) in &down {
        if done.contains(&(a.clone(), b.clone())) {
            continue;
        }
        let two_way = down.get(&(b.clone(), a.clone())) == Some(layer);
        let (a, b) = if two_way && b < a { (b, a) } else { (a, b) };
        done.insert((a.clone(), b.clone()));
        done.insert((b.clone(), a.clone()));
        let w = witnesses(a, b);
        let arrow = if two_way { "<->" } else { "->" };
        let mut text = format!("{a}{arrow}{b}: path down ({})", layer.name());
        if !w.is_empty() {
            text += &format!(
                ", {} reach{} both",
                w.join(" and "),
                if w.len() == 1 { "es" } else { "" }
            );
        }
        out.push(Verdict {
            kind: "path",
            alert: "RdmaPathDown",
            host: None,
            a: Some(a.clone()),
            b: Some(b.clone()),
            two_way,
            fault: *layer,
            loss: None,
            pairs_failing: 0,
            pairs_total: 0,
            witnesses: w,
            since: None,
            text,
        });
    }
    for ((a, b), loss) in &legs {
        let w = witnesses(a, b);
        let mut text = format!("{a}->{b}: loss {:.0}% on the way", loss * 100.0);
        if !w.is_empty() {
            text += &format!(
                ", {} reach{} both",
                w.join(" and "),
                if w.len() == 1 { "es" } else { "" }
            );
        }
        out.push(Verdict {
            kind: "path",
            alert: "RdmaPathLossy",
            host: None,
            a: Some(a.clone()),
            b: Some(b.clone()),
            two_way: false,
            fault: Fault::Egress,
            loss: Some(*loss),
            pairs_failing: 0,
            pairs_total: 0,
            witnesses: w,
            since: None,
            text,
        });
    }
    out
}

/// What `rdmactl mesh` prints.
#[derive(Serialize, Debug)]
pub struct Report {
    /// "prometheus" or "targets".
    pub source: &'static str,
    /// Every host, sorted.
    pub hosts: Vec<String>,
    /// Every pair.
    pub pairs: Vec<Pair>,
    /// The named faults; empty when the mesh is healthy.
    pub verdicts: Vec<Verdict>,
    /// Targets that could not be scraped (direct mode), with why.
    pub unreachable_targets: Vec<String>,
}

fn strip_port(addr: &str) -> &str {
    match addr.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => addr,
    }
}

/// The host of an http(s) URL.
fn url_host(url: &str) -> &str {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .unwrap_or(url);
    strip_port(rest.split('/').next().unwrap_or(rest))
}

fn name_pairs(specs: &[String], what: &str) -> Result<BTreeMap<String, String>> {
    specs
        .iter()
        .map(|s| match s.split_once('=') {
            Some((k, v)) if !k.is_empty() && !v.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => bail!("{what} {s:?}: expected ADDR=NAME"),
        })
        .collect()
}

/// One rdmad's peer series: peer address -> (status, sent, lost request, lost reply, typical).
#[derive(Default, Debug, Clone)]
struct PeerSeries {
    status: Option<u8>,
    sent: f64,
    lost_request: f64,
    lost_reply: f64,
    typical: Option<f64>,
}

fn peer_series(e: &Exposition) -> BTreeMap<String, PeerSeries> {
    let mut out: BTreeMap<String, PeerSeries> = BTreeMap::new();
    for s in &e.samples {
        let Some(peer) = s.label("peer").filter(|p| !p.is_empty()) else {
            continue;
        };
        let kind_peer = s.label("kind").is_none_or(|k| k == "peer");
        let entry = out.entry(peer.to_string()).or_default();
        match s.name.as_str() {
            "rdma_probe_peer_status" if s.value.is_finite() => {
                let v = s.value.clamp(0.0, 255.0) as u8;
                entry.status = Some(entry.status.map_or(v, |o| o.max(v)));
            }
            "rdma_probe_sent_total" if kind_peer => entry.sent += s.value,
            "rdma_probe_lost_total" if kind_peer => match s.label("direction") {
                Some("reply") => entry.lost_reply += s.value,
                _ => entry.lost_request += s.value,
            },
            "rdma_probe_latency_last_seconds"
                if kind_peer && s.label("stat") == Some("typical") =>
            {
                entry.typical = Some(entry.typical.map_or(s.value, |o| o.max(s.value)));
            }
            _ => {}
        }
    }
    out
}

/// The pairs of one prober from two scrapes of its rdmad (`before`, then `after`).
fn pairs_from_scrapes(
    prober: &str,
    before: &Exposition,
    after: &Exposition,
    peer_names: &BTreeMap<String, String>,
) -> Vec<Pair> {
    let b = peer_series(before);
    let mut out = Vec::new();
    for (peer, now) in peer_series(after) {
        let Some(status) = now.status else { continue };
        let addr = strip_port(&peer);
        let target = peer_names
            .get(addr)
            .cloned()
            .unwrap_or_else(|| addr.to_string());
        let then = b.get(&peer).cloned().unwrap_or_default();
        let sent = now.sent - then.sent;
        // A counter that went down is a restarted rdmad, and a pair down at the window's start
        // lost its probes to that layer (as the rules): no loss figure for this window.
        let was_down = then.status.is_some_and(|s| s > 0);
        let ratio = |lost_now: f64, lost_then: f64| {
            let lost = lost_now - lost_then;
            (sent > 0.0 && lost >= 0.0 && !was_down).then(|| lost / sent)
        };
        out.push(Pair {
            prober: prober.to_string(),
            target,
            status,
            sent: (sent >= 0.0).then_some(sent),
            loss_request: ratio(now.lost_request, then.lost_request),
            loss_reply: ratio(now.lost_reply, then.lost_reply),
            latency_typical_seconds: now.typical,
        });
    }
    out
}

fn fetch(url: &str) -> Result<String> {
    let scraper = Scraper::new(&ScrapeConfig::new(url)).map_err(|e| anyhow::anyhow!("{e}"))?;
    scraper.fetch().map_err(|e| anyhow::anyhow!("{e}"))
}

fn scrape(url: &str) -> Result<Exposition> {
    let text = fetch(url)?;
    exposition::parse(&text).map_err(|e| anyhow::anyhow!("{url}: {e:?}"))
}

/// Direct mode: scrape every target twice.
fn report_from_targets(args: &Source, interval: f64, t: &Thresholds) -> Result<Report> {
    if !(interval > 0.0 && interval <= 3600.0) {
        bail!("--interval must be more than 0 and at most 3600 seconds");
    }
    let peer_names = name_pairs(&args.peer_names, "--peer-name")?;
    let mut targets = Vec::new();
    for spec in &args.targets {
        let (name, url) = match spec.split_once('=') {
            Some((n, u)) if !n.contains("://") => (n.to_string(), u.to_string()),
            _ => (url_host(spec).to_string(), spec.clone()),
        };
        if name.is_empty() {
            bail!("--target {spec:?}: no host name");
        }
        targets.push((name, url));
    }
    let mut unreachable = Vec::new();
    let mut first = Vec::new();
    for (name, url) in &targets {
        match scrape(url) {
            Ok(e) => first.push((name.clone(), url.clone(), e)),
            Err(e) => unreachable.push(format!("{name} ({url}): {e}")),
        }
    }
    if first.is_empty() {
        bail!("no rdmad answered: {}", unreachable.join("; "));
    }
    std::thread::sleep(Duration::from_secs_f64(interval));
    let mut pairs = Vec::new();
    for (name, url, before) in &first {
        match scrape(url) {
            Ok(after) => pairs.extend(pairs_from_scrapes(name, before, &after, &peer_names)),
            Err(e) => unreachable.push(format!("{name} ({url}): {e}")),
        }
    }
    Ok(finish("targets", pairs, unreachable, t))
}

fn finish(
    source: &'static str,
    mut pairs: Vec<Pair>,
    unreachable: Vec<String>,
    t: &Thresholds,
) -> Report {
    pairs.sort_by(|a, b| (&a.prober, &a.target).cmp(&(&b.prober, &b.target)));
    let hosts: BTreeSet<String> = pairs
        .iter()
        .flat_map(|p| [p.prober.clone(), p.target.clone()])
        .collect();
    let verdicts = verdicts(&pairs, t);
    Report {
        source,
        hosts: hosts.into_iter().collect(),
        pairs,
        verdicts,
        unreachable_targets: unreachable,
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An instant query's vector: (labels, value).
fn query(base: &str, q: &str) -> Result<Vec<(BTreeMap<String, String>, f64)>> {
    let url = format!("{base}/api/v1/query?query={}", percent_encode(q));
    let v: serde_json::Value =
        serde_json::from_str(&fetch(&url)?).with_context(|| format!("{url}: not JSON"))?;
    if v["status"] != "success" {
        bail!("{url}: {}", v["error"]);
    }
    let mut out = Vec::new();
    for s in v["data"]["result"].as_array().into_iter().flatten() {
        let labels = s["metric"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        let value = s["value"][1]
            .as_str()
            .and_then(|x| x.parse::<f64>().ok())
            .unwrap_or(f64::NAN);
        out.push((labels, value));
    }
    Ok(out)
}

/// Prometheus mode: the recording rules, and "since" from the firing alerts.
fn report_from_prometheus(base: &str, t: &Thresholds) -> Result<Report> {
    let base = base.trim_end_matches('/');
    let key = |l: &BTreeMap<String, String>| {
        (
            l.get("prober").cloned().unwrap_or_default(),
            l.get("target").cloned().unwrap_or_default(),
        )
    };
    let mut pairs: BTreeMap<(String, String), Pair> = BTreeMap::new();
    for (l, v) in query(base, "rdma:probe_pair_status")? {
        let (prober, target) = key(&l);
        let status = if v.is_finite() {
            v.clamp(0.0, 255.0) as u8
        } else {
            0
        };
        let e = pairs
            .entry((prober.clone(), target.clone()))
            .or_insert(Pair {
                prober,
                target,
                status,
                sent: None,
                loss_request: None,
                loss_reply: None,
                latency_typical_seconds: None,
            });
        e.status = e.status.max(status);
    }
    let loss = format!("rdma:probe_pair_loss_direction:ratio{}s", t.window_seconds);
    for (l, v) in query(base, &loss)? {
        if let Some(p) = pairs.get_mut(&key(&l)) {
            match l.get("direction").map(String::as_str) {
                Some("reply") => p.loss_reply = Some(v),
                _ => p.loss_request = Some(v),
            }
        }
    }
    for (l, v) in query(base, "rdma:probe_pair_latency_seconds:typical")? {
        if let Some(p) = pairs.get_mut(&key(&l)) {
            p.latency_typical_seconds = Some(v);
        }
    }
    let mut report = finish("prometheus", pairs.into_values().collect(), Vec::new(), t);
    let url = format!("{base}/api/v1/alerts");
    let alerts: serde_json::Value =
        serde_json::from_str(&fetch(&url)?).with_context(|| format!("{url}: not JSON"))?;
    for al in alerts["data"]["alerts"].as_array().into_iter().flatten() {
        if al["state"] != "firing" {
            continue;
        }
        let l = &al["labels"];
        let s = |k: &str| l[k].as_str().map(str::to_string);
        for v in report.verdicts.iter_mut() {
            let same = s("alertname").as_deref() == Some(v.alert)
                && match v.kind {
                    "host" => s("host") == v.host,
                    _ => {
                        (s("a"), s("b")) == (v.a.clone(), v.b.clone())
                            || (v.two_way && (s("a"), s("b")) == (v.b.clone(), v.a.clone()))
                    }
                };
            if let (true, Some(at)) = (same, al["activeAt"].as_str()) {
                if v.since.as_deref().is_none_or(|old| at < old) {
                    v.since = Some(at.to_string());
                }
            }
        }
    }
    for v in report.verdicts.iter_mut() {
        // "2026-12-04T12:03:10.123Z" -> "since 12:03:10 UTC"
        if let Some(hms) = v.since.as_deref().and_then(|s| s.get(11..19)) {
            v.text += &format!(" since {hms} UTC");
        }
    }
    Ok(report)
}

/// Build the report from `source`; `interval`: seconds between the two scrapes of every
/// rdmad (direct mode).
pub fn report(source: &Source, interval: f64) -> Result<Report> {
    let t = thresholds()?;
    match (&source.prometheus, source.targets.is_empty()) {
        (Some(url), _) => report_from_prometheus(url, &t),
        (None, false) => report_from_targets(source, interval, &t),
        (None, true) => bail!("give --prometheus URL or at least one --target URL"),
    }
}

fn cell(p: &Pair) -> String {
    if let Some(f) = Fault::layer(p.status) {
        return format!("DOWN {}", f.name());
    }
    let lat = p
        .latency_typical_seconds
        .map_or("-".to_string(), |s| format!("{:.0}us", s * 1e6));
    let pct = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{:.0}%", r * 100.0));
    format!("{lat} {}/{}", pct(p.loss_request), pct(p.loss_reply))
}

/// The matrix and the verdicts as text; `color` adds ANSI colours.
pub fn print_text(r: &Report, t: &Thresholds, color: bool, out: &mut impl Write) -> Result<()> {
    let paint = |s: &str, code: &str| {
        if color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    };
    writeln!(
        out,
        "pingmesh from {}: row = prober, column = target; typical latency, lost requests/replies",
        r.source
    )?;
    let width = r
        .hosts
        .iter()
        .map(|h| h.len())
        .chain(r.pairs.iter().map(|p| cell(p).len()))
        .max()
        .unwrap_or(4)
        .max(6)
        + 2;
    write!(out, "{:width$}", "")?;
    for h in &r.hosts {
        write!(out, "{h:width$}")?;
    }
    writeln!(out)?;
    for row in &r.hosts {
        write!(out, "{row:width$}")?;
        for col in &r.hosts {
            let text = match r
                .pairs
                .iter()
                .find(|p| &p.prober == row && &p.target == col)
            {
                Some(p) => {
                    let s = format!("{:width$}", cell(p));
                    if p.status > 0 {
                        paint(&s, "31")
                    } else if lossy(p.loss_request, t) || lossy(p.loss_reply, t) {
                        paint(&s, "33")
                    } else {
                        paint(&s, "32")
                    }
                }
                None => format!("{:width$}", if row == col { "" } else { "." }),
            };
            write!(out, "{text}")?;
        }
        writeln!(out)?;
    }
    for (line, verdict) in summary(r, t) {
        if verdict {
            writeln!(out, "{}", paint(&line, "1;31"))?;
        } else {
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}

/// The lines under the matrix, as `rdmactl mesh` and `rdmactl top` print them: the targets
/// not scraped, then the verdicts (`true`) or the line saying there is no fault.
pub fn summary(r: &Report, t: &Thresholds) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = r
        .unreachable_targets
        .iter()
        .map(|u| (format!("not scraped: {u}"), false))
        .collect();
    if r.verdicts.is_empty() {
        out.push((
            format!(
                "no fault: every pair answers, no direction loses over {:.0}%",
                t.loss_ratio * 100.0
            ),
            false,
        ));
    }
    out.extend(r.verdicts.iter().map(|v| (v.text.clone(), true)));
    out
}

/// The report as JSON (`--json`).
pub fn print_json(r: &Report, out: &mut impl Write) -> Result<()> {
    serde_json::to_writer_pretty(&mut *out, r)?;
    writeln!(out)?;
    Ok(())
}

/// `rdmactl mesh`.
pub fn run(args: Args) -> Result<ExitCode> {
    let t = thresholds()?;
    let r = report(&args.source, args.interval)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        print_json(&r, &mut out)?;
    } else {
        let color = match args.color {
            Color::Always => true,
            Color::Never => false,
            Color::Auto => {
                std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
            }
        };
        print_text(&r, &t, color, &mut out)?;
    }
    Ok(ExitCode::from(if r.verdicts.is_empty() {
        0
    } else {
        FAULT_FOUND
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// (status, request loss share, reply loss share) of a pair, or None: the prober is not
    /// scraped (its host or its rdmad is down).
    type Fault = fn(&str, &str) -> Option<(u8, f64, f64)>;

    const SENT: u64 = 200; // probes per pair between the two scrapes

    /// One rdmad's exposition as rdmad writes its per-peer series (label order of
    /// rdmad/src/collector/probes.rs: device, port, op, kind, peer, transport, peer_rack; the
    /// status gauge by device, peer, peer_rack), `after` = false: before the window.
    fn exposition(prober: &str, hosts: &[&str], fault: Fault, after: bool) -> Option<String> {
        let mut text = String::new();
        let mut series = Vec::new();
        for &t in hosts.iter().filter(|&&t| t != prober) {
            let (status, req, rep) = fault(prober, t)?;
            let peer = format!("10.2.0.{}:9737", &t[1..]);
            let probe = format!(
                "device=\"rxe0\",port=\"1\",op=\"send\",kind=\"peer\",peer=\"{peer}\",transport=\"ud\",peer_rack=\"\""
            );
            let (sent, lreq, lrep) = if after {
                (
                    1000 + SENT,
                    7 + (SENT as f64 * req) as u64,
                    3 + (SENT as f64 * rep) as u64,
                )
            } else {
                (1000, 7, 3)
            };
            series.push(format!(
                "rdma_probe_peer_status{{device=\"rxe0\",peer=\"{peer}\",peer_rack=\"\"}} {status}"
            ));
            series.push(format!("rdma_probe_sent_total{{{probe}}} {sent}"));
            series.push(format!(
                "rdma_probe_lost_total{{{probe},direction=\"request\"}} {lreq}"
            ));
            series.push(format!(
                "rdma_probe_lost_total{{{probe},direction=\"reply\"}} {lrep}"
            ));
            series.push(format!(
                "rdma_probe_latency_last_seconds{{{probe},stat=\"typical\"}} 2.1e-5"
            ));
        }
        for family in [
            ("rdma_probe_peer_status", "gauge"),
            ("rdma_probe_sent_total", "counter"),
            ("rdma_probe_lost_total", "counter"),
            ("rdma_probe_latency_last_seconds", "gauge"),
        ] {
            text += &format!("# TYPE {} {}\n", family.0, family.1);
            for s in series
                .iter()
                .filter(|s| s.starts_with(&format!("{}{{", family.0)))
            {
                text += s;
                text.push('\n');
            }
        }
        Some(text)
    }

    fn names(hosts: &[&str]) -> BTreeMap<String, String> {
        hosts
            .iter()
            .map(|h| (format!("10.2.0.{}", &h[1..]), h.to_string()))
            .collect()
    }

    fn texts(hosts: &[&str], fault: Fault) -> Vec<String> {
        let t = thresholds().unwrap();
        let mut pairs = Vec::new();
        for &h in hosts {
            let (Some(b), Some(a)) = (
                exposition(h, hosts, fault, false),
                exposition(h, hosts, fault, true),
            ) else {
                continue;
            };
            let (b, a) = (
                exposition::parse(&b).unwrap(),
                exposition::parse(&a).unwrap(),
            );
            pairs.extend(pairs_from_scrapes(h, &b, &a, &names(hosts)));
        }
        verdicts(&pairs, &t).into_iter().map(|v| v.text).collect()
    }

    const H4: &[&str] = &["h1", "h2", "h3", "h4"];
    const H3: &[&str] = &["h1", "h2", "h3"];

    #[test]
    fn thresholds_are_the_rules_ones() {
        let t = thresholds().unwrap();
        assert_eq!(t.loss_ratio, 0.02);
        assert_eq!(t.min_counterparts, 2);
        let rules = include_str!("../../../dashboards/rules/rdma.rules.yml");
        let window = format!("[{}s]", t.window_seconds);
        assert!(rules.contains(&window), "the rules use {window}");
        assert!(rules.contains(&format!("> {}", t.loss_ratio)));
        assert!(rules.contains(&format!(">= {}", t.min_counterparts)));
    }

    #[test]
    fn no_fault_no_verdict() {
        assert!(texts(H4, |_, _| Some((0, 0.0, 0.0))).is_empty());
        assert!(texts(H3, |_, _| Some((0, 0.0, 0.0))).is_empty());
    }

    #[test]
    fn dead_host_is_the_culprit_not_its_pairs() {
        fn down(p: &str, t: &str) -> Option<(u8, f64, f64)> {
            match (p, t) {
                ("h4", _) => None,
                (_, "h4") => Some((2, 1.0, 0.0)),
                _ => Some((0, 0.0, 0.0)),
            }
        }
        assert_eq!(texts(H4, down), ["h4: unreachable (host) on 3 of 3 pairs"]);
        fn down3(p: &str, t: &str) -> Option<(u8, f64, f64)> {
            match (p, t) {
                ("h3", _) => None,
                (_, "h3") => Some((1, 1.0, 0.0)),
                _ => Some((0, 0.0, 0.0)),
            }
        }
        assert_eq!(
            texts(H3, down3),
            ["h3: rdmad refuses or is absent (agent) on 2 of 2 pairs"]
        );
    }

    #[test]
    fn half_the_mesh_down_blames_the_dead_not_the_survivors() {
        // h1 and h2 each fail to 2 of 3 targets (a majority), but those targets go first.
        fn f(p: &str, t: &str) -> Option<(u8, f64, f64)> {
            match (p, t) {
                ("h3" | "h4", _) => None,
                (_, "h3" | "h4") => Some((2, 1.0, 0.0)),
                _ => Some((0, 0.0, 0.0)),
            }
        }
        assert_eq!(
            texts(H4, f),
            [
                "h3: unreachable (host) on 2 of 2 pairs",
                "h4: unreachable (host) on 2 of 2 pairs"
            ]
        );
    }

    #[test]
    fn rdma_down_both_ways_is_the_host() {
        fn f(p: &str, t: &str) -> Option<(u8, f64, f64)> {
            Some(if p == "h3" || t == "h3" {
                (3, 1.0, 0.0)
            } else {
                (0, 0.0, 0.0)
            })
        }
        assert_eq!(
            texts(H4, f),
            ["h3: RDMA does not answer (rdma) on 3 of 3 pairs"]
        );
        assert_eq!(
            texts(H3, f),
            ["h3: RDMA does not answer (rdma) on 2 of 2 pairs"]
        );
    }

    #[test]
    fn egress_and_ingress_loss_name_the_host_and_direction() {
        fn egress(p: &str, t: &str) -> Option<(u8, f64, f64)> {
            Some(match (p, t) {
                (_, "h2") => (0, 0.0, 0.3),
                ("h2", _) => (0, 0.3, 0.0),
                _ => (0, 0.0, 0.0),
            })
        }
        assert_eq!(texts(H4, egress), ["h2: egress loss 30% on 3 of 3 pairs"]);
        assert_eq!(texts(H3, egress), ["h2: egress loss 30% on 2 of 2 pairs"]);
        fn ingress(p: &str, t: &str) -> Option<(u8, f64, f64)> {
            Some(match (p, t) {
                (_, "h2") => (0, 0.2, 0.0),
                ("h2", _) => (0, 0.0, 0.2),
                _ => (0, 0.0, 0.0),
            })
        }
        assert_eq!(texts(H4, ingress), ["h2: ingress loss 20% on 3 of 3 pairs"]);
    }

    #[test]
    fn partition_of_one_pair_is_a_path_not_a_host() {
        fn f(p: &str, t: &str) -> Option<(u8, f64, f64)> {
            Some(match (p, t) {
                ("h1", "h3") | ("h3", "h1") => (2, 1.0, 0.0),
                _ => (0, 0.0, 0.0),
            })
        }
        assert_eq!(
            texts(H4, f),
            ["h1<->h3: path down (host), h2 and h4 reach both"]
        );
        assert_eq!(texts(H3, f), ["h1<->h3: path down (host), h2 reaches both"]);
    }

    #[test]
    fn one_way_loss_is_one_leg() {
        // Half of h1 -> h3 dropped: h1's requests to h3, and h1's replies to h3's probes.
        fn f(p: &str, t: &str) -> Option<(u8, f64, f64)> {
            Some(match (p, t) {
                ("h1", "h3") => (0, 0.5, 0.0),
                ("h3", "h1") => (0, 0.0, 0.5),
                _ => (0, 0.0, 0.0),
            })
        }
        assert_eq!(
            texts(H4, f),
            ["h1->h3: loss 50% on the way, h2 and h4 reach both"]
        );
        assert_eq!(
            texts(H3, f),
            ["h1->h3: loss 50% on the way, h2 reaches both"]
        );
    }

    #[test]
    fn a_pair_down_at_the_start_of_the_window_is_not_lossy_once_up() {
        let before = exposition(
            "h1",
            H3,
            |_, t| {
                Some(if t == "h3" {
                    (2, 1.0, 0.0)
                } else {
                    (0, 0.0, 0.0)
                })
            },
            false,
        )
        .unwrap();
        let after = exposition(
            "h1",
            H3,
            |_, t| {
                Some(if t == "h3" {
                    (0, 0.5, 0.0)
                } else {
                    (0, 0.0, 0.0)
                })
            },
            true,
        )
        .unwrap();
        let pairs = pairs_from_scrapes(
            "h1",
            &exposition::parse(&before).unwrap(),
            &exposition::parse(&after).unwrap(),
            &names(H3),
        );
        let h3 = pairs.iter().find(|p| p.target == "h3").unwrap();
        assert_eq!((h3.status, h3.loss_request), (0, None));
        let h2 = pairs.iter().find(|p| p.target == "h2").unwrap();
        assert_eq!(h2.loss_request, Some(0.0));
    }

    /// A /metrics server on 127.0.0.1: GET /hK/metrics answers hK's exposition before the
    /// window the first time, after it from then on.
    fn serve(hosts: &'static [&'static str], fault: Fault) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: Arc<Vec<AtomicUsize>> =
            Arc::new(hosts.iter().map(|_| AtomicUsize::new(0)).collect());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).unwrap() == 0 || h == "\r\n" {
                        break;
                    }
                }
                let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
                let body = hosts
                    .iter()
                    .position(|h| path == format!("/{h}/metrics"))
                    .and_then(|i| {
                        let n = seen[i].fetch_add(1, Ordering::SeqCst);
                        exposition(hosts[i], hosts, fault, n > 0)
                    });
                let resp = match body {
                    Some(b) => format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{b}",
                        b.len()
                    ),
                    None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into(),
                };
                let _ = conn.write_all(resp.as_bytes());
            }
        });
        port
    }

    #[test]
    fn json_from_rdmads_scraped_over_http() {
        fn egress(p: &str, t: &str) -> Option<(u8, f64, f64)> {
            Some(match (p, t) {
                (_, "h4") => (0, 0.0, 0.3),
                ("h4", _) => (0, 0.3, 0.0),
                _ => (0, 0.0, 0.0),
            })
        }
        let port = serve(H4, egress);
        // A fifth target nobody answers: listed, and the others still give their verdict.
        let dead = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut targets: Vec<String> = H4
            .iter()
            .map(|h| format!("{h}=http://127.0.0.1:{port}/{h}/metrics"))
            .collect();
        targets.push(format!("h5=http://127.0.0.1:{dead}/metrics"));
        let source = Source {
            prometheus: None,
            targets,
            peer_names: (1..=4).map(|k| format!("10.2.0.{k}=h{k}")).collect(),
        };
        let r = report(&source, 0.05).unwrap();
        let mut out = Vec::new();
        print_json(&r, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["source"], "targets");
        assert_eq!(v["hosts"], serde_json::json!(["h1", "h2", "h3", "h4"]));
        let pairs = v["pairs"].as_array().unwrap();
        assert_eq!(pairs.len(), 12);
        let p = pairs
            .iter()
            .find(|p| p["prober"] == "h1" && p["target"] == "h4")
            .unwrap();
        assert_eq!(p["status"], 0);
        assert_eq!(p["sent"], 200.0);
        assert_eq!(p["loss_request"], 0.0);
        assert_eq!(p["loss_reply"], 0.3);
        assert_eq!(p["latency_typical_seconds"], 2.1e-5);
        let verdicts = v["verdicts"].as_array().unwrap();
        assert_eq!(verdicts.len(), 1, "{verdicts:?}");
        assert_eq!(verdicts[0]["kind"], "host");
        assert_eq!(verdicts[0]["alert"], "RdmaHostLinkLossy");
        assert_eq!(verdicts[0]["host"], "h4");
        assert_eq!(verdicts[0]["fault"], "egress");
        assert_eq!(verdicts[0]["pairs_failing"], 3);
        assert_eq!(verdicts[0]["text"], "h4: egress loss 30% on 3 of 3 pairs");
        let un = v["unreachable_targets"].as_array().unwrap();
        assert_eq!(un.len(), 1);
        assert!(un[0].as_str().unwrap().starts_with("h5 "), "{un:?}");
        // The text form: the matrix's h4 column shows the reply loss, plain without colour.
        let mut text = Vec::new();
        print_text(&r, &thresholds().unwrap(), false, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains("21us 0%/30%"), "{text}");
        assert!(!text.contains('\x1b'), "{text}");
        assert!(
            text.ends_with("h4: egress loss 30% on 3 of 3 pairs\n"),
            "{text}"
        );
    }

    #[test]
    fn bad_arguments_are_errors() {
        let args = |targets: Vec<String>, peer_names: Vec<String>| Source {
            prometheus: None,
            targets,
            peer_names,
        };
        assert!(report(&args(vec![], vec![]), 1.0).is_err());
        let e = report(
            &args(
                vec!["http://127.0.0.1:1/metrics".into()],
                vec!["nonsense".into()],
            ),
            1.0,
        )
        .unwrap_err();
        assert!(e.to_string().contains("ADDR=NAME"), "{e}");
    }
}
