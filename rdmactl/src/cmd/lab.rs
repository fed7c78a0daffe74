//! `rdmactl lab`: the Soft-RoCE lab (a qemu VM with a real rxe device).
//!
//! `lab up` boots it with rdmad inside and gives a shell; `lab run -- CMD` runs one command
//! in a fresh VM and returns its exit code; `lab test` runs the live test suite in one boot.
//! Before booting, the project's binaries are rebuilt (when run from a checkout) so the VM
//! always holds what the source says.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rdma_lab::multi::{self, ControlTarget, MultiMode, MultiSpec};
use rdma_lab::suite::{self, Counts, TestBinary};
use rdma_lab::vm::{self, Mode, RunSpec};

/// The port rdmad listens on inside the lab (and by default on the host).
pub const RDMAD_PORT: u16 = 9736;

/// Arguments of `rdmactl lab`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(clap::Subcommand, Debug)]
enum LabCommand {
    /// Boot the lab with rdmad inside, forward its metrics port, and open a shell in it.
    Up(UpArgs),
    /// Run one command in a fresh lab VM and return its exit code.
    ///
    /// Exit code: the command's, 124 on timeout, 125 when the lab itself failed.
    Run(RunArgs),
    /// Build the live test suite and run all of it in one lab boot.
    Test(TestArgs),
    /// Inject a fault into a running multi-host lab (from this machine or inside a host).
    ///
    /// netem hK ARGS (tc netem on hK's fabric egress, e.g. `loss 5%`, `delay 2ms`,
    /// `delay 20ms 5ms`, `reorder 25% gap 5`, `corrupt 1%`) | ingress hK loss P% (the fabric
    /// switch drops P% of the frames towards hK) | clear hK (undoes netem, ingress,
    /// kill-rdmad, rxe-remove on hK) | link hK down|up | partition hA hB [--oneway] (with
    /// --oneway only hA -> hB is dropped) | heal [hA hB] | kill hK | restart hK |
    /// kill-rdmad hK | start-rdmad hK | rxe-remove hK | rxe-add hK. Each fault is logged
    /// with a UTC timestamp.
    Fault(FaultArgs),
    /// Run a shell command on one host of a running multi-host lab; returns its exit code.
    Exec(ExecArgs),
    /// Show the hosts of a running multi-host lab (state, link, netem, fabric frames).
    Status(ControlArgs),
    /// Attach this terminal to a host's serial console shell (Ctrl-] detaches).
    Ssh(SshArgs),
    /// (internal) What qemu runs for each guest connection to the lab controller.
    #[command(hide = true)]
    Relay {
        /// The control socket.
        socket: PathBuf,
    },
    /// Build (or check) the cached lab image and print where it is.
    Build,
    /// Remove the lab cache (downloaded packages and the image).
    Clean,
}

