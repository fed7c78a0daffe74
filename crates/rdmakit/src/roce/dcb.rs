//! DCB netlink (`RTM_GETDCB` / `DCB_CMD_IEEE_GET`): the IEEE 802.1Qaz configuration of a
//! netdev as its driver reports it: which priorities PFC protects, the APP table (among
//! others the DSCP -> priority map) and, on drivers that have one, the APP trust order.
//!
//! The layout (include/uapi/linux/dcbnl.h, net/dcb/dcbnl.c `dcbnl_ieee_fill`): a netlink
//! message of type `RTM_GETDCB` (78), then `struct dcbmsg { u8 dcb_family; u8 cmd; u16 pad }`,
//! then attributes: `DCB_ATTR_IFNAME` (1, string), `DCB_ATTR_IEEE` (13, nested:
//! `DCB_ATTR_IEEE_PFC` (2, `struct ieee_pfc`), `DCB_ATTR_IEEE_APP_TABLE` (3, nested
//! `DCB_ATTR_IEEE_APP` (1) / `DCB_ATTR_DCB_APP` (2) of `struct dcb_app`),
//! `DCB_ATTR_DCB_APP_TRUST_TABLE` (11, nested `DCB_ATTR_DCB_APP_TRUST` (1, u8 selector)), ...),
//! `DCB_ATTR_DCBX` (14, u8). A driver without DCB ops (rxe's netdev, veth, virtio_net)
//! answers with `NLMSG_ERROR` `EOPNOTSUPP`. Reading needs no privilege (only `RTM_SETDCB`
//! asks for `CAP_NET_ADMIN`).
//!
//! The parser works on the bytes of the kernel's answer, whether they were just received
//! ([`query`]) or captured earlier (a file written by [`capture`]), so the tests run it on
//! real layouts.

use std::path::Path;

use netlink_packet_core::{NetlinkBuffer, NlasIterator};
use serde::Serialize;

/// `RTM_GETDCB`.
pub const RTM_GETDCB: u16 = 78;
/// `DCB_CMD_IEEE_GET`.
pub const DCB_CMD_IEEE_GET: u8 = 21;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const DCB_ATTR_IFNAME: u16 = 1;
const DCB_ATTR_IEEE: u16 = 13;
const DCB_ATTR_DCBX: u16 = 14;
const DCB_ATTR_IEEE_PFC: u16 = 2;
const DCB_ATTR_IEEE_APP_TABLE: u16 = 3;
const DCB_ATTR_DCB_APP_TRUST_TABLE: u16 = 11;
const DCB_ATTR_IEEE_APP: u16 = 1;
const DCB_ATTR_DCB_APP: u16 = 2;
const DCB_ATTR_DCB_APP_TRUST: u16 = 1;
/// `sizeof(struct ieee_pfc)`: u8 pfc_cap, pfc_en, mbc; u16 delay; u64 requests[8],
/// indications[8] (naturally aligned: the u64 arrays start at offset 8).
const IEEE_PFC_LEN: usize = 136;

/// `IEEE_8021QAZ_APP_SEL_DSCP`.
pub const SEL_DSCP: u8 = 5;
/// `DCB_APP_SEL_PCP`.
pub const SEL_PCP: u8 = 255;

/// The name of an APP selector, as `dcb app` / `dcb apptrust` print it.
pub fn selector_name(sel: u8) -> String {
    match sel {
        1 => "ethtype".into(),
        2 => "stream-port".into(),
        3 => "dgram-port".into(),
        4 => "port".into(),
        SEL_DSCP => "dscp".into(),
        SEL_PCP => "pcp".into(),
        n => format!("selector-{n}"),
    }
}

/// One APP table entry (`struct dcb_app`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AppEntry {
    /// The selector (`SEL_DSCP` for DSCP -> priority entries).
    pub selector: u8,
    /// The 802.1p priority.
    pub priority: u8,
    /// The protocol: the DSCP value, the ethertype, the port, ...
    pub protocol: u16,
}

/// What `DCB_CMD_IEEE_GET` says about one netdev.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DcbIeee {
    /// `DCB_ATTR_IFNAME`.
    pub ifname: Option<String>,
    /// `ieee_pfc.pfc_cap`, when the driver reports PFC.
    pub pfc_cap: Option<u8>,
    /// `ieee_pfc.pfc_en`: bit N set = PFC on priority N (`None`: no PFC attribute).
    pub pfc_enabled: Option<u8>,
    /// The APP table, in the kernel's order.
    pub app: Vec<AppEntry>,
    /// The APP trust order (`None`: the driver has no `dcbnl_getapptrust`).
    pub trust: Option<Vec<u8>>,
    /// `DCB_ATTR_DCBX`.
    pub dcbx: Option<u8>,
}

