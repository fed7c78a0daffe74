//! cargo-fuzz (libFuzzer) target for rdma-probe's handshake Offer decoder: no input may
//! panic, and every offer that decodes survives encode/decode.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rdma_probe::handshake::fuzz_offer(data);
});
