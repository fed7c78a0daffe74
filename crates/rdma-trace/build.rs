//! Build script: with the `bpf` feature, compile src/bpf/rdma_trace.bpf.c with clang into a
//! BPF object that the crate embeds (include_bytes!) and loads through libbpf-rs at run time.
//! Without the feature it does nothing, so the workspace builds with no clang installed.
use std::path::PathBuf;
use std::process::Command;

const SOURCE: &str = "src/bpf/rdma_trace.bpf.c";

fn main() {
    println!("cargo:rerun-if-changed={SOURCE}");
    println!("cargo:rerun-if-env-changed=CLANG");
    if std::env::var_os("CARGO_FEATURE_BPF").is_none() {
        return;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let (bpf_arch, multiarch) = match arch.as_str() {
        "x86_64" => ("x86", "x86_64-linux-gnu"),
        "aarch64" => ("arm64", "aarch64-linux-gnu"),
        other => panic!("rdma-trace: the bpf feature supports x86_64 and aarch64, not {other}"),
    };
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let object = out.join("rdma_trace.bpf.o");
    let mut cmd = Command::new(&clang);
    // bpf_helpers.h & co from the vendored libbpf that libbpf-sys builds (the one we link).
    if let Some(include) = std::env::var_os("DEP_BPF_INCLUDE") {
        cmd.arg("-I").arg(include);
    }
    let status = cmd
        .args(["-g", "-O2", "-target", "bpf", "-Wall", "-Werror"])
        .arg(format!("-D__TARGET_ARCH_{bpf_arch}"))
        .arg(format!("-I/usr/include/{multiarch}"))
        .arg("-c")
        .arg(SOURCE)
        .arg("-o")
        .arg(&object)
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "rdma-trace: the `bpf` feature needs clang to compile {SOURCE} ({clang}: {e}). \
                 On Debian: apt-get install clang linux-libc-dev libelf-dev zlib1g-dev pkg-config; \
                 or build without --features bpf."
            )
        });
    if !status.success() {
        panic!("rdma-trace: {clang} failed to compile {SOURCE} ({status})");
    }
}
