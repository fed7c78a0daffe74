//! The nldev message on netlink-packet-core: [`NldevMessage`] (a command plus its raw
//! attributes, emitted byte-for-byte as parsed), the requests this crate sends, and the
//! splitting of a receive buffer into messages.
//!
//! Requests are built like iproute2's `rdma` tool builds them: `GET`, `PORT_GET`, `RES_*`
//! dumps with `NLM_F_DUMP`, per-port `STAT_GET` / `STAT_GET_STATUS` as plain requests, all
//! with `NLM_F_ACK`. There is deliberately no builder for `SET`, `STAT_SET` or `STAT_DEL`:
//! this crate never changes counters or devices.

use super::error::{ParseError, ParseErrorKind};
use super::ids::{attr, cmd, command_of, message_type};
use netlink_packet_core::{
    DefaultNla, Emitable, NetlinkBuffer, NetlinkDeserializable, NetlinkHeader, NetlinkMessage,
    NetlinkPayload, NetlinkSerializable, NlaBuffer, NlasIterator, Parseable, NLM_F_ACK, NLM_F_DUMP,
    NLM_F_REQUEST,
};

/// One nldev message: the command (low 10 bits of the netlink type) and its attributes,
/// kept raw (kind with flags, value bytes) so that emitting reproduces the parsed bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NldevMessage {
    /// The nldev command (`cmd::*`).
    pub command: u8,
    /// Top-level attributes in wire order.
    pub attrs: Vec<DefaultNla>,
}

impl NldevMessage {
    /// A message with no attributes.
    pub fn new(command: u8) -> NldevMessage {
        NldevMessage {
            command,
            attrs: Vec::new(),
        }
    }

    /// Append a u32 attribute.
    pub fn with_u32(mut self, id: u16, value: u32) -> NldevMessage {
        self.attrs
            .push(DefaultNla::new(id, value.to_ne_bytes().to_vec()));
        self
    }

    /// The emitted attribute bytes (what the typed parsers read).
    pub fn attr_bytes(&self) -> Vec<u8> {
        let attrs = self.attrs.as_slice();
        let mut buf = vec![0u8; attrs.buffer_len()];
        attrs.emit(&mut buf);
        buf
    }
}

impl NetlinkDeserializable for NldevMessage {
    type Error = ParseError;

    fn deserialize(header: &NetlinkHeader, payload: &[u8]) -> Result<Self, Self::Error> {
        let command = command_of(header.message_type).ok_or_else(|| {
            ParseError::message(
                None,
                ParseErrorKind::NotNldev {
                    message_type: header.message_type,
                },
            )
        })?;
        let mut attrs = Vec::new();
        for nla in NlasIterator::new(payload) {
            let nla = nla.map_err(|e| {
                ParseError::message(Some(command), ParseErrorKind::Framing(e.to_string()))
            })?;
            let parsed = DefaultNla::parse(&NlaBuffer::new(nla.into_inner())).map_err(|e| {
                ParseError::message(Some(command), ParseErrorKind::Framing(e.to_string()))
            })?;
            attrs.push(parsed);
        }
        Ok(NldevMessage { command, attrs })
    }
}

impl NetlinkSerializable for NldevMessage {
    fn message_type(&self) -> u16 {
        message_type(self.command)
    }

    fn buffer_len(&self) -> usize {
        self.attrs.as_slice().buffer_len()
    }

    fn serialize(&self, buffer: &mut [u8]) {
        self.attrs.as_slice().emit(buffer)
    }
}

impl From<NldevMessage> for NetlinkPayload<NldevMessage> {
    fn from(message: NldevMessage) -> Self {
        NetlinkPayload::InnerMessage(message)
    }
}

/// A request: the message and its netlink flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The nldev message.
    pub message: NldevMessage,
    /// `NLM_F_*` flags.
    pub flags: u16,
    /// The device the request is about (for error messages).
    pub device: Option<String>,
}

impl Request {
    fn get(command: u8) -> Request {
        Request {
            message: NldevMessage::new(command),
            flags: NLM_F_REQUEST | NLM_F_ACK,
            device: None,
        }
    }

    fn dump(command: u8) -> Request {
        Request {
            message: NldevMessage::new(command),
            flags: NLM_F_REQUEST | NLM_F_ACK | NLM_F_DUMP,
            device: None,
        }
    }

    fn on(mut self, dev_index: u32, dev_name: Option<&str>) -> Request {
        self.message = self.message.with_u32(attr::DEV_INDEX, dev_index);
        self.device = Some(dev_name.map_or_else(|| format!("index {dev_index}"), str::to_string));
        self
    }

    /// True for dump requests (the answer ends with `NLMSG_DONE`, not an ACK).
    pub fn is_dump(&self) -> bool {
        self.flags & NLM_F_DUMP == NLM_F_DUMP
    }

    /// All devices (`rdma dev show`): `GET`, dump.
    pub fn devices() -> Request {
        Request::dump(cmd::GET)
    }

    /// All ports of one device (`rdma link show`): `PORT_GET`, dump with `DEV_INDEX`.
    pub fn ports(dev_index: u32, dev_name: Option<&str>) -> Request {
        Request::dump(cmd::PORT_GET).on(dev_index, dev_name)
    }

