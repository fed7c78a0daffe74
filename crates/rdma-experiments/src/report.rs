//! The report of one experiment run: the stable JSON structure behind
//! `rdmactl experiment run NAME --json` (schema [`SCHEMA`]), also what the text face prints.
//!
//! Field by field (all present unless marked optional):
//! - `schema`: `"rdmactl.experiment/1"`; bumped on any incompatible change.
//! - `name`, `title`, `shows`, `lesson` (`{name, chapter}`), `device`, `family` (catalog
//!   family of the device, optional), `declared_family` (the family the counter expectations
//!   are written for).
//! - `outcome`: `completed` | `failed` | `interrupted`; `error` (optional) says why.
//! - `duration_ms`.
//! - `steps[]`: `{n, part, verb, detail, result: ok|error|info, errno: {code, name}?,
//!   wc_status?, wc_opcode?, expected?, as_expected?, elapsed_us?, values{}}` in run order.
//! - `parts[]`: `{name, title, duration_ms, counters_moved[], async_events[], expectations[]}`,
//!   an expectation being `{counter, expect: moves|stays, delta?, met?}` (`met` null when the
//!   device is not of the declared family or lacks the counter).
//! - `counters`: `{source, all[], moved[]}`, each `{name, port, source, before, after, delta}`:
//!   every hardware counter of the device across the whole run.
//! - `explanations[]`: `{counter, family, summary, meaning, severity}` from the catalog, for
//!   the counters the experiment names and those that moved.
//! - `resources`: `{source, before{}, after{}, equal, note?}`: `rdma res` counts of the device
//!   before the experiment and after its cleanup.
//! - `findings[]`: `{id, text}`: what the device did that a learner should know (for example
//!   `mw_bounds_not_enforced` on rxe).
//! - `data{}`: the experiment's own measurements (tables of sizes, latencies, CPU times).
//!
//! Keys and addresses in `steps[].values` and `data` are the string `"masked"` unless the run
//! used `--show-keys`.
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The schema id of the JSON document.
pub const SCHEMA: &str = "rdmactl.experiment/1";

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every step ran.
    Completed,
    /// A step failed in a way the experiment did not plan for (see `error`).
    Failed,
    /// Ctrl-C (SIGINT) stopped it; cleanup still ran.
    Interrupted,
}

/// What a step's call returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepResult {
    /// The call succeeded (a completion: status SUCCESS).
    Ok,
    /// The call failed or the completion carries an error status.
    Error,
    /// Nothing was called: a reading or an explanation.
    Info,
}

/// An errno, numeric and symbolic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Errno {
    /// The number (22).
    pub code: i32,
    /// The symbol (`EINVAL`).
    pub name: &'static str,
}

impl Errno {
    /// From a raw errno.
    pub fn new(code: i32) -> Errno {
        Errno {
            code,
            name: errno_name(code),
        }
    }
}

/// The errno's symbol (`EINVAL`, from rdmakit's one table); `E?` for a number the platform
/// does not define.
pub fn errno_name(code: i32) -> &'static str {
    rdmakit::uapi::errno_name(code).unwrap_or("E?")
}

/// One numbered step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// 1-based number.
    pub n: usize,
    /// The part it belongs to.
    pub part: Option<&'static str>,
    /// The verb called (`ibv_reg_mr`, `ibv_modify_qp`, `ibv_poll_cq`) or what was read.
    pub verb: String,
    /// What exactly was asked.
    pub detail: String,
    /// What came back.
    pub result: StepResult,
    /// The errno of a failed call.
    pub errno: Option<Errno>,
    /// The completion status (`SUCCESS`, `REM_ACCESS_ERR`, ...) of a polled completion.
    pub wc_status: Option<String>,
    /// The completion opcode (valid on success).
    pub wc_opcode: Option<String>,
    /// What the lesson predicts (`EINVAL`, `RNR_RETRY_EXC_ERR`, `SUCCESS`).
    pub expected: Option<String>,
    /// Whether it happened.
    pub as_expected: Option<bool>,
    /// How long the call (or the wait for the completion) took.
    pub elapsed_us: Option<f64>,
    /// Anything else worth showing (QP numbers, sizes, masked keys).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, Value>,
}

/// One counter over a window of time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CounterChange {
    /// File name.
    pub name: String,
    /// Port (none for device-level counters).
    pub port: Option<u32>,
    /// `hw`, `pma` or `device_hw`.
    pub source: &'static str,
    /// First value.
    pub before: u64,
    /// Second value.
    pub after: u64,
    /// Wrap-aware difference.
    pub delta: u64,
}

/// Does a declared counter move or stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    /// delta > 0.
    Moves,
    /// delta == 0.
    Stays,
}

/// One declared counter expectation, checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Expectation {
    /// Counter name.
    pub counter: &'static str,
    /// What the declaration says.
    pub expect: Expect,
    /// The measured delta (none when the device has no such counter).
    pub delta: Option<u64>,
    /// Whether the declaration held (none when not applicable).
    pub met: Option<bool>,
}

