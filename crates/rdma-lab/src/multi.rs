//! The multi-host lab: N qemu VMs `h1..hN` on one simulated L2 fabric, a controller that
//! injects faults while commands run, and the exit code of the command(s) run on them.
//!
//! Wiring (see the README's lab section for the picture):
//! - each host has two NICs: eth0 on its own qemu user network (only host-forwarded ports:
//!   rdmad's metrics, the command agent; and the controller at 10.0.2.100:7000 through a
//!   guestfwd), and eth1 on the fabric, 10.2.0.K/24, with rxe0 on it;
//! - the fabric is [`crate::fabric::Switch`], a learning switch in this process, reached by
//!   each qemu through unix datagram sockets (no address on this machine at all);
//! - the controller listens on a unix socket (`control.sock` in the run directory, named in
//!   `<cache>/lab-control`); `rdmactl lab fault|exec|status` talk to it from this machine,
//!   and from inside a host through the guestfwd (qemu runs `rdmactl lab relay` per
//!   connection, which copies bytes to the control socket).
//!
//! Control protocol: one request line per connection, the answer until EOF. The last line
//! is `ok ...` or `error ...` (for `exec`: the command's output, then `LAB-AGENT-EXIT=N`).
//!
//! - `wait-ready`: answers once every host's rxe0 is ACTIVE;
//! - `status`: one line per host;
//! - `exec hK BASE64-SCRIPT`: runs the script on hK through its agent (eth0, not the fabric);
//! - `fault NAME ARGS...`: one of [`FAULTS`] (`multi/faults.rs`).
//!
//! Every fault is logged with a UTC timestamp on stderr and in the fault log.

use std::fs;

use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::fabric::Switch;
use crate::image::BaseImage;
use crate::vm;
use crate::{host, LabError, Progress};

mod control;
mod error;
mod faults;
mod qemu;

use control::{agent_sh, log_fault, qmp, serve};
pub use control::{base64, parse_status, relay, request, ControlTarget};
pub use error::{ControlError, HostNameError, PercentError, QmpError};
pub use faults::{usage as fault_usage, Fault, FAULTS};
use qemu::{spawn_host, supervise};

/// Most hosts a fabric may have.
pub const MAX_HOSTS: usize = 6;
/// The guest address of the controller (a qemu guestfwd on each host's user network).
pub const CONTROL_GUEST_ADDR: &str = "10.0.2.100:7000";
/// The port of the command agent inside every host.
pub const AGENT_PORT: u16 = 7001;
/// The port rdmad listens on inside every host.
pub const RDMAD_PORT: u16 = 9736;
/// Exit code of a command whose host was killed by a fault before it finished (as SIGKILL).
pub const EXIT_KILLED: i32 = 137;
/// How long a host may take from qemu start to ACTIVE before the lab fails.
const BOOT_LIMIT: Duration = Duration::from_secs(300);

/// What the hosts do.
#[derive(Debug, Clone)]
pub enum MultiMode {
    /// Run `argv` on one host (0-based index) or on every host (`None`).
    Run {
        /// The host that runs it, or all.
        on: Option<usize>,
        /// The command.
        argv: Vec<String>,
    },
    /// A shell on h1 on our terminal; the others idle (`lab ssh hK` reaches them).
    Shell,
}

/// One boot of the multi-host lab.
#[derive(Debug, Clone)]
pub struct MultiSpec {
    /// Number of hosts, 2..=[`MAX_HOSTS`].
    pub hosts: usize,
    /// What to run.
    pub mode: MultiMode,
    /// Guest memory per host, MiB.
    pub memory_mib: u32,
    /// CPUs per host.
    pub cpus: u32,
    /// Hard limit for the whole run (every VM is killed after it).
    pub timeout: Option<Duration>,
    /// Host files copied into every host: (host path, guest path).
    pub files: Vec<(PathBuf, String)>,
    /// Environment for the command.
    pub env: Vec<(String, String)>,
    /// Host-forwarded ports: (host index 0-based, 127.0.0.1 port, guest port).
    pub forwards: Vec<(usize, u16, u16)>,
    /// The relay program qemu runs per guest connection to the controller, with its
    /// leading arguments; the control socket path is appended (`rdmactl lab relay`). The
    /// program is copied into the run directory first (`/proc/self/exe` reads even when a
    /// rebuild replaced this binary), so that nothing can replace it under a running lab.
    pub relay: Vec<String>,
}

