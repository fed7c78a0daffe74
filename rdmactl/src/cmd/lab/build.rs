//! What the lab boots: the workspace it was built from, the VM's binaries built into their
//! own target directory, the course's C examples, the live suite's test binaries.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use rdma_lab::suite::{self, TestBinary};

use super::{progress, VmArgs};

/// The lab cache and, when we run from a checkout, the workspace root.
pub(super) fn locate() -> Result<(PathBuf, Option<PathBuf>)> {
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
pub(super) fn find_workspace() -> Option<PathBuf> {
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

/// The features of the lab's builds: every verbs-based one. tests/run's unit tests build
/// the workspace with the same ones, so that the lab's target directory, seeded from
/// theirs, finds those units built. tests/run and tests/live-count-check read them from this
/// line: keep it one line, in this form.
pub(super) const LAB_FEATURES: &str = "rdmactl/verbs,rdmactl/bpf,rdmad/bpf,rdmad/verbs";

/// What the VM gets: both binaries with every verbs-based feature on, built into their own
/// target directory ([`LAB_TARGET_DIR`]).
pub(super) const VM_BUILD: &[&str] = &["-p", "rdmad", "-p", "rdmactl", "--features", LAB_FEATURES];

/// The live suite's build (`cargo test` then these), in [`LAB_TARGET_DIR`] too. The whole
/// workspace with [`LAB_FEATURES`], not `-p live-tests`: cargo resolves the features of
/// shared dependencies over the packages it is asked for: `-p live-tests` alone gave 44
/// dependency units other features than tests/run's unit tests (the workspace with these
/// features), so they were compiled once more; now only live-tests' own 24 units are. Only
/// the live-tests package's binaries are the suite ([`LIVE_TESTS_PACKAGE`]); the workspace's
/// other tests are built, not run. Here, not in target/<profile>: there the workspace build
/// would link rdmactl over the running one; here the VM build has compiled most of it
/// (without tests/run's seed the workspace's tests add 103 units to the VM build's 318;
/// `-p live-tests` in target/release added 154 to the default build's). tests/live-count-check
/// builds the suite with the same arguments.
pub(super) const LIVE_BUILD: &[&str] = &[
    "--workspace",
    "--features",
    LAB_FEATURES,
    "--no-run",
    "--message-format=json",
];

/// The package of the live suite (tests/live).
pub(super) const LIVE_TESTS_PACKAGE: &str = "live-tests";

/// "release" when this rdmactl is a release build, else "debug".
pub(super) fn profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

pub(super) fn build_image(cache: &Path) -> Result<rdma_lab::image::BaseImage> {
    Ok(rdma_lab::image::ensure_base(cache, &progress)?)
}

/// Where the lab builds the VM's binaries, under the workspace: never target/<profile>,
/// which holds the rdmactl that runs the lab (`cargo run -p rdmactl -- lab ...` builds the
/// default features there; building the verbs flavour over it would replace the running
/// binary, and each `cargo run` after a lab command would build the default one again).
pub(super) const LAB_TARGET_DIR: &str = "target/lab-build";

/// What `cargo run` puts in its child's environment about the package it ran. A build
/// script that tracks one of them (ring's tracks CARGO_MANIFEST_DIR) is dirty whenever the lab
/// was started one way (`cargo run -p rdmactl -- lab ...`) and built last the other way
/// (`target/release/rdmactl lab ...`): several minutes of rebuilding each time. The lab's
/// cargo gets neither.
pub(super) fn is_cargo_run_package_var(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_MANIFEST_")
        || matches!(
            name,
            "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE"
        )
}

/// `cargo SUBCOMMAND [--release]` in the workspace, building into [`LAB_TARGET_DIR`],
/// without what `cargo run` says of its package.
fn lab_cargo(workspace: &Path, subcommand: &str) -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(is_cargo_run_package_var) {
            cmd.env_remove(&name);
        }
    }
    cmd.current_dir(workspace)
        .env("CARGO_TARGET_DIR", workspace.join(LAB_TARGET_DIR))
        .arg(subcommand);
    if profile() == "release" {
        cmd.arg("--release");
    }
    cmd
}

pub(super) fn cargo_build(workspace: &Path, extra: &[&str]) -> Result<()> {
    let mut cmd = lab_cargo(workspace, "build");
    cmd.arg("--quiet").args(extra);
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
pub(super) fn project_binaries(
    vm: &VmArgs,
    workspace: Option<&Path>,
) -> Result<Vec<(PathBuf, String)>> {
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
pub(super) fn course_examples(workspace: Option<&Path>) -> Vec<(PathBuf, String)> {
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

/// Build the live suite with cargo ([`LIVE_BUILD`]); its test binaries
/// ([`suite::test_binaries`] of [`LIVE_TESTS_PACKAGE`]). Run it before [`project_binaries`]:
/// this build links rdmad and rdmactl into [`LAB_TARGET_DIR`] as well (today the VM build's
/// units, but `cargo test` resolves features with the dev-dependencies, which could make
/// them others), and the VM build after it links its own back, the ones the VM gets.
pub(super) fn build_live_tests(workspace: &Path) -> Result<Vec<TestBinary>> {
    // The verbs features need cmake and clang, as the VM build does.
    rdma_lab::host::ensure_build_tools(&progress)?;
    progress("building the live test suite");
    let out = lab_cargo(workspace, "test")
        .args(LIVE_BUILD)
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo test --no-run")?;
    if !out.status.success() {
        bail!("building the live test suite failed");
    }
    let bins = suite::test_binaries(&String::from_utf8_lossy(&out.stdout), LIVE_TESTS_PACKAGE);
    if bins.is_empty() {
        bail!("the live test suite has no test binaries");
    }
    Ok(bins)
}
