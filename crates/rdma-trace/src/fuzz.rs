//! The bodies of the fuzz targets of this crate's parsers (`fuzz/fuzz_targets/`), shared with
//! the tests that run their checked-in seed corpora (`fuzz/seeds/`) on every `cargo test`.
//!
//! Each takes arbitrary bytes, parses them, renders whatever parsed in every form the tools
//! print, and returns whether the parse succeeded. No input may panic.
use crate::event::parse_raw;
use crate::resolve::{btf_func_names, btf_string_section_len};
use crate::wire::{parse_bth_payload, parse_ethernet};

/// An Ethernet frame through the RoCE v2 decoder (and the same bytes as a bare UDP 4791
/// payload); true when the frame decoded.
pub fn wire(data: &[u8]) -> bool {
    if let Ok(p) = parse_bth_payload(data) {
        render_packet(&p);
    }
    match parse_ethernet(data) {
        Ok(p) => {
            render_packet(&p);
            true
        }
        Err(e) => {
            let _ = e.to_string();
            false
        }
    }
}

fn render_packet(p: &crate::wire::RocePacket) {
    let _ = p.line(false);
    let _ = p.line(true);
    let _ = p.to_json(false).to_string();
    let _ = p.to_json(true).to_string();
}

/// A ring buffer record through the trace event parser, then its text and JSON; true when
/// it parsed.
pub fn trace_event(data: &[u8]) -> bool {
    let tracepoints = ["cm_event_handler".to_string(), "cm_req_handler".to_string()];
    // Offsets that push the clock to both ends.
    for offset in [0, i128::from(i64::MAX), i128::from(i64::MIN)] {
        if let Ok(ev) = parse_raw(data, offset, &tracepoints) {
            let _ = ev.what();
            let _ = ev.line();
            let _ = serde_json::to_string(&ev);
        }
    }
    match parse_raw(data, 0, &tracepoints) {
        Ok(_) => true,
        Err(e) => {
            let _ = e.to_string();
            false
        }
    }
}

/// A BTF blob through the FUNC reader, as vmlinux BTF and as a module's split BTF over a
/// base of its own string length; true when it read as vmlinux BTF.
pub fn btf(data: &[u8]) -> bool {
    if let Ok(base) = btf_string_section_len(data) {
        let _ = btf_func_names(data, Some(base));
        let _ = btf_func_names(data, Some(u32::MAX));
    }
    match btf_func_names(data, None) {
        Ok(names) => {
            let _ = names.join(",");
            true
        }
        Err(e) => {
            let _ = e.to_string();
            false
        }
    }
}
