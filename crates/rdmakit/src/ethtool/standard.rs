//! The kernel's standard statistics and FEC state of a netdev over ethtool netlink (generic
//! netlink family `ethtool`, include/uapi/linux/ethtool_netlink.h): the parsers of the three
//! replies rdmad asks for, working on the raw datagram the kernel sent.
//!
//! - `ETHTOOL_MSG_PAUSE_GET` (21) with `ETHTOOL_FLAG_STATS` in the request header: the
//!   reply `ETHTOOL_MSG_PAUSE_GET_REPLY` (22) has `ETHTOOL_A_PAUSE_STATS` (5, nested) with
//!   `ETHTOOL_A_PAUSE_STAT_TX_FRAMES` (2) and `_RX_FRAMES` (3), u64 each (IEEE 802.3
//!   30.3.4.2 aPAUSEMACCtrlFramesTransmitted, 30.3.4.3 ...Received: link-level pause);
//! - `ETHTOOL_MSG_STATS_GET` (32) with the groups bitset eth-phy, eth-mac, eth-ctrl, rmon:
//!   the reply `ETHTOOL_MSG_STATS_GET_REPLY` (33) has one `ETHTOOL_A_STATS_GRP` (4, nested)
//!   per group: `_GRP_ID` (2, u32: 0 eth-phy, 1 eth-mac, 2 eth-ctrl, 3 rmon), `_GRP_SS_ID`
//!   (3), then one `_GRP_STAT` (4) nest per statistic the driver reports, holding a single
//!   u64 whose attribute type is the statistic's index in the group (the kernel's name
//!   tables, net/ethtool/stats.c: index 0 of eth-mac is FramesTransmittedOK ...), and for
//!   rmon `_GRP_HIST_RX` / `_GRP_HIST_TX` (5/6) nests of `_HIST_BKT_LOW` (7, u32),
//!   `_HIST_BKT_HI` (8, u32, 0 = no upper bound) and `_HIST_VAL` (9, u64);
//! - `ETHTOOL_MSG_FEC_GET` (29): `ETHTOOL_MSG_FEC_GET_REPLY` (30) with `ETHTOOL_A_FEC_AUTO`
//!   (3, u8) and `ETHTOOL_A_FEC_ACTIVE` (4, u32: the link-mode bit of the active encoding,
//!   49 None, 50 RS, 51 BaseR, 74 LLRS).
//!
//! The kernel leaves out every statistic the driver did not fill (ETHTOOL_STAT_NOT_SET), so
//! absent stays absent. Parsing never panics and reads nothing past a length it checked
//! (netlink-packet-core's checked buffers); unknown attributes are skipped, known ones of
//! the wrong size make the reply malformed, and so does a reply of the wrong message type.

use netlink_packet_core::{NetlinkBuffer, NlasIterator};

use super::EthtoolError;

/// `ETHTOOL_GENL_NAME`.
pub const FAMILY: &str = "ethtool";
/// `ETHTOOL_GENL_VERSION`.
pub const VERSION: u8 = 1;
/// `ETHTOOL_FLAG_COMPACT_BITSETS`.
pub const FLAG_COMPACT_BITSETS: u32 = 1 << 0;
/// `ETHTOOL_FLAG_STATS`.
pub const FLAG_STATS: u32 = 1 << 2;
/// `ETHTOOL_A_HEADER_DEV_NAME`.
pub const A_HEADER_DEV_NAME: u16 = 2;
/// `ETHTOOL_A_HEADER_FLAGS`.
pub const A_HEADER_FLAGS: u16 = 3;
/// `ETHTOOL_A_STATS_GROUPS` (a bitset).
pub const A_STATS_GROUPS: u16 = 3;
/// `ETHTOOL_A_BITSET_NOMASK`, `_SIZE`, `_VALUE`.
pub const A_BITSET_NOMASK: u16 = 1;
/// `ETHTOOL_A_BITSET_SIZE`.
pub const A_BITSET_SIZE: u16 = 2;
/// `ETHTOOL_A_BITSET_VALUE`.
pub const A_BITSET_VALUE: u16 = 4;
/// The standard groups rdmad asks for (`ETHTOOL_STATS_ETH_PHY` .. `_RMON`), by their ID.
pub const GROUPS: [&str; 4] = ["eth-phy", "eth-mac", "eth-ctrl", "rmon"];

const NLMSG_ERROR: u16 = 2;
const NLMSG_HEADER: usize = 16;
const GENL_HEADER: usize = 4;

