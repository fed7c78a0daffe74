//! Host test: with libibverbs.so.1 impossible to load, the crate reports
//! `NoRdmaStack { LibraryMissing }` and does not panic or abort.
//!
//! When the library is installed, the test re-runs itself in a private mount namespace
//! (`unshare -m` as root, `unshare -r -m` with a user namespace otherwise) with an empty file
//! bind-mounted over the library, so the `dlopen` in rdma-mummy-sys's constructor fails
//! exactly as on a host without rdma-core. No loader setting can hide it instead:
//! rdma-mummy-sys `dlopen`s the bare soname, and glibc falls back to its system directories
//! (which hold the library) after LD_LIBRARY_PATH and the cache. When the namespace cannot be
//! made, the test says why and passes only outside CI: with `CI` set it fails.
use rdma_verbs::{NoStackReason, VerbsError};
use std::process::Command;

const CHILD_ENV: &str = "RDMA_VERBS_NO_STACK_CHILD";
const CHILD_MARKER: &str = "no-stack-child-checked";

/// The file libibverbs.so.1 was loaded from, if it is mapped into this process.
fn mapped_libibverbs() -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("libibverbs.so"))
        .map(str::to_string)
}

fn assert_library_missing() {
    assert_eq!(
        rdma_verbs::stack_available(),
        Err(NoStackReason::LibraryMissing)
    );
    match rdma_verbs::devices() {
        Err(VerbsError::NoRdmaStack {
            reason: NoStackReason::LibraryMissing,
        }) => {}
        other => panic!("expected NoRdmaStack(LibraryMissing), got {other:?}"),
    }
    let err = rdma_verbs::open("rxe0").unwrap_err();
    assert!(err.is_no_rdma(), "{err}");
    assert!(err.to_string().contains("libibverbs.so.1"), "{err}");
}

/// The library-missing path could not be run on this host: a failure when `CI` is set (a
/// pass would claim a check that did not happen), a note elsewhere.
fn not_exercised(why: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{why}: the library-missing path was not exercised, and CI is set"
    );
    eprintln!("NOTE: {why}; library-missing path not exercised here");
}

#[test]
fn missing_libibverbs_is_a_typed_error() {
    if std::env::var_os(CHILD_ENV).is_some() {
        assert_library_missing();
        println!("{CHILD_MARKER}");
        return;
    }
    let Some(lib) = mapped_libibverbs() else {
        // This host has no rdma-core: the real thing.
        assert_library_missing();
        return;
    };
    let empty = std::env::temp_dir().join(format!("rdma-verbs-empty-{}.so", std::process::id()));
    std::fs::write(&empty, b"").unwrap();
    let me = std::env::current_exe().unwrap();
    let script = format!(
        "mount --bind '{}' '{}' && exec \"$0\" --exact missing_libibverbs_is_a_typed_error --nocapture --test-threads=1",
        empty.display(),
        lib
    );
    // Root needs no user namespace (and may be denied one in a container); anyone else does.
    let ns: &[&str] = if nix::unistd::Uid::effective().is_root() {
        &["-m"]
    } else {
        &["-r", "-m"]
    };
    let out = Command::new("unshare")
        .args(ns)
        .args(["sh", "-c", &script])
        .arg(&me)
        .env(CHILD_ENV, "1")
        .output();
    let _ = std::fs::remove_file(&empty);
    let out = match out {
        Ok(out) => out,
        Err(e) => {
            not_exercised(&format!("unshare does not run ({e})"));
            return;
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !stdout.contains(CHILD_MARKER) && !stdout.contains("running 1 test") {
        not_exercised(&format!(
            "could not hide {lib} with unshare {} (no namespaces here?): {stderr}",
            ns.join(" ")
        ));
        return;
    }
    assert!(
        out.status.success() && stdout.contains(CHILD_MARKER),
        "child failed: status {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
}