impl DcbIeee {
    /// Priorities PFC protects, ascending.
    pub fn pfc_priorities(&self) -> Vec<u8> {
        let en = self.pfc_enabled.unwrap_or(0);
        (0..8).filter(|p| en & (1 << p) != 0).collect()
    }

    /// The priority the APP table maps `dscp` to, if it has an entry.
    pub fn dscp_priority(&self, dscp: u8) -> Option<u8> {
        self.app
            .iter()
            .find(|a| a.selector == SEL_DSCP && a.protocol == u16::from(dscp))
            .map(|a| a.priority)
    }

    /// The DSCP entries of the APP table, as `(dscp, priority)`, in table order.
    pub fn dscp_map(&self) -> Vec<(u16, u8)> {
        self.app
            .iter()
            .filter(|a| a.selector == SEL_DSCP)
            .map(|a| (a.protocol, a.priority))
            .collect()
    }
}

/// Why a DCB answer could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DcbError {
    /// The kernel answered with an error (`EOPNOTSUPP`: the driver has no DCB).
    #[error("RTM_GETDCB: {}", crate::uapi::errno_name(*.0).map(|n| format!("{n} ({})", std::io::Error::from_raw_os_error(*.0))).unwrap_or_else(|| std::io::Error::from_raw_os_error(*.0).to_string()))]
    Kernel(i32),
    /// Bytes that are not a DCB answer.
    #[error("RTM_GETDCB: malformed answer: {0}")]
    Malformed(String),
    /// The socket or the captured file failed.
    #[error("RTM_GETDCB: {0}")]
    Io(String),
}

impl DcbError {
    /// Whether the driver has no DCB support at all.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, DcbError::Kernel(e) if *e == nix::errno::Errno::EOPNOTSUPP as i32)
    }
}

fn malformed(what: impl Into<String>) -> DcbError {
    DcbError::Malformed(what.into())
}

/// Parse the kernel's answer to `DCB_CMD_IEEE_GET` (one datagram: the `RTM_GETDCB` message,
/// or an `NLMSG_ERROR`). Never panics on any input.
pub fn parse_reply(buf: &[u8]) -> Result<DcbIeee, DcbError> {
    let mut offset = 0usize;
    while offset < buf.len() {
        let rest = &buf[offset..];
        let nl = NetlinkBuffer::new_checked(rest).map_err(|e| malformed(e.to_string()))?;
        let len = nl.length() as usize;
        let payload = nl.payload();
        match nl.message_type() {
            NLMSG_ERROR => {
                let code = payload
                    .get(..4)
                    .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                    .ok_or_else(|| malformed("NLMSG_ERROR without an error code"))?;
                if code < 0 {
                    return Err(DcbError::Kernel(-code));
                }
                // An ACK: keep looking for the data message.
            }
            NLMSG_DONE => break,
            RTM_GETDCB => return parse_dcbmsg(payload),
            other => return Err(malformed(format!("unexpected message type {other}"))),
        }
        offset = offset.saturating_add(((len + 3) & !3).max(4));
    }
    Err(malformed("no RTM_GETDCB message in the answer"))
}

fn parse_dcbmsg(payload: &[u8]) -> Result<DcbIeee, DcbError> {
    let head = payload
        .get(..4)
        .ok_or_else(|| malformed("dcbmsg shorter than 4 bytes"))?;
    if head[1] != DCB_CMD_IEEE_GET {
        return Err(malformed(format!(
            "answer to command {} instead of DCB_CMD_IEEE_GET",
            head[1]
        )));
    }
    let mut out = DcbIeee {
        ifname: None,
        pfc_cap: None,
        pfc_enabled: None,
        app: Vec::new(),
        trust: None,
        dcbx: None,
    };
    for nla in NlasIterator::new(&payload[4..]) {
        let nla = nla.map_err(|e| malformed(e.to_string()))?;
        let value = nla.value();
        match nla.kind() {
            DCB_ATTR_IFNAME => {
                let end = value.iter().position(|b| *b == 0).unwrap_or(value.len());
                out.ifname = Some(String::from_utf8_lossy(&value[..end]).into_owned());
            }
            DCB_ATTR_DCBX => out.dcbx = value.first().copied(),
            DCB_ATTR_IEEE => parse_ieee(value, &mut out)?,
            _ => {}
        }
    }
    Ok(out)
}

