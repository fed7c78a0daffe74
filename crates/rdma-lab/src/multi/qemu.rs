//! The hosts' qemus: starting (or restarting) one, and watching them all until the command
//! finished, the time limit, or a failure.

use std::fs;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fabric;
use crate::vm::{self, EXIT_LAB_FAILURE, EXIT_TIMEOUT};
use crate::{LabError, Progress};

use super::{
    host_name, lock, Lab, LineSink, MultiMode, State, AGENT_PORT, BOOT_LIMIT, CONTROL_GUEST_ADDR,
    RDMAD_PORT,
};

/// Start (or restart) host `i`'s qemu. A restarted host idles (it does not rerun the command).
pub(super) fn spawn_host(lab: &Arc<Lab>, i: usize) -> Result<(), LabError> {
    let spec = &lab.spec;
    let k = i + 1;
    let name = host_name(i);
    let (mode, console, agent_port) = {
        let mut hosts = lock(&lab.hosts);
        let h = &mut hosts[i];
        h.generation += 1;
        if h.generation > 1 {
            h.console = lab.dir.join(format!("{name}-boot{}.console", h.generation));
        }
        let mode = match spec.mode {
            MultiMode::Shell if i == 0 && h.generation == 1 => "shell",
            _ if h.runs_command => "run",
            _ => "idle",
        };
        (mode, h.console.clone(), h.agent_port)
    };
    let fab_local = fabric::host_path(&lab.dir, k);
    let _ = fs::remove_file(&fab_local);
    let monitor = lab.dir.join(format!("{name}.qmp"));
    let tty = lab.dir.join(format!("{name}.tty"));
    let _ = fs::remove_file(&monitor);
    let _ = fs::remove_file(&tty);
    // no_timer_check: under TCG on a loaded machine the kernel's early check that the
    // IO-APIC timer ticks can time out and panic ("IO-APIC + timer doesn't work"); N VMs
    // booting at once make that likely.
    let append = format!(
        "console=ttyS0 quiet loglevel=3 panic=-1 mitigations=off no_timer_check lab.mode={mode} lab.devices=1 lab.rxe=1 lab.port={RDMAD_PORT} lab.hosts={} lab.host={k}",
        spec.hosts
    );
    // restrict=on: nothing the guest sends leaves this machine except through the hostfwd
    // ports and the guestfwd relay (see vm.rs).
    let mut user =
        format!("user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{agent_port}-:{AGENT_PORT}");
    for (hi, hp, gp) in &spec.forwards {
        if *hi == i {
            user.push_str(&format!(",hostfwd=tcp:127.0.0.1:{hp}-:{gp}"));
        }
    }
    let mut relay = lab.relay.clone();
    relay.push(lab.control.to_string_lossy().to_string());
    user.push_str(&format!(
        ",guestfwd=tcp:{CONTROL_GUEST_ADDR}-cmd:{}",
        relay.join(" ")
    ));
    let fab = format!(
        "dgram,id=fab,local.type=unix,local.path={},remote.type=unix,remote.path={}",
        fab_local.display(),
        fabric::switch_path(&lab.dir, k).display()
    );
    // Like a single-host run: qemu writes its pid into the run directory, which goes away
    // with the run, so tests/run can find a VM left behind wherever the cache is.
    let pidfile = lab.dir.join(format!("{name}.{}", vm::QEMU_PIDFILE));
    let mut cmd = vm::QemuVm {
        kernel: &lab.base.kernel,
        initrd: &lab.initrd,
        memory_mib: spec.memory_mib,
        cpus: spec.cpus,
        append: &append,
        console: &console,
        user_netdev: &user,
        pidfile: &pidfile,
    }
    .command();
    cmd.args(["-name", &name])
        .args(["-netdev", &fab])
        .args([
            "-device",
            &format!("virtio-net-pci,netdev=fab,mac=52:54:00:02:00:{k:02x},romfile="),
        ])
        .arg("-qmp")
        .arg(format!("unix:{},server=on,wait=off", monitor.display()));
    match mode {
        "shell" => {
            cmd.args([
                "-chardev",
                "stdio,id=io,signal=off",
                "-serial",
                "chardev:io",
            ]);
            cmd.stdin(Stdio::inherit()).stdout(Stdio::inherit());
        }
        "run" => {
            cmd.args(["-chardev", "stdio,id=io", "-serial", "chardev:io"]);
            cmd.stdin(Stdio::null()).stdout(Stdio::piped());
        }
        _ => {
            cmd.arg("-chardev")
                .arg(format!(
                    "socket,id=io,path={},server=on,wait=off",
                    tty.display()
                ))
                .args(["-serial", "chardev:io"]);
            cmd.stdin(Stdio::null()).stdout(Stdio::null());
        }
    }
    cmd.stderr(Stdio::inherit());
    let mut child = cmd.spawn().map_err(|e| LabError::Tool {
        tool: "qemu-system-x86_64".into(),
        detail: e.to_string(),
    })?;
    if let Some(out) = child.stdout.take() {
        let tx = lock(&lab.lines).clone();
        std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match r.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let line = String::from_utf8_lossy(&buf)
                            .trim_end_matches(['\n', '\r'])
                            .to_string();
                        if tx.send((i, line)).is_err() {
                            break;
                        }
                    }
                }
            }
        });
    }
    let mut hosts = lock(&lab.hosts);
    let h = &mut hosts[i];
    h.child = Some(child);
    h.state = State::Booting;
    h.started = Instant::now();
    h.link_up = true;
    h.netem = None;
    h.rdmad_killed = false;
    h.rxe_removed = false;
    drop(hosts);
    // A new boot has a clean NIC: an ingress loss set on the old one is gone too.
    lab.switch.set_ingress_loss(i, 0);
    Ok(())
}

