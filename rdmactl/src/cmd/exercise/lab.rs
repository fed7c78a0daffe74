//! The lab's side of the exercises (the `lab` feature): compiling a program with the
//! course's flags, running programs under the observer through `rdmactl lab run` (in one
//! VM, or between h1 and h2 of the two-host lab, in one boot either way), `check`'s run and
//! `verify`. The operator's rdmactl has none of it.
use anyhow::{bail, Context as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use super::judge::{judge, judge_two, sections, Observed};
use super::{find, Exercise, EXERCISES, HEADERS};

/// Compile `src` with the course's flags into `out` (headers next to `src`).
fn compile(src: &Path, out: &Path, libs: &[&str]) -> anyhow::Result<Result<(), String>> {
    let dir = src.parent().unwrap_or(Path::new("."));
    for (name, text) in HEADERS {
        std::fs::write(dir.join(name), text)
            .with_context(|| format!("writing {}", dir.join(name).display()))?;
    }
    let r = Command::new("gcc")
        .args(["-Wall", "-Wextra", "-Werror", "-O2", "-o"])
        .arg(out)
        .arg(src)
        .args(libs)
        .output()
        .context("running gcc (needs gcc, libibverbs-dev and librdmacm-dev)")?;
    if r.status.success() {
        Ok(Ok(()))
    } else {
        Ok(Err(String::from_utf8_lossy(&r.stderr).into_owned()))
    }
}

/// Run each (label, binary) under the observer in one lab VM (one `rdmactl lab run`);
/// returns label -> (what the observer saw, the program's own output).
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
    let results = sections(text.lines());
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

/// One two-host run: its label, the program, and the scripts h1 and h2 run.
struct TwoHostRun {
    label: String,
    bin: PathBuf,
    h1: String,
    h2: String,
}

/// What one two-host run did on each host: (label, h1's, h2's), each (observed, output).
type TwoHostResult = (String, (Observed, String), (Observed, String));

/// Run each two-host exercise run in one boot of a two-host lab: on h2 the run's h2
/// script, on h1 its h1 script, each under that host's observer, one run after the other
/// in the same order on both hosts (each run has its own port; a client waits for its
/// server by trying again to connect).
fn run_two_hosts(dir: &Path, runs: &[TwoHostRun]) -> anyhow::Result<Vec<TwoHostResult>> {
    let exe = std::env::current_exe().context("finding rdmactl")?;
    let mut cmd = Command::new(&exe);
    cmd.args(["lab", "run", "--hosts", "2", "--timeout", "1200"]);
    let mut script = String::new();
    for (i, r) in runs.iter().enumerate() {
        let guest = format!("/opt/rdma/extra/{}", r.label);
        let port = 7600 + i;
        cmd.arg("--add").arg(format!("{}:{guest}", r.bin.display()));
        for (host, body) in [("h1", &r.h1), ("h2", &r.h2)] {
            let file = dir.join(format!("{}.{host}.sh", r.label));
            std::fs::write(&file, format!("PROG={guest}\nPORT={port}\n{body}\n"))
                .with_context(|| format!("writing {}", file.display()))?;
            cmd.arg("--add")
                .arg(format!("{}:{guest}.{host}.sh", file.display()));
        }
        script.push_str(&format!(
            "echo '=== {label}'; /opt/rdma/bin/rdmactl lesson exercise observe --limit 240 --device rxe0 -- sh {guest}.$LAB_HOST.sh 2>&1; echo \"=== exit $?\"\n",
            label = r.label
        ));
    }
    cmd.args(["--", "sh", "-c", &script]);
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .context("running rdmactl lab run --hosts 2")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let host_lines = |host: &str| {
        let prefix = format!("{host}: ");
        text.lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .map(str::to_string)
            .collect::<Vec<String>>()
    };
    let (h1, h2) = (host_lines("h1"), host_lines("h2"));
    let h1 = sections(h1.iter().map(String::as_str));
    let h2 = sections(h2.iter().map(String::as_str));
    if h1.len() != runs.len() || h2.len() != runs.len() {
        bail!(
            "the two-host lab run gave {} (h1) and {} (h2) of {} results (exit {:?}):\n{text}",
            h1.len(),
            h2.len(),
            runs.len(),
            out.status.code()
        );
    }
    Ok(h1
        .into_iter()
        .zip(h2)
        .map(|((label, o1, out1), (_, o2, out2))| (label, (o1, out1), (o2, out2)))
        .collect())
}

/// `check` in the lab: build DIR/NAME.c, run it (in one VM, or its two sides on h1 and h2),
/// say what passed.
pub(super) fn check(e: &Exercise, dir: &Path) -> anyhow::Result<ExitCode> {
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
    let passed = match compile(&src, &bin, e.libs())? {
        Err(msg) => {
            report.push(format!(
                "  [FAIL] compiles with -Wall -Wextra -Werror:\n{msg}"
            ));
            false
        }
        Ok(()) => {
            report.push("  [pass] compiles with -Wall -Wextra -Werror".into());
            if let Some(two) = &e.two {
                let scripts = tempdir()?;
                let r = run_two_hosts(
                    &scripts,
                    &[TwoHostRun {
                        label: e.name.to_string(),
                        bin,
                        h1: two.h1.to_string(),
                        h2: two.h2.to_string(),
                    }],
                );
                let _ = std::fs::remove_dir_all(&scripts);
                let (_, (o1, out1), (o2, out2)) = &r?[0];
                println!("--- output on h1:\n{}", out1.trim_end());
                println!("--- output on h2:\n{}", out2.trim_end());
                judge_two(e, o1, o2, &mut report)?
            } else {
                let r = run_in_lab(&[(e.name.to_string(), bin)])?;
                let (_, seen, output) = &r[0];
                println!("--- output in the lab:\n{}", output.trim_end());
                judge(e, seen, &mut report)
            }
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

/// `verify`, in a temporary directory of its own.
pub(super) fn verify() -> anyhow::Result<ExitCode> {
    let dir = tempdir()?;
    let r = verify_in(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    r
}

/// `verify`: every solution passes and every starter fails; the one-host exercises in one
/// lab boot, the two-host ones in one boot of two hosts.
fn verify_in(dir: &Path) -> anyhow::Result<ExitCode> {
    let mut bins = Vec::new();
    let mut runs = Vec::new();
    for e in EXERCISES {
        for (kind, text) in [("solution", e.solution), ("starter", e.starter)] {
            let src = dir.join(format!("{}.{kind}.c", e.name));
            std::fs::write(&src, text)?;
            let bin = dir.join(format!("{}.{kind}", e.name));
            if let Err(msg) = compile(&src, &bin, e.libs())? {
                bail!("{}'s {kind} does not compile:\n{msg}", e.name);
            }
            let label = format!("{}.{kind}", e.name);
            match &e.two {
                None => bins.push((label, bin)),
                Some(two) => runs.push(TwoHostRun {
                    label,
                    bin,
                    h1: two.h1.to_string(),
                    h2: two.h2.to_string(),
                }),
            }
        }
    }
    // (label, verdict, report, the programs' output)
    let mut verdicts: Vec<(String, bool, Vec<String>, String)> = Vec::new();
    for (label, seen, output) in run_in_lab(&bins)? {
        let e = find(label.rsplit_once('.').map_or(label.as_str(), |(n, _)| n))?;
        let mut report = Vec::new();
        let passed = judge(e, &seen, &mut report);
        verdicts.push((label, passed, report, output));
    }
    if !runs.is_empty() {
        for (label, (o1, out1), (o2, out2)) in run_two_hosts(dir, &runs)? {
            let e = find(label.rsplit_once('.').map_or(label.as_str(), |(n, _)| n))?;
            let mut report = Vec::new();
            let passed = judge_two(e, &o1, &o2, &mut report)?;
            let output = format!("--- h1:\n{}--- h2:\n{}", out1, out2);
            verdicts.push((label, passed, report, output));
        }
    }
    let mut wrong = 0;
    for (label, passed, report, output) in &verdicts {
        let kind = label.rsplit_once('.').map_or("", |(_, k)| k);
        let right = *passed == (kind == "solution");
        println!(
            "{} {label}: {}",
            if right { "ok  " } else { "WRONG" },
            if *passed { "passes" } else { "fails" }
        );
        if right {
            // What the verdict rests on, so a log shows why each one passed or failed.
            for l in report.iter().filter(|l| l.contains("[FAIL]") || *passed) {
                println!("    {}", l.trim_start());
            }
        } else {
            wrong += 1;
            println!("{}\n{}", report.join("\n"), output.trim_end());
        }
    }
    if verdicts.len() != 2 * EXERCISES.len() {
        bail!(
            "{} verdicts for {} exercises",
            verdicts.len(),
            EXERCISES.len()
        );
    }
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

fn tempdir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("rdmactl-exercises-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}