/// How a multi-host run ended.
#[derive(Debug)]
pub struct MultiOutcome {
    /// The first non-zero exit code in host order (0 if all were 0),
    /// [`EXIT_TIMEOUT`](vm::EXIT_TIMEOUT) or [`EXIT_LAB_FAILURE`](vm::EXIT_LAB_FAILURE).
    pub exit_code: i32,
    /// Each host's command exit code (None: it ran no command or was not reached).
    pub host_codes: Vec<Option<i32>>,
    /// Wall time from the first qemu start until every host was ACTIVE.
    pub all_ready_after: Option<Duration>,
    /// Wall time of the whole run.
    pub elapsed: Duration,
    /// The fault log of the run (kept after it).
    pub fault_log: PathBuf,
    /// Where the hosts' console logs were kept.
    pub console_dir: PathBuf,
}

/// Where a run's output lines go: `(host name, line)`.
pub type LineSink<'a> = &'a mut dyn FnMut(&str, &str);

/// Host name of index `i` (0-based): `h1`...
pub fn host_name(i: usize) -> String {
    format!("h{}", i + 1)
}

/// Index (0-based) of a host name `hK` in a lab of `hosts`.
pub fn parse_host(name: &str, hosts: usize) -> Result<usize, HostNameError> {
    let k: usize = name
        .strip_prefix('h')
        .and_then(|d| d.parse().ok())
        .ok_or_else(|| HostNameError::NotAHostName {
            name: name.to_string(),
            hosts,
        })?;
    if k == 0 || k > hosts {
        return Err(HostNameError::NoSuchHost {
            name: name.to_string(),
            hosts,
        });
    }
    Ok(k - 1)
}

/// `2026-12-01T16:04:05.123Z` for a time.
pub fn utc_timestamp(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z.rem_euclid(146097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Booting,
    Ready,
    /// The qemu exited by itself (command done, or a failure).
    Exited,
    /// Killed by a fault.
    Killed,
}

struct Host {
    child: Option<Child>,
    state: State,
    /// Runs the command (until killed: a restarted host only idles).
    runs_command: bool,
    code: Option<i32>,
    console: PathBuf,
    generation: u32,
    agent_port: u16,
    started: Instant,
    link_up: bool,
    netem: Option<String>,
    /// `kill-rdmad` killed its rdmad (until `start-rdmad` or `clear`).
    rdmad_killed: bool,
    /// `rxe-remove` deleted its rxe0 (until `rxe-add` or `clear`).
    rxe_removed: bool,
}

struct Lab {
    hosts: Mutex<Vec<Host>>,
    ready: Condvar,
    switch: Switch,
    dir: PathBuf,
    /// Where the consoles and the fault log are kept after the run.
    kept: PathBuf,
    fault_log: Mutex<fs::File>,
    stop: AtomicBool,
    failure: Mutex<Option<String>>,
    spec: MultiSpec,
    base: BaseImage,
    initrd: PathBuf,
    control: PathBuf,
    /// The relay command (its program copied into `dir`).
    relay: Vec<String>,
    lines: Mutex<Sender<(usize, String)>>,
    all_ready: Mutex<Option<Duration>>,
    start: Instant,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn free_port() -> Result<u16, LabError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| LabError::Tool {
            tool: "bind 127.0.0.1:0".into(),
            detail: e.to_string(),
        })
}

/// The file in the cache that names the running lab's control socket.
pub fn control_pointer(cache: &Path) -> PathBuf {
    cache.join("lab-control")
}

