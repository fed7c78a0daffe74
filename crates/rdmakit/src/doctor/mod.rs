//! The doctor: what moved between two snapshots, and what it means.
//!
//! [`deltas`] compares two [`Snapshot`]s counter by counter (32-bit counters that wrapped are
//! unwrapped using the width the catalog declares; a counter that went backwards otherwise is
//! a reset), and [`diagnose`] turns the movements into ranked [`Finding`]s using the rules in
//! `catalog/rules.toml` plus the catalog's severity for counters no rule covers.
//! Rules are data: adding a diagnosis means editing the TOML, not this code.

mod delta;
mod rules;

pub use delta::{deltas, family_of, CounterDelta, Movement};
pub use rules::{Rule, RuleError, Rules};

use serde::Serialize;

use crate::catalog::{Catalog, Severity};
use crate::model::Snapshot;

/// One diagnosis, for one port (or device).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The rule that fired, or `catalog:<counter>` for a counter no rule covers, or
    /// `port-state` / `device-gone` / `device-new`.
    pub id: String,
    /// How serious.
    pub severity: Severity,
    /// Short title.
    pub title: String,
    /// `device/port` or `device`.
    pub target: String,
    /// What happened, in plain words.
    pub finding: String,
    /// What to do.
    pub advice: String,
    /// The counters that moved, with their deltas.
    pub counters: Vec<CounterDelta>,
    /// Sum of the deltas (the ranking key after severity).
    pub total: u64,
    /// Per second, when the interval is known.
    pub rate_per_second: Option<f64>,
    /// The experiment that reproduces it.
    pub experiment: Option<String>,
}

/// The doctor's whole answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnosis {
    /// Seconds between the samples, when known.
    pub interval_seconds: Option<f64>,
    /// Findings, most serious first.
    pub findings: Vec<Finding>,
    /// Every counter that moved (for `--json` and for "what else changed").
    pub moved: Vec<CounterDelta>,
}

fn rank(s: Severity) -> u8 {
    match s {
        Severity::Error => 0,
        Severity::Warning => 1,
        Severity::Info => 2,
    }
}

/// Diagnose the movement between `before` and `after`.
pub fn diagnose(
    before: &Snapshot,
    after: &Snapshot,
    interval_seconds: Option<f64>,
    catalog: &Catalog,
    rules: &Rules,
) -> Diagnosis {
    let moved: Vec<CounterDelta> = deltas(before, after, catalog)
        .into_iter()
        .filter(|d| d.delta > 0)
        .collect();
    let mut findings = Vec::new();
    let mut covered = std::collections::HashSet::new();

    // Group by target, keeping the order of first appearance.
    let mut targets: Vec<String> = Vec::new();
    for d in &moved {
        if !targets.contains(&d.target()) {
            targets.push(d.target());
        }
    }
    for target in &targets {
        let here: Vec<&CounterDelta> = moved.iter().filter(|d| &d.target() == target).collect();
        for rule in rules.iter() {
            let hits: Vec<CounterDelta> = here
                .iter()
                .filter(|d| rule.counters.iter().any(|c| c == &d.name))
                .map(|d| (*d).clone())
                .collect();
            let total: u64 = hits.iter().map(|d| d.delta).sum();
            if hits.is_empty() || total < rule.min_delta {
                continue;
            }
            for h in &hits {
                covered.insert((h.target(), h.name.clone()));
            }
            findings.push(Finding {
                id: rule.id.clone(),
                severity: rule.severity,
                title: rule.title.clone(),
                target: target.clone(),
                finding: rule.finding.replace("{target}", target),
                advice: rule.advice.clone(),
                rate_per_second: interval_seconds
                    .filter(|s| *s > 0.0)
                    .map(|s| total as f64 / s),
                counters: hits,
                total,
                experiment: rule.experiment.clone(),
            });
        }
        // Counters the catalog marks as worth attention that no rule explained.
        for d in here {
            if covered.contains(&(d.target(), d.name.clone())) {
                continue;
            }
            let Some(info) = d.family.as_deref().and_then(|f| catalog.get(f, &d.name)) else {
                continue;
            };
            if info.severity == Severity::Info {
                continue;
            }
            findings.push(Finding {
                id: format!("catalog:{}", d.name),
                severity: info.severity,
                title: d.name.clone(),
                target: target.clone(),
                finding: format!(
                    "{} rose by {} on {target}: {}",
                    d.name, d.delta, info.summary
                ),
                advice: info.next_steps.join("; "),
                counters: vec![d.clone()],
                total: d.delta,
                rate_per_second: interval_seconds
                    .filter(|s| *s > 0.0)
                    .map(|s| d.delta as f64 / s),
                experiment: info.experiment.map(|e| e.as_str().to_string()),
            });
        }
    }
    findings.extend(state_findings(before, after));
    findings.sort_by(|a, b| {
        rank(a.severity)
            .cmp(&rank(b.severity))
            .then(b.total.cmp(&a.total))
            .then(a.target.cmp(&b.target))
            .then(a.id.cmp(&b.id))
    });
    Diagnosis {
        interval_seconds,
        findings,
        moved,
    }
}

/// Devices that appeared or vanished, ports whose state changed.
fn state_findings(before: &Snapshot, after: &Snapshot) -> Vec<Finding> {
    let mut out = Vec::new();
    let plain =
        |id: &str, sev: Severity, title: &str, target: String, finding: String, advice: &str| {
            Finding {
                id: id.to_string(),
                severity: sev,
                title: title.to_string(),
                target,
                finding,
                advice: advice.to_string(),
                counters: Vec::new(),
                total: 0,
                rate_per_second: None,
                experiment: None,
            }
        };
    for d in &before.devices {
        match after.device(&d.name) {
            None => out.push(plain(
                "device-gone",
                Severity::Warning,
                "Device disappeared",
                d.name.clone(),
                format!("{} was present in the first sample and is gone in the second.", d.name),
                "Check `rdma link` and the kernel log: a driver reset, hot-unplug or `rdma link delete`.",
            )),
            Some(a) => {
                for p in &d.ports {
                    let Some(ap) = a.port(p.num) else { continue };
                    let (Some(s0), Some(s1)) = (&p.state, &ap.state) else {
                        continue;
                    };
                    if s0.id != s1.id {
                        let down = s1.name != "ACTIVE";
                        out.push(plain(
                            "port-state",
                            if down { Severity::Error } else { Severity::Info },
                            "Port state changed",
                            format!("{}/{}", d.name, p.num),
                            format!("Port state went from {} to {}.", s0.name, s1.name),
                            if down {
                                "Check the link (cable, peer port, subnet manager on InfiniBand, the netdev on RoCE)."
                            } else {
                                "The port came up; QPs created while it was down must be re-created or reconnected."
                            },
                        ));
                    }
                }
            }
        }
    }
    for a in &after.devices {
        if before.device(&a.name).is_none() {
            out.push(plain(
                "device-new",
                Severity::Info,
                "Device appeared",
                a.name.clone(),
                format!("{} appeared between the two samples.", a.name),
                "Nothing to do if it was expected (a new rxe link, a driver reload).",
            ));
        }
    }
    out
}