    /// Hardware counters of one port (`rdma statistic show link DEV/PORT`): `STAT_GET` with
    /// `DEV_INDEX` and `PORT_INDEX`. Disabled optional counters are not in the answer.
    pub fn hw_counters(dev_index: u32, dev_name: Option<&str>, port: u32) -> Request {
        let mut r = Request::get(cmd::STAT_GET).on(dev_index, dev_name);
        r.message = r.message.with_u32(attr::PORT_INDEX, port);
        r
    }

    /// The optional (dynamic) counters of a port and whether each is enabled
    /// (`rdma statistic mode supported`): `STAT_GET_STATUS` with `DEV_INDEX`, `PORT_INDEX`.
    pub fn counter_status(dev_index: u32, dev_name: Option<&str>, port: u32) -> Request {
        let mut r = Request::get(cmd::STAT_GET_STATUS).on(dev_index, dev_name);
        r.message = r.message.with_u32(attr::PORT_INDEX, port);
        r
    }

    /// The QP counter mode of a port (`rdma statistic qp mode`): `STAT_GET` with `STAT_MODE`
    /// present (its value only tells the kernel to answer with the mode) and `STAT_RES` = QP.
    /// This is a read: nothing is changed.
    pub fn qp_counter_mode(dev_index: u32, dev_name: Option<&str>, port: u32) -> Request {
        let mut r = Request::get(cmd::STAT_GET).on(dev_index, dev_name);
        r.message = r
            .message
            .with_u32(attr::PORT_INDEX, port)
            .with_u32(attr::STAT_MODE, super::ids::counter_mode::MANUAL)
            .with_u32(attr::STAT_RES, u32::from(attr::RES_QP));
        r
    }

    /// Bound QP counters of a port (`rdma statistic qp show`): `STAT_GET` dump with
    /// `STAT_RES` = QP.
    pub fn qp_counters(dev_index: u32, dev_name: Option<&str>, port: u32) -> Request {
        let mut r = Request::dump(cmd::STAT_GET).on(dev_index, dev_name);
        r.message = r
            .message
            .with_u32(attr::PORT_INDEX, port)
            .with_u32(attr::STAT_RES, u32::from(attr::RES_QP));
        r
    }

    /// Resource counts of every device (`rdma res show`): `RES_GET`, dump.
    pub fn resource_summary() -> Request {
        Request::dump(cmd::RES_GET)
    }

    /// All resources of one kind on one device (`rdma res show qp`): `RES_*_GET`, dump with
    /// `DEV_INDEX`.
    pub fn resources(
        kind: super::types::ResourceKind,
        dev_index: u32,
        dev_name: Option<&str>,
    ) -> Request {
        Request::dump(kind.command()).on(dev_index, dev_name)
    }

    /// The full netlink message with `sequence` (length and type filled in).
    pub fn to_netlink(&self, sequence: u32) -> NetlinkMessage<NldevMessage> {
        let mut header = NetlinkHeader::default();
        header.flags = self.flags;
        header.sequence_number = sequence;
        let mut msg =
            NetlinkMessage::new(header, NetlinkPayload::InnerMessage(self.message.clone()));
        msg.finalize();
        msg
    }

    /// The bytes to send.
    pub fn to_bytes(&self, sequence: u32) -> Vec<u8> {
        let msg = self.to_netlink(sequence);
        let mut buf = vec![0u8; msg.buffer_len()];
        msg.serialize(&mut buf);
        buf
    }
}

/// One message of a receive buffer: its raw bytes and its parse.
pub type RawMessage<'a> = (&'a [u8], NetlinkMessage<NldevMessage>);

/// Split a buffer holding one or more netlink messages (as read from the socket, or a
/// captured file) into `(raw bytes, parsed message)` pairs. Never panics.
pub fn split_messages(buf: &[u8]) -> Result<Vec<RawMessage<'_>>, ParseError> {
    let mut out = Vec::new();
    let mut offset = 0usize;
    while offset < buf.len() {
        let rest = &buf[offset..];
        let framing = |e: String| ParseError::message(None, ParseErrorKind::Framing(e));
        let nl = NetlinkBuffer::new_checked(rest).map_err(|e| framing(e.to_string()))?;
        let len = nl.length() as usize;
        let raw = rest
            .get(..len)
            .ok_or_else(|| framing(format!("message length {len} beyond buffer")))?;
        let msg = NetlinkMessage::<NldevMessage>::deserialize(raw).map_err(|e| {
            let command = command_of(nl.message_type());
            ParseError::message(command, ParseErrorKind::Framing(e.to_string()))
        })?;
        out.push((raw, msg));
        // Messages are 4-byte aligned in a datagram.
        let step = (len + 3) & !3;
        offset = offset.saturating_add(step.max(1));
    }
    Ok(out)
}

/// Emit a parsed netlink message back to bytes (for round-trip tests).
pub fn emit(msg: &NetlinkMessage<NldevMessage>) -> Vec<u8> {
    let mut buf = vec![0u8; msg.buffer_len()];
    if buf.len() == msg.header.length as usize {
        msg.serialize(&mut buf);
    } else {
        // A header length that disagrees with the content: rebuild it instead of panicking.
        let mut fixed = msg.clone();
        fixed.header.length = buf.len() as u32;
        fixed.serialize(&mut buf);
    }
    buf
}