/// Boot the multi-host lab and run `spec`. Output lines go to `on_line(host, line)` when
/// given, else to our stdout prefixed `hK: `.
pub fn run(
    base: &BaseImage,
    cache: &Path,
    spec: &MultiSpec,
    progress: &Progress,
    on_line: Option<LineSink<'_>>,
) -> Result<MultiOutcome, LabError> {
    if spec.hosts < 2 || spec.hosts > MAX_HOSTS {
        return Err(LabError::Image(format!(
            "a multi-host lab has 2..{MAX_HOSTS} hosts, not {}",
            spec.hosts
        )));
    }
    if let MultiMode::Run { on: Some(i), .. } = spec.mode {
        if i >= spec.hosts {
            return Err(LabError::Image(format!("no host {}", host_name(i))));
        }
    }
    if host::which("qemu-system-x86_64").is_none() {
        host::ensure_tools(progress)?;
    }
    require_dgram_netdev()?;
    // Short: unix socket paths are limited to 108 bytes.
    let dir = cache.join("runs").join(format!(
        "m{}-{}",
        std::process::id(),
        vm::nanos() % 1_000_000_000
    ));
    fs::create_dir_all(&dir).map_err(|e| LabError::io(&dir, e))?;
    let kept = cache.join("last-multi");
    let result = run_in(base, cache, &dir, &kept, spec, progress, on_line);
    // Keep the consoles and the fault log of the last run for diagnosis.
    let _ = fs::remove_dir_all(&kept);
    let _ = fs::create_dir_all(&kept);
    if let Ok(rd) = fs::read_dir(&dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.ends_with(".console") || name == "faults.log" {
                let _ = fs::copy(e.path(), kept.join(&name));
            }
        }
    }
    let _ = fs::remove_dir_all(&dir);
    result
}

/// The fabric needs qemu's `dgram` netdev (qemu 7.2 and later): say so before booting.
fn require_dgram_netdev() -> Result<(), LabError> {
    let out = Command::new("qemu-system-x86_64")
        .args(["-netdev", "help"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LabError::Tool {
            tool: "qemu-system-x86_64 -netdev help".into(),
            detail: e.to_string(),
        })?;
    if String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim() == "dgram")
    {
        Ok(())
    } else {
        Err(LabError::Tool {
            tool: "qemu-system-x86_64".into(),
            detail: "this qemu has no `dgram` netdev, which the multi-host fabric needs (qemu 7.2 or later, e.g. Debian bookworm's qemu-system-x86)".into(),
        })
    }
}