fn parse_ieee(bytes: &[u8], out: &mut DcbIeee) -> Result<(), DcbError> {
    for nla in NlasIterator::new(bytes) {
        let nla = nla.map_err(|e| malformed(format!("DCB_ATTR_IEEE: {e}")))?;
        let value = nla.value();
        match nla.kind() {
            DCB_ATTR_IEEE_PFC => {
                if value.len() < IEEE_PFC_LEN {
                    return Err(malformed(format!(
                        "DCB_ATTR_IEEE_PFC of {} bytes, struct ieee_pfc has {IEEE_PFC_LEN}",
                        value.len()
                    )));
                }
                out.pfc_cap = Some(value[0]);
                out.pfc_enabled = Some(value[1]);
            }
            DCB_ATTR_IEEE_APP_TABLE => {
                for app in NlasIterator::new(value) {
                    let app = app.map_err(|e| malformed(format!("APP table: {e}")))?;
                    if app.kind() != DCB_ATTR_IEEE_APP && app.kind() != DCB_ATTR_DCB_APP {
                        continue;
                    }
                    let v = app.value();
                    if v.len() < 4 {
                        return Err(malformed(format!("APP entry of {} bytes", v.len())));
                    }
                    out.app.push(AppEntry {
                        selector: v[0],
                        priority: v[1],
                        protocol: u16::from_ne_bytes([v[2], v[3]]),
                    });
                }
            }
            DCB_ATTR_DCB_APP_TRUST_TABLE => {
                let mut order = Vec::new();
                for t in NlasIterator::new(value) {
                    let t = t.map_err(|e| malformed(format!("APP trust table: {e}")))?;
                    if t.kind() == DCB_ATTR_DCB_APP_TRUST {
                        if let Some(sel) = t.value().first() {
                            order.push(*sel);
                        }
                    }
                }
                out.trust = Some(order);
            }
            _ => {}
        }
    }
    Ok(())
}

/// The request bytes: `RTM_GETDCB`, `NLM_F_REQUEST`, `dcbmsg { AF_UNSPEC, DCB_CMD_IEEE_GET }`,
/// `DCB_ATTR_IFNAME`.
pub fn request(netdev: &str, seq: u32) -> Vec<u8> {
    let name_len = netdev.len() + 1;
    let attr_len = 4 + name_len;
    let total = 16 + 4 + ((attr_len + 3) & !3);
    let mut b = Vec::with_capacity(total);
    b.extend_from_slice(&(total as u32).to_ne_bytes());
    b.extend_from_slice(&RTM_GETDCB.to_ne_bytes());
    b.extend_from_slice(&1u16.to_ne_bytes()); // NLM_F_REQUEST
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.extend_from_slice(&[0, DCB_CMD_IEEE_GET, 0, 0]);
    b.extend_from_slice(&(attr_len as u16).to_ne_bytes());
    b.extend_from_slice(&DCB_ATTR_IFNAME.to_ne_bytes());
    b.extend_from_slice(netdev.as_bytes());
    b.push(0);
    b.resize(total, 0);
    b
}

/// Ask the kernel, returning the answer's bytes exactly as received.
pub fn query_raw(netdev: &str) -> Result<Vec<u8>, DcbError> {
    use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
    let io = |what: &str, e: std::io::Error| DcbError::Io(format!("{what}: {e}"));
    let mut socket = Socket::new(NETLINK_ROUTE).map_err(|e| io("socket(NETLINK_ROUTE)", e))?;
    socket.bind_auto().map_err(|e| io("bind", e))?;
    socket
        .connect(&SocketAddr::new(0, 0))
        .map_err(|e| io("connect", e))?;
    socket
        .set_rx_buf_sz(1 << 16)
        .map_err(|e| io("SO_RCVBUF", e))?;
    let seq = 1;
    socket
        .send(&request(netdev, seq), 0)
        .map_err(|e| io("send", e))?;
    let mut buf = Vec::with_capacity(1 << 16);
    socket.recv(&mut buf, 0).map_err(|e| io("receive", e))?;
    Ok(buf)
}

/// Ask the kernel about `netdev`.
pub fn query(netdev: &str) -> Result<DcbIeee, DcbError> {
    parse_reply(&query_raw(netdev)?)
}

/// Where DCB answers come from: the kernel, or a directory of captured answers
/// (`<dir>/<netdev>/ieee.bin`, the datagram as received, or `<dir>/<netdev>/errno`).
#[derive(Debug, Clone)]
pub enum DcbSource {
    /// `RTM_GETDCB` now.
    Kernel,
    /// Captured answers.
    Captured(std::path::PathBuf),
}

impl DcbSource {
    /// The IEEE DCB configuration of `netdev`.
    pub fn get(&self, netdev: &str) -> Result<DcbIeee, DcbError> {
        match self {
            DcbSource::Kernel => query(netdev),
            DcbSource::Captured(dir) => read_captured(&dir.join(netdev)),
        }
    }
}

