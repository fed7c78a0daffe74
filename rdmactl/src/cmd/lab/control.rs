//! `lab fault|status|exec|ssh`: requests to a running lab's controller.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use rdma_lab::multi::{self, ControlTarget};
use rdma_lab::vm::{self};

use super::build::locate;
use super::{exit_code, ControlArgs, ExecArgs, FaultArgs, SshArgs};

/// Where `lab fault|exec|status|ssh` talk to: --control, $RDMA_LAB_CONTROL, the controller
/// of this host's lab when run inside a multi-host lab, else the last lab of this cache.
pub(super) fn control_target(c: &ControlArgs) -> Result<ControlTarget> {
    if let Some(p) = &c.control {
        return Ok(ControlTarget::Unix(p.clone()));
    }
    if let Some(p) = std::env::var_os("RDMA_LAB_CONTROL") {
        return Ok(ControlTarget::Unix(PathBuf::from(p)));
    }
    if Path::new("/etc/lab/fabric").is_file() {
        return Ok(ControlTarget::Guest);
    }
    let (cache, _) = locate()?;
    let pointer = multi::control_pointer(&cache);
    let path = std::fs::read_to_string(&pointer).with_context(|| {
        format!(
            "no running multi-host lab ({} is missing; start one with `rdmactl lab up --hosts 3` or `lab run --hosts N`, or pass --control)",
            pointer.display()
        )
    })?;
    Ok(ControlTarget::Unix(PathBuf::from(path.trim())))
}

pub(super) fn control_text(target: &ControlTarget, line: &str) -> Result<String> {
    let mut out = Vec::new();
    multi::request(target, line, &mut out)
        .with_context(|| format!("talking to the lab controller ({target:?})"))?;
    Ok(String::from_utf8_lossy(&out).to_string())
}

/// Print a controller answer; exit 0 for `ok`, 1 for `error`.
pub(super) fn answer(text: &str) -> ExitCode {
    let last = text.lines().last().unwrap_or("");
    if text.starts_with("ok") {
        println!(
            "{}",
            text.trim_end()
                .strip_prefix("ok ")
                .unwrap_or(text.trim_end())
        );
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "lab: {}",
            last.strip_prefix("error ").unwrap_or(if last.is_empty() {
                "no answer from the lab controller"
            } else {
                last
            })
        );
        ExitCode::from(1)
    }
}

pub(super) fn fault(a: FaultArgs) -> Result<ExitCode> {
    let target = control_target(&a.control)?;
    let text = control_text(&target, &format!("fault {}", a.fault.join(" ")))?;
    Ok(answer(&text))
}

pub(super) fn status(a: ControlArgs) -> Result<ExitCode> {
    let target = control_target(&a)?;
    Ok(answer(&control_text(&target, "status")?))
}

pub(super) fn exec(a: ExecArgs) -> Result<ExitCode> {
    let target = control_target(&a.control)?;
    let script = a.command.join(" ");
    let text = control_text(
        &target,
        &format!("exec {} {}", a.host, multi::base64(script.as_bytes())),
    )?;
    let mut code = None;
    for line in text.lines() {
        if let Some(c) = line.strip_prefix("LAB-AGENT-EXIT=") {
            code = c.trim().parse::<i32>().ok();
        } else if let Some(e) = line.strip_prefix("error ") {
            eprintln!("lab: {e}");
        } else {
            println!("{line}");
        }
    }
    Ok(exit_code(code.unwrap_or(vm::EXIT_LAB_FAILURE)))
}

pub(super) fn ssh(a: SshArgs) -> Result<ExitCode> {
    let target = control_target(&a.control)?;
    let ControlTarget::Unix(control) = target else {
        bail!("`lab ssh` runs on the machine that runs the lab (inside a host, use `lab exec`)");
    };
    let dir = control
        .parent()
        .context("control socket has no directory")?;
    let tty = dir.join(format!("{}.tty", a.host));
    if !tty.exists() {
        bail!(
            "{} has no console socket ({}): h1's shell is the terminal of `lab up`, and hosts are h2..hN",
            a.host,
            tty.display()
        );
    }
    let sock = std::os::unix::net::UnixStream::connect(&tty)
        .with_context(|| format!("connecting to {}", tty.display()))?;
    eprintln!(
        "lab: attached to {}'s console; press Enter for a prompt, Ctrl-] to detach",
        a.host
    );
    crossterm::terminal::enable_raw_mode().context("setting the terminal to raw mode")?;
    let mut down = sock.try_clone()?;
    let printer = std::thread::spawn(move || {
        let mut out = std::io::stdout();
        let mut buf = [0u8; 4096];
        loop {
            match std::io::Read::read(&mut down, &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let _ = std::io::Write::write_all(&mut out, &buf[..n]);
                    let _ = std::io::Write::flush(&mut out);
                }
            }
        }
    });
    let mut up = sock;
    let mut stdin = std::io::stdin();
    let mut buf = [0u8; 1024];
    loop {
        let n = match std::io::Read::read(&mut stdin, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(pos) = buf[..n].iter().position(|b| *b == 0x1d) {
            let _ = std::io::Write::write_all(&mut up, &buf[..pos]);
            break;
        }
        if std::io::Write::write_all(&mut up, &buf[..n]).is_err() {
            break;
        }
    }
    let _ = up.shutdown(std::net::Shutdown::Both);
    let _ = printer.join();
    let _ = crossterm::terminal::disable_raw_mode();
    eprintln!("\r\nlab: detached from {}", a.host);
    Ok(ExitCode::SUCCESS)
}
