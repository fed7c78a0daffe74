//! cargo-fuzz (libFuzzer) target for rdma-trace's ring buffer record parser: no record may
//! panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rdma_trace::fuzz::trace_event(data);
});