fn read_captured(dir: &Path) -> Result<DcbIeee, DcbError> {
    let errno = dir.join("errno");
    if let Ok(text) = std::fs::read_to_string(&errno) {
        let n: i32 = text
            .trim()
            .parse()
            .map_err(|_| DcbError::Io(format!("{}: not an errno: {text:?}", errno.display())))?;
        return Err(DcbError::Kernel(n));
    }
    let file = dir.join("ieee.bin");
    let bytes =
        std::fs::read(&file).map_err(|e| DcbError::Io(format!("{}: {e}", file.display())))?;
    parse_reply(&bytes)
}

/// Write the kernel's answer for `netdev` under `dir` in the layout [`DcbSource::Captured`]
/// reads (for building fixtures on a real machine).
pub fn capture(netdev: &str, dir: &Path) -> std::io::Result<()> {
    let d = dir.join(netdev);
    std::fs::create_dir_all(&d)?;
    match query_raw(netdev) {
        Ok(bytes) => std::fs::write(d.join("ieee.bin"), bytes),
        Err(DcbError::Kernel(n)) => std::fs::write(d.join("errno"), format!("{n}\n")),
        Err(e) => Err(std::io::Error::other(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(value);
        while b.len() % 4 != 0 {
            b.push(0);
        }
        b
    }

    fn message(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(&0u16.to_ne_bytes());
        b.extend_from_slice(&1u32.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(payload);
        b
    }

    fn pfc(en: u8) -> Vec<u8> {
        let mut v = vec![0u8; IEEE_PFC_LEN];
        v[0] = 8;
        v[1] = en;
        v
    }

    #[test]
    fn parses_pfc_app_and_trust() {
        let mut app = Vec::new();
        app.extend(nla(DCB_ATTR_IEEE_APP, &[SEL_DSCP, 3, 26, 0]));
        app.extend(nla(DCB_ATTR_IEEE_APP, &[SEL_DSCP, 6, 48, 0]));
        let mut ieee = nla(DCB_ATTR_IEEE_PFC, &pfc(0b1000));
        ieee.extend(nla(DCB_ATTR_IEEE_APP_TABLE, &app));
        ieee.extend(nla(
            DCB_ATTR_DCB_APP_TRUST_TABLE,
            &nla(DCB_ATTR_DCB_APP_TRUST, &[SEL_DSCP]),
        ));
        let mut payload = vec![0, DCB_CMD_IEEE_GET, 0, 0];
        payload.extend(nla(DCB_ATTR_IFNAME, b"eth9\0"));
        payload.extend(nla(DCB_ATTR_IEEE, &ieee));
        payload.extend(nla(DCB_ATTR_DCBX, &[0x0a]));
        let d = parse_reply(&message(RTM_GETDCB, &payload)).unwrap();
        assert_eq!(d.ifname.as_deref(), Some("eth9"));
        assert_eq!(d.pfc_priorities(), vec![3]);
        assert_eq!(d.dscp_priority(26), Some(3));
        assert_eq!(d.dscp_priority(27), None);
        assert_eq!(d.trust, Some(vec![SEL_DSCP]));
        assert_eq!(d.dcbx, Some(0x0a));
    }

    #[test]
    fn error_answer_is_the_errno() {
        let mut p = (-95i32).to_ne_bytes().to_vec();
        p.extend_from_slice(&[0u8; 16]);
        let e = parse_reply(&message(NLMSG_ERROR, &p)).unwrap_err();
        assert!(e.is_unsupported(), "{e}");
    }

    #[test]
    fn short_pfc_and_garbage_are_errors_not_panics() {
        let mut payload = vec![0, DCB_CMD_IEEE_GET, 0, 0];
        payload.extend(nla(DCB_ATTR_IEEE, &nla(DCB_ATTR_IEEE_PFC, &[0, 8])));
        assert!(matches!(
            parse_reply(&message(RTM_GETDCB, &payload)),
            Err(DcbError::Malformed(_))
        ));
        for n in 0..40 {
            let junk: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            let _ = parse_reply(&junk);
        }
    }

    #[test]
    fn request_layout() {
        let r = request("eth0", 7);
        assert_eq!(r.len(), 16 + 4 + 12);
        assert_eq!(
            u32::from_ne_bytes([r[0], r[1], r[2], r[3]]) as usize,
            r.len()
        );
        assert_eq!(u16::from_ne_bytes([r[4], r[5]]), RTM_GETDCB);
        assert_eq!(r[17], DCB_CMD_IEEE_GET);
        assert_eq!(&r[24..29], b"eth0\0");
    }
}
