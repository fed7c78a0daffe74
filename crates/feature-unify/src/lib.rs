//! No code. This crate only declares dependencies with features, so that rdmactl built on
//! its own resolves them as `cargo build -p rdmactl -p rdmad` does (see its Cargo.toml).
