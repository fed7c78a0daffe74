//! RoCE v2 on the wire: decode Ethernet / IPv4 or IPv6 / UDP port 4791 / InfiniBand BTH,
//! and the extended headers that follow it (RETH, AETH, ImmDt), to show what anyone who can
//! see the packets learns: opcodes, QP numbers, PSNs, and, in every RDMA WRITE or READ
//! request, the remote virtual address and the rkey in clear text.
//!
//! Layouts are those of the InfiniBand Architecture Specification (BTH 12 bytes, RETH 16,
//! AETH 4, ImmDt 4, ICRC 4 at the end) and the RoCE v2 annex (UDP destination port 4791).
//! [`RocePacket::to_json`] masks the address and rkey unless asked not to.
use serde::Serialize;
use serde_json::{json, Value};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The RoCE v2 UDP destination port.
pub const ROCE_V2_PORT: u16 = 4791;

/// Base Transport Header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Bth {
    /// Opcode (transport in the top 3 bits, operation in the low 5).
    pub opcode: u8,
    /// Solicited event bit.
    pub solicited: bool,
    /// Pad count (bytes added to the payload to reach a multiple of 4).
    pub pad: u8,
    /// Partition key.
    pub pkey: u16,
    /// Destination QP number (24 bits).
    pub dest_qp: u32,
    /// Acknowledge request bit.
    pub ack_req: bool,
    /// Packet sequence number (24 bits).
    pub psn: u32,
}

/// RDMA Extended Transport Header: where a WRITE lands / a READ reads, and the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Reth {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length of the whole RDMA operation (not of this packet).
    pub dma_len: u32,
}

/// ACK Extended Transport Header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Aeth {
    /// Syndrome: ACK, RNR NAK or NAK with a code.
    pub syndrome: u8,
    /// Message sequence number.
    pub msn: u32,
}

/// One decoded RoCE v2 packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RocePacket {
    /// IP source.
    pub src: IpAddr,
    /// IP destination.
    pub dst: IpAddr,
    /// UDP source port (rxe derives it from the QP for ECMP entropy).
    pub udp_src: u16,
    /// Base transport header.
    pub bth: Bth,
    /// RDMA extended header (WRITE first/only, READ request).
    pub reth: Option<Reth>,
    /// ACK extended header (acknowledges, READ responses).
    pub aeth: Option<Aeth>,
    /// Immediate data.
    pub imm: Option<u32>,
    /// Payload bytes after the headers, without pad and ICRC.
    pub payload_len: usize,
}

/// Why a frame is not a RoCE v2 packet we can decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than its headers say.
    #[error("truncated {0}")]
    Truncated(&'static str),
    /// Not IPv4/IPv6, not UDP, or not port 4791.
    #[error("not RoCE v2 ({0})")]
    NotRoce(String),
}

/// Opcode names (IBA 9.2: RC 0x00.., UC 0x20.., RD 0x40.., UD 0x60.., CNP 0x81).
pub fn opcode_name(op: u8) -> String {
    let transport = match op >> 5 {
        0 => "RC",
        1 => "UC",
        2 => "RD",
        3 => "UD",
        4 if op == 0x81 => return "CNP".into(),
        _ => return format!("OPCODE_{op:#04x}"),
    };
    let name = match op & 0x1f {
        0x00 => "SEND_FIRST",
        0x01 => "SEND_MIDDLE",
        0x02 => "SEND_LAST",
        0x03 => "SEND_LAST_WITH_IMMEDIATE",
        0x04 => "SEND_ONLY",
        0x05 => "SEND_ONLY_WITH_IMMEDIATE",
        0x06 => "RDMA_WRITE_FIRST",
        0x07 => "RDMA_WRITE_MIDDLE",
        0x08 => "RDMA_WRITE_LAST",
        0x09 => "RDMA_WRITE_LAST_WITH_IMMEDIATE",
        0x0a => "RDMA_WRITE_ONLY",
        0x0b => "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        0x0c => "RDMA_READ_REQUEST",
        0x0d => "RDMA_READ_RESPONSE_FIRST",
        0x0e => "RDMA_READ_RESPONSE_MIDDLE",
        0x0f => "RDMA_READ_RESPONSE_LAST",
        0x10 => "RDMA_READ_RESPONSE_ONLY",
        0x11 => "ACKNOWLEDGE",
        0x12 => "ATOMIC_ACKNOWLEDGE",
        0x13 => "COMPARE_SWAP",
        0x14 => "FETCH_ADD",
        0x16 => "SEND_LAST_WITH_INVALIDATE",
        0x17 => "SEND_ONLY_WITH_INVALIDATE",
        _ => return format!("{transport}_OPCODE_{op:#04x}"),
    };
    format!("{transport}_{name}")
}

