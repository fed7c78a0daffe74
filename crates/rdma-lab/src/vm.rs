//! Booting the lab: one qemu process per run, a per-run payload appended to the base
//! initramfs, a hard timeout, and the payload's exit code read back from the kernel console.
//!
//! Serial ports: ttyS0 is the kernel console, written to a log file (the exit-code marker
//! `LAB-EXIT-CODE=N` is printed there); ttyS1 carries the payload's output (run mode) or the
//! interactive shell (shell mode) and is connected to our stdio or to a pipe we read.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cpio::CpioWriter;
use crate::image::BaseImage;
use crate::strip;
use crate::{host, LabError, Progress};

/// Exit code when the run hit its time limit (as timeout(1)).
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit code when the lab itself failed (no boot, no device, no marker).
pub const EXIT_LAB_FAILURE: i32 = 125;

/// What to do once the lab is up.
#[derive(Debug, Clone)]
pub enum Mode {
    /// Run this command (argv) and return its exit code.
    Run(Vec<String>),
    /// Start rdmad and give an interactive shell on our terminal.
    Shell,
}

/// One boot of the lab.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// Run a command, or a shell.
    pub mode: Mode,
    /// 1: rxe0 on eth0. 2: also rxe_a/rxe_b on a veth pair (10.1.0.1, 10.1.0.2).
    pub devices: u32,
    /// Load rdma_rxe and create the devices (false only to prove tests fail without them).
    pub rxe: bool,
    /// Guest memory in MiB (memory registration pins guest RAM).
    pub memory_mib: u32,
    /// Guest CPUs.
    pub cpus: u32,
    /// Hard limit for the whole run; the VM is killed after it.
    pub timeout: Option<Duration>,
    /// Host files copied in: (host path, absolute guest path).
    pub files: Vec<(PathBuf, String)>,
    /// Environment for the command.
    pub env: Vec<(String, String)>,
    /// Forward 127.0.0.1:host to the guest's port: (host, guest). In shell mode the first
    /// one is where rdmad listens inside.
    pub forwards: Vec<(u16, u16)>,
}

impl Default for RunSpec {
    fn default() -> Self {
        RunSpec {
            mode: Mode::Shell,
            devices: 1,
            rxe: true,
            memory_mib: 2048,
            cpus: 2,
            timeout: Some(Duration::from_secs(900)),
            files: Vec::new(),
            env: Vec::new(),
            forwards: Vec::new(),
        }
    }
}

/// How a run ended.
#[derive(Debug)]
pub struct RunOutcome {
    /// The command's exit code, or [`EXIT_TIMEOUT`].
    pub exit_code: i32,
    /// Wall time from qemu start to exit.
    pub elapsed: Duration,
    /// Guest uptime when the devices were ACTIVE (from the console log), if seen.
    pub ready_after: Option<Duration>,
    /// Where the console log of this run was kept.
    pub console_log: PathBuf,
}

/// Quote a word for the guest's POSIX shell.
pub fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The guest script that runs the payload command.
pub fn command_script(argv: &[String], env: &[(String, String)]) -> String {
    let mut s = String::from("#!/bin/sh\n");
    for (k, v) in env {
        s.push_str(&format!("export {k}={}\n", shell_quote(v)));
    }
    let words: Vec<String> = argv.iter().map(|a| shell_quote(a)).collect();
    s.push_str(&words.join(" "));
    s.push('\n');
    s
}

/// Find `LAB-EXIT-CODE=N` (and any `LAB-ERROR=...`) in a console log.
pub fn parse_console(log: &str) -> (Option<i32>, Option<String>) {
    let mut code = None;
    let mut error = None;
    for line in log.lines() {
        if let Some(pos) = line.find("LAB-EXIT-CODE=") {
            let digits: String = line[pos + 14..]
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            code = digits.parse().ok();
        }
        if let Some(pos) = line.find("LAB-ERROR=") {
            error = Some(line[pos + 10..].trim().to_string());
        }
    }
    (code, error)
}

