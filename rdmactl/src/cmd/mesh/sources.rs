//! The two sources of the pingmesh: the rdmads' `/metrics` scraped twice (direct mode), or
//! the recording rules and the firing alerts of a Prometheus.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rdmakit::exposition::{self, Exposition};
use rdmakit::scrape::{ScrapeConfig, Scraper};

use super::{verdicts, Pair, Report, Source, Thresholds};

pub(super) fn strip_port(addr: &str) -> &str {
    match addr.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => addr,
    }
}

/// The host of an http(s) URL.
pub(super) fn url_host(url: &str) -> &str {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .unwrap_or(url);
    strip_port(rest.split('/').next().unwrap_or(rest))
}

pub(super) fn name_pairs(specs: &[String], what: &str) -> Result<BTreeMap<String, String>> {
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
pub(super) struct PeerSeries {
    status: Option<u8>,
    sent: f64,
    lost_request: f64,
    lost_reply: f64,
    typical: Option<f64>,
}

pub(super) fn peer_series(e: &Exposition) -> BTreeMap<String, PeerSeries> {
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
pub(super) fn pairs_from_scrapes(
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

pub(super) fn fetch(url: &str) -> Result<String> {
    let scraper = Scraper::new(&ScrapeConfig::new(url)).map_err(|e| anyhow::anyhow!("{e}"))?;
    scraper.fetch().map_err(|e| anyhow::anyhow!("{e}"))
}

pub(super) fn scrape(url: &str) -> Result<Exposition> {
    let text = fetch(url)?;
    exposition::parse(&text).map_err(|e| anyhow::anyhow!("{url}: {e:?}"))
}

/// Direct mode: scrape every target twice.
pub(super) fn report_from_targets(args: &Source, interval: f64, t: &Thresholds) -> Result<Report> {
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

pub(super) fn finish(
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

pub(super) fn percent_encode(s: &str) -> String {
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
pub(super) fn query(base: &str, q: &str) -> Result<Vec<(BTreeMap<String, String>, f64)>> {
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
pub(super) fn report_from_prometheus(base: &str, t: &Thresholds) -> Result<Report> {
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