/// One of the three ethtool netlink requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Request {
    /// `ETHTOOL_MSG_PAUSE_GET` with statistics.
    Pause,
    /// `ETHTOOL_MSG_STATS_GET` of the four groups.
    Stats,
    /// `ETHTOOL_MSG_FEC_GET`.
    Fec,
}

impl Request {
    /// Every request, in the order rdmad sends them.
    pub const ALL: [Request; 3] = [Request::Pause, Request::Stats, Request::Fec];

    /// The name in errors and in rdmad's `request` label.
    pub fn name(self) -> &'static str {
        match self {
            Request::Pause => "PAUSE_GET",
            Request::Stats => "STATS_GET",
            Request::Fec => "FEC_GET",
        }
    }

    /// The `ETHTOOL_MSG_*` command of the request.
    pub fn command(self) -> u8 {
        match self {
            Request::Pause => 21,
            Request::Stats => 32,
            Request::Fec => 29,
        }
    }

    /// The command of its reply.
    pub fn reply_command(self) -> u8 {
        match self {
            Request::Pause => 22,
            Request::Stats => 33,
            Request::Fec => 30,
        }
    }

    /// The attribute that carries the request header (`ETHTOOL_A_*_HEADER`).
    pub fn header_attr(self) -> u16 {
        match self {
            Request::Pause | Request::Fec => 1,
            Request::Stats => 2,
        }
    }

    /// The file of a captured reply (`CapturedEthtool`).
    pub fn capture_file(self) -> &'static str {
        match self {
            Request::Pause => "nl-pause.bin",
            Request::Stats => "nl-stats.bin",
            Request::Fec => "nl-fec.bin",
        }
    }
}

/// One standard statistic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StandardStat {
    /// `pause`, `eth-phy`, `eth-mac`, `eth-ctrl` or `rmon` (ethtool's group names).
    pub group: &'static str,
    /// The name ethtool prints after the group prefix: the IEEE 802.3 / RMON name
    /// (`FramesTransmittedOK`, `etherStatsJabbers`), `tx_pause_frames` / `rx_pause_frames`
    /// for pause, `rx-etherStatsPkts<low>to<high>Octets` for an rmon histogram bucket
    /// (`<low>toMax` when the bucket has no upper bound).
    pub name: String,
    /// The value.
    pub value: u64,
}

/// The FEC state of a netdev.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FecState {
    /// The active encoding: `None`, `RS`, `BaseR`, `LLRS` (ethtool's words), `None` when the
    /// driver does not say (link down, or no `ETHTOOL_A_FEC_ACTIVE`).
    pub active: Option<String>,
    /// Whether the encoding is chosen automatically (`ETHTOOL_A_FEC_AUTO`).
    pub auto: Option<bool>,
}

/// The names of the statistics of group `id`, by attribute type (net/ethtool/stats.c).
fn group_names(id: u32) -> Option<&'static [&'static str]> {
    const PHY: &[&str] = &["SymbolErrorDuringCarrier"];
    const MAC: &[&str] = &[
        "FramesTransmittedOK",
        "SingleCollisionFrames",
        "MultipleCollisionFrames",
        "FramesReceivedOK",
        "FrameCheckSequenceErrors",
        "AlignmentErrors",
        "OctetsTransmittedOK",
        "FramesWithDeferredXmissions",
        "LateCollisions",
        "FramesAbortedDueToXSColls",
        "FramesLostDueToIntMACXmitError",
        "CarrierSenseErrors",
        "OctetsReceivedOK",
        "FramesLostDueToIntMACRcvError",
        "MulticastFramesXmittedOK",
        "BroadcastFramesXmittedOK",
        "FramesWithExcessiveDeferral",
        "MulticastFramesReceivedOK",
        "BroadcastFramesReceivedOK",
        "InRangeLengthErrors",
        "OutOfRangeLengthField",
        "FrameTooLongErrors",
    ];
    const CTRL: &[&str] = &[
        "MACControlFramesTransmitted",
        "MACControlFramesReceived",
        "UnsupportedOpcodesReceived",
    ];
    const RMON: &[&str] = &[
        "etherStatsUndersizePkts",
        "etherStatsOversizePkts",
        "etherStatsFragments",
        "etherStatsJabbers",
    ];
    match id {
        0 => Some(PHY),
        1 => Some(MAC),
        2 => Some(CTRL),
        3 => Some(RMON),
        _ => None,
    }
}

