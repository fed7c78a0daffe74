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
    /// Guest memory in MiB (registering N bytes of memory pins N bytes of guest RAM).
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u32).range(256..=16384))]
    memory: u32,
    /// Guest CPUs.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=8))]
    cpus: u32,
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
    /// started by CMD from a Prometheus on the host): HOST:GUEST, repeatable.
    #[arg(long = "forward", value_name = "HOST:GUEST")]
    forward: Vec<String>,
    /// Boot WITHOUT rdma_rxe (no RDMA device): proves that live tests fail without one.
    #[arg(long)]
    no_rxe: bool,
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(clap::Args, Debug)]
struct TestArgs {
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

/// What the VM gets: both binaries with every verbs-based feature on. Cargo keeps one
/// artifact per feature set, so switching between this and the default build relinks nothing.
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

fn cargo_build(workspace: &Path, extra: &[&str]) -> Result<()> {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(workspace).arg("build").arg("--quiet");
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
        ws.join("target").join(profile())
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
        memory_mib: vm.memory,
        cpus: vm.cpus,
        files,
        ..RunSpec::default()
    })
}

fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

fn run_cmd(a: RunArgs) -> Result<ExitCode> {
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

/// A free TCP port on 127.0.0.1: `want` if free, else one the OS picks.
fn free_port(want: u16) -> Result<u16> {
    if TcpListener::bind(("127.0.0.1", want)).is_ok() {
        return Ok(want);
    }
    let l = TcpListener::bind(("127.0.0.1", 0)).context("no free port on 127.0.0.1")?;
    Ok(l.local_addr()?.port())
}

fn up(a: UpArgs) -> Result<ExitCode> {
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

/// One test binary of the live suite, as cargo reports it.
#[derive(Debug)]
struct TestBinary {
    name: String,
    path: PathBuf,
}

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
    let mut bins = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["reason"] != "compiler-artifact" {
            continue;
        }
        // Integration tests, and the crate's own unit tests (profile.test on the lib).
        if v["profile"]["test"] != true {
            continue;
        }
        if let (Some(exe), Some(name)) = (v["executable"].as_str(), v["target"]["name"].as_str()) {
            let kind = v["target"]["kind"][0].as_str().unwrap_or("test");
            bins.push(TestBinary {
                name: if kind == "lib" {
                    format!("{}-unit", name.replace('-', "_"))
                } else {
                    name.to_string()
                },
                path: PathBuf::from(exe),
            });
        }
    }
    bins.sort_by(|a, b| a.name.cmp(&b.name));
    // The smoke test goes first: if it fails, nothing after it means much.
    bins.sort_by_key(|b| b.name != "smoke");
    if bins.is_empty() {
        bail!("the live test suite has no test binaries");
    }
    Ok(bins)
}

/// Totals over libtest's "test result:" lines.
#[derive(Debug, Default, PartialEq)]
pub struct Counts {
    /// Tests that passed.
    pub passed: u64,
    /// Tests that failed.
    pub failed: u64,
    /// Tests that were ignored.
    pub ignored: u64,
}

impl Counts {
    /// Add one libtest summary line ("test result: ok. 3 passed; 0 failed; 1 ignored; ...").
    pub fn add_line(&mut self, line: &str) -> bool {
        let Some(rest) = line.trim().strip_prefix("test result:") else {
            return false;
        };
        for part in rest.split(';') {
            let words: Vec<&str> = part.split_whitespace().collect();
            let n = words
                .iter()
                .rev()
                .nth(1)
                .and_then(|w| w.parse::<u64>().ok())
                .unwrap_or(0);
            match words.last() {
                Some(&"passed") => self.passed += n,
                Some(&"failed") => self.failed += n,
                Some(&"ignored") => self.ignored += n,
                _ => {}
            }
        }
        true
    }
}

