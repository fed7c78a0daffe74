//! Host test: with libibverbs.so.1 impossible to load, the crate reports
//! `NoRdmaStack { LibraryMissing }` and does not panic or abort.
//!
//! When the library is installed, the test re-runs itself in a user+mount namespace
//! (`unshare -r -m`) with an empty file bind-mounted over the library, so the `dlopen` in
//! rdma-mummy-sys's constructor fails exactly as on a host without rdma-core.
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
    let out = Command::new("unshare")
        .args(["-r", "-m", "sh", "-c", &script])
        .arg(&me)
        .env(CHILD_ENV, "1")
        .output();
    let _ = std::fs::remove_file(&empty);
    let out = match out {
        Ok(out) => out,
        Err(e) => {
            eprintln!("NOTE: unshare unavailable ({e}); library-missing path not exercised here");
            return;
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !stdout.contains(CHILD_MARKER) && !stdout.contains("running 1 test") {
        eprintln!(
            "NOTE: could not hide {lib} (no user namespaces?): {stderr}; library-missing path not exercised here"
        );
        return;
    }
    assert!(
        out.status.success() && stdout.contains(CHILD_MARKER),
        "child failed: status {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
}
