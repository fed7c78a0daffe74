//! The one body every fuzz driver runs: split the input into netlink messages, emit each back,
//! and run every nldev parser on it; then read the input as the attribute stream of each
//! nldev command. Anything but a panic is fine.

use netlink_packet_core::{NetlinkDeserializable, NetlinkHeader, NetlinkPayload};
use rdmakit::nldev::ids::{cmd, message_type};
use rdmakit::nldev::message::{emit, split_messages};
use rdmakit::nldev::{parse, NldevMessage, ResourceKind};

fn all_parsers(m: &NldevMessage) {
    let _ = parse::any(m);
    let _ = parse::device(m);
    let _ = parse::port(m);
    let _ = parse::port_counters(m);
    let _ = parse::counter_status(m);
    let _ = parse::qp_counter_mode(m);
    let _ = parse::bound_counters(m);
    let _ = parse::resource_summary(m);
    let _ = parse::event(m);
    for kind in ResourceKind::ALL {
        let _ = parse::resources(kind, m);
    }
}

/// Feed one input through everything.
pub fn run(data: &[u8]) {
    if let Ok(msgs) = split_messages(data) {
        for (_, msg) in msgs {
            let _ = emit(&msg);
            if let NetlinkPayload::InnerMessage(m) = msg.payload {
                all_parsers(&m);
            }
        }
    }
    if let Some((first, rest)) = data.split_first() {
        let commands = [
            cmd::GET,
            cmd::PORT_GET,
            cmd::RES_GET,
            cmd::RES_QP_GET,
            cmd::RES_CM_ID_GET,
            cmd::RES_CQ_GET,
            cmd::RES_MR_GET,
            cmd::RES_PD_GET,
            cmd::STAT_GET,
            cmd::RES_CTX_GET,
            cmd::RES_SRQ_GET,
            cmd::STAT_GET_STATUS,
            cmd::MONITOR,
        ];
        let command = commands[usize::from(*first) % commands.len()];
        let mut header = NetlinkHeader::default();
        header.message_type = message_type(command);
        if let Ok(m) = NldevMessage::deserialize(&header, rest) {
            all_parsers(&m);
        }
    }
}
