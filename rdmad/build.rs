//! Bakes the git revision into rdmad (`RDMAD_REVISION`), for `--version` and
//! `rdma_exporter_build_info`. See `build/revision.rs` for where it comes from.

#[path = "build/revision.rs"]
mod revision;

fn main() {
    let dir =
        std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    println!("cargo:rerun-if-env-changed={}", revision::ENV);
    println!("cargo:rerun-if-changed=build/revision.rs");
    let env = std::env::var(revision::ENV).ok();
    let (rev, watch) = revision::revision(&dir, env.as_deref());
    // Only files that exist: a missing one would make cargo rerun this on every build.
    for path in watch.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    println!("cargo:rustc-env=RDMAD_REVISION={rev}");
}
