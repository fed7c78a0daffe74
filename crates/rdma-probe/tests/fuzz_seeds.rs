//! The checked-in seed corpora of the `handshake_offer` and `ud_datagram` fuzz targets
//! (fuzz/seeds/) through the bodies the targets run (`rdma_probe::handshake::fuzz_offer`,
//! `rdma_probe::ud::fuzz_datagram`), on stable, in every `cargo test`: no seed may panic,
//! and each decodes exactly when its file name says so (`ok-*` decodes, `err-*` is refused).
use std::path::PathBuf;

#[test]
fn handshake_offer_seeds() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/handshake_offer");
    let mut seen = (0, 0);
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let want = if name.starts_with("ok-") {
            seen.0 += 1;
            true
        } else if name.starts_with("err-") {
            seen.1 += 1;
            false
        } else {
            panic!("{name}: a seed's name starts with ok- or err-");
        };
        let data = std::fs::read(&path).unwrap();
        assert_eq!(rdma_probe::handshake::fuzz_offer(&data), want, "{name}");
    }
    assert!(
        seen.0 > 0 && seen.1 > 0,
        "ok- and err- seeds both needed: {seen:?}"
    );
}

/// The same for the `ud_datagram` target (`rdma_probe::ud::fuzz_datagram`): `ok-*` decodes
/// as a UD probe datagram, `err-*` is refused as malformed.
#[test]
fn ud_datagram_seeds() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/ud_datagram");
    let mut seen = (0, 0);
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let want = if name.starts_with("ok-") {
            seen.0 += 1;
            true
        } else if name.starts_with("err-") {
            seen.1 += 1;
            false
        } else {
            panic!("{name}: a seed's name starts with ok- or err-");
        };
        let data = std::fs::read(&path).unwrap();
        assert_eq!(rdma_probe::ud::fuzz_datagram(&data), want, "{name}");
    }
    assert!(
        seen.0 > 0 && seen.1 > 0,
        "ok- and err- seeds both needed: {seen:?}"
    );
}
