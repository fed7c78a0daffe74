//! cargo-fuzz (libFuzzer) target for rdma-probe's UD echo datagram parser: no input may
//! panic, every datagram that decodes survives encode/decode, and no sequence of replies
//! breaks the loss-by-direction bookkeeping.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rdma_probe::ud::fuzz_datagram(data);
});