#[derive(clap::Args, Debug, Clone)]
struct VmArgs {
    /// 1: rxe0 on eth0. 2: also rxe_a and rxe_b on a veth pair (10.1.0.1 and 10.1.0.2).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=2))]
    devices: u32,
    /// Guest memory in MiB, per host (registering N bytes of memory pins N bytes of guest
    /// RAM). Default 2048 for one host, 1024 per host for --hosts 2 and more.
    #[arg(long, value_parser = clap::value_parser!(u32).range(256..=16384))]
    memory: Option<u32>,
    /// Guest CPUs, per host. Default 2 for one host, 1 per host for --hosts 2 and more.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=8))]
    cpus: Option<u32>,
    /// Hosts: 1 is the single-VM lab; 2..6 boot h1..hN on one fabric (10.2.0.K/24, rxe0
    /// on eth1, DNS on h1 for hK.lab, rdmad.lab and _rdmad-probe._tcp.rdmad.lab).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=6))]
    hosts: u32,
    /// Copy a host file into the VM: HOST[:GUEST]; GUEST defaults to /opt/rdma/extra/<name>.
    #[arg(long = "add", value_name = "HOST[:GUEST]")]
    add: Vec<String>,
    /// Use these binaries instead of building rdmad and rdmactl from the checkout.
    #[arg(long, value_name = "DIR")]
    bin_dir: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct UpArgs {
    #[command(flatten)]
    vm: VmArgs,
    /// Host port for rdmad's metrics (127.0.0.1 only); a free one is picked if it is taken.
    #[arg(long, default_value_t = RDMAD_PORT)]
    port: u16,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    vm: VmArgs,
    /// Hard time limit in seconds for the whole run (boot included).
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// Environment for the command: KEY=VALUE.
    #[arg(long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Forward 127.0.0.1:HOST on this machine to GUEST in the VM (e.g. to scrape an rdmad
    /// started by CMD from a Prometheus on the host): HOST:GUEST, repeatable. With --hosts:
    /// hK:HOST:GUEST for one host, or HOST:GUEST for HOST, HOST+1, ... on h1, h2, ...
    #[arg(long = "forward", value_name = "[hK:]HOST:GUEST")]
    forward: Vec<String>,
    /// With --hosts: run CMD on this host only (the others idle); default: on every host.
    /// CMD sees its host's name in $LAB_HOST.
    #[arg(long, value_name = "hK")]
    on: Option<String>,
    /// Boot WITHOUT rdma_rxe (no RDMA device): proves that live tests fail without one.
    #[arg(long)]
    no_rxe: bool,
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(clap::Args, Debug)]
struct ControlArgs {
    /// The control socket of the lab (default: the last lab started from this cache; inside
    /// a host: the controller at 10.0.2.100:7000).
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
struct FaultArgs {
    #[command(flatten)]
    control: ControlArgs,
    /// The fault: netem hK ARGS.. | ingress hK loss P% | clear hK | link hK down|up |
    /// partition hA hB [--oneway] | heal [hA hB] | kill hK | restart hK | kill-rdmad hK |
    /// start-rdmad hK | rxe-remove hK | rxe-add hK.
    #[arg(
        trailing_var_arg = true,
        required = true,
        allow_hyphen_values = true,
        value_name = "FAULT"
    )]
    fault: Vec<String>,
}

#[derive(clap::Args, Debug)]
struct ExecArgs {
    #[command(flatten)]
    control: ControlArgs,
    /// The host (h1..hN).
    host: String,
    /// The command (run by the host's sh).
    #[arg(
        trailing_var_arg = true,
        required = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    command: Vec<String>,
}

#[derive(clap::Args, Debug)]
struct SshArgs {
    #[command(flatten)]
    control: ControlArgs,
    /// The host (h2..hN; h1's shell is the terminal of `lab up`).
    host: String,
}

#[derive(clap::Args, Debug)]
struct TestArgs {
    /// 1: the single-VM suite. 2..6: the multi-host suite (tests/live/tests/multihost*.rs)
    /// runs on h1 of a lab of this many hosts.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=6))]
    hosts: u32,
    /// Hard time limit in seconds for the whole suite.
    #[arg(long, default_value_t = 1800)]
    timeout: u64,
    /// Boot WITHOUT rdma_rxe: the suite must then fail.
    #[arg(long)]
    no_rxe: bool,
    /// Only test binaries whose name contains this.
    #[arg(long)]
    only: Option<String>,
    /// Passed to every test binary (e.g. a test name filter).
    #[arg(trailing_var_arg = true)]
    test_args: Vec<String>,
}

