//! A generic netlink socket (netlink-sys) for the ethtool family: resolve the family's ID
//! through `nlctrl` (`CTRL_CMD_GETFAMILY`), send one request, return the raw datagram of the
//! reply (or of the kernel's error) for [`super::standard`] to parse. Read-only: only the
//! three GET requests of [`Request`] are ever built.

use std::time::Duration;

use netlink_packet_core::NetlinkBuffer;
use netlink_sys::{Socket, SocketAddr};

use super::standard::{genl_message, put_attr, request_bytes, Request, FAMILY};
use super::EthtoolError;

const NETLINK_GENERIC: isize = 16;
const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// Larger than any reply of the three requests (STATS_GET of four groups is < 1 KiB).
const RECV_BUF: usize = 64 * 1024;
/// A kernel that does not answer within this is treated as failed (the scrape goes on).
const TIMEOUT: Duration = Duration::from_secs(2);

/// An open generic netlink socket that knows the ethtool family's ID.
#[derive(Debug)]
pub struct EthtoolNetlink {
    socket: Socket,
    family: u16,
    seq: u32,
}

fn io(call: &'static str) -> impl Fn(std::io::Error) -> EthtoolError {
    move |e| EthtoolError::Os {
        call,
        errno: e.raw_os_error().unwrap_or(nix::errno::Errno::EIO as i32),
    }
}

impl EthtoolNetlink {
    /// Open the socket and resolve the family (`ENOENT` from nlctrl: the kernel has no
    /// ethtool netlink, CONFIG_ETHTOOL_NETLINK off).
    pub fn open() -> Result<EthtoolNetlink, EthtoolError> {
        let mut socket = Socket::new(NETLINK_GENERIC).map_err(io("socket"))?;
        socket.bind_auto().map_err(io("bind"))?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(io("connect"))?;
        {
            use nix::sys::socket::{setsockopt, sockopt::ReceiveTimeout};
            let tv = nix::sys::time::TimeVal::new(TIMEOUT.as_secs() as i64, 0);
            setsockopt(&socket, ReceiveTimeout, &tv).map_err(|e| EthtoolError::Os {
                call: "setsockopt",
                errno: e as i32,
            })?;
        }
        let mut this = EthtoolNetlink {
            socket,
            family: 0,
            seq: 1,
        };
        let mut name = FAMILY.as_bytes().to_vec();
        name.push(0);
        let mut attrs = Vec::new();
        put_attr(&mut attrs, CTRL_ATTR_FAMILY_NAME, &name);
        let msg = genl_message(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, this.seq, &attrs);
        let reply = this.exchange("GETFAMILY", &msg)?;
        this.family = family_id(&reply)?;
        Ok(this)
    }

    /// Send `request` about `netdev`; the raw reply datagram (its first message is the
    /// reply or the kernel's error, see [`super::standard::reply_attrs`]).
    pub fn raw(&mut self, request: Request, netdev: &str) -> Result<Vec<u8>, EthtoolError> {
        self.seq = self.seq.wrapping_add(1);
        let msg = request_bytes(request, self.family, netdev, self.seq);
        self.exchange(request.name(), &msg)
    }

    /// Send `msg` and return the first datagram that holds a message of its sequence (the
    /// reply or the error). The ACK that follows a reply is read and dropped.
    fn exchange(&mut self, call: &'static str, msg: &[u8]) -> Result<Vec<u8>, EthtoolError> {
        let seq = u32::from_ne_bytes([msg[8], msg[9], msg[10], msg[11]]);
        self.socket.send(msg, 0).map_err(io(call))?;
        let mut reply: Option<Vec<u8>> = None;
        loop {
            let mut buf = Vec::with_capacity(RECV_BUF);
            self.socket.recv(&mut buf, 0).map_err(io(call))?;
            let mut at = 0;
            while let Ok(m) = NetlinkBuffer::new_checked(&buf[at..]) {
                let len = (m.length() as usize).max(16);
                let end = (at + len).min(buf.len());
                if m.sequence_number() == seq {
                    let ty = m.message_type();
                    if ty == NLMSG_ERROR || ty == NLMSG_DONE {
                        let code = buf
                            .get(at + 16..at + 20)
                            .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                            .unwrap_or(0);
                        // The ACK after the reply ends the exchange; an error before any
                        // reply is the answer.
                        return match (reply, code) {
                            (Some(r), _) => Ok(r),
                            (None, _) if ty == NLMSG_ERROR && code < 0 => Ok(buf[at..end].to_vec()),
                            (None, _) => Err(EthtoolError::Malformed {
                                call,
                                what: "an ACK without a reply".into(),
                            }),
                        };
                    }
                    if reply.is_none() {
                        reply = Some(buf[at..end].to_vec());
                    }
                }
                at += len.next_multiple_of(4);
                if at >= buf.len() {
                    break;
                }
            }
        }
    }
}

/// `CTRL_ATTR_FAMILY_ID` of a `CTRL_CMD_NEWFAMILY` reply datagram, or nlctrl's error
/// (`ENOENT`: no ethtool family in this kernel).
fn family_id(datagram: &[u8]) -> Result<u16, EthtoolError> {
    let malformed = |what: &str| EthtoolError::Malformed {
        call: "GETFAMILY",
        what: what.into(),
    };
    let m = NetlinkBuffer::new_checked(datagram).map_err(|_| malformed("short reply"))?;
    if m.message_type() == NLMSG_ERROR {
        let code = datagram
            .get(16..20)
            .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
            .unwrap_or(0);
        return Err(EthtoolError::Os {
            call: "GETFAMILY",
            errno: code.saturating_neg(),
        });
    }
    let attrs = datagram
        .get(20..m.length() as usize)
        .ok_or_else(|| malformed("short reply"))?;
    for nla in netlink_packet_core::NlasIterator::new(attrs) {
        let nla = nla.map_err(|_| malformed("bad attribute"))?;
        if nla.kind() == CTRL_ATTR_FAMILY_ID {
            if let [a, b] = *nla.value() {
                return Ok(u16::from_ne_bytes([a, b]));
            }
        }
    }
    Err(malformed("no CTRL_ATTR_FAMILY_ID"))
}
