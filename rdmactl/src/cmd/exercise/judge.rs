//! What a run did, as the observer (`rdmactl lesson exercise observe`, in the VM) printed
//! it, and the verdict on it: one host's run against the exercise's behaviours, or a
//! two-host run against each host's. Only what the observer saw counts, never what the
//! program printed.
use anyhow::Context as _;
use std::collections::BTreeMap;

use super::Behaviour::{AtLeast, ReleasedAtCheckpoint, Still};
use super::{Behaviour, Exercise, OBS};

/// The resource kinds the checkpoint compares (the context is still open there).
const CHECKPOINT_KINDS: &[&str] = &["pd", "cq", "qp", "mr", "srq"];

/// What one run did, as the observer in the VM saw it.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Observed {
    pub(super) code: i32,
    /// hw counter deltas on the device.
    pub(super) counters: BTreeMap<String, u64>,
    pub(super) res_before: BTreeMap<String, u64>,
    pub(super) res_after: BTreeMap<String, u64>,
    /// At the program's `lab_checkpoint()`, if it reached one.
    pub(super) res_checkpoint: Option<BTreeMap<String, u64>>,
    /// What the observer could not do (no device, no netlink): the run cannot be judged.
    pub(super) errors: Vec<String>,
}

impl Observed {
    /// Takes the observer's lines out of `output`, which keeps the program's own.
    pub(super) fn parse(output: &mut String) -> Observed {
        let mut o = Observed {
            code: -1,
            ..Observed::default()
        };
        let mut rest = String::new();
        for line in output.lines() {
            let Some(obs) = line.strip_prefix(OBS) else {
                rest.push_str(line);
                rest.push('\n');
                continue;
            };
            let f: Vec<&str> = obs.split_whitespace().collect();
            let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
            match (f.first().copied(), f.get(1)) {
                (Some("exit"), _) => o.code = f.get(1).and_then(|v| v.parse().ok()).unwrap_or(-1),
                (Some("counter"), Some(name)) => {
                    o.counters.insert(name.to_string(), num(2).unwrap_or(0));
                }
                (Some("res"), Some(kind)) => {
                    if let (Some(b), Some(a)) = (num(2), num(3)) {
                        o.res_before.insert(kind.to_string(), b);
                        o.res_after.insert(kind.to_string(), a);
                    }
                }
                (Some("checkpoint"), Some(kind)) => {
                    if let Some(v) = num(2) {
                        o.res_checkpoint
                            .get_or_insert_with(BTreeMap::new)
                            .insert(kind.to_string(), v);
                    }
                }
                (Some("checkpoint-reached"), _) => {
                    o.res_checkpoint.get_or_insert_with(BTreeMap::new);
                }
                (Some("error"), _) => o.errors.push(obs["error".len()..].trim().to_string()),
                _ => o.errors.push(format!("unreadable observer line {line:?}")),
            }
        }
        *output = rest;
        o
    }
}

/// The `=== LABEL` ... `=== exit N` sections of the observer script's output: label ->
/// (what the observer saw, the program's own output).
pub(super) fn sections<'a>(
    lines: impl Iterator<Item = &'a str>,
) -> Vec<(String, Observed, String)> {
    let mut results = Vec::new();
    let mut cur: Option<(String, String)> = None;
    for line in lines {
        if let Some(code) = line.strip_prefix("=== exit ") {
            if let Some((label, mut output)) = cur.take() {
                let mut seen = Observed::parse(&mut output);
                if code.trim() != "0" {
                    // The observer itself failed (it exits 0 whatever the program did).
                    seen.errors
                        .push(format!("the observer exited {}", code.trim()));
                }
                results.push((label, seen, output));
            }
        } else if let Some(label) = line.strip_prefix("=== ") {
            cur = Some((label.to_string(), String::new()));
        } else if let Some((_, output)) = cur.as_mut() {
            output.push_str(line);
            output.push('\n');
        }
    }
    results
}

/// Judge a two-host run: h1 by `expect`, h2 by `h2_expect`; report lines say which host.
pub(super) fn judge_two(
    e: &Exercise,
    h1: &Observed,
    h2: &Observed,
    report: &mut Vec<String>,
) -> anyhow::Result<bool> {
    let two = e.two.as_ref().context("not a two-host exercise")?;
    let mut ok = true;
    for (host, seen, expect) in [("h1", h1, e.expect), ("h2", h2, two.h2_expect)] {
        let mut lines = Vec::new();
        ok &= judge_against(expect, seen, &mut lines);
        report.extend(
            lines
                .into_iter()
                .map(|l| l.replacen("  [", &format!("  {host} ["), 1)),
        );
    }
    Ok(ok)
}

/// What passed and what did not, one line each; true when everything passed. Judges only
/// what the observer saw the program do, never what it printed.
pub(super) fn judge(e: &Exercise, seen: &Observed, report: &mut Vec<String>) -> bool {
    judge_against(e.expect, seen, report)
}

/// `judge` with the behaviours given.
fn judge_against(expect: &[Behaviour], seen: &Observed, report: &mut Vec<String>) -> bool {
    let mut ok = true;
    let mut item = |pass: bool, what: String| {
        report.push(format!("  [{}] {what}", if pass { "pass" } else { "FAIL" }));
        ok &= pass;
    };
    for err in &seen.errors {
        item(false, format!("observing the run: {err}"));
    }
    item(seen.code == 0, format!("exit code 0 (got {})", seen.code));
    item(
        !seen.res_before.is_empty() && seen.res_before == seen.res_after,
        format!(
            "every resource released: rdma resource show before {} after {}",
            counts(&seen.res_before),
            counts(&seen.res_after)
        ),
    );
    for b in expect {
        match *b {
            AtLeast(name, min) => {
                let got = seen.counters.get(name);
                item(
                    got.is_some_and(|&d| d >= min),
                    format!(
                        "rxe0 {name} moved by at least {min} (moved by {})",
                        shown(got)
                    ),
                );
            }
            Still(name) => {
                let got = seen.counters.get(name);
                item(
                    got == Some(&0),
                    format!("rxe0 {name} did not move (moved by {})", shown(got)),
                );
            }
            ReleasedAtCheckpoint => match &seen.res_checkpoint {
                None => item(false, "the program reached lab_checkpoint()".into()),
                Some(at) => {
                    let held: Vec<String> = CHECKPOINT_KINDS
                        .iter()
                        .filter_map(|k| {
                            let now = at.get(*k).copied().unwrap_or(0);
                            let was = seen.res_before.get(*k).copied().unwrap_or(0);
                            (now > was).then(|| format!("{k} +{}", now - was))
                        })
                        .collect();
                    item(
                        held.is_empty() && !at.is_empty(),
                        format!(
                            "at lab_checkpoint(), before ibv_close_device, nothing is still held \
                             (held: {})",
                            if held.is_empty() {
                                "nothing".to_string()
                            } else {
                                held.join(", ")
                            }
                        ),
                    );
                }
            },
        }
    }
    ok
}

fn shown(delta: Option<&u64>) -> String {
    delta.map_or("nothing: no such counter".into(), |d| d.to_string())
}

fn counts(res: &BTreeMap<String, u64>) -> String {
    if res.is_empty() {
        return "(not read)".into();
    }
    res.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}