fn run_in(
    base: &BaseImage,
    cache: &Path,
    dir: &Path,
    kept: &Path,
    spec: &MultiSpec,
    progress: &Progress,
    on_line: Option<LineSink<'_>>,
) -> Result<MultiOutcome, LabError> {
    let initrd = dir.join("initrd.cpio");
    let argv = match &spec.mode {
        MultiMode::Run { argv, .. } => Some(argv.clone()),
        MultiMode::Shell => None,
    };
    vm::build_initrd(
        base,
        cache,
        &initrd,
        &dir.join("payload.cpio"),
        argv.as_deref(),
        &spec.env,
        &spec.files,
    )?;
    let relay = install_relay(dir, &spec.relay)?;
    let switch = Switch::start(dir, spec.hosts)?;
    let fault_log_path = dir.join("faults.log");
    let fault_log =
        fs::File::create(&fault_log_path).map_err(|e| LabError::io(&fault_log_path, e))?;
    let control = dir.join("control.sock");
    let listener = UnixListener::bind(&control).map_err(|e| LabError::io(&control, e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| LabError::io(&control, e))?;
    let pointer = control_pointer(cache);
    fs::write(&pointer, control.to_string_lossy().as_bytes())
        .map_err(|e| LabError::io(&pointer, e))?;

    let (tx, rx) = channel::<(usize, String)>();
    let mut hosts = Vec::new();
    for i in 0..spec.hosts {
        let runs_command = match &spec.mode {
            MultiMode::Run { on, .. } => on.is_none_or(|o| o == i),
            MultiMode::Shell => false,
        };
        hosts.push(Host {
            child: None,
            state: State::Booting,
            runs_command,
            code: None,
            console: dir.join(format!("{}.console", host_name(i))),
            generation: 0,
            agent_port: free_port()?,
            started: Instant::now(),
            link_up: true,
            netem: None,
            rdmad_killed: false,
            rxe_removed: false,
        });
    }
    let lab = Arc::new(Lab {
        hosts: Mutex::new(hosts),
        ready: Condvar::new(),
        switch,
        dir: dir.to_path_buf(),
        kept: kept.to_path_buf(),
        fault_log: Mutex::new(fault_log),
        stop: AtomicBool::new(false),
        failure: Mutex::new(None),
        spec: spec.clone(),
        base: base.clone(),
        initrd,
        control: control.clone(),
        relay,
        lines: Mutex::new(tx),
        all_ready: Mutex::new(None),
        start: Instant::now(),
    });

    let interrupted = Arc::new(AtomicBool::new(false));
    let mut sig_ids = Vec::new();
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        if let Ok(id) = signal_hook::flag::register(sig, Arc::clone(&interrupted)) {
            sig_ids.push(id);
        }
    }
    let server = {
        let lab = Arc::clone(&lab);
        std::thread::spawn(move || serve(&lab, listener))
    };
    progress(&format!(
        "booting {} hosts on one fabric (control socket {}, fault log {})",
        spec.hosts,
        control.display(),
        kept.join("faults.log").display()
    ));
    let mut spawn_err = None;
    for i in 0..spec.hosts {
        if let Err(e) = spawn_host(&lab, i) {
            spawn_err = Some(e);
            break;
        }
    }
    let waited = match spawn_err {
        Some(e) => Err(e),
        None => supervise(&lab, &rx, on_line, &interrupted, progress),
    };
    lab.stop.store(true, Ordering::Relaxed);
    lab.ready.notify_all();
    {
        let mut hosts = lock(&lab.hosts);
        for h in hosts.iter_mut() {
            if let Some(mut c) = h.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
    let _ = server.join();
    for id in sig_ids {
        signal_hook::low_level::unregister(id);
    }
    if fs::read_to_string(&pointer).ok().as_deref() == Some(&*control.to_string_lossy()) {
        let _ = fs::remove_file(&pointer);
    }
    let _ = fs::remove_file(&control);
    let exit_code = waited?;
    let hosts = lock(&lab.hosts);
    let all_ready_after = *lock(&lab.all_ready);
    Ok(MultiOutcome {
        exit_code,
        host_codes: hosts.iter().map(|h| h.code).collect(),
        all_ready_after,
        elapsed: lab.start.elapsed(),
        fault_log: kept.join("faults.log"),
        console_dir: kept.to_path_buf(),
    })
}

/// Copy the relay program into the run directory; the relay command with that copy.
fn install_relay(dir: &Path, relay: &[String]) -> Result<Vec<String>, LabError> {
    let Some((program, args)) = relay.split_first() else {
        return Err(LabError::Image("the lab needs a relay program".into()));
    };
    let copy = dir.join("relay");
    fs::copy(program, &copy).map_err(|e| LabError::io(Path::new(program), e))?;
    let mut cmd = vec![copy.to_string_lossy().to_string()];
    cmd.extend(args.iter().cloned());
    cmd.push(dir.join("control.sock").to_string_lossy().to_string());
    if let Some(bad) = cmd.iter().find(|w| w.contains([' ', ','])) {
        return Err(LabError::Image(format!(
            "the lab relay command word {bad:?} has a space or comma, which qemu's guestfwd cannot take (set RDMA_LAB_CACHE to a path without them)"
        )));
    }
    cmd.pop();
    Ok(cmd)
}

#[cfg(test)]
mod tests;