fn has_reth(op: u8) -> bool {
    // RC/UC/RD: WRITE first, WRITE only (with imm), READ request.
    op >> 5 <= 2 && matches!(op & 0x1f, 0x06 | 0x0a | 0x0b | 0x0c)
}

fn has_aeth(op: u8) -> bool {
    op >> 5 == 0 && matches!(op & 0x1f, 0x0d | 0x0f | 0x10 | 0x11 | 0x12)
}

fn has_imm(op: u8) -> bool {
    matches!(op & 0x1f, 0x03 | 0x05 | 0x09 | 0x0b)
}

fn take<'a>(b: &'a [u8], at: usize, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
    b.get(at..at + n).ok_or(WireError::Truncated(what))
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be24(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Decode an Ethernet frame (optionally 802.1Q tagged) carrying RoCE v2.
pub fn parse_ethernet(frame: &[u8]) -> Result<RocePacket, WireError> {
    let eth = take(frame, 0, 14, "ethernet header")?;
    let mut ethertype = be16(&eth[12..14]);
    let mut at = 14;
    if ethertype == 0x8100 {
        ethertype = be16(take(frame, 16, 2, "vlan tag")?);
        at = 18;
    }
    parse_ip(ethertype, &frame[at..])
}

/// Decode an IP packet (ethertype 0x0800 or 0x86dd) carrying RoCE v2.
pub fn parse_ip(ethertype: u16, ip: &[u8]) -> Result<RocePacket, WireError> {
    let (src, dst, proto, l4, l4_len) = match ethertype {
        0x0800 => {
            let h = take(ip, 0, 20, "IPv4 header")?;
            let ihl = (h[0] & 0x0f) as usize * 4;
            let total = be16(&h[2..4]) as usize;
            if ihl < 20 || total < ihl || total > ip.len() {
                return Err(WireError::Truncated("IPv4 packet"));
            }
            let src = Ipv4Addr::new(h[12], h[13], h[14], h[15]);
            let dst = Ipv4Addr::new(h[16], h[17], h[18], h[19]);
            (IpAddr::V4(src), IpAddr::V4(dst), h[9], ihl, total - ihl)
        }
        0x86dd => {
            let h = take(ip, 0, 40, "IPv6 header")?;
            let plen = be16(&h[4..6]) as usize;
            if 40 + plen > ip.len() {
                return Err(WireError::Truncated("IPv6 packet"));
            }
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(&h[8..24]);
            d.copy_from_slice(&h[24..40]);
            (
                IpAddr::V6(Ipv6Addr::from(s)),
                IpAddr::V6(Ipv6Addr::from(d)),
                h[6],
                40,
                plen,
            )
        }
        other => return Err(WireError::NotRoce(format!("ethertype {other:#06x}"))),
    };
    if proto != 17 {
        return Err(WireError::NotRoce(format!("IP protocol {proto}")));
    }
    let udp = take(ip, l4, 8, "UDP header")?;
    let dport = be16(&udp[2..4]);
    if dport != ROCE_V2_PORT {
        return Err(WireError::NotRoce(format!("UDP port {dport}")));
    }
    let udp_len = (be16(&udp[4..6]) as usize).min(l4_len);
    if udp_len < 8 {
        return Err(WireError::Truncated("UDP length"));
    }
    let payload = take(ip, l4 + 8, udp_len - 8, "UDP payload")?;
    let mut pkt = parse_bth_payload(payload)?;
    pkt.src = src;
    pkt.dst = dst;
    pkt.udp_src = be16(&udp[0..2]);
    Ok(pkt)
}

/// Decode a UDP 4791 payload: BTH, extended headers, payload, ICRC.
pub fn parse_bth_payload(p: &[u8]) -> Result<RocePacket, WireError> {
    let b = take(p, 0, 12, "BTH")?;
    let bth = Bth {
        opcode: b[0],
        solicited: b[1] & 0x80 != 0,
        pad: (b[1] >> 4) & 0x3,
        pkey: be16(&b[2..4]),
        dest_qp: be24(&b[5..8]),
        ack_req: b[8] & 0x80 != 0,
        psn: be24(&b[9..12]),
    };
    let mut at = 12;
    let reth = if has_reth(bth.opcode) {
        let r = take(p, at, 16, "RETH")?;
        at += 16;
        let mut va = [0u8; 8];
        va.copy_from_slice(&r[0..8]);
        Some(Reth {
            va: u64::from_be_bytes(va),
            rkey: be32(&r[8..12]),
            dma_len: be32(&r[12..16]),
        })
    } else {
        None
    };
    let aeth = if has_aeth(bth.opcode) {
        let a = take(p, at, 4, "AETH")?;
        at += 4;
        Some(Aeth {
            syndrome: a[0],
            msn: be24(&a[1..4]),
        })
    } else {
        None
    };
    let imm = if has_imm(bth.opcode) && bth.opcode >> 5 <= 3 {
        let i = take(p, at, 4, "ImmDt")?;
        at += 4;
        Some(be32(i))
    } else {
        None
    };
    // What is left: payload + pad + 4-byte ICRC.
    let rest = p
        .len()
        .checked_sub(at + 4)
        .ok_or(WireError::Truncated("ICRC"))?;
    let payload_len = rest.saturating_sub(bth.pad as usize);
    Ok(RocePacket {
        src: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        dst: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        udp_src: 0,
        bth,
        reth,
        aeth,
        imm,
        payload_len,
    })
}

/// What stands in for a secret that is not shown.
pub const MASKED: &str = "<masked>";

impl RocePacket {
    /// The opcode's name.
    pub fn opcode_name(&self) -> String {
        opcode_name(self.bth.opcode)
    }

    /// JSON view; with `show_keys == false` the RETH address and rkey read `<masked>`.
    pub fn to_json(&self, show_keys: bool) -> Value {
        let mut v = json!({
            "src": self.src.to_string(),
            "dst": self.dst.to_string(),
            "udp_src_port": self.udp_src,
            "opcode": self.bth.opcode,
            "opcode_name": self.opcode_name(),
            "dest_qp": self.bth.dest_qp,
            "psn": self.bth.psn,
            "ack_req": self.bth.ack_req,
            "pkey": self.bth.pkey,
            "payload_len": self.payload_len,
        });
        if let Some(r) = self.reth {
            v["reth"] = if show_keys {
                json!({ "va": format!("{:#x}", r.va), "rkey": r.rkey, "dma_len": r.dma_len })
            } else {
                json!({ "va": MASKED, "rkey": MASKED, "dma_len": r.dma_len })
            };
        }
        if let Some(a) = self.aeth {
            v["aeth"] = json!({ "syndrome": a.syndrome, "msn": a.msn });
        }
        if let Some(i) = self.imm {
            v["imm"] = json!(i);
        }
        v
    }

    /// One text line; with `show_keys == false` the RETH address and rkey are masked.
    pub fn line(&self, show_keys: bool) -> String {
        let mut s = format!(
            "{} -> {} {} dqp {:#08x} psn {}",
            self.src,
            self.dst,
            self.opcode_name(),
            self.bth.dest_qp,
            self.bth.psn
        );
        if self.bth.ack_req {
            s.push_str(" ackreq");
        }
        if let Some(r) = self.reth {
            if show_keys {
                s.push_str(&format!(
                    " RETH va={:#x} rkey={:#x} len={}",
                    r.va, r.rkey, r.dma_len
                ));
            } else {
                s.push_str(&format!(
                    " RETH va={MASKED} rkey={MASKED} len={}",
                    r.dma_len
                ));
            }
        }
        if let Some(a) = self.aeth {
            s.push_str(&format!(" AETH syndrome={:#04x} msn={}", a.syndrome, a.msn));
        }
        if let Some(i) = self.imm {
            s.push_str(&format!(" imm={i:#x}"));
        }
        s.push_str(&format!(" payload {} B", self.payload_len));
        s
    }
}

/// Why a hex dump is not understood ([`frames_from_hex`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HexDumpError {
    /// A character is not ASCII (so not a hex digit).
    #[error("line {line}: not a hex digit")]
    NotAscii {
        /// The 1-based line number.
        line: usize,
    },
    /// A line has an odd number of digits.
    #[error("line {line}: odd number of hex digits")]
    OddLength {
        /// The 1-based line number.
        line: usize,
    },
    /// A pair of characters is not a hex byte.
    #[error("line {line}: {source}")]
    Digit {
        /// The 1-based line number.
        line: usize,
        /// What parsing the pair said.
        source: std::num::ParseIntError,
    },
}