/// What every lab VM's qemu command line is made of, single-host or one host of a fabric:
/// the accelerator, CPU, memory, kernel + initrd + command line, the serial console log, the
/// user-mode NIC (n0, with its forwards) and the pidfile tests/run looks for. Callers add
/// what differs (the console's chardev, a fabric NIC, a QMP monitor, a name).
pub(crate) struct QemuVm<'a> {
    pub kernel: &'a Path,
    pub initrd: &'a Path,
    pub memory_mib: u32,
    pub cpus: u32,
    pub append: &'a str,
    pub console: &'a Path,
    pub user_netdev: &'a str,
    pub pidfile: &'a Path,
}

impl QemuVm<'_> {
    pub(crate) fn command(&self) -> Command {
        let accel = pick_accel();
        let mut cmd = Command::new("qemu-system-x86_64");
        cmd.args([
            "-nodefaults",
            "-no-user-config",
            "-no-reboot",
            "-display",
            "none",
        ])
        .args(["-accel", accel])
        .args(["-cpu", if accel == "kvm" { "host" } else { "max" }])
        .args(["-m", &self.memory_mib.to_string()])
        .args(["-smp", &self.cpus.to_string()])
        .arg("-kernel")
        .arg(self.kernel)
        .arg("-initrd")
        .arg(self.initrd)
        .args(["-append", self.append])
        .arg("-serial")
        .arg(format!("file:{}", self.console.display()))
        .args(["-netdev", self.user_netdev])
        .args(["-device", "virtio-net-pci,netdev=n0,romfile="])
        .arg("-pidfile")
        .arg(self.pidfile);
        cmd
    }
}

/// KVM only where it really works: /dev/kvm usable and the CPU advertises vmx/svm
/// (a nested "pagetable VM" without them fails on cmpxchg16b). RDMA_LAB_ACCEL=tcg|kvm overrides.
pub fn pick_accel() -> &'static str {
    match std::env::var("RDMA_LAB_ACCEL").as_deref() {
        Ok("kvm") => return "kvm",
        Ok("tcg") => return "tcg",
        _ => {}
    }
    let kvm_ok = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    let cpu_ok = fs::read_to_string("/proc/cpuinfo")
        .map(|c| {
            c.lines()
                .filter(|l| l.starts_with("flags"))
                .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"))
        })
        .unwrap_or(false);
    if kvm_ok && cpu_ok {
        "kvm"
    } else {
        "tcg"
    }
}

fn payload(
    cache: &Path,
    argv: Option<&[String]>,
    env: &[(String, String)],
    files: &[(PathBuf, String)],
    out: &Path,
) -> Result<(), LabError> {
    let file = fs::File::create(out).map_err(|e| LabError::io(out, e))?;
    let mut w = CpioWriter::new(std::io::BufWriter::new(file));
    let io = |e: std::io::Error| LabError::io(out, e);
    w.dir("opt/rdma/bin", 0o755).map_err(io)?;
    if let Some(argv) = argv {
        w.file("opt/rdma/cmd", 0o755, command_script(argv, env).as_bytes())
            .map_err(io)?;
    }
    for (host_path, guest) in files {
        // ELF files without their debug sections (see strip.rs), with the host file's mode.
        let copy = strip::guest_copy(cache, host_path)?;
        let data = fs::read(&copy).map_err(|e| LabError::io(&copy, e))?;
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(host_path)
            .map(|m| m.permissions().mode())
            .unwrap_or(0o644);
        w.file(guest, mode, &data).map_err(io)?;
    }
    w.finish().map_err(io)?;
    Ok(())
}

/// The file in a run's directory (`<cache>/runs/<id>/`) where qemu writes its pid. The
/// directory is removed when the run ends, so a pidfile naming a live qemu is a VM left behind
/// (tests/run checks that none is).
pub const QEMU_PIDFILE: &str = "qemu.pid";

/// Write `initrd`: the base initramfs followed by a payload archive (built in `extra`) with
/// the command script (when `argv` is given) and the files (ELF files stripped of their
/// debug sections, copies kept in `cache`); the kernel unpacks both in turn.
pub(crate) fn build_initrd(
    base: &BaseImage,
    cache: &Path,
    initrd: &Path,
    extra: &Path,
    argv: Option<&[String]>,
    env: &[(String, String)],
    files: &[(PathBuf, String)],
) -> Result<(), LabError> {
    fs::copy(&base.initrd, initrd).map_err(|e| LabError::io(initrd, e))?;
    payload(cache, argv, env, files, extra)?;
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(initrd)
        .map_err(|e| LabError::io(initrd, e))?;
    let data = fs::read(extra).map_err(|e| LabError::io(extra, e))?;
    f.write_all(&data).map_err(|e| LabError::io(initrd, e))?;
    Ok(())
}

