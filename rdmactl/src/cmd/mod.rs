//! One module per subcommand.
pub mod counters;
pub mod devices;
pub mod doctor;
pub mod doctor_roce;
pub mod exercise;
#[cfg(feature = "verbs")]
pub mod experiment;
pub mod explain;
pub mod generate;
pub mod lab;
pub mod lesson;
pub mod mesh;
pub mod monitor;
#[cfg(feature = "verbs")]
pub mod ping;
pub mod resources;
pub mod top;
pub mod trace;
#[cfg(feature = "verbs")]
pub mod verbs;
#[cfg(feature = "verbs")]
pub mod wire;

/// Arguments of a verbs-based subcommand in a build without the `verbs` feature: anything is
/// accepted, and running it says how to get a build that has it.
#[cfg(not(feature = "verbs"))]
#[derive(clap::Args, Debug)]
pub struct WithoutVerbs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    _rest: Vec<String>,
}

/// The error of a verbs-based subcommand in a build without the `verbs` feature (exit 3).
#[cfg(not(feature = "verbs"))]
pub fn without_verbs(name: &str) -> anyhow::Result<std::process::ExitCode> {
    Err(crate::exit::CodedError::no_rdma(format!(
        "this rdmactl was built without verbs support, so `rdmactl {name}` is not available; \
         rebuild with `cargo build-rdma` (cargo build --release -p rdmad -p rdmactl \
         --features rdmactl/verbs; needs cmake and clang). `rdmactl lab` builds it for the VM."
    )))
}
