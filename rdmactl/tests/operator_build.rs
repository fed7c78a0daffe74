//! The operator's rdmactl (what deploy/packages/build packages: `--no-default-features
//! --features verbs,bpf`) does not link rdma-lab, the Soft-RoCE lab's developer tooling;
//! the checkout's default build does (the `lab` feature, for the README's quick start).
use std::process::Command;

/// The crates `cargo tree` says rdmactl links (normal dependencies) with `features`.
fn linked(features: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "tree",
            "--offline",
            "--locked",
            "-p",
            "rdmactl",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .args(features)
        .output()
        .expect("running cargo tree");
    assert!(
        out.status.success(),
        "cargo tree {features:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_packaged_build_does_not_link_rdma_lab() {
    let crates = linked(&["--no-default-features", "--features", "verbs,bpf"]);
    // What it does link, so an empty or unreadable tree cannot pass.
    for want in ["rdmactl", "rdmakit", "rdma-verbs", "rdma-trace", "clap"] {
        assert!(crates.iter().any(|c| c == want), "{want} not in {crates:?}");
    }
    assert!(
        !crates.iter().any(|c| c == "rdma-lab"),
        "the operator's rdmactl links rdma-lab"
    );
}

#[test]
fn the_default_build_has_the_lab() {
    let crates = linked(&[]);
    assert!(
        crates.iter().any(|c| c == "rdma-lab"),
        "the default rdmactl (README quick start: `cargo run -p rdmactl -- lab up`) lacks rdma-lab: {crates:?}"
    );
}