/// Run `rdmactl lab ...`.
pub fn run(args: Args) -> Result<ExitCode> {
    match args.command {
        LabCommand::Up(a) => up(a),
        LabCommand::Run(a) => run_cmd(a),
        LabCommand::Test(a) => test(a),
        LabCommand::Fault(a) => fault(a),
        LabCommand::Exec(a) => exec(a),
        LabCommand::Status(a) => status(a),
        LabCommand::Ssh(a) => ssh(a),
        LabCommand::Relay { socket } => {
            rdma_lab::multi::relay(&socket)
                .with_context(|| format!("relaying to {}", socket.display()))?;
            Ok(ExitCode::SUCCESS)
        }
        LabCommand::Build => {
            let (cache, _) = locate()?;
            let base = build_image(&cache)?;
            println!("kernel: {}", base.kernel.display());
            println!("initrd: {}", base.initrd.display());
            println!("release: {}", base.kernel_release);
            Ok(ExitCode::SUCCESS)
        }
        LabCommand::Clean => {
            let (cache, _) = locate()?;
            if cache.exists() {
                std::fs::remove_dir_all(&cache)
                    .with_context(|| format!("removing {}", cache.display()))?;
                eprintln!("lab: removed {}", cache.display());
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn progress(msg: &str) {
    eprintln!("lab: {msg}");
}

/// The lab cache and, when we run from a checkout, the workspace root.
fn locate() -> Result<(PathBuf, Option<PathBuf>)> {
    let workspace = find_workspace();
    let cache = if let Some(dir) = std::env::var_os("RDMA_LAB_CACHE") {
        PathBuf::from(dir)
    } else if let Some(ws) = &workspace {
        ws.join("target").join("lab")
    } else {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .context("neither RDMA_LAB_CACHE, XDG_CACHE_HOME nor HOME is set")?;
        base.join("rdmactl").join("lab")
    };
    std::fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
    Ok((cache, workspace))
}

/// The checkout we were built from: walk up from the executable (target/<profile>/rdmactl),
/// then from the current directory, to a Cargo.toml that declares the workspace.
fn find_workspace() -> Option<PathBuf> {
    let mut starts = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        starts.push(exe);
    }
    if let Ok(cwd) = std::env::current_dir() {
        starts.push(cwd);
    }
    for start in starts {
        for dir in start.ancestors() {
            let manifest = dir.join("Cargo.toml");
            if let Ok(text) = std::fs::read_to_string(&manifest) {
                if text.contains("[workspace]") && dir.join("rdmactl").is_dir() {
                    return Some(dir.to_path_buf());
                }
            }
        }
    }
    None
}

/// What the VM gets: both binaries with every verbs-based feature on, built into their own
/// target directory ([`LAB_TARGET_DIR`]).
const VM_BUILD: &[&str] = &[
    "-p",
    "rdmad",
    "-p",
    "rdmactl",
    "--features",
    "rdmactl/verbs,rdmactl/bpf,rdmad/bpf,rdmad/verbs",
];

/// "release" when this rdmactl is a release build, else "debug".
fn profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

fn build_image(cache: &Path) -> Result<rdma_lab::image::BaseImage> {
    Ok(rdma_lab::image::ensure_base(cache, &progress)?)
}

/// Where the lab builds the VM's binaries, under the workspace: never target/<profile>,
/// which holds the rdmactl that runs the lab (`cargo run -p rdmactl -- lab ...` builds the
/// default features there; building the verbs flavour over it would replace the running
/// binary, and each `cargo run` after a lab command would build the default one again).
const LAB_TARGET_DIR: &str = "target/lab-build";

/// What `cargo run` puts in its child's environment about the package it ran. A build
/// script that tracks one of them (ring's tracks CARGO_MANIFEST_DIR) is dirty whenever the lab
/// was started one way (`cargo run -p rdmactl -- lab ...`) and built last the other way
/// (`target/release/rdmactl lab ...`): several minutes of rebuilding each time. The lab's
/// cargo gets neither.
fn is_cargo_run_package_var(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_MANIFEST_")
        || matches!(
            name,
            "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE"
        )
}

fn cargo_build(workspace: &Path, extra: &[&str]) -> Result<()> {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(is_cargo_run_package_var) {
            cmd.env_remove(&name);
        }
    }
    cmd.current_dir(workspace)
        .env("CARGO_TARGET_DIR", workspace.join(LAB_TARGET_DIR))
        .arg("build")
        .arg("--quiet");
    if profile() == "release" {
        cmd.arg("--release");
    }
    cmd.args(extra);
    let status = cmd
        .status()
        .context("running cargo to build the lab's binaries")?;
    if !status.success() {
        bail!("cargo build {} failed", extra.join(" "));
    }
    Ok(())
}

/// rdmad and rdmactl for the VM: freshly built from the checkout, or from --bin-dir, or
/// next to this executable.
fn project_binaries(vm: &VmArgs, workspace: Option<&Path>) -> Result<Vec<(PathBuf, String)>> {
    let dir = if let Some(d) = &vm.bin_dir {
        d.clone()
    } else if let Some(ws) = workspace {
        rdma_lab::host::ensure_build_tools(&progress)?;
        progress(&format!(
            "building rdmad and rdmactl with verbs support ({} profile)",
            profile()
        ));
        cargo_build(ws, VM_BUILD)?;
        ws.join(LAB_TARGET_DIR).join(profile())
    } else {
        std::env::current_exe()?
            .parent()
            .context("executable has no directory")?
            .to_path_buf()
    };
    let mut files = Vec::new();
    for name in ["rdmad", "rdmactl"] {
        let p = dir.join(name);
        if !p.is_file() {
            bail!("{} is missing (build it, or pass --bin-dir)", p.display());
        }
        files.push((p, format!("/opt/rdma/bin/{name}")));
    }
    Ok(files)
}

/// The course's C examples (lessons/code), compiled on the host by tests/lessons-build into
/// target/lessons-bin and placed in /opt/rdma/examples (on the guest's PATH). Needs gcc and
/// libibverbs-dev/librdmacm-dev; when they are missing the lab still boots, without examples.
fn course_examples(workspace: Option<&Path>) -> Vec<(PathBuf, String)> {
    let Some(ws) = workspace else {
        return Vec::new();
    };
    let script = ws.join("tests/lessons-build");
    if !script.is_file() || !rdma_lab::host::ensure_c_example_tools(&progress) {
        return Vec::new();
    }
    progress("building the course's C examples (tests/lessons-build)");
    let out = Command::new(&script)
        .current_dir(ws)
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let last: Vec<&str> = err.lines().rev().take(3).collect();
            progress(&format!(
                "C examples not built (needs gcc, make, libibverbs-dev, librdmacm-dev): {}",
                last.into_iter().rev().collect::<Vec<_>>().join(" / ")
            ));
            return Vec::new();
        }
        Err(e) => {
            progress(&format!("C examples not built: {e}"));
            return Vec::new();
        }
    }
    let dir = ws.join("target/lessons-bin");
    let mut files: Vec<(PathBuf, String)> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .filter_map(|p| {
                    let name = p.file_name()?.to_str()?.to_string();
                    Some((p, format!("/opt/rdma/examples/{name}")))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

fn parse_forward(spec: &str) -> Result<(u16, u16)> {
    let (h, g) = spec
        .split_once(':')
        .with_context(|| format!("--forward {spec}: expected HOST:GUEST ports"))?;
    let port = |p: &str| -> Result<u16> {
        p.parse::<u16>()
            .ok()
            .filter(|n| *n > 0)
            .with_context(|| format!("--forward {spec}: {p:?} is not a port"))
    };
    Ok((port(h)?, port(g)?))
}

fn parse_add(spec: &str) -> Result<(PathBuf, String)> {
    let (host, guest) = match spec.split_once(':') {
        Some((h, g)) => (PathBuf::from(h), g.to_string()),
        None => {
            let p = PathBuf::from(spec);
            let name = p
                .file_name()
                .and_then(|n| n.to_str())
                .with_context(|| format!("--add {spec}: no file name"))?
                .to_string();
            (p, format!("/opt/rdma/extra/{name}"))
        }
    };
    if !guest.starts_with('/') {
        bail!("--add {spec}: the guest path must be absolute");
    }
    if !host.is_file() {
        bail!("--add {spec}: {} is not a file", host.display());
    }
    Ok((host, guest))
}

fn spec_from(vm: &VmArgs, files: Vec<(PathBuf, String)>) -> Result<RunSpec> {
    let mut files = files;
    for a in &vm.add {
        files.push(parse_add(a)?);
    }
    Ok(RunSpec {
        devices: vm.devices,
        memory_mib: vm.memory.unwrap_or(2048),
        cpus: vm.cpus.unwrap_or(2),
        files,
        ..RunSpec::default()
    })
}

/// Per-host memory and CPUs of a multi-host lab: small, N of them share this machine. The
/// memory must hold the initramfs twice while it unpacks (image + the multi-host test
/// binaries, ~270 MB on 2026-12-01): 768 MiB stopped fitting.
const MULTI_MEMORY_MIB: u32 = 1024;
const MULTI_CPUS: u32 = 1;

fn multi_spec_from(
    vm: &VmArgs,
    files: Vec<(PathBuf, String)>,
    mode: MultiMode,
) -> Result<MultiSpec> {
    if vm.devices != 1 {
        bail!("--devices 2 (the veth pair) is for the single-host lab; a multi-host lab has rxe0 per host");
    }
    let mut files = files;
    for a in &vm.add {
        files.push(parse_add(a)?);
    }
    Ok(MultiSpec {
        hosts: vm.hosts as usize,
        mode,
        memory_mib: vm.memory.unwrap_or(MULTI_MEMORY_MIB),
        cpus: vm.cpus.unwrap_or(MULTI_CPUS),
        timeout: None,
        files,
        env: Vec::new(),
        forwards: Vec::new(),
        // This very binary, read through /proc (which works even after a rebuild replaced
        // its file); the lab copies it into its run directory before any qemu starts.
        relay: vec!["/proc/self/exe".into(), "lab".into(), "relay".into()],
    })
}

/// `[hK:]HOST:GUEST` for a lab of `hosts`: (host index, host port, guest port) entries.
fn parse_multi_forward(spec: &str, hosts: usize) -> Result<Vec<(usize, u16, u16)>> {
    if let Some((h, rest)) = spec.split_once(':').filter(|(h, _)| h.starts_with('h')) {
        let i = rdma_lab::multi::parse_host(h, hosts)
            .map_err(|e| anyhow::anyhow!("--forward {spec}: {e}"))?;
        let (hp, gp) = parse_forward(rest)?;
        return Ok(vec![(i, hp, gp)]);
    }
    let (hp, gp) = parse_forward(spec)?;
    (0..hosts)
        .map(|i| {
            let p = u16::try_from(usize::from(hp) + i)
                .ok()
                .with_context(|| format!("--forward {spec}: port {hp}+{i} is out of range"))?;
            Ok((i, p, gp))
        })
        .collect()
}

fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

fn run_cmd(a: RunArgs) -> Result<ExitCode> {
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

fn parse_env(list: &[String]) -> Result<Vec<(String, String)>> {
    list.iter()
        .map(|kv| {
            let (k, v) = kv
                .split_once('=')
                .with_context(|| format!("--env {kv}: expected KEY=VALUE"))?;
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

fn run_multi(a: RunArgs) -> Result<ExitCode> {
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

/// Where `lab fault|exec|status|ssh` talk to: --control, $RDMA_LAB_CONTROL, the controller
/// of this host's lab when run inside a multi-host lab, else the last lab of this cache.
fn control_target(c: &ControlArgs) -> Result<ControlTarget> {
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

fn control_text(target: &ControlTarget, line: &str) -> Result<String> {
    let mut out = Vec::new();
    multi::request(target, line, &mut out)
        .with_context(|| format!("talking to the lab controller ({target:?})"))?;
    Ok(String::from_utf8_lossy(&out).to_string())
}

/// Print a controller answer; exit 0 for `ok`, 1 for `error`.
fn answer(text: &str) -> ExitCode {
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

fn fault(a: FaultArgs) -> Result<ExitCode> {
    let target = control_target(&a.control)?;
    let text = control_text(&target, &format!("fault {}", a.fault.join(" ")))?;
    Ok(answer(&text))
}

fn status(a: ControlArgs) -> Result<ExitCode> {
    let target = control_target(&a)?;
    Ok(answer(&control_text(&target, "status")?))
}

fn exec(a: ExecArgs) -> Result<ExitCode> {
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

fn ssh(a: SshArgs) -> Result<ExitCode> {
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

/// A free TCP port on 127.0.0.1: `want` if free, else one the OS picks.
fn free_port(want: u16) -> Result<u16> {
    if TcpListener::bind(("127.0.0.1", want)).is_ok() {
        return Ok(want);
    }
    let l = TcpListener::bind(("127.0.0.1", 0)).context("no free port on 127.0.0.1")?;
    Ok(l.local_addr()?.port())
}

fn up(a: UpArgs) -> Result<ExitCode> {
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

fn up_multi(a: UpArgs) -> Result<ExitCode> {
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

/// Build the live suite with cargo; its test binaries ([`suite::test_binaries`]).
fn build_live_tests(workspace: &Path) -> Result<Vec<TestBinary>> {
    progress("building the live test suite");
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(workspace).args([
        "test",
        "-p",
        "live-tests",
        "--no-run",
        "--message-format=json",
    ]);
    if profile() == "release" {
        cmd.arg("--release");
    }
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo test --no-run")?;
    if !out.status.success() {
        bail!("building the live test suite failed");
    }
    let bins = suite::test_binaries(&String::from_utf8_lossy(&out.stdout));
    if bins.is_empty() {
        bail!("the live test suite has no test binaries");
    }
    Ok(bins)
}

fn test(a: TestArgs) -> Result<ExitCode> {
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
    let mut files = project_binaries(&vm_args, Some(&ws))?;
    files.extend(course_examples(Some(&ws)));
    let bins = suite::select(build_live_tests(&ws)?, multi_host, a.only.as_deref());
    if bins.is_empty() {
        bail!(
            "no live test binary matches --only {}",
            a.only.as_deref().unwrap_or("(none)")
        );
    }
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
fn suite_verdict(vm_code: i32, counts: Counts, binaries: usize, timeout: u64) -> ExitCode {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lab_cargo_drops_what_cargo_run_says_of_its_package() {
        for v in [
            "CARGO_PKG_NAME",
            "CARGO_PKG_VERSION_MAJOR",
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "CARGO_CRATE_NAME",
            "CARGO_BIN_NAME",
            "CARGO_PRIMARY_PACKAGE",
        ] {
            assert!(is_cargo_run_package_var(v), "{v}");
        }
        for v in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_JOBS",
            "PATH",
        ] {
            assert!(!is_cargo_run_package_var(v), "{v}");
        }
    }

    #[test]
    fn forward_specs_are_checked() {
        assert_eq!(parse_forward("19736:9736").unwrap(), (19736, 9736));
        assert!(parse_forward("9736").is_err());
        assert!(parse_forward("0:9736").is_err());
        assert!(parse_forward("x:9736").is_err());
        assert!(parse_forward("70000:1").is_err());
    }

    #[test]
    fn multi_host_forwards_name_a_host_or_count_up() {
        assert_eq!(
            parse_multi_forward("h2:19736:9736", 3).unwrap(),
            vec![(1, 19736, 9736)]
        );
        assert_eq!(
            parse_multi_forward("19736:9736", 3).unwrap(),
            vec![(0, 19736, 9736), (1, 19737, 9736), (2, 19738, 9736)]
        );
        assert!(parse_multi_forward("h4:19736:9736", 3).is_err());
        assert!(parse_multi_forward("h2:19736", 3).is_err());
        assert!(parse_multi_forward("65535:9736", 2).is_err());
    }

    #[test]
    fn add_specs_are_checked() {
        assert!(parse_add("/nonexistent/file").is_err());
        let exe = std::env::current_exe().unwrap();
        let (h, g) = parse_add(exe.to_str().unwrap()).unwrap();
        assert_eq!(h, exe);
        assert!(g.starts_with("/opt/rdma/extra/"));
        let rel = format!("{}:relative/path", exe.display());
        assert!(parse_add(&rel).is_err());
    }

    /// The fault help is written by hand: it names every fault the controller knows.
    #[test]
    fn fault_help_names_every_fault() {
        use clap::CommandFactory;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(subcommand)]
            lab: LabCommand,
        }
        let mut cmd = Cli::command();
        let help = cmd
            .find_subcommand_mut("fault")
            .expect("a fault subcommand")
            .render_long_help()
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        for f in multi::FAULTS {
            assert!(
                help.contains(&format!(
                    "{} {}",
                    f.name,
                    f.args.split(' ').next().unwrap_or("")
                )),
                "`lab fault --help` does not show `{} {}`:\n{help}",
                f.name,
                f.args
            );
        }
    }

    /// The README's fault table has a row for every fault (what it does to RoCE).
    #[test]
    fn readme_fault_table_has_every_fault() {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
            .expect("README.md");
        // The first cells of the table's rows: "`partition hA hB` / `heal`".
        let firsts: Vec<&str> = readme
            .lines()
            .filter(|l| l.starts_with("| `"))
            .filter_map(|l| l.split('|').nth(1))
            .collect();
        for f in multi::FAULTS {
            assert!(
                firsts.iter().any(|c| c.contains(&format!("`{} ", f.name))
                    || c.contains(&format!("`{}`", f.name))),
                "README.md's fault table has no row for `{}`",
                f.name
            );
        }
    }
}
