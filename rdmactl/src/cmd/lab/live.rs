//! `lab test`: the live suite in one boot, and its verdict.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rdma_lab::multi::{self, MultiMode};
use rdma_lab::suite::{self, Counts};
use rdma_lab::vm::{self, Mode};

use super::build::{build_image, build_live_tests, course_examples, locate, project_binaries};
use super::spec::{multi_spec_from, spec_from};
use super::{progress, TestArgs, VmArgs};

pub(super) fn test(a: TestArgs) -> Result<ExitCode> {
    let (cache, workspace) = locate()?;
    let ws = workspace.context("`lab test` runs from a checkout of the project")?;
    let base = build_image(&cache)?;
    let multi_host = a.hosts > 1;
    let vm_args = VmArgs {
        devices: if multi_host { 1 } else { 2 },
        memory: None,
        cpus: None,
        hosts: a.hosts,
        add: Vec::new(),
        bin_dir: None,
    };
    // The suite first: the VM build after it links the VM's binaries (see build_live_tests).
    let bins = suite::select(build_live_tests(&ws)?, multi_host, a.only.as_deref());
    if bins.is_empty() {
        bail!(
            "no live test binary matches --only {}",
            a.only.as_deref().unwrap_or("(none)")
        );
    }
    let mut files = project_binaries(&vm_args, Some(&ws))?;
    files.extend(course_examples(Some(&ws)));
    for b in &bins {
        files.push((b.path.clone(), suite::guest_path(b)));
    }
    let script = suite::script(&bins, &a.test_args);
    let env = vec![
        (
            "RDMACTL_BIN".to_string(),
            "/opt/rdma/bin/rdmactl".to_string(),
        ),
        ("RDMAD_BIN".into(), "/opt/rdma/bin/rdmad".into()),
        ("RUST_BACKTRACE".into(), "1".into()),
    ];
    if multi_host {
        if a.no_rxe {
            bail!("--no-rxe is for the single-host suite");
        }
        let mode = MultiMode::Run {
            on: Some(0),
            argv: vec!["sh".into(), "-c".into(), script],
        };
        let mut spec = multi_spec_from(&vm_args, files, mode)?;
        spec.timeout = Some(Duration::from_secs(a.timeout));
        spec.env = env;
        progress(&format!(
            "running {} multi-host test binaries on h1 of {} hosts",
            bins.len(),
            a.hosts
        ));
        let mut counts = Counts::default();
        // Only h1 runs the suite: its lines as they are, so that libtest's summaries
        // start their lines (tests/run counts them).
        let mut on_line = |_host: &str, line: &str| {
            println!("{line}");
            counts.add_line(line);
        };
        let outcome = multi::run(&base, &cache, &spec, &progress, Some(&mut on_line))?;
        if let Some(r) = outcome.all_ready_after {
            progress(&format!(
                "all {} hosts were ACTIVE {:.1} s after the first qemu started; the whole run took {:.1} s",
                a.hosts,
                r.as_secs_f64(),
                outcome.elapsed.as_secs_f64()
            ));
        }
        progress(&format!("fault log: {}", outcome.fault_log.display()));
        return Ok(suite_verdict(
            outcome.exit_code,
            counts,
            bins.len(),
            a.timeout,
        ));
    }
    let mut spec = spec_from(&vm_args, files)?;
    spec.mode = Mode::Run(vec!["sh".into(), "-c".into(), script]);
    spec.rxe = !a.no_rxe;
    spec.timeout = Some(Duration::from_secs(a.timeout));
    spec.env = env;
    progress(&format!(
        "running {} live test binaries in one lab boot",
        bins.len()
    ));
    let mut counts = Counts::default();
    let mut on_line = |line: &str| {
        println!("{line}");
        counts.add_line(line);
    };
    let outcome = vm::run(&base, &cache, &spec, &progress, Some(&mut on_line))?;
    if let Some(r) = outcome.ready_after {
        progress(&format!(
            "devices were ACTIVE {:.1} s after boot; the whole run took {:.1} s",
            r.as_secs_f64(),
            outcome.elapsed.as_secs_f64()
        ));
    }
    Ok(suite_verdict(
        outcome.exit_code,
        counts,
        bins.len(),
        a.timeout,
    ))
}

/// Print the totals and turn them into the suite's exit code.
pub(super) fn suite_verdict(
    vm_code: i32,
    counts: Counts,
    binaries: usize,
    timeout: u64,
) -> ExitCode {
    if counts.summaries < binaries {
        eprintln!(
            "lab: {} of {binaries} test binaries printed no result",
            binaries - counts.summaries
        );
    }
    let counts = counts.finish(binaries);
    println!(
        "live: {} passed, {} failed, {} ignored",
        counts.passed, counts.failed, counts.ignored
    );
    if vm_code == vm::EXIT_TIMEOUT {
        eprintln!("lab: the live suite timed out after {timeout} s");
    }
    if counts.passed_with(vm_code) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
