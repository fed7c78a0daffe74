//! cargo-fuzz (libFuzzer) target for rdma-trace's RoCE v2 wire decoder: no frame may panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rdma_trace::fuzz::wire(data);
});
