//! rdma-experiments: break RDMA on purpose and show what the device says.
//!
//! Each experiment ([`decl::DECLARATIONS`]) is data plus code: the declaration says what it
//! shows, which lesson it belongs to, its parts, and which hardware counters each part must
//! move and must leave alone; the code (one file per experiment in `exp/`) calls real verbs
//! through `rdma-verbs` and records every call as a numbered step. [`run`] wraps it: it reads
//! the device's `rdma res` counts and counters before, runs the experiment (checking Ctrl-C
//! at every step), lets ownership clean everything up (also on error and interruption),
//! reads counters and resources again and builds the [`Report`] whose JSON shape is
//! documented in [`report`].
//!
//! Keys and addresses never appear in reports unless [`Options::show_keys`] is set.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod decl;
mod exp;
mod harness;
pub mod observe;
pub mod report;

pub use decl::{by_name, declaration, Declaration, PartDecl, DECLARATIONS};
pub use harness::{ExpError, Options, Progress};
pub use report::{Outcome, Report, SCHEMA};

use harness::Run;
use observe::{changes, CounterProbe};
use rdmakit::catalog::Catalog;
use report::{CounterReport, Explanation, LessonRef, ResourceCheck};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

/// Why [`run`] could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// No experiment of that name.
    #[error("no experiment named {name:?} (experiments: {})", DECLARATIONS.iter().map(|d| d.name()).collect::<Vec<_>>().join(", "))]
    Unknown {
        /// The name asked for.
        name: String,
    },
    /// The embedded counter catalog does not load (a build defect).
    #[error("the counter catalog does not load: {0}")]
    Catalog(String),
}

/// Run the experiment `name` on `opts.device`, reporting progress to `sink` as it goes.
/// `cancel` becoming true (Ctrl-C) stops it at the next step; the report then says
/// `interrupted` and still carries the resources after cleanup.
pub fn run(
    name: &str,
    opts: &Options,
    cancel: &AtomicBool,
    sink: &mut dyn FnMut(Progress<'_>),
) -> Result<Report, RunError> {
    let decl = by_name(name).ok_or_else(|| RunError::Unknown {
        name: name.to_string(),
    })?;
    let catalog = Catalog::embedded().map_err(|e| RunError::Catalog(e.to_string()))?;
    let t0 = Instant::now();
    let res_before = observe::resources(&opts.device);
    let mut probe = CounterProbe::new(&opts.sysfs_root, &opts.device);
    let first = probe.read();
    let family = first.as_ref().ok().and_then(|s| probe.family(s, catalog));
    let mut run = Run::new(opts, cancel, sink, decl, catalog, probe, family.clone());
    // Every verbs object lives inside this call: when it returns, they are all gone.
    let result = exp::dispatch(decl, &mut run);
    run.end_part(None);
    let last = run.probe().read();
    let counters = match (&first, &last) {
        (Ok(b), Ok(a)) => {
            let all = changes(b, a, catalog);
            CounterReport {
                source: format!(
                    "sysfs {}/class/infiniband/{}/",
                    opts.sysfs_root.display(),
                    opts.device
                ),
                moved: all.iter().filter(|c| c.delta > 0).cloned().collect(),
                all,
                note: run.counter_note.clone(),
            }
        }
        (Err(e), _) | (_, Err(e)) => CounterReport {
            source: "sysfs".into(),
            note: Some(e.to_string()),
            ..Default::default()
        },
    };
    let res_after = observe::resources(&opts.device);
    let resources = match (res_before, res_after) {
        (Ok(b), Ok(a)) => ResourceCheck {
            source: "RDMA netlink RES_GET (rdma res show)".into(),
            equal: Some(a == b),
            before: Some(b),
            after: Some(a),
            note: None,
        },
        (Err(e), _) | (_, Err(e)) => ResourceCheck {
            source: "RDMA netlink RES_GET (rdma res show)".into(),
            note: Some(e.to_string()),
            ..Default::default()
        },
    };
    let explanations = explain(decl, family.as_deref(), &counters, catalog);
    let (outcome, error) = match result {
        Ok(()) => (Outcome::Completed, None),
        Err(ExpError::Interrupted) => (
            Outcome::Interrupted,
            Some(ExpError::Interrupted.to_string()),
        ),
        Err(e) => (Outcome::Failed, Some(e.to_string())),
    };
    Ok(Report {
        schema: SCHEMA,
        name: decl.name(),
        title: decl.title(),
        shows: decl.shows,
        lesson: LessonRef {
            name: decl.lesson().as_str(),
            chapter: decl.lesson().chapter(),
        },
        device: opts.device.clone(),
        family,
        declared_family: decl.family,
        outcome,
        error,
        duration_ms: t0.elapsed().as_millis() as u64,
        steps: std::mem::take(&mut run.steps),
        parts: std::mem::take(&mut run.parts),
        counters,
        explanations,
        resources,
        findings: std::mem::take(&mut run.findings),
        data: std::mem::take(&mut run.data),
    })
}

/// Catalog explanations for the declared counters and every counter that moved.
fn explain(
    decl: &Declaration,
    family: Option<&str>,
    counters: &CounterReport,
    catalog: &Catalog,
) -> Vec<Explanation> {
    let family = family.unwrap_or(decl.family);
    let mut names: Vec<String> = decl.counters().iter().map(|s| s.to_string()).collect();
    for c in &counters.moved {
        if !names.contains(&c.name) {
            names.push(c.name.clone());
        }
    }
    names
        .into_iter()
        .filter_map(|n| catalog.get(family, &n))
        .map(|info| Explanation {
            counter: info.name.clone(),
            family: info.driver.clone(),
            summary: info.summary.clone(),
            meaning: info.meaning.trim().replace('\n', " "),
            severity: info.severity.as_str().to_string(),
        })
        .collect()
}
