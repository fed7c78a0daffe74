//! The Prometheus each scenario runs on: start it, query it, report its alerts and costs.

use anyhow::{bail, Context};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::mesh::{Fault, Scenario};
use crate::serve::Combo;
use crate::{host_ip, MESH_ALERTS, STEP};

/// A Prometheus of ours on 127.0.0.1, killed and its directory removed on drop.
pub(crate) struct Prometheus {
    pub(crate) child: std::process::Child,
    pub(crate) url: String,
    pub(crate) dir: PathBuf,
    pub(crate) keep: bool,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

pub(crate) fn start_prometheus(
    dir: &Path,
    rules: &Path,
    exporter: u16,
    jobs: &[(usize, &Combo)],
    keep: bool,
) -> anyhow::Result<Prometheus> {
    std::fs::create_dir_all(dir)?;
    let port = free_port()?;
    let mut cfg = format!(
        "global:\n  scrape_interval: {STEP}s\n  scrape_timeout: {STEP}s\n  evaluation_interval: {STEP}s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: prometheus\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n",
        rules.display()
    );
    for (k, c) in jobs {
        let _ = write!(
            cfg,
            "  - job_name: {}\n    honor_labels: true\n    metrics_path: /metrics/{k}\n    static_configs:\n      - targets: ['127.0.0.1:{exporter}']\n",
            c.job
        );
    }
    let config = dir.join("prometheus.yml");
    std::fs::write(&config, cfg)?;
    let log = std::fs::File::create(dir.join("prometheus.log"))?;
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--storage.tsdb.retention.time=1d")
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting prometheus (Debian: prometheus)")?;
    let p = Prometheus {
        child,
        url: format!("http://127.0.0.1:{port}"),
        dir: dir.to_path_buf(),
        keep,
    };
    // Ready within a minute, polled.
    for _ in 0..120 {
        if ureq::get(&format!("{}/-/ready", p.url)).call().is_ok() {
            return Ok(p);
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    bail!(
        "prometheus did not get ready: see {}",
        dir.join("prometheus.log").display()
    )
}

/// An instant query: (labels, value) of each sample.
pub(crate) fn query(
    prom: &Prometheus,
    expr: &str,
    at: f64,
) -> anyhow::Result<Vec<(BTreeMap<String, String>, f64)>> {
    let body = ureq::get(&format!("{}/api/v1/query", prom.url))
        .query("query", expr)
        .query("time", format!("{at:.3}"))
        .call()
        .with_context(|| format!("query {expr}"))?
        .body_mut()
        .read_to_string()?;
    let v: serde_json::Value = serde_json::from_str(&body)?;
    if v["status"] != "success" {
        bail!("query {expr}: {body}");
    }
    let mut out = Vec::new();
    for r in v["data"]["result"].as_array().into_iter().flatten() {
        let labels = r["metric"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        let value = r["value"][1]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(f64::NAN);
        out.push((labels, value));
    }
    Ok(out)
}

/// The alert as one line: its name and the labels that say which culprit.
pub(crate) fn alert_key(l: &BTreeMap<String, String>) -> String {
    let mut s = l.get("alertname").cloned().unwrap_or_default();
    let parts: Vec<String> = ["host", "direction", "a", "b", "layer"]
        .iter()
        .filter(|k| !(l.contains_key("host") && (**k == "a" || **k == "b")))
        .filter_map(|k| l.get(*k).map(|v| format!("{k}={v}")))
        .collect();
    if !parts.is_empty() {
        let _ = write!(s, "{{{}}}", parts.join(","));
    }
    s
}

pub(crate) const CULPRIT_ALERTS: [&str; 5] = [
    "RdmaHostUnreachable",
    "RdmaAgentDown",
    "RdmaHostRdmaDown",
    "RdmaHostLinkLossy",
    "RdmaHostLatencyHigh",
];

/// The culprit alerts the fault should fire (keys as [`alert_key`] writes them).
pub(crate) fn injected(fault: &Fault) -> BTreeSet<String> {
    fault
        .hosts
        .iter()
        .map(|&h| {
            let host = host_ip(h as usize);
            match fault.scenario {
                Scenario::Egress => format!("RdmaHostLinkLossy{{host={host},direction=egress}}"),
                Scenario::Rack => format!("RdmaHostUnreachable{{host={host}}}"),
            }
        })
        .collect()
}

/// What one combo's job fired, from the Prometheus that evaluated it. Returns whether it
/// fired exactly the injected culprits and nothing else at the end of the fault.
pub(crate) fn report(prom: &Prometheus, c: &Combo, start_unix: f64) -> anyhow::Result<bool> {
    let job = &c.job;
    let firing =
        format!("ALERTS{{job=\"{job}\",alertstate=\"firing\",alertname=~\"{MESH_ALERTS}\"}}");
    let at_end = start_unix + (c.time.fault_end - STEP) as f64;
    let now = start_unix + c.time.end as f64;
    let want = injected(&c.fault);
    let (found, others): (BTreeSet<String>, BTreeSet<String>) = query(prom, &firing, at_end)?
        .iter()
        .map(|(l, _)| alert_key(l))
        .partition(|k| {
            CULPRIT_ALERTS
                .iter()
                .any(|n| k.split('{').next() == Some(n))
        });
    let hit = found.intersection(&want).count();
    println!(
        "    culprits: {} injected, {} found at the end of the fault, {} right, {} wrong; other pingmesh alerts firing then: {}",
        want.len(),
        found.len(),
        hit,
        found.len() - hit,
        others.len()
    );
    for k in want.difference(&found).take(3) {
        println!("      missed: {k}");
    }
    for k in found.difference(&want).take(3) {
        println!("      unexpected: {k}");
    }
    for k in others.iter().take(3) {
        println!("      also firing: {k}");
    }
    let span = c.time.end;
    let first = query(
        prom,
        &format!("min_over_time(timestamp({firing})[{span}s:{STEP}s])"),
        now,
    )?;
    let last = query(
        prom,
        &format!("max_over_time(timestamp({firing})[{span}s:{STEP}s])"),
        now,
    )?;
    let mut by_name: BTreeMap<String, (usize, f64, f64, f64)> = BTreeMap::new();
    for (l, v) in &first {
        let name = l.get("alertname").cloned().unwrap_or_default();
        let end = last
            .iter()
            .find(|(m, _)| m == l)
            .map_or(f64::NAN, |(_, w)| *w);
        let e = by_name
            .entry(name)
            .or_insert((0, f64::MAX, f64::MAX, f64::MIN));
        e.0 += 1;
        e.1 = e.1.min(*v);
        e.2 = e.2.min(if want.contains(&alert_key(l)) {
            *v
        } else {
            f64::MAX
        });
        e.3 = e.3.max(end);
    }
    let since = |t: f64, from: u64| t - start_unix - from as f64;
    for (name, (count, first, _, last)) in &by_name {
        println!(
            "    fired {name}: {count} alert(s), the first +{:.0} s after injection; the last still firing +{:.0} s after the fault's end",
            since(*first, c.time.fault_start),
            since(*last, c.time.fault_end),
        );
    }
    if by_name.is_empty() {
        println!("    fired: no pingmesh alert");
    }
    let firing_after = query(prom, &firing, now)?.len();
    println!(
        "    still firing at the end (+{} s after the fault): {firing_after}",
        c.time.end - c.time.fault_end
    );
    Ok(found == want && others.is_empty() && firing_after == 0)
}

/// Prometheus's own figures over the run: rule evaluation, scrapes, memory.
pub(crate) fn costs(prom: &Prometheus, end_unix: f64, span: u64) -> anyhow::Result<()> {
    let one = |expr: &str| -> anyhow::Result<f64> {
        Ok(query(prom, expr, end_unix)?
            .first()
            .map_or(f64::NAN, |(_, v)| *v))
    };
    let r = format!("[{span}s]");
    println!(
        "    Prometheus: pingmesh rule group {:.2} s per evaluation (max {:.2} s), all rules {:.2} s per {STEP} s evaluation; {:.0} evaluations missed; scrape of the mesh jobs max {:.2} s; head series max {:.0}; RSS max {:.0} MiB",
        one(&format!("avg(avg_over_time(prometheus_rule_group_last_duration_seconds{{rule_group=~\".*;rdma-pingmesh\"}}{r}))"))?,
        one(&format!("max(max_over_time(prometheus_rule_group_last_duration_seconds{{rule_group=~\".*;rdma-pingmesh\"}}{r}))"))?,
        one(&format!("sum(avg_over_time(prometheus_rule_group_last_duration_seconds{r}))"))?,
        one("sum(prometheus_rule_group_iterations_missed_total)")?,
        one(&format!("max(max_over_time(scrape_duration_seconds{{job!=\"prometheus\"}}{r}))"))?,
        one(&format!("max_over_time(prometheus_tsdb_head_series{r})"))?,
        one(&format!("max_over_time(process_resident_memory_bytes{{job=\"prometheus\"}}{r})"))? / 1048576.0,
    );
    println!(
        "    Prometheus CPU: {:.2} cores on average over the run (wall times above include waiting for a loaded machine's CPU)",
        one(&format!("rate(process_cpu_seconds_total{{job=\"prometheus\"}}{r})"))?,
    );
    // The costliest rules of the last evaluation (the rules API's per-rule evaluationTime).
    let body = ureq::get(&format!("{}/api/v1/rules", prom.url))
        .call()?
        .body_mut()
        .read_to_string()?;
    let v: serde_json::Value = serde_json::from_str(&body)?;
    let mut rules: Vec<(f64, String)> = v["data"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .map(|r| {
            (
                r["evaluationTime"].as_f64().unwrap_or(0.0),
                r["name"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    rules.sort_by(|a, b| b.0.total_cmp(&a.0));
    let top: Vec<String> = rules
        .iter()
        .take(4)
        .map(|(t, n)| format!("{n} {t:.2} s"))
        .collect();
    println!(
        "    costliest rules in the last evaluation: {}",
        top.join(", ")
    );
    Ok(())
}

/// The shipped rules with every non-zero `for:` at `seconds` (as tests/multihost-prometheus
/// shortens them), in `dir`.
pub(crate) fn rules_with_for(rules: &Path, seconds: u64, dir: &Path) -> anyhow::Result<PathBuf> {
    let text = std::fs::read_to_string(rules)?;
    let mut changed = 0;
    let out: Vec<String> = text
        .lines()
        .map(|l| {
            let t = l.trim_start();
            match t.strip_prefix("for: ") {
                Some(d) if !d.starts_with('0') => {
                    changed += 1;
                    format!("{}for: {seconds}s", &l[..l.len() - t.len()])
                }
                _ => l.to_string(),
            }
        })
        .collect();
    if changed == 0 {
        bail!("no `for:` in {}", rules.display());
    }
    let path = dir.join("rdma.rules.yml");
    std::fs::write(&path, out.join("\n") + "\n")?;
    Ok(path)
}