/// Boot the lab, run `spec`, and wait. Output lines of a run go to `on_line` when given,
/// else straight to our stdout.
pub fn run(
    base: &BaseImage,
    cache: &Path,
    spec: &RunSpec,
    progress: &Progress,
    on_line: Option<&mut dyn FnMut(&str)>,
) -> Result<RunOutcome, LabError> {
    if host::which("qemu-system-x86_64").is_none() {
        host::ensure_tools(progress)?;
    }
    let run_dir = cache
        .join("runs")
        .join(format!("{}-{}", std::process::id(), nanos()));
    fs::create_dir_all(&run_dir).map_err(|e| LabError::io(&run_dir, e))?;
    let result = run_in(base, cache, &run_dir, spec, on_line);
    let _ = fs::remove_dir_all(&run_dir);
    result
}

pub(crate) fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

fn run_in(
    base: &BaseImage,
    cache: &Path,
    run_dir: &Path,
    spec: &RunSpec,
    on_line: Option<&mut dyn FnMut(&str)>,
) -> Result<RunOutcome, LabError> {
    let initrd = run_dir.join("initrd.cpio");
    let argv = match &spec.mode {
        Mode::Run(argv) => Some(argv.as_slice()),
        Mode::Shell => None,
    };
    build_initrd(
        base,
        cache,
        &initrd,
        &run_dir.join("payload.cpio"),
        argv,
        &spec.env,
        &spec.files,
    )?;
    let console = run_dir.join("console.log");
    let kept_console = cache.join("last-console.log");

    let mode = match spec.mode {
        Mode::Shell => "shell",
        Mode::Run(_) => "run",
    };
    let guest_port = spec.forwards.first().map(|f| f.1).unwrap_or(9736);
    let append = format!(
        "console=ttyS0 quiet loglevel=3 panic=-1 mitigations=off lab.mode={mode} lab.devices={} lab.rxe={} lab.port={guest_port}",
        spec.devices,
        if spec.rxe { 1 } else { 0 }
    );
    // restrict=on: the guest reaches nothing beyond this qemu except through the hostfwd
    // ports (qemu's user network answers any other TCP connect with a reset at once).
    let mut netdev = "user,id=n0,restrict=on".to_string();
    for (h, g) in &spec.forwards {
        netdev.push_str(&format!(",hostfwd=tcp:127.0.0.1:{h}-:{g}"));
    }
    let mut cmd = QemuVm {
        kernel: &base.kernel,
        initrd: &initrd,
        memory_mib: spec.memory_mib,
        cpus: spec.cpus,
        append: &append,
        console: &console,
        user_netdev: &netdev,
        pidfile: &run_dir.join(QEMU_PIDFILE),
    }
    .command();
    let interactive = matches!(spec.mode, Mode::Shell);
    if interactive {
        cmd.args([
            "-chardev",
            "stdio,id=io,signal=off",
            "-serial",
            "chardev:io",
        ]);
        cmd.stdin(Stdio::inherit()).stdout(Stdio::inherit());
    } else {
        cmd.args(["-chardev", "stdio,id=io", "-serial", "chardev:io"]);
        cmd.stdin(Stdio::null());
        if on_line.is_some() {
            cmd.stdout(Stdio::piped());
        } else {
            cmd.stdout(Stdio::inherit());
        }
    }
    cmd.stderr(Stdio::inherit());

    let stop = Arc::new(AtomicBool::new(false));
    let mut sig_ids = Vec::new();
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        if let Ok(id) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            sig_ids.push(id);
        }
    }
    let start = Instant::now();
    let mut child = cmd.spawn().map_err(|e| LabError::Tool {
        tool: "qemu-system-x86_64".into(),
        detail: e.to_string(),
    })?;
    let waited = wait(&mut child, spec.timeout, &stop, on_line);
    for id in sig_ids {
        signal_hook::low_level::unregister(id);
    }
    let elapsed = start.elapsed();
    let log = fs::read(&console).unwrap_or_default();
    let _ = fs::write(&kept_console, &log);
    let log = String::from_utf8_lossy(&log).to_string();
    let ready_after = ready_time(&log);
    match waited? {
        Waited::TimedOut => {
            return Ok(RunOutcome {
                exit_code: EXIT_TIMEOUT,
                elapsed,
                ready_after,
                console_log: kept_console,
            })
        }
        Waited::Interrupted => {
            return Err(LabError::Vm {
                detail: "interrupted; the VM was stopped".into(),
                console: kept_console,
            })
        }
        Waited::Exited => {}
    }
    let (code, error) = parse_console(&log);
    match (code, error) {
        (Some(c), None) => Ok(RunOutcome {
            exit_code: c,
            elapsed,
            ready_after,
            console_log: kept_console,
        }),
        (_, Some(err)) => Err(LabError::Vm {
            detail: err,
            console: kept_console,
        }),
        (None, None) => Err(LabError::Vm {
            detail: format!(
                "it stopped after {:.1} s without reporting an exit code{}",
                elapsed.as_secs_f64(),
                tail(&log)
            ),
            console: kept_console,
        }),
    }
}

