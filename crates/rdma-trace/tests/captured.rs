//! The wire decoder on frames captured in the lab (testdata/write_rxe_a_to_b.hex: how they
//! were captured and what the program reported is in the file's header). The decoded RETH
//! must give back exactly the rkey and address the program used.
use rdma_trace::wire::{frames_from_hex, parse_ethernet, MASKED};

const CAPTURE: &str = include_str!("../testdata/write_rxe_a_to_b.hex");

#[test]
fn captured_write_gives_away_the_programs_rkey_and_address() {
    let frames = frames_from_hex(CAPTURE).unwrap();
    assert_eq!(frames.len(), 2);
    let write = parse_ethernet(&frames[0]).unwrap();
    assert_eq!(write.src.to_string(), "10.1.0.1");
    assert_eq!(write.dst.to_string(), "10.1.0.2");
    assert_eq!(write.opcode_name(), "RC_RDMA_WRITE_ONLY");
    assert_eq!(write.bth.dest_qp, 17);
    assert_eq!(write.bth.psn, 0xa0a0);
    assert!(write.bth.ack_req);
    assert_eq!(write.bth.pkey, 0xffff);
    let reth = write.reth.expect("a WRITE ONLY carries a RETH");
    assert_eq!(reth.rkey, 0x261);
    assert_eq!(reth.va, 0x55f2_72ce_3100);
    assert_eq!(reth.dma_len, 40);
    assert_eq!(write.payload_len, 40);
    // The payload itself is on the wire too, after the RETH.
    let text = String::from_utf8_lossy(&frames[0]);
    assert!(text.contains("what does the wire say about this write?"));
}

#[test]
fn captured_ack_acknowledges_the_same_psn() {
    let frames = frames_from_hex(CAPTURE).unwrap();
    let ack = parse_ethernet(&frames[1]).unwrap();
    assert_eq!(ack.opcode_name(), "RC_ACKNOWLEDGE");
    assert_eq!(ack.src.to_string(), "10.1.0.2");
    assert_eq!(ack.bth.dest_qp, 17);
    assert_eq!(ack.bth.psn, 0xa0a0);
    let aeth = ack.aeth.expect("an ACK carries an AETH");
    assert_eq!(aeth.syndrome >> 5, 0, "syndrome class 0 = ACK");
    assert_eq!(aeth.msn, 1);
    assert_eq!(ack.reth, None);
}

#[test]
fn captured_write_is_masked_by_default() {
    let frames = frames_from_hex(CAPTURE).unwrap();
    let write = parse_ethernet(&frames[0]).unwrap();
    let masked = write.to_json(false);
    assert_eq!(masked["reth"]["rkey"], MASKED);
    assert_eq!(masked["reth"]["va"], MASKED);
    let line = write.line(false);
    assert!(
        !line.contains("0x261") && !line.contains("55f272ce3100"),
        "{line}"
    );
    assert!(write.line(true).contains("rkey=0x261"));
}
