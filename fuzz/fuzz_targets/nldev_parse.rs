//! cargo-fuzz (libFuzzer) target for rdmakit's nldev message parser: no input may panic.
#![no_main]

mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| common::run(data));
