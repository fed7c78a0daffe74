//! The checked-in seed corpora of the fuzz targets (fuzz/seeds/<target>/) through the same
//! bodies the targets run (`rdma_trace::fuzz`), on stable, in every `cargo test`: no seed
//! may panic, and each parses exactly when its file name says so (`ok-*` parses, `err-*` is
//! refused with an error).
use std::path::PathBuf;

fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("directory entry").path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).expect("seed file"))
        })
        .collect();
    out.sort();
    assert!(
        out.iter().any(|(n, _)| n.starts_with("ok-"))
            && out.iter().any(|(n, _)| n.starts_with("err-")),
        "{target}: the corpus needs inputs that parse and inputs that do not"
    );
    out
}

fn check(target: &str, body: fn(&[u8]) -> bool) {
    for (name, data) in seeds(target) {
        let want = match name.split('-').next() {
            Some("ok") => true,
            Some("err") => false,
            _ => panic!("{target}/{name}: a seed's name starts with ok- or err-"),
        };
        assert_eq!(body(&data), want, "{target}/{name}");
    }
}

#[test]
fn wire_parse_seeds() {
    check("wire_parse", rdma_trace::fuzz::wire);
}

#[test]
fn trace_event_seeds() {
    check("trace_event", rdma_trace::fuzz::trace_event);
}

#[test]
fn btf_read_seeds() {
    check("btf_read", rdma_trace::fuzz::btf);
}

#[test]
fn a_real_btf_seed_names_its_functions() {
    // The ok- BTF seed is clang's output for a BPF object with two global functions and a
    // static inline one (inlined away): the reader must find exactly the two.
    let blob = std::fs::read(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/seeds/btf_read/ok-clang-bpf-object.btf"),
    )
    .unwrap();
    let mut names = rdma_trace::resolve::btf_func_names(&blob, None).unwrap();
    names.sort();
    assert_eq!(names, ["create_qp", "modify_qp"]);
}