/// Parse a hex dump (whitespace ignored, `#` comments) into bytes: one frame per line.
pub fn frames_from_hex(text: &str) -> Result<Vec<Vec<u8>>, HexDumpError> {
    let mut frames = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let hex: String = line.chars().filter(|c| !c.is_whitespace()).collect();
        if !hex.is_ascii() {
            return Err(HexDumpError::NotAscii { line: n + 1 });
        }
        if hex.len() % 2 != 0 {
            return Err(HexDumpError::OddLength { line: n + 1 });
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16))
            .collect::<Result<Vec<u8>, _>>()
            .map_err(|source| HexDumpError::Digit {
                line: n + 1,
                source,
            })?;
        frames.push(bytes);
    }
    Ok(frames)
}

/// Bytes as lowercase hex.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-built RC RDMA WRITE ONLY frame (IPv4, 8 bytes of payload): the layout test;
    /// the captured frames are tested in tests/captured.rs.
    fn write_only_frame() -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&[0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00]);
        let payload_len = 12 + 16 + 8 + 4;
        let udp_len = 8 + payload_len;
        let total = 20 + udp_len;
        f.extend_from_slice(&[0x45, 0x00]);
        f.extend_from_slice(&(total as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 10, 1, 0, 1, 10, 1, 0, 2]);
        f.extend_from_slice(&0xc000u16.to_be_bytes());
        f.extend_from_slice(&4791u16.to_be_bytes());
        f.extend_from_slice(&(udp_len as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        // BTH: opcode 0x0a, SE=0 pad=0, pkey 0xffff, dqp 0x000123, ackreq, psn 0x001000.
        f.extend_from_slice(&[0x0a, 0x00, 0xff, 0xff, 0x00, 0x00, 0x01, 0x23]);
        f.extend_from_slice(&[0x80, 0x00, 0x10, 0x00]);
        // RETH: va 0x00007f0012345678, rkey 0x00001a2b, len 8.
        f.extend_from_slice(&0x0000_7f00_1234_5678u64.to_be_bytes());
        f.extend_from_slice(&0x0000_1a2bu32.to_be_bytes());
        f.extend_from_slice(&8u32.to_be_bytes());
        f.extend_from_slice(b"payload!");
        f.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        f
    }

    #[test]
    fn write_only_decodes_bth_and_reth() {
        let p = parse_ethernet(&write_only_frame()).unwrap();
        assert_eq!(p.src.to_string(), "10.1.0.1");
        assert_eq!(p.dst.to_string(), "10.1.0.2");
        assert_eq!(p.udp_src, 0xc000);
        assert_eq!(p.opcode_name(), "RC_RDMA_WRITE_ONLY");
        assert_eq!(p.bth.dest_qp, 0x123);
        assert_eq!(p.bth.psn, 0x1000);
        assert!(p.bth.ack_req);
        assert_eq!(p.bth.pkey, 0xffff);
        assert_eq!(
            p.reth,
            Some(Reth {
                va: 0x7f00_1234_5678,
                rkey: 0x1a2b,
                dma_len: 8
            })
        );
        assert_eq!(p.payload_len, 8);
        assert_eq!(p.aeth, None);
    }

    #[test]
    fn keys_are_masked_unless_asked() {
        let p = parse_ethernet(&write_only_frame()).unwrap();
        let masked = p.to_json(false);
        assert_eq!(masked["reth"]["rkey"], MASKED);
        assert_eq!(masked["reth"]["va"], MASKED);
        assert_eq!(masked["reth"]["dma_len"], 8);
        let text = p.line(false);
        assert!(
            !text.contains("1a2b") && !text.contains("12345678"),
            "{text}"
        );
        let shown = p.to_json(true);
        assert_eq!(shown["reth"]["rkey"], 0x1a2b);
        assert_eq!(shown["reth"]["va"], "0x7f0012345678");
        assert!(p.line(true).contains("rkey=0x1a2b"));
    }

    #[test]
    fn truncation_and_foreign_traffic_are_errors() {
        let f = write_only_frame();
        assert!(matches!(
            parse_ethernet(&f[..50]),
            Err(WireError::Truncated(_))
        ));
        let mut other_port = f.clone();
        other_port[37] = 0x00; // UDP destination port 0x1200
        assert!(matches!(
            parse_ethernet(&other_port),
            Err(WireError::NotRoce(_))
        ));
        let mut arp = f;
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert_eq!(
            parse_ethernet(&arp),
            Err(WireError::NotRoce("ethertype 0x0806".into()))
        );
    }

    #[test]
    fn ack_has_aeth_and_no_reth() {
        // BTH ACKNOWLEDGE + AETH (syndrome 0x1f = ACK with credits 31, msn 1) + ICRC.
        let p = parse_bth_payload(&[
            0x11, 0, 0xff, 0xff, 0, 0, 0, 0x12, 0, 0, 0x10, 0, 0x1f, 0, 0, 1, 1, 2, 3, 4,
        ])
        .unwrap();
        assert_eq!(p.opcode_name(), "RC_ACKNOWLEDGE");
        assert_eq!(
            p.aeth,
            Some(Aeth {
                syndrome: 0x1f,
                msn: 1
            })
        );
        assert_eq!(p.reth, None);
        assert_eq!(p.payload_len, 0);
    }

    #[test]
    fn opcode_names() {
        assert_eq!(opcode_name(0x0c), "RC_RDMA_READ_REQUEST");
        assert_eq!(opcode_name(0x2a), "UC_RDMA_WRITE_ONLY");
        assert_eq!(opcode_name(0x64), "UD_SEND_ONLY");
        assert_eq!(opcode_name(0x81), "CNP");
        assert_eq!(opcode_name(0xe0), "OPCODE_0xe0");
    }

    #[test]
    fn hex_round_trip() {
        let f = write_only_frame();
        let text = format!("# a comment\n{}\n\n", to_hex(&f));
        assert_eq!(frames_from_hex(&text).unwrap(), vec![f]);
        assert!(frames_from_hex("abc").is_err());
        assert!(frames_from_hex("zz").is_err());
    }
}