fn malformed(request: Request, what: impl Into<String>) -> EthtoolError {
    EthtoolError::Malformed {
        call: request.name(),
        what: what.into(),
    }
}

/// The top-level attributes of the reply to `request` in `datagram` (the first netlink
/// message of it), or the kernel's error (`NLMSG_ERROR` with a negative code).
pub fn reply_attrs(request: Request, datagram: &[u8]) -> Result<Vec<(u16, &[u8])>, EthtoolError> {
    let message = NetlinkBuffer::new_checked(datagram)
        .map_err(|e| malformed(request, format!("netlink header: {e}")))?;
    let len = message.length() as usize;
    let body = datagram
        .get(NLMSG_HEADER..len)
        .ok_or_else(|| malformed(request, format!("message length {len}")))?;
    if message.message_type() == NLMSG_ERROR {
        let code = body
            .get(..4)
            .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| malformed(request, "error message without a code"))?;
        if code < 0 {
            return Err(EthtoolError::Os {
                call: request.name(),
                errno: code.saturating_neg(),
            });
        }
        return Err(malformed(request, "an ACK where the reply should be"));
    }
    let command = *body
        .first()
        .ok_or_else(|| malformed(request, "no generic netlink header"))?;
    if command != request.reply_command() {
        return Err(malformed(
            request,
            format!(
                "command {command}, expected {} (the reply)",
                request.reply_command()
            ),
        ));
    }
    let attrs = body
        .get(GENL_HEADER..)
        .ok_or_else(|| malformed(request, "short generic netlink header"))?;
    nested(request, attrs)
}

/// The attributes inside `bytes`, as (type without flags, value).
fn nested(request: Request, bytes: &[u8]) -> Result<Vec<(u16, &[u8])>, EthtoolError> {
    let mut out = Vec::new();
    for nla in NlasIterator::new(bytes) {
        let nla = nla.map_err(|e| malformed(request, format!("attribute: {e}")))?;
        let kind = nla.kind();
        let value = nla.into_inner();
        // new_checked verified 4 <= length <= the buffer; the value is what follows the
        // 4-byte attribute header up to the length.
        let length = u16::from_ne_bytes([value[0], value[1]]) as usize;
        out.push((kind, &value[4..length]));
    }
    Ok(out)
}

fn u64_of(request: Request, what: &str, value: &[u8]) -> Result<u64, EthtoolError> {
    let raw: [u8; 8] = value
        .try_into()
        .map_err(|_| malformed(request, format!("{what}: {} bytes, not 8", value.len())))?;
    Ok(u64::from_ne_bytes(raw))
}

fn u32_of(request: Request, what: &str, value: &[u8]) -> Result<u32, EthtoolError> {
    let raw: [u8; 4] = value
        .try_into()
        .map_err(|_| malformed(request, format!("{what}: {} bytes, not 4", value.len())))?;
    Ok(u32::from_ne_bytes(raw))
}

/// The pause statistics of a `PAUSE_GET` reply (empty when the driver has none).
pub fn parse_pause(datagram: &[u8]) -> Result<Vec<StandardStat>, EthtoolError> {
    let r = Request::Pause;
    let mut out = Vec::new();
    for (kind, value) in reply_attrs(r, datagram)? {
        if kind != 5 {
            continue;
        }
        for (stat, v) in nested(r, value)? {
            let name = match stat {
                2 => "tx_pause_frames",
                3 => "rx_pause_frames",
                _ => continue,
            };
            out.push(StandardStat {
                group: "pause",
                name: name.to_string(),
                value: u64_of(r, name, v)?,
            });
        }
    }
    Ok(out)
}

