//! Empty: it only makes this crate's build-dependencies part of the resolution (see
//! Cargo.toml).
fn main() {}
