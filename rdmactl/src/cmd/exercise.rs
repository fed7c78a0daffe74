//! `rdmactl lesson exercise`: the course's checked exercises.
//!
//! Each exercise is a C program with a TODO (its starter) and what it must do on rxe0.
//! `start` copies the starter and the course's headers into a directory; `check` compiles
//! the learner's file with the course's flags and runs it in a fresh lab VM under `observe`
//! (this binary, in the VM), which reads rxe0's hw counters (rdma-experiments'
//! `CounterProbe`) and `rdma resource show` counts (its nldev reader) before and after the
//! run, and at the program's `lab_checkpoint()` when it stops itself there. The verdict
//! rests on that and the exit code, never on the program's printed lines. `verify` is CI's:
//! every reference solution must pass and every starter must fail, all in one boot. `check`
//! and `verify` need the lab (the `lab` feature): the packaged rdmactl has neither `verify`
//! nor a lab for `check`, which says so.
use anyhow::{bail, Context as _};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use crate::exit::CodedError;

/// What the checker requires of a run besides exit 0 and every resource released.
#[derive(Debug, Clone, Copy)]
enum Behaviour {
    /// rxe0's hw counter moved by at least this much during the run.
    AtLeast(&'static str, u64),
    /// rxe0's hw counter did not move.
    Still(&'static str),
    /// At the program's checkpoint (`lab_checkpoint()`, after its teardown and before
    /// `ibv_close_device`), `rdma resource show` counts no PD, CQ, QP or MR more than
    /// before the run.
    ReleasedAtCheckpoint,
}

/// The resource kinds the checkpoint compares (the context is still open there).
const CHECKPOINT_KINDS: &[&str] = &["pd", "cq", "qp", "mr", "srq"];

/// One exercise.
struct Exercise {
    name: &'static str,
    chapter: u8,
    task: &'static str,
    starter: &'static str,
    /// The reference solution (`verify` runs it; the lab's).
    #[cfg_attr(not(feature = "lab"), allow(dead_code))]
    solution: &'static str,
    /// What the run must show on rxe0 (besides exit 0 and nothing left behind).
    expect: &'static [Behaviour],
}

macro_rules! exercise {
    ($name:literal, $chapter:expr, $task:literal, $expect:expr) => {
        Exercise {
            name: $name,
            chapter: $chapter,
            task: $task,
            starter: include_str!(concat!("../../../lessons/exercises/", $name, ".starter.c")),
            solution: include_str!(concat!("../../../lessons/exercises/", $name, ".solution.c")),
            expect: $expect,
        }
    };
}

use Behaviour::{AtLeast, ReleasedAtCheckpoint, Still};

const EXERCISES: &[Exercise] = &[
    exercise!(
        "05-address-vector",
        5,
        "make the address vector work on RoCE as well as on InfiniBand",
        // 10 round trips, one SEND each (A and B take turns): 10 SENDs consumed 10
        // receives, none found the receive queue empty.
        &[
            AtLeast("rdma_sends", 10),
            AtLeast("rdma_recvs", 10),
            Still("send_rnr_err")
        ]
    ),
    exercise!(
        "09-teardown",
        9,
        "fix a broken teardown order",
        &[ReleasedAtCheckpoint]
    ),
    exercise!(
        "12-selective-signalling",
        12,
        "add selective signalling: 64 WRITEs, 4 completions",
        // 64 WRITEs and their ACKs went through rxe0; WRITEs consume no receive.
        &[
            AtLeast("sent_pkts", 64),
            Still("rdma_sends"),
            Still("completer_retry_err")
        ]
    ),
    exercise!(
        "12-switch-to-ud",
        12,
        "switch to UD: Q_Key at INIT, no peer at RTR, an address handle in every SEND",
        &[AtLeast("rdma_sends", 8), AtLeast("rdma_recvs", 8)]
    ),
    exercise!(
        "12-srq",
        12,
        "add a shared receive queue: B's QP takes its receives from the SRQ",
        &[AtLeast("rdma_recvs", 8), Still("send_rnr_err")]
    ),
    exercise!(
        "13-credits",
        13,
        "add credit-based flow control: 12 messages through 4 receives, rnr_retry 0",
        &[
            AtLeast("rdma_recvs", 12),
            Still("send_rnr_err"),
            Still("rcvd_rnr_err")
        ]
    ),
];

/// The headers the exercises include.
const HEADERS: &[(&str, &str)] = &[
    (
        "lab_common.h",
        include_str!("../../../lessons/code/lab_common.h"),
    ),
    ("ah_attr.h", include_str!("../../../lessons/code/ah_attr.h")),
];

#[derive(clap::Subcommand, Debug)]
pub enum ExerciseCommand {
    /// List the exercises.
    List,
    /// Copy an exercise's starter (and the course's headers) into DIR.
    Start {
        /// The exercise (see `list`).
        name: String,
        /// Where to put it.
        #[arg(long, default_value = "rdma-exercises")]
        dir: PathBuf,
    },
    /// Build DIR/NAME.c and run it in the lab; say what passed.
    Check {
        /// The exercise.
        name: String,
        /// Where `start` put it.
        #[arg(long, default_value = "rdma-exercises")]
        dir: PathBuf,
    },
    /// CI: every reference solution must pass and every starter must fail (one lab boot).
    #[cfg(feature = "lab")]
    Verify,
    /// In the lab VM: run PROG and report what it did on DEVICE (hw counter deltas,
    /// `rdma resource show` counts before, at its checkpoint and after). `check` runs it.
    #[command(hide = true)]
    Observe {
        /// The RDMA device to watch.
        #[arg(long, default_value = "rxe0")]
        device: String,
        /// The program and its arguments.
        #[arg(last = true, required = true)]
        prog: Vec<String>,
    },
}

/// The observer's lines start with this, so a program's own output cannot be taken for them
/// by accident (and a program that prints them anyway only fools itself).
const OBS: &str = "@@obs ";

/// What one run did, as the observer in the VM saw it.
#[derive(Debug, Default, PartialEq)]
struct Observed {
    code: i32,
    /// hw counter deltas on the device.
    counters: BTreeMap<String, u64>,
    res_before: BTreeMap<String, u64>,
    res_after: BTreeMap<String, u64>,
    /// At the program's `lab_checkpoint()`, if it reached one.
    res_checkpoint: Option<BTreeMap<String, u64>>,
    /// What the observer could not do (no device, no netlink): the run cannot be judged.
    errors: Vec<String>,
}

impl Observed {
    /// Takes the observer's lines out of `output`, which keeps the program's own.
    fn parse(output: &mut String) -> Observed {
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

fn find(name: &str) -> anyhow::Result<&'static Exercise> {
    EXERCISES.iter().find(|e| e.name == name).ok_or_else(|| {
        anyhow::Error::new(CodedError {
            message: format!("no exercise {name:?}: see `rdmactl lesson exercise list`"),
            code: 2,
        })
    })
}

/// Compile `src` with the course's flags into `out` (headers next to `src`).
fn compile(src: &Path, out: &Path) -> anyhow::Result<Result<(), String>> {
    let dir = src.parent().unwrap_or(Path::new("."));
    for (name, text) in HEADERS {
        std::fs::write(dir.join(name), text)
            .with_context(|| format!("writing {}", dir.join(name).display()))?;
    }
    let r = Command::new("gcc")
        .args(["-Wall", "-Wextra", "-Werror", "-O2", "-o"])
        .arg(out)
        .arg(src)
        .arg("-libverbs")
        .output()
        .context("running gcc (needs gcc and libibverbs-dev)")?;
    if r.status.success() {
        Ok(Ok(()))
    } else {
        Ok(Err(String::from_utf8_lossy(&r.stderr).into_owned()))
    }
}

/// Run each (label, binary) under the observer in one lab VM; returns label -> (what the
/// observer saw, the program's own output). Through `rdmactl lab run`: callers check
/// [`super::need_lab`] first.
fn run_in_lab(bins: &[(String, PathBuf)]) -> anyhow::Result<Vec<(String, Observed, String)>> {
    let exe = std::env::current_exe().context("finding rdmactl")?;
    let mut cmd = Command::new(&exe);
    // The lab's own binaries: built with the verbs feature the observer needs, in a target
    // directory of their own (they never replace this rdmactl, whatever its features).
    cmd.args(["lab", "run", "--timeout", "600"]);
    let mut script = String::new();
    for (label, bin) in bins {
        let guest = format!("/opt/rdma/extra/{label}");
        cmd.arg("--add").arg(format!("{}:{guest}", bin.display()));
        script.push_str(&format!(
            "echo '=== {label}'; /opt/rdma/bin/rdmactl lesson exercise observe --device rxe0 -- {guest} rxe0 2>&1; echo \"=== exit $?\"\n"
        ));
    }
    cmd.args(["--", "sh", "-c", &script]);
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .context("running rdmactl lab run")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut results = Vec::new();
    let mut cur: Option<(String, String)> = None;
    for line in text.lines() {
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
    if results.len() != bins.len() {
        bail!(
            "the lab run gave {} of {} results (exit {:?}):\n{text}",
            results.len(),
            bins.len(),
            out.status.code()
        );
    }
    Ok(results)
}

/// What passed and what did not, one line each; true when everything passed. Judges only
/// what the observer saw the program do, never what it printed.
fn judge(e: &Exercise, seen: &Observed, report: &mut Vec<String>) -> bool {
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
    for b in e.expect {
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

/// The guest's half: run `prog` with `LAB_CHECKPOINT` set, read `device`'s counters and
/// resource counts around it (and at its checkpoint, when it stops itself there), print
/// what was seen as `@@obs` lines. Exits 0 when it could observe, whatever the program did.
#[cfg(feature = "verbs")]
fn observe(device: &str, prog: &[String]) -> anyhow::Result<ExitCode> {
    use rdma_experiments::observe::{changes, resources, CounterProbe};
    use std::time::{Duration, Instant};

    let catalog =
        rdmakit::catalog::Catalog::embedded().map_err(|e| anyhow::anyhow!("catalog: {e}"))?;
    let mut probe = CounterProbe::new(Path::new("/sys"), device);
    let before = probe.read().map_err(anyhow::Error::msg)?;
    let res_before = resources(device).map_err(anyhow::Error::msg)?;
    let (first, args) = prog.split_first().context("no program to run")?;
    let mut child = Command::new(first)
        .args(args)
        .env("LAB_CHECKPOINT", "1")
        .spawn()
        .with_context(|| format!("running {first}"))?;
    let pid = child.id();
    // Bounded: an exercise that hangs is killed after a minute and judged on what it did.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut checkpoint = None;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if Instant::now() > deadline {
            println!("{OBS}error {first} ran longer than 60 s: killed");
            child.kill()?;
            break child.wait()?;
        }
        if checkpoint.is_none() && stopped(pid) {
            checkpoint = Some(resources(device).map_err(anyhow::Error::msg)?);
            let cont = Command::new("sh")
                .args(["-c", &format!("kill -CONT {pid}")])
                .status()?;
            if !cont.success() {
                bail!("could not continue {first} (pid {pid}) after its checkpoint");
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let after = probe.read().map_err(anyhow::Error::msg)?;
    let res_after = resources(device).map_err(anyhow::Error::msg)?;
    for c in changes(&before, &after, catalog) {
        if c.port.is_none() || c.port == Some(1) {
            println!("{OBS}counter {} {}", c.name, c.delta);
        }
    }
    for (kind, b) in &res_before {
        println!(
            "{OBS}res {kind} {b} {}",
            res_after.get(kind).copied().unwrap_or(0)
        );
    }
    if let Some(at) = checkpoint {
        println!("{OBS}checkpoint-reached");
        for (kind, v) in at {
            println!("{OBS}checkpoint {kind} {v}");
        }
    }
    println!("{OBS}exit {}", status.code().unwrap_or(-1));
    Ok(ExitCode::SUCCESS)
}

#[cfg(not(feature = "verbs"))]
fn observe(_device: &str, _prog: &[String]) -> anyhow::Result<ExitCode> {
    bail!("`lesson exercise observe` needs rdmactl built with the verbs feature (the lab's is)")
}

/// Is `pid` stopped (it raised SIGSTOP at its checkpoint)? From /proc/PID/stat's state field.
#[cfg_attr(not(feature = "verbs"), allow(dead_code))]
fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}

pub fn run(cmd: ExerciseCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ExerciseCommand::List => {
            for e in EXERCISES {
                println!("{:<26} chapter {:>2}: {}", e.name, e.chapter, e.task);
            }
            println!("\nStart one with `rdmactl lesson exercise start NAME`, then `check NAME`.");
            Ok(ExitCode::SUCCESS)
        }
        ExerciseCommand::Start { name, dir } => {
            let e = find(&name)?;
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let file = dir.join(format!("{}.c", e.name));
            if file.exists() {
                bail!("{} exists: not overwriting your work", file.display());
            }
            std::fs::write(&file, e.starter)
                .with_context(|| format!("writing {}", file.display()))?;
            for (h, text) in HEADERS {
                std::fs::write(dir.join(h), text)?;
            }
            println!("{}: {}", file.display(), e.task);
            println!(
                "Edit it (look for TODO), then: rdmactl lesson exercise check {} --dir {}",
                e.name,
                dir.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        ExerciseCommand::Check { name, dir } => {
            let e = find(&name)?;
            super::need_lab("lesson exercise check")?;
            let src = dir.join(format!("{}.c", e.name));
            if !src.is_file() {
                bail!(
                    "{} does not exist: run `rdmactl lesson exercise start {}` first",
                    src.display(),
                    e.name
                );
            }
            let bin = dir.join(e.name);
            let mut report = Vec::new();
            let passed = match compile(&src, &bin)? {
                Err(msg) => {
                    report.push(format!(
                        "  [FAIL] compiles with -Wall -Wextra -Werror:\n{msg}"
                    ));
                    false
                }
                Ok(()) => {
                    report.push("  [pass] compiles with -Wall -Wextra -Werror".into());
                    let r = run_in_lab(&[(e.name.to_string(), bin)])?;
                    let (_, seen, output) = &r[0];
                    println!("--- output in the lab:\n{}", output.trim_end());
                    judge(e, seen, &mut report)
                }
            };
            println!("{} (chapter {}):", e.name, e.chapter);
            for l in report {
                println!("{l}");
            }
            println!(
                "{}",
                if passed {
                    "PASSED"
                } else {
                    "NOT YET: see the FAIL lines"
                }
            );
            Ok(if passed {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        ExerciseCommand::Observe { device, prog } => observe(&device, &prog),
        #[cfg(feature = "lab")]
        ExerciseCommand::Verify => {
            let dir = tempdir()?;
            let mut bins = Vec::new();
            for e in EXERCISES {
                for (kind, text) in [("solution", e.solution), ("starter", e.starter)] {
                    let src = dir.join(format!("{}.{kind}.c", e.name));
                    std::fs::write(&src, text)?;
                    let bin = dir.join(format!("{}.{kind}", e.name));
                    if let Err(msg) = compile(&src, &bin)? {
                        bail!("{}'s {kind} does not compile:\n{msg}", e.name);
                    }
                    bins.push((format!("{}.{kind}", e.name), bin));
                }
            }
            let results = run_in_lab(&bins)?;
            let mut wrong = 0;
            for (label, seen, output) in &results {
                let (name, kind) = label.rsplit_once('.').unwrap_or((label, ""));
                let e = find(name)?;
                let mut report = Vec::new();
                let passed = judge(e, seen, &mut report);
                let right = passed == (kind == "solution");
                println!(
                    "{} {label}: {}",
                    if right { "ok  " } else { "WRONG" },
                    if passed { "passes" } else { "fails" }
                );
                if right {
                    // What the verdict rests on, so a log shows why each one passed or failed.
                    for l in report.iter().filter(|l| l.contains("[FAIL]") || passed) {
                        println!("    {}", l.trim_start());
                    }
                } else {
                    wrong += 1;
                    println!("{}\n{}", report.join("\n"), output.trim_end());
                }
            }
            let _ = std::fs::remove_dir_all(&dir);
            println!(
                "exercise-verify: {} exercises, {wrong} wrong",
                EXERCISES.len()
            );
            Ok(if wrong == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}

#[cfg(feature = "lab")]
fn tempdir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("rdmactl-exercises-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_exercise_has_a_todo_and_a_different_solution() {
        for e in EXERCISES {
            // The header comment states the task (one TODO); the starter adds its own.
            assert!(
                e.starter.matches("TODO").count() > e.solution.matches("TODO").count(),
                "{}",
                e.name
            );
            assert_ne!(e.starter, e.solution, "{}", e.name);
            assert!(!e.expect.is_empty());
        }
    }

    /// What the observer prints for a good 13-credits run (shape of a lab run's lines).
    const GOOD: &str = "12 messages delivered in order, no RNR
@@obs counter rdma_recvs 12
@@obs counter rdma_sends 12
@@obs counter send_rnr_err 0
@@obs counter rcvd_rnr_err 0
@@obs res cq 0 0
@@obs res ctx 0 0
@@obs res pd 0 0
@@obs res qp 0 0
@@obs exit 0
";

    fn observed(text: &str) -> (Observed, String) {
        let mut out = text.to_string();
        let o = Observed::parse(&mut out);
        (o, out)
    }

    #[test]
    fn parse_separates_the_observer_from_the_program() {
        let (o, out) = observed(GOOD);
        assert_eq!(out, "12 messages delivered in order, no RNR\n");
        assert_eq!(o.code, 0);
        assert_eq!(o.counters["rdma_recvs"], 12);
        assert_eq!(o.res_before["pd"], 0);
        assert!(o.res_checkpoint.is_none());
        assert!(o.errors.is_empty());
        let (o, _) = observed("@@obs checkpoint-reached\n@@obs checkpoint pd 1\n@@obs bogus\n");
        assert_eq!(o.res_checkpoint.unwrap()["pd"], 1);
        assert_eq!(o.errors.len(), 1);
        assert_eq!(o.code, -1, "no exit line: not a clean exit");
    }

    #[test]
    fn judge_rests_on_behaviour_not_on_printed_lines() {
        let e = find("13-credits").unwrap();
        let mut r = Vec::new();
        let (good, _) = observed(GOOD);
        assert!(judge(e, &good, &mut r), "{r:?}");
        // The printed line alone passes nothing: the counters did not move.
        let (o, _) = observed(&GOOD.replace("rdma_recvs 12", "rdma_recvs 0"));
        assert!(!judge(e, &o, &mut r));
        // An RNR NAK is the failure credits exist to prevent.
        let (o, _) = observed(&GOOD.replace("send_rnr_err 0", "send_rnr_err 1"));
        assert!(!judge(e, &o, &mut r));
        let (o, _) = observed(&GOOD.replace("exit 0", "exit 1"));
        assert!(!judge(e, &o, &mut r));
        // Something left behind after the exit.
        let (o, _) = observed(&GOOD.replace("res qp 0 0", "res qp 0 1"));
        assert!(!judge(e, &o, &mut r));
        // A counter the device does not have is not a pass.
        let (o, _) = observed(&GOOD.replace("@@obs counter rcvd_rnr_err 0\n", ""));
        assert!(!judge(e, &o, &mut r));
        // The observer could not read the resources: nothing to judge on.
        let (o, _) = observed(&GOOD.replace("@@obs res", "res"));
        assert!(!judge(e, &o, &mut r));
        assert!(find("nope").is_err());
    }

    #[test]
    fn teardown_is_judged_at_the_checkpoint() {
        let e = find("09-teardown").unwrap();
        let base = "@@obs res pd 1 1\n@@obs res cq 0 0\n@@obs exit 0\n";
        let mut r = Vec::new();
        let (o, _) = observed(base);
        assert!(!judge(e, &o, &mut r), "never reached the checkpoint");
        let (o, _) = observed(&format!(
            "{base}@@obs checkpoint-reached\n@@obs checkpoint pd 1\n@@obs checkpoint cq 0\n@@obs checkpoint ctx 1\n"
        ));
        assert!(judge(e, &o, &mut r), "{r:?}");
        let (o, _) = observed(&format!(
            "{base}@@obs checkpoint-reached\n@@obs checkpoint pd 2\n@@obs checkpoint cq 1\n"
        ));
        r.clear();
        assert!(!judge(e, &o, &mut r));
        assert!(r.iter().any(|l| l.contains("pd +1, cq +1")), "{r:?}");
    }
}
