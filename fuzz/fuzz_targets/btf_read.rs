//! cargo-fuzz (libFuzzer) target for rdma-trace's BTF FUNC reader: no blob may panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rdma_trace::fuzz::btf(data);
});