/// Watch the hosts until the command(s) finished, the time limit, or a failure.
pub(super) fn supervise(
    lab: &Arc<Lab>,
    rx: &std::sync::mpsc::Receiver<(usize, String)>,
    on_line: Option<LineSink<'_>>,
    interrupted: &AtomicBool,
    progress: &Progress,
) -> Result<i32, LabError> {
    let mut on_line = on_line;
    let mut emit = |i: usize, line: &str| match on_line.as_mut() {
        Some(f) => f(&host_name(i), line),
        None => println!("{}: {line}", host_name(i)),
    };
    let shell = matches!(lab.spec.mode, MultiMode::Shell);
    loop {
        while let Ok((i, line)) = rx.try_recv() {
            emit(i, &line);
        }
        if interrupted.load(Ordering::Relaxed) {
            return Err(LabError::Vm {
                detail: "interrupted; the VMs were stopped".into(),
                console: lab.kept.clone(),
            });
        }
        if let Some(t) = lab.spec.timeout {
            if lab.start.elapsed() > t {
                progress(&format!(
                    "timed out after {} s; every VM was stopped",
                    t.as_secs()
                ));
                return Ok(EXIT_TIMEOUT);
            }
        }
        if let Some(f) = lock(&lab.failure).clone() {
            progress(&f);
            return Ok(EXIT_LAB_FAILURE);
        }
        let mut failure = None;
        let mut done = true;
        let mut all_ready = true;
        {
            let mut hosts = lock(&lab.hosts);
            for (i, h) in hosts.iter_mut().enumerate() {
                if h.state == State::Booting {
                    let log = fs::read(&h.console).unwrap_or_default();
                    let log = String::from_utf8_lossy(&log);
                    if log.contains("LAB-READY") {
                        h.state = State::Ready;
                    } else if h.started.elapsed() > BOOT_LIMIT {
                        failure = Some(format!(
                            "{} was not ACTIVE {} s after its start",
                            host_name(i),
                            BOOT_LIMIT.as_secs()
                        ));
                    }
                }
                if let Some(c) = h.child.as_mut() {
                    if let Ok(Some(_)) = c.try_wait() {
                        h.child = None;
                        h.state = State::Exited;
                        let log = fs::read(&h.console).unwrap_or_default();
                        let log = String::from_utf8_lossy(&log).to_string();
                        let (code, error) = vm::parse_console(&log);
                        if let Some(e) = &error {
                            failure = Some(format!("{}: {e}", host_name(i)));
                        }
                        if h.runs_command {
                            h.code = Some(code.unwrap_or(EXIT_LAB_FAILURE));
                            if code.is_none() {
                                failure = Some(format!(
                                    "{} stopped without reporting an exit code{}",
                                    host_name(i),
                                    vm::tail(&log)
                                ));
                            }
                        } else if !(shell && i == 0) {
                            failure = Some(format!(
                                "{} stopped by itself (console: {}){}",
                                host_name(i),
                                h.console.display(),
                                vm::tail(&log)
                            ));
                        } else {
                            h.code = code;
                        }
                    }
                }
                if h.state != State::Ready {
                    all_ready = false;
                }
                let finished = if shell {
                    i != 0 || h.state == State::Exited
                } else {
                    !h.runs_command || h.code.is_some()
                };
                done &= finished;
            }
        }
        if all_ready {
            let mut r = lock(&lab.all_ready);
            if r.is_none() {
                *r = Some(lab.start.elapsed());
                lab.ready.notify_all();
            }
        }
        if let Some(f) = failure {
            // Drain what the hosts printed before saying why the lab failed.
            while let Ok((i, line)) = rx.try_recv() {
                emit(i, &line);
            }
            progress(&f);
            return Ok(EXIT_LAB_FAILURE);
        }
        if done {
            std::thread::sleep(Duration::from_millis(50));
            while let Ok((i, line)) = rx.try_recv() {
                emit(i, &line);
            }
            let hosts = lock(&lab.hosts);
            if shell {
                return Ok(hosts[0].code.unwrap_or(0));
            }
            let code = hosts
                .iter()
                .filter_map(|h| h.code)
                .find(|c| *c != 0)
                .unwrap_or(0);
            return Ok(code);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
