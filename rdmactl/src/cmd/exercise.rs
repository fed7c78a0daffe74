//! `rdmactl lesson exercise`: the course's checked exercises.
//!
//! Each exercise is a C program with a TODO (its starter) and the outcome it must reach
//! (exit 0 and some lines of output). `start` copies the starter and the course's headers
//! into a directory; `check` compiles the learner's file with the course's flags and runs
//! it in a fresh lab VM (`rdmactl lab run`), then says what passed and what did not.
//! `verify` is CI's: every reference solution must pass and every starter must fail, all
//! in one boot.
use anyhow::{bail, Context as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use crate::exit::CodedError;

/// One exercise.
struct Exercise {
    name: &'static str,
    chapter: u8,
    task: &'static str,
    starter: &'static str,
    solution: &'static str,
    /// Lines the program's output must contain (besides exit 0 and "OK").
    expect: &'static [&'static str],
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

const EXERCISES: &[Exercise] = &[
    exercise!(
        "05-address-vector",
        5,
        "make the address vector work on RoCE as well as on InfiniBand",
        &["A and B connected; 10 round trips"]
    ),
    exercise!(
        "09-teardown",
        9,
        "fix a broken teardown order",
        &["teardown: 0 EBUSY, everything freed"]
    ),
    exercise!(
        "12-selective-signalling",
        12,
        "add selective signalling: 64 WRITEs, 4 completions",
        &["64 WRITEs, 4 completions"]
    ),
    exercise!(
        "12-switch-to-ud",
        12,
        "switch to UD: Q_Key at INIT, no peer at RTR, an address handle in every SEND",
        &["8 datagrams from A reached B"]
    ),
    exercise!(
        "12-srq",
        12,
        "add a shared receive queue: B's QP takes its receives from the SRQ",
        &["8 messages received through the SRQ"]
    ),
    exercise!(
        "13-credits",
        13,
        "add credit-based flow control: 12 messages through 4 receives, rnr_retry 0",
        &["12 messages delivered in order, no RNR"]
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
    Verify,
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

/// Run each (label, binary) in one lab VM; returns label -> (exit code, output).
fn run_in_lab(bins: &[(String, PathBuf)]) -> anyhow::Result<Vec<(String, i32, String)>> {
    let exe = std::env::current_exe().context("finding rdmactl")?;
    let mut cmd = Command::new(&exe);
    cmd.args(["lab", "run", "--timeout", "600"]);
    // Reuse the binaries next to this one, so the lab does not rebuild (and replace) us.
    if let Some(dir) = exe.parent().filter(|d| d.join("rdmad").is_file()) {
        cmd.arg("--bin-dir").arg(dir);
    }
    let mut script = String::new();
    for (label, bin) in bins {
        let guest = format!("/opt/rdma/extra/{label}");
        cmd.arg("--add").arg(format!("{}:{guest}", bin.display()));
        script.push_str(&format!(
            "echo '=== {label}'; {guest} rxe0 2>&1; echo \"=== exit $?\"\n"
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
            if let Some((label, output)) = cur.take() {
                results.push((label, code.trim().parse().unwrap_or(-1), output));
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

/// What passed and what did not, one line each; true when everything passed.
fn judge(e: &Exercise, code: i32, output: &str, report: &mut Vec<String>) -> bool {
    let mut ok = true;
    let mut item = |pass: bool, what: String| {
        report.push(format!("  [{}] {what}", if pass { "pass" } else { "FAIL" }));
        ok &= pass;
    };
    item(code == 0, format!("exit code 0 (got {code})"));
    for want in e.expect {
        item(output.contains(want), format!("prints {want:?}"));
    }
    item(
        output.lines().any(|l| l == "OK"),
        "prints \"OK\"".to_string(),
    );
    ok
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
                    let (_, code, output) = &r[0];
                    println!("--- output in the lab:\n{}", output.trim_end());
                    judge(e, *code, output, &mut report)
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
            for (label, code, output) in &results {
                let (name, kind) = label.rsplit_once('.').unwrap_or((label, ""));
                let e = find(name)?;
                let mut report = Vec::new();
                let passed = judge(e, *code, output, &mut report);
                let right = passed == (kind == "solution");
                println!(
                    "{} {label}: {}",
                    if right { "ok  " } else { "WRONG" },
                    if passed { "passes" } else { "fails" }
                );
                if !right {
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

    #[test]
    fn judge_needs_exit_0_every_line_and_ok() {
        let e = find("13-credits").unwrap();
        let mut r = Vec::new();
        assert!(judge(
            e,
            0,
            "12 messages delivered in order, no RNR\nOK\n",
            &mut r
        ));
        assert!(!judge(
            e,
            1,
            "12 messages delivered in order, no RNR\nOK\n",
            &mut r
        ));
        assert!(!judge(e, 0, "OK\n", &mut r));
        assert!(!judge(
            e,
            0,
            "12 messages delivered in order, no RNR\n",
            &mut r
        ));
        assert!(find("nope").is_err());
    }
}
