//! `lab run` and `lab up`, on one VM or a multi-host fabric.

use std::net::TcpListener;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rdma_lab::multi::{self, MultiMode};
use rdma_lab::vm::{self, Mode};

use super::build::{build_image, course_examples, locate, project_binaries};
use super::spec::{multi_spec_from, parse_env, parse_forward, parse_multi_forward, spec_from};
use super::{exit_code, progress, RunArgs, UpArgs, RDMAD_PORT};

pub(super) fn run_cmd(a: RunArgs) -> Result<ExitCode> {
    if a.vm.hosts > 1 {
        return run_multi(a);
    }
    if a.on.is_some() {
        bail!("--on hK needs --hosts 2 or more");
    }
    let (cache, workspace) = locate()?;
    let base = build_image(&cache)?;
    let mut bins = project_binaries(&a.vm, workspace.as_deref())?;
    bins.extend(course_examples(workspace.as_deref()));
    let mut spec = spec_from(&a.vm, bins)?;
    spec.mode = Mode::Run(a.command.clone());
    spec.rxe = !a.no_rxe;
    spec.timeout = Some(Duration::from_secs(a.timeout));
    for f in &a.forward {
        spec.forwards.push(parse_forward(f)?);
    }
    for kv in &a.env {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("--env {kv}: expected KEY=VALUE"))?;
        spec.env.push((k.to_string(), v.to_string()));
    }
    let outcome = vm::run(&base, &cache, &spec, &progress, None)?;
    if outcome.exit_code == vm::EXIT_TIMEOUT {
        eprintln!(
            "lab: timed out after {} s; the VM was stopped (console log: {})",
            a.timeout,
            outcome.console_log.display()
        );
    }
    Ok(exit_code(outcome.exit_code))
}

pub(super) fn run_multi(a: RunArgs) -> Result<ExitCode> {
    if a.no_rxe {
        bail!("--no-rxe is for the single-host lab");
    }
    let hosts = a.vm.hosts as usize;
    let on =
        a.on.as_deref()
            .map(|h| multi::parse_host(h, hosts).map_err(|e| anyhow::anyhow!("--on: {e}")))
            .transpose()?;
    let mut forwards = Vec::new();
    for f in &a.forward {
        forwards.extend(parse_multi_forward(f, hosts)?);
    }
    let (cache, workspace) = locate()?;
    let base = build_image(&cache)?;
    let mut bins = project_binaries(&a.vm, workspace.as_deref())?;
    bins.extend(course_examples(workspace.as_deref()));
    let mode = MultiMode::Run {
        on,
        argv: a.command.clone(),
    };
    let mut spec = multi_spec_from(&a.vm, bins, mode)?;
    spec.timeout = Some(Duration::from_secs(a.timeout));
    spec.env = parse_env(&a.env)?;
    spec.forwards = forwards;
    let outcome = multi::run(&base, &cache, &spec, &progress, None)?;
    if let Some(r) = outcome.all_ready_after {
        progress(&format!(
            "all {hosts} hosts ACTIVE {:.1} s after the first qemu started; the run took {:.1} s",
            r.as_secs_f64(),
            outcome.elapsed.as_secs_f64()
        ));
    }
    let codes: Vec<String> = outcome
        .host_codes
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.map(|c| format!("{}={c}", multi::host_name(i))))
        .collect();
    if !codes.is_empty() {
        progress(&format!("exit codes: {}", codes.join(" ")));
    }
    progress(&format!(
        "consoles and fault log kept in {}",
        outcome.console_dir.display()
    ));
    Ok(exit_code(outcome.exit_code))
}

/// A free TCP port on 127.0.0.1: `want` if free, else one the OS picks.
pub(super) fn free_port(want: u16) -> Result<u16> {
    if TcpListener::bind(("127.0.0.1", want)).is_ok() {
        return Ok(want);
    }
    let l = TcpListener::bind(("127.0.0.1", 0)).context("no free port on 127.0.0.1")?;
    Ok(l.local_addr()?.port())
}

pub(super) fn up(a: UpArgs) -> Result<ExitCode> {
    if a.vm.hosts > 1 {
        return up_multi(a);
    }
    let (cache, workspace) = locate()?;
    let base = build_image(&cache)?;
    let mut bins = project_binaries(&a.vm, workspace.as_deref())?;
    bins.extend(course_examples(workspace.as_deref()));
    let mut spec = spec_from(&a.vm, bins)?;
    let port = free_port(a.port)?;
    spec.mode = Mode::Shell;
    spec.forwards = vec![(port, RDMAD_PORT)];
    spec.timeout = None;
    eprintln!();
    eprintln!(
        "lab: booting the Soft-RoCE lab (kernel {})",
        base.kernel_release
    );
    eprintln!("lab: rdmad metrics:  http://127.0.0.1:{port}/metrics   (from this host, while the lab runs)");
    eprintln!("lab: in another terminal:  curl -s http://127.0.0.1:{port}/metrics | grep ^rdma_");
    eprintln!("lab: the shell below is inside the VM; `exit` powers it off.");
    let outcome = vm::run(&base, &cache, &spec, &progress, None)?;
    eprintln!(
        "lab: the VM is off (ran {:.0} s)",
        outcome.elapsed.as_secs_f64()
    );
    Ok(exit_code(outcome.exit_code))
}

pub(super) fn up_multi(a: UpArgs) -> Result<ExitCode> {
    let hosts = a.vm.hosts as usize;
    let (cache, workspace) = locate()?;
    let base = build_image(&cache)?;
    let mut bins = project_binaries(&a.vm, workspace.as_deref())?;
    bins.extend(course_examples(workspace.as_deref()));
    let mut spec = multi_spec_from(&a.vm, bins, MultiMode::Shell)?;
    let mut ports = Vec::new();
    for i in 0..hosts {
        let want = a.port.saturating_add(i as u16);
        let mut p = free_port(want)?;
        while ports.contains(&p) {
            p = free_port(0)?;
        }
        ports.push(p);
        spec.forwards.push((i, p, RDMAD_PORT));
    }
    eprintln!();
    eprintln!(
        "lab: booting {hosts} Soft-RoCE hosts on one fabric (kernel {})",
        base.kernel_release
    );
    for (i, p) in ports.iter().enumerate() {
        eprintln!(
            "lab: {} rdmad metrics:  http://127.0.0.1:{p}/metrics",
            multi::host_name(i)
        );
    }
    eprintln!("lab: the shell below is h1; `exit` powers every host off.");
    eprintln!("lab: other hosts, from another terminal:  rdmactl lab ssh h2   (Ctrl-] detaches)");
    eprintln!("lab:                  or one command:     rdmactl lab exec h2 -- rdma link");
    eprintln!("lab: faults:  rdmactl lab fault link h2 down | netem h2 loss 5% | ingress h2 loss 5% | partition h1 h2 [--oneway] | kill-rdmad h2 | rxe-remove h2 | kill h3 | restart h3");
    let outcome = multi::run(&base, &cache, &spec, &progress, None)?;
    eprintln!(
        "lab: the hosts are off (ran {:.0} s; fault log {})",
        outcome.elapsed.as_secs_f64(),
        outcome.fault_log.display()
    );
    Ok(exit_code(outcome.exit_code))
}