/// The statistics of a `STATS_GET` reply, in the kernel's order.
pub fn parse_stats(datagram: &[u8]) -> Result<Vec<StandardStat>, EthtoolError> {
    let r = Request::Stats;
    let mut out = Vec::new();
    for (kind, group) in reply_attrs(r, datagram)? {
        if kind != 4 {
            continue;
        }
        let attrs = nested(r, group)?;
        let id = attrs
            .iter()
            .find(|(k, _)| *k == 2)
            .map(|(_, v)| u32_of(r, "GRP_ID", v))
            .transpose()?
            .ok_or_else(|| malformed(r, "a group without GRP_ID"))?;
        // A group of a newer kernel than these tables: skipped, like unknown attributes.
        let (Some(names), Some(&group_name)) = (group_names(id), GROUPS.get(id as usize)) else {
            continue;
        };
        for (k, v) in attrs {
            match k {
                4 => {
                    for (index, value) in nested(r, v)? {
                        // A statistic newer than the table: skipped.
                        let Some(name) = names.get(index as usize) else {
                            continue;
                        };
                        out.push(StandardStat {
                            group: group_name,
                            name: name.to_string(),
                            value: u64_of(r, name, value)?,
                        });
                    }
                }
                5 | 6 => {
                    let (mut low, mut high, mut val) = (None, None, None);
                    for (hk, hv) in nested(r, v)? {
                        match hk {
                            7 => low = Some(u32_of(r, "HIST_BKT_LOW", hv)?),
                            8 => high = Some(u32_of(r, "HIST_BKT_HI", hv)?),
                            9 => val = Some(u64_of(r, "HIST_VAL", hv)?),
                            _ => {}
                        }
                    }
                    let (Some(low), Some(high), Some(value)) = (low, high, val) else {
                        return Err(malformed(
                            r,
                            "a histogram bucket without low, high or value",
                        ));
                    };
                    let direction = if k == 5 { "rx" } else { "tx" };
                    let high = if high == 0 {
                        "Max".to_string()
                    } else {
                        high.to_string()
                    };
                    out.push(StandardStat {
                        group: group_name,
                        name: format!("{direction}-etherStatsPkts{low}to{high}Octets"),
                        value,
                    });
                }
                _ => {}
            }
        }
    }
    Ok(out)
}

/// The FEC state of a `FEC_GET` reply.
pub fn parse_fec(datagram: &[u8]) -> Result<FecState, EthtoolError> {
    let r = Request::Fec;
    let mut state = FecState {
        active: None,
        auto: None,
    };
    for (kind, value) in reply_attrs(r, datagram)? {
        match kind {
            3 => {
                let [b]: [u8; 1] = value
                    .try_into()
                    .map_err(|_| malformed(r, format!("FEC_AUTO: {} bytes", value.len())))?;
                state.auto = Some(b != 0);
            }
            4 => {
                let bit = u32_of(r, "FEC_ACTIVE", value)?;
                state.active = Some(match bit {
                    49 => "None".to_string(),
                    50 => "RS".to_string(),
                    51 => "BaseR".to_string(),
                    74 => "LLRS".to_string(),
                    other => format!("link-mode-bit-{other}"),
                });
            }
            _ => {}
        }
    }
    Ok(state)
}

/// The bytes of a request for `netdev` to the family `family_id` (one netlink message with
/// `NLM_F_REQUEST | NLM_F_ACK`).
pub fn request_bytes(request: Request, family_id: u16, netdev: &str, seq: u32) -> Vec<u8> {
    let mut header = Vec::new();
    let mut name = netdev.as_bytes().to_vec();
    name.push(0);
    put_attr(&mut header, A_HEADER_DEV_NAME, &name);
    let flags = match request {
        Request::Pause | Request::Fec => FLAG_STATS | FLAG_COMPACT_BITSETS,
        Request::Stats => FLAG_COMPACT_BITSETS,
    };
    put_attr(&mut header, A_HEADER_FLAGS, &flags.to_ne_bytes());
    let mut attrs = Vec::new();
    put_attr(&mut attrs, request.header_attr() | NLA_F_NESTED, &header);
    if request == Request::Stats {
        let mut bitset = Vec::new();
        put_attr(&mut bitset, A_BITSET_NOMASK, &[]);
        put_attr(
            &mut bitset,
            A_BITSET_SIZE,
            &(GROUPS.len() as u32).to_ne_bytes(),
        );
        put_attr(&mut bitset, A_BITSET_VALUE, &0b1111u32.to_ne_bytes());
        put_attr(&mut attrs, A_STATS_GROUPS | NLA_F_NESTED, &bitset);
    }
    genl_message(family_id, request.command(), seq, &attrs)
}

const NLA_F_NESTED: u16 = 1 << 15;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;

/// Append one attribute (4-byte aligned).
pub(crate) fn put_attr(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = 4 + value.len();
    out.extend((len as u16).to_ne_bytes());
    out.extend(kind.to_ne_bytes());
    out.extend(value);
    out.resize(out.len() + (len.next_multiple_of(4) - len), 0);
}