/// The guest's uptime when its devices were ACTIVE (`LAB-READY ... uptime=S`).
pub fn ready_time(log: &str) -> Option<Duration> {
    let line = log.lines().find(|l| l.contains("LAB-READY"))?;
    let value = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("uptime="))?;
    value.parse::<f64>().ok().map(Duration::from_secs_f64)
}

pub(crate) fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return String::new();
    }
    format!(
        "; console ends with:\n{}",
        lines[lines.len().saturating_sub(8)..].join("\n")
    )
}

enum Waited {
    Exited,
    TimedOut,
    Interrupted,
}

fn wait(
    child: &mut Child,
    timeout: Option<Duration>,
    stop: &AtomicBool,
    on_line: Option<&mut dyn FnMut(&str)>,
) -> Result<Waited, LabError> {
    let start = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = child.stdout.take().map(|out| {
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
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        })
    });
    let mut on_line = on_line;
    let outcome = loop {
        while let Ok(line) = rx.try_recv() {
            if let Some(f) = on_line.as_mut() {
                f(&line);
            }
        }
        match child.try_wait() {
            Ok(Some(_)) => break Waited::Exited,
            Ok(None) => {}
            Err(e) => {
                return Err(LabError::Tool {
                    tool: "qemu-system-x86_64".into(),
                    detail: e.to_string(),
                })
            }
        }
        if stop.load(Ordering::Relaxed) {
            let _ = child.kill();
            let _ = child.wait();
            break Waited::Interrupted;
        }
        if let Some(t) = timeout {
            if start.elapsed() > t {
                let _ = child.kill();
                let _ = child.wait();
                break Waited::TimedOut;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if let Some(h) = reader {
        let _ = h.join();
    }
    while let Ok(line) = rx.try_recv() {
        if let Some(f) = on_line.as_mut() {
            f(&line);
        }
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_the_shell() {
        assert_eq!(shell_quote("ib_write_bw"), "ib_write_bw");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
        let script = command_script(
            &["sh".into(), "-c".into(), "exit 7".into()],
            &[("X".into(), "1 2".into())],
        );
        assert_eq!(script, "#!/bin/sh\nexport X='1 2'\nsh -c 'exit 7'\n");
        // The real shell agrees: run the script on the host.
        let out = Command::new("sh").arg("-c").arg(&script).status().unwrap();
        assert_eq!(out.code(), Some(7));
    }

    #[test]
    fn console_marker_is_found_among_kernel_noise() {
        let log = "[    1.0] rdma_rxe: loaded\nLAB-READY devices=rxe0\nLAB-EXIT-CODE=3\r\n[ 2.0] reboot: Power down\n";
        assert_eq!(parse_console(log), (Some(3), None));
        let bad = "LAB-ERROR=rxe0 port 1 did not become ACTIVE in 15 s\nLAB-EXIT-CODE=125\n";
        assert_eq!(
            parse_console(bad),
            (
                Some(125),
                Some("rxe0 port 1 did not become ACTIVE in 15 s".into())
            )
        );
        assert_eq!(parse_console("Kernel panic"), (None, None));
        assert_eq!(
            ready_time("LAB-READY devices=rxe0 uptime=4.52\n"),
            Some(Duration::from_secs_f64(4.52))
        );
    }
}
