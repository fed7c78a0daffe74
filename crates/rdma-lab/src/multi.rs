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

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::fabric::{self, Switch};
use crate::image::BaseImage;
use crate::vm::{self, EXIT_LAB_FAILURE, EXIT_TIMEOUT};
use crate::{host, LabError, Progress};

mod faults;
pub use faults::{usage as fault_usage, Fault, FAULTS};

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
    /// The first non-zero exit code in host order (0 if all were 0), [`EXIT_TIMEOUT`] or
    /// [`EXIT_LAB_FAILURE`].
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
pub fn parse_host(name: &str, hosts: usize) -> Result<usize, String> {
    let k: usize = name
        .strip_prefix('h')
        .and_then(|d| d.parse().ok())
        .ok_or_else(|| format!("{name:?} is not a host name (h1..h{hosts})"))?;
    if k == 0 || k > hosts {
        return Err(format!("no host {name} (this lab has h1..h{hosts})"));
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

/// Start (or restart) host `i`'s qemu. A restarted host idles (it does not rerun the command).
fn spawn_host(lab: &Arc<Lab>, i: usize) -> Result<(), LabError> {
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
fn supervise(
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

fn serve(lab: &Arc<Lab>, listener: UnixListener) {
    while !lab.stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                let lab = Arc::clone(lab);
                std::thread::spawn(move || {
                    let _ = stream.set_nonblocking(false);
                    handle(&lab, stream);
                });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn handle(lab: &Arc<Lab>, stream: UnixStream) {
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut out = stream;
    let mut line = String::new();
    let mut r = BufReader::new(read_half.take(1 << 20));
    if r.read_line(&mut line).is_err() {
        return;
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    let answer = match words.as_slice() {
        ["wait-ready"] => wait_ready(lab),
        ["status"] => Ok(status(lab)),
        ["exec", host, script] => {
            let _ = exec(lab, host, script, &mut out);
            return;
        }
        ["fault", rest @ ..] => faults::fault(lab, rest),
        [] => Err("empty request".to_string()),
        other => Err(format!(
            "unknown request {:?} (wait-ready, status, exec, fault)",
            other.join(" ")
        )),
    };
    let _ = match answer {
        Ok(text) => writeln!(out, "ok {text}"),
        Err(text) => writeln!(out, "error {text}"),
    };
}

fn wait_ready(lab: &Lab) -> Result<String, String> {
    let mut guard = lock(&lab.all_ready);
    loop {
        if let Some(d) = *guard {
            return Ok(format!(
                "all {} hosts ACTIVE {:.1} s after the lab started",
                lab.spec.hosts,
                d.as_secs_f64()
            ));
        }
        if lab.stop.load(Ordering::Relaxed) {
            return Err("the lab is stopping".into());
        }
        guard = lab
            .ready
            .wait_timeout(guard, Duration::from_millis(500))
            .map(|(g, _)| g)
            .unwrap_or_else(|e| e.into_inner().0);
    }
}

fn status(lab: &Lab) -> String {
    let mut s = format!("{} hosts", lab.spec.hosts);
    for i in 0..lab.spec.hosts {
        let (rx, tx, dropped, lost) = lab.switch.stats(i);
        let (state, generation, link_up) = {
            let hosts = lock(&lab.hosts);
            (hosts[i].state, hosts[i].generation, hosts[i].link_up)
        };
        s.push_str(&format!(
            "\n{} {state:?} boot={generation} link={} {} fabric_rx={rx} fabric_tx={tx} dropped={dropped} ingress_lost={lost}",
            host_name(i),
            if link_up { "up" } else { "down" },
            faults::host_faults(lab, i),
        ));
    }
    for (a, b, both) in lab.switch.partitions() {
        s.push_str(&format!(
            "\npartition {} {}{}",
            host_name(a),
            host_name(b),
            if both { "" } else { " --oneway" }
        ));
    }
    s
}

/// Run a base64 script on a host through its agent, streaming the answer to `out`.
fn exec(lab: &Lab, host: &str, script: &str, out: &mut dyn Write) -> std::io::Result<()> {
    let i = match parse_host(host, lab.spec.hosts) {
        Ok(i) => i,
        Err(e) => return writeln!(out, "error {e}"),
    };
    let port = lock(&lab.hosts)[i].agent_port;
    match agent(port, script, out) {
        Ok(()) => Ok(()),
        Err(e) => writeln!(out, "error {host}: the agent did not answer: {e}"),
    }
}

fn agent(port: u16, script: &str, out: &mut dyn Write) -> std::io::Result<()> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.write_all(script.as_bytes())?;
    s.write_all(b"\n")?;
    let mut buf = [0u8; 8192];
    let mut seen_exit = false;
    let mut tail = Vec::new();
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        out.write_all(&buf[..n])?;
        tail.extend_from_slice(&buf[..n]);
        if tail.len() > 64 {
            tail.drain(..tail.len() - 64);
        }
        if String::from_utf8_lossy(&tail).contains("LAB-AGENT-EXIT=") {
            seen_exit = true;
        }
    }
    if seen_exit {
        Ok(())
    } else {
        Err(std::io::Error::other(
            "the connection closed without an exit code",
        ))
    }
}

/// Run a shell command on host `i` through its agent; (exit code, output).
fn agent_sh(lab: &Lab, i: usize, script: &str) -> Result<(i32, String), String> {
    let port = lock(&lab.hosts)[i].agent_port;
    let mut out = Vec::new();
    agent(port, &base64(script.as_bytes()), &mut out)
        .map_err(|e| format!("{}: the agent did not answer: {e}", host_name(i)))?;
    let text = String::from_utf8_lossy(&out).to_string();
    let code = text
        .lines()
        .filter_map(|l| l.strip_prefix("LAB-AGENT-EXIT="))
        .next_back()
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or(-1);
    Ok((code, text))
}

/// Standard base64 with padding (what busybox `base64 -d` reads).
pub fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for j in 0..4 {
            if j <= c.len() {
                s.push(T[(n >> (18 - 6 * j) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

fn log_fault(lab: &Lab, what: &str) -> String {
    let line = format!("{} {what}", utc_timestamp(SystemTime::now()));
    eprintln!("lab: fault {line}");
    let _ = writeln!(lock(&lab.fault_log), "{line}");
    line
}

/// One QMP command (a JSON object) on host `i`'s monitor socket: Ok on `{"return": ...}`,
/// the error line otherwise.
fn qmp(lab: &Lab, i: usize, command: &str) -> Result<(), String> {
    let path = lab.dir.join(format!("{}.qmp", host_name(i)));
    let s = UnixStream::connect(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut w = s.try_clone().map_err(|e| e.to_string())?;
    let mut r = BufReader::new(s);
    // Answers are one JSON object per line; asynchronous events ("event") are skipped.
    let answer = |r: &mut BufReader<UnixStream>| -> Result<String, String> {
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).map_err(|e| format!("QMP: {e}"))? == 0 {
                return Err("QMP closed".into());
            }
            if !line.contains("\"event\"") {
                return Ok(line);
            }
        }
    };
    let greeting = answer(&mut r)?;
    if !greeting.contains("\"QMP\"") {
        return Err(format!("not a QMP greeting: {greeting}"));
    }
    for cmd in [r#"{"execute":"qmp_capabilities"}"#, command] {
        writeln!(w, "{cmd}").map_err(|e| e.to_string())?;
        let line = answer(&mut r)?;
        if !line.contains("\"return\"") {
            return Err(line.trim().to_string());
        }
    }
    Ok(())
}

/// Where a control request goes: the lab's unix socket (on this machine) or the guestfwd
/// address (inside a host).
#[derive(Debug, Clone)]
pub enum ControlTarget {
    /// The control socket of a running lab.
    Unix(PathBuf),
    /// `10.0.2.100:7000` inside a host.
    Guest,
}

/// Send one request line and return the whole answer.
pub fn request(target: &ControlTarget, line: &str, out: &mut dyn Write) -> std::io::Result<()> {
    fn talk<S: Read + Write>(mut s: S, line: &str, out: &mut dyn Write) -> std::io::Result<()> {
        s.write_all(line.as_bytes())?;
        s.write_all(b"\n")?;
        s.flush()?;
        std::io::copy(&mut s, out)?;
        Ok(())
    }
    match target {
        ControlTarget::Unix(p) => talk(UnixStream::connect(p)?, line, out),
        ControlTarget::Guest => talk(TcpStream::connect(CONTROL_GUEST_ADDR)?, line, out),
    }
}

/// What qemu runs per guest connection to the controller: copy stdin to the control
/// socket and the answer to stdout.
pub fn relay(control: &Path) -> std::io::Result<()> {
    let sock = UnixStream::connect(control)?;
    let mut up = sock.try_clone()?;
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut up);
        let _ = up.shutdown(std::net::Shutdown::Write);
    });
    let mut down = sock;
    let mut stdout = std::io::stdout().lock();
    std::io::copy(&mut down, &mut stdout)?;
    stdout.flush()
}

/// Parse `status` answers into host -> fields (for tests and `lab status`).
pub fn parse_status(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once(' ')?;
            name.starts_with('h')
                .then(|| (name.to_string(), rest.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_are_checked() {
        assert_eq!(parse_host("h1", 3), Ok(0));
        assert_eq!(parse_host("h3", 3), Ok(2));
        assert!(parse_host("h4", 3).is_err());
        assert!(parse_host("h0", 3).is_err());
        assert!(parse_host("x1", 3).is_err());
        assert!(parse_host("h", 3).is_err());
    }

    #[test]
    fn base64_matches_the_standard() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        // The host's base64(1) decodes ours.
        let script = "echo \"it's $LAB_HOST\"\nexit 3\n";
        let mut child = Command::new("base64")
            .arg("-d")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(base64(script.as_bytes()).as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), script);
    }

    #[test]
    fn timestamps_are_utc_rfc3339() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_054_400_123);
        assert_eq!(utc_timestamp(t), "2026-11-30T16:00:00.123Z");
        assert_eq!(
            utc_timestamp(SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00.000Z"
        );
    }

    #[test]
    fn status_lines_parse() {
        let s = parse_status(
            "3 hosts\nh1 Ready boot=1 link=up\nh2 Killed boot=1 link=up\npartition h1 h2",
        );
        assert_eq!(s.len(), 2);
        assert!(s["h2"].starts_with("Killed"));
    }
}