/// One generic netlink request message.
pub(crate) fn genl_message(family_id: u16, command: u8, seq: u32, attrs: &[u8]) -> Vec<u8> {
    let len = NLMSG_HEADER + GENL_HEADER + attrs.len();
    let mut out = Vec::with_capacity(len);
    out.extend((len as u32).to_ne_bytes());
    out.extend(family_id.to_ne_bytes());
    out.extend((NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    out.extend(seq.to_ne_bytes());
    out.extend(0u32.to_ne_bytes());
    out.extend([command, VERSION, 0, 0]);
    out.extend(attrs);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply datagram as the kernel lays it out.
    fn reply(command: u8, attrs: &[u8]) -> Vec<u8> {
        let mut m = genl_message(0x15, command, 1, attrs);
        m[6..8].copy_from_slice(&0u16.to_ne_bytes());
        m
    }

    fn stat(index: u16, value: u64) -> Vec<u8> {
        let mut inner = Vec::new();
        put_attr(&mut inner, index, &value.to_ne_bytes());
        let mut out = Vec::new();
        put_attr(&mut out, 4 | NLA_F_NESTED, &inner);
        out
    }

    #[test]
    fn stats_groups_and_histogram() {
        let mut grp = Vec::new();
        put_attr(&mut grp, 2, &1u32.to_ne_bytes());
        put_attr(&mut grp, 3, &18u32.to_ne_bytes());
        grp.extend(stat(0, 7));
        grp.extend(stat(4, 3));
        grp.extend(stat(99, 1)); // newer than the table: skipped
        let mut rmon = Vec::new();
        put_attr(&mut rmon, 2, &3u32.to_ne_bytes());
        let mut bucket = Vec::new();
        put_attr(&mut bucket, 7, &1519u32.to_ne_bytes());
        put_attr(&mut bucket, 8, &0u32.to_ne_bytes());
        put_attr(&mut bucket, 9, &5u64.to_ne_bytes());
        put_attr(&mut rmon, 5 | NLA_F_NESTED, &bucket);
        let mut attrs = Vec::new();
        put_attr(&mut attrs, 4 | NLA_F_NESTED, &grp);
        put_attr(&mut attrs, 4 | NLA_F_NESTED, &rmon);
        let got = parse_stats(&reply(33, &attrs)).unwrap();
        let names: Vec<_> = got
            .iter()
            .map(|s| (s.group, s.name.as_str(), s.value))
            .collect();
        assert_eq!(
            names,
            [
                ("eth-mac", "FramesTransmittedOK", 7),
                ("eth-mac", "FrameCheckSequenceErrors", 3),
                ("rmon", "rx-etherStatsPkts1519toMaxOctets", 5)
            ]
        );
    }

    #[test]
    fn errors_and_wrong_replies() {
        let mut err = vec![0u8; 36];
        err[0..4].copy_from_slice(&36u32.to_ne_bytes());
        err[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err[16..20].copy_from_slice(&(-95i32).to_ne_bytes());
        assert_eq!(
            parse_pause(&err),
            Err(EthtoolError::Os {
                call: "PAUSE_GET",
                errno: 95
            })
        );
        assert!(matches!(
            parse_pause(&reply(30, &[])),
            Err(EthtoolError::Malformed { .. })
        ));
        let mut bad = Vec::new();
        let mut inner = Vec::new();
        put_attr(&mut inner, 2, &[1, 2, 3]);
        put_attr(&mut bad, 5 | NLA_F_NESTED, &inner);
        assert!(matches!(
            parse_pause(&reply(22, &bad)),
            Err(EthtoolError::Malformed { .. })
        ));
    }

    #[test]
    fn no_input_panics() {
        // Every prefix and every single-byte corruption of a valid reply is an answer or
        // an error, never a panic.
        let mut attrs = Vec::new();
        let mut grp = Vec::new();
        put_attr(&mut grp, 2, &0u32.to_ne_bytes());
        grp.extend(stat(0, 9));
        put_attr(&mut attrs, 4 | NLA_F_NESTED, &grp);
        let good = reply(33, &attrs);
        for n in 0..good.len() {
            let _ = parse_stats(&good[..n]);
            let _ = parse_pause(&good[..n]);
            let _ = parse_fec(&good[..n]);
        }
        for i in 0..good.len() {
            for b in [0u8, 1, 0x7f, 0xff] {
                let mut m = good.clone();
                m[i] = b;
                let _ = parse_stats(&m);
                let _ = parse_fec(&m);
            }
        }
    }
}
