//! `rdmactl lab`: the Soft-RoCE lab (a qemu VM with a real rxe device).
//!
//! `lab up` boots it with rdmad inside and gives a shell; `lab run -- CMD` runs one command
//! in a fresh VM and returns its exit code; `lab test` runs the live test suite in one boot.
//! Before booting, the project's binaries are rebuilt (when run from a checkout) so the VM
//! always holds what the source says.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};

mod boot;
mod build;
mod control;
mod live;
mod spec;

use boot::{run_cmd, up};
use build::{build_image, locate};
use control::{exec, fault, ssh, status};
use live::test;

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

fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

#[cfg(test)]
mod tests;