/// One part's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartReport {
    /// The declared part name.
    pub name: &'static str,
    /// Its title.
    pub title: &'static str,
    /// How long the part took, cleanup of the previous part's objects excluded.
    pub duration_ms: u64,
    /// Counters with a non-zero delta during the part.
    pub counters_moved: Vec<CounterChange>,
    /// Asynchronous events read during or right after the part (`QP_FATAL`, `SQ_DRAINED`...).
    pub async_events: Vec<String>,
    /// The declared expectations, checked.
    pub expectations: Vec<Expectation>,
}

/// Counters across the whole run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct CounterReport {
    /// Where they were read.
    pub source: String,
    /// Every counter of the device.
    pub all: Vec<CounterChange>,
    /// The ones that moved.
    pub moved: Vec<CounterChange>,
    /// Why there are none, when reading failed.
    pub note: Option<String>,
}

/// A catalog explanation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Explanation {
    /// Counter name.
    pub counter: String,
    /// Catalog family.
    pub family: String,
    /// One line.
    pub summary: String,
    /// The paragraph.
    pub meaning: String,
    /// `info`, `warning` or `error`.
    pub severity: String,
}

/// `rdma res` counts before and after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct ResourceCheck {
    /// Where they were read (`nldev RES_GET`).
    pub source: String,
    /// Counts before the experiment (pd, cq, qp, cm_id, mr, ctx, srq).
    pub before: Option<BTreeMap<String, u64>>,
    /// Counts after its cleanup.
    pub after: Option<BTreeMap<String, u64>>,
    /// Whether cleanup gave back everything (none when not measured).
    pub equal: Option<bool>,
    /// Why they are missing, when they are.
    pub note: Option<String>,
}

/// Something the device did that the learner should know.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Stable id (`mw_bounds_not_enforced`).
    pub id: &'static str,
    /// The explanation.
    pub text: String,
}

/// The lesson an experiment belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LessonRef {
    /// Its name (`error-handling`).
    pub name: &'static str,
    /// Its chapter number.
    pub chapter: u8,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Experiment name.
    pub name: &'static str,
    /// Title.
    pub title: &'static str,
    /// What it shows.
    pub shows: &'static str,
    /// Its lesson.
    pub lesson: LessonRef,
    /// The device used.
    pub device: String,
    /// The device's catalog family.
    pub family: Option<String>,
    /// The family the counter expectations are written for.
    pub declared_family: &'static str,
    /// How it ended.
    pub outcome: Outcome,
    /// Why it did not complete.
    pub error: Option<String>,
    /// Wall time.
    pub duration_ms: u64,
    /// The steps.
    pub steps: Vec<Step>,
    /// The parts.
    pub parts: Vec<PartReport>,
    /// Counters across the run.
    pub counters: CounterReport,
    /// Catalog explanations.
    pub explanations: Vec<Explanation>,
    /// Resources before and after.
    pub resources: ResourceCheck,
    /// Findings.
    pub findings: Vec<Finding>,
    /// Experiment-specific measurements.
    pub data: Map<String, Value>,
}

impl Report {
    /// Every declared counter expectation that was checked and failed, as `part/counter`.
    pub fn unmet_expectations(&self) -> Vec<String> {
        self.parts
            .iter()
            .flat_map(|p| {
                p.expectations
                    .iter()
                    .filter(|e| e.met == Some(false))
                    .map(move |e| format!("{}/{}", p.name, e.counter))
            })
            .collect()
    }

    /// Steps whose outcome differed from the lesson's prediction.
    pub fn surprises(&self) -> Vec<&Step> {
        self.steps
            .iter()
            .filter(|s| s.as_expected == Some(false))
            .collect()
    }
}

/// A key or address as shown: hex with `show`, else `"masked"`.
pub fn secret(value: u64, show: bool) -> Value {
    if show {
        Value::String(format!("{value:#x}"))
    } else {
        Value::String("masked".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked_unless_asked() {
        assert_eq!(secret(0x1234, false), Value::String("masked".into()));
        assert_eq!(secret(0x1234, true), Value::String("0x1234".into()));
        let s = serde_json::to_string(&secret(0xdead_beef, false)).unwrap();
        assert!(!s.contains("dead") && !s.contains("3735928559"));
    }

    #[test]
    fn errnos_have_names() {
        assert_eq!(Errno::new(22).name, "EINVAL");
        assert_eq!(Errno::new(95).name, "EOPNOTSUPP");
        assert_eq!(Errno::new(4242).name, "E?");
        let v = serde_json::to_value(Errno::new(22)).unwrap();
        assert_eq!(v["code"], 22);
        assert_eq!(v["name"], "EINVAL");
    }

    #[test]
    fn enums_serialize_in_snake_case() {
        assert_eq!(
            serde_json::to_value(Outcome::Interrupted).unwrap(),
            "interrupted"
        );
        assert_eq!(serde_json::to_value(StepResult::Info).unwrap(), "info");
        assert_eq!(serde_json::to_value(Expect::Stays).unwrap(), "stays");
    }
}