fn test(a: TestArgs) -> Result<ExitCode> {
    let (cache, workspace) = locate()?;
    let ws = workspace.context("`lab test` runs from a checkout of the project")?;
    let base = build_image(&cache)?;
    let vm_args = VmArgs {
        devices: 2,
        memory: 2048,
        cpus: 2,
        add: Vec::new(),
        bin_dir: None,
    };
    let mut files = project_binaries(&vm_args, Some(&ws))?;
    files.extend(course_examples(Some(&ws)));
    let mut bins = build_live_tests(&ws)?;
    if let Some(only) = &a.only {
        bins.retain(|b| b.name.contains(only.as_str()));
        if bins.is_empty() {
            bail!("no live test binary matches --only {only}");
        }
    }
    let mut script = String::from("fail=0\n");
    for b in &bins {
        let guest = format!("/opt/rdma/tests/{}", b.name);
        files.push((b.path.clone(), guest.clone()));
        let extra: Vec<String> = a.test_args.iter().map(|s| vm::shell_quote(s)).collect();
        script.push_str(&format!(
            "echo '=== live suite: {name}'\n{guest} --test-threads=1 --color never {extra} || fail=1\n",
            name = b.name,
            extra = extra.join(" ")
        ));
    }
    script.push_str("exit $fail\n");
    let mut spec = spec_from(&vm_args, files)?;
    spec.mode = Mode::Run(vec!["sh".into(), "-c".into(), script]);
    spec.rxe = !a.no_rxe;
    spec.timeout = Some(Duration::from_secs(a.timeout));
    spec.env = vec![
        ("RDMACTL_BIN".into(), "/opt/rdma/bin/rdmactl".into()),
        ("RDMAD_BIN".into(), "/opt/rdma/bin/rdmad".into()),
        ("RUST_BACKTRACE".into(), "1".into()),
    ];
    progress(&format!(
        "running {} live test binaries in one lab boot",
        bins.len()
    ));
    let mut counts = Counts::default();
    let mut summaries = 0usize;
    let mut on_line = |line: &str| {
        println!("{line}");
        if counts.add_line(line) {
            summaries += 1;
        }
    };
    let outcome = vm::run(&base, &cache, &spec, &progress, Some(&mut on_line))?;
    if let Some(r) = outcome.ready_after {
        progress(&format!(
            "devices were ACTIVE {:.1} s after boot; the whole run took {:.1} s",
            r.as_secs_f64(),
            outcome.elapsed.as_secs_f64()
        ));
    }
    if summaries < bins.len() {
        // A binary that crashed or was never reached prints no summary: that is a failure.
        counts.failed += (bins.len() - summaries) as u64;
        eprintln!(
            "lab: {} of {} test binaries printed no result",
            bins.len() - summaries,
            bins.len()
        );
    }
    println!(
        "live: {} passed, {} failed, {} ignored",
        counts.passed, counts.failed, counts.ignored
    );
    if outcome.exit_code == vm::EXIT_TIMEOUT {
        eprintln!("lab: the live suite timed out after {} s", a.timeout);
    }
    if outcome.exit_code == 0 && counts.failed == 0 && counts.passed > 0 {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libtest_summaries_are_counted() {
        let mut c = Counts::default();
        assert!(c.add_line(
            "test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s"
        ));
        assert!(c.add_line("test result: FAILED. 1 passed; 2 failed; 0 ignored; 0 measured"));
        assert!(!c.add_line("running 3 tests"));
        assert_eq!(
            c,
            Counts {
                passed: 4,
                failed: 2,
                ignored: 1
            }
        );
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
    fn add_specs_are_checked() {
        assert!(parse_add("/nonexistent/file").is_err());
        let exe = std::env::current_exe().unwrap();
        let (h, g) = parse_add(exe.to_str().unwrap()).unwrap();
        assert_eq!(h, exe);
        assert!(g.starts_with("/opt/rdma/extra/"));
        let rel = format!("{}:relative/path", exe.display());
        assert!(parse_add(&rel).is_err());
    }
}
