//! The nldev client: a `NETLINK_RDMA` socket (netlink-sys) that sends the requests of
//! [`super::message::Request`] and collects and parses the answers.
//!
//! One request at a time: send with a fresh sequence number, read datagrams until the dump's
//! `NLMSG_DONE` or the request's ACK, skip messages of other sequences, turn kernel error
//! codes into [`NldevError::Kernel`]. Read-only by construction: no request here changes
//! counters or devices.

use super::error::{NldevError, ParseError, ParseErrorKind};
use super::ids::{cmd, NETLINK_RDMA};
use super::message::{split_messages, NldevMessage, Request};
use super::parse;
use super::types::*;
use netlink_packet_core::NetlinkPayload;
use netlink_sys::{Socket, SocketAddr};

/// Receive buffer size: larger than any nldev dump datagram (the kernel fills up to ~32 KiB).
const RECV_BUF: usize = 256 * 1024;

/// An open `NETLINK_RDMA` socket.
#[derive(Debug)]
pub struct NldevClient {
    socket: Socket,
    sequence: u32,
}

/// True for the errno values that mean "this kernel has no such netlink family".
fn is_missing_family(err: &std::io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc_codes::EPROTONOSUPPORT) | Some(libc_codes::EAFNOSUPPORT)
    )
}

/// The two errno values we need, without a libc dependency.
mod libc_codes {
    pub const EPROTONOSUPPORT: i32 = 93;
    pub const EAFNOSUPPORT: i32 = 97;
}

impl NldevClient {
    /// Open and bind the socket. No RDMA netlink in the kernel gives [`NldevError::NoRdma`].
    pub fn open() -> Result<NldevClient, NldevError> {
        let mut socket = Socket::new(NETLINK_RDMA).map_err(|e| {
            if is_missing_family(&e) {
                NldevError::NoRdma(e)
            } else {
                NldevError::Io {
                    what: "socket(NETLINK_RDMA)".into(),
                    source: e,
                }
            }
        })?;
        socket.bind_auto().map_err(|e| NldevError::Io {
            what: "bind".into(),
            source: e,
        })?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(|e| NldevError::Io {
                what: "connect".into(),
                source: e,
            })?;
        let sequence = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(1);
        Ok(NldevClient { socket, sequence })
    }

    /// Send `req` and return the raw bytes of every answer message (data messages only, in
    /// order; the final `NLMSG_DONE` / ACK is consumed, not returned).
    pub fn request_raw(&mut self, req: &Request) -> Result<Vec<Vec<u8>>, NldevError> {
        let mut out = Vec::new();
        self.request_each_raw(req, |raw| {
            out.push(raw.to_vec());
            Ok(())
        })?;
        Ok(out)
    }

    /// Send `req` and hand every answer message's raw bytes to `each` as it arrives, one
    /// receive buffer at a time: a dump of any size is never held whole. An error from
    /// `each` ends the request (the rest of the answer is left to be skipped by the next
    /// request's sequence check).
    pub fn request_each_raw(
        &mut self,
        req: &Request,
        mut each: impl FnMut(&[u8]) -> Result<(), NldevError>,
    ) -> Result<(), NldevError> {
        self.sequence = self.sequence.wrapping_add(1);
        let seq = self.sequence;
        let command = cmd::name(req.message.command)
            .map(str::to_string)
            .unwrap_or_else(|| req.message.command.to_string());
        let bytes = req.to_bytes(seq);
        self.socket.send(&bytes, 0).map_err(|e| NldevError::Io {
            what: format!("send {command}"),
            source: e,
        })?;
        let mut buf = Vec::with_capacity(RECV_BUF);
        loop {
            buf.clear();
            self.socket.recv(&mut buf, 0).map_err(|e| {
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) {
                    NldevError::Timeout {
                        command: command.clone(),
                    }
                } else {
                    NldevError::Io {
                        what: format!("receive {command}"),
                        source: e,
                    }
                }
            })?;
            for (raw, msg) in split_messages(&buf)? {
                if msg.header.sequence_number != seq {
                    continue;
                }
                match msg.payload {
                    NetlinkPayload::InnerMessage(_) => each(raw)?,
                    NetlinkPayload::Done(done) => {
                        if done.code < 0 {
                            return Err(NldevError::Kernel {
                                command,
                                device: req.device.clone(),
                                errno: -done.code,
                            });
                        }
                        return Ok(());
                    }
                    NetlinkPayload::Error(err) => match err.code {
                        None => return Ok(()),
                        Some(code) => {
                            return Err(NldevError::Kernel {
                                command,
                                device: req.device.clone(),
                                errno: -code.get(),
                            })
                        }
                    },
                    NetlinkPayload::Noop => {}
                    NetlinkPayload::Overrun(_) => {
                        return Err(NldevError::Parse(ParseError::message(
                            Some(req.message.command),
                            ParseErrorKind::Framing("netlink overrun".into()),
                        )))
                    }
                    _ => {}
                }
            }
        }
    }

    /// Send `req` and hand every parsed answer message to `each` as it arrives (see
    /// [`NldevClient::request_each_raw`]).
    pub fn request_each(
        &mut self,
        req: &Request,
        mut each: impl FnMut(&NldevMessage) -> Result<(), NldevError>,
    ) -> Result<(), NldevError> {
        self.request_each_raw(req, |raw| {
            for (_, msg) in split_messages(raw)? {
                if let NetlinkPayload::InnerMessage(m) = msg.payload {
                    each(&m)?;
                }
            }
            Ok(())
        })
    }

    /// Bound every later receive to `timeout` (`None`: wait as long as the kernel takes).
    /// A receive past it fails with [`NldevError::Timeout`]; a scrape deadline uses it so
    /// that a socket that never answers cannot hold the scrape.
    pub fn set_receive_timeout(
        &mut self,
        timeout: Option<std::time::Duration>,
    ) -> Result<(), NldevError> {
        use nix::sys::socket::{setsockopt, sockopt::ReceiveTimeout};
        use nix::sys::time::TimeVal;
        // A zero timeval means "no timeout" to the kernel: ask for at least a microsecond.
        let tv = match timeout {
            Some(d) => TimeVal::new(
                d.as_secs().min(i64::MAX as u64) as i64,
                i64::from(d.subsec_micros().max(u32::from(d.as_secs() == 0))),
            ),
            None => TimeVal::new(0, 0),
        };
        setsockopt(&self.socket, ReceiveTimeout, &tv).map_err(|e| NldevError::Io {
            what: "setsockopt(SO_RCVTIMEO)".into(),
            source: std::io::Error::from(e),
        })
    }

    /// Send `req` and return the parsed nldev messages of the answer.
    pub fn request(&mut self, req: &Request) -> Result<Vec<NldevMessage>, NldevError> {
        let mut out = Vec::new();
        for raw in self.request_raw(req)? {
            for (_, msg) in split_messages(&raw)? {
                if let NetlinkPayload::InnerMessage(m) = msg.payload {
                    out.push(m);
                }
            }
        }
        Ok(out)
    }

    /// All devices (`rdma dev show`).
    pub fn devices(&mut self) -> Result<Vec<NlDevice>, NldevError> {
        let msgs = self.request(&Request::devices())?;
        Ok(msgs.iter().map(parse::device).collect::<Result<_, _>>()?)
    }

    /// The ports of one device (`rdma link show dev`).
    pub fn ports(&mut self, dev: &NlDevice) -> Result<Vec<NlPort>, NldevError> {
        let msgs = self.request(&Request::ports(dev.index, Some(&dev.name)))?;
        Ok(msgs.iter().map(parse::port).collect::<Result<_, _>>()?)
    }

    /// Every port of every device.
    pub fn all_ports(&mut self) -> Result<Vec<NlPort>, NldevError> {
        let mut out = Vec::new();
        for dev in self.devices()? {
            out.extend(self.ports(&dev)?);
        }
        Ok(out)
    }

    /// Hardware counters of one port (`rdma statistic show link DEV/PORT`).
    pub fn port_counters(
        &mut self,
        dev_index: u32,
        dev_name: &str,
        port: u32,
    ) -> Result<PortHwCounters, NldevError> {
        let msgs = self.request(&Request::hw_counters(dev_index, Some(dev_name), port))?;
        one(msgs, cmd::STAT_GET, dev_name, parse::port_counters)
    }

    /// Optional counters of one port and whether each is enabled. Read-only.
    pub fn counter_status(
        &mut self,
        dev_index: u32,
        dev_name: &str,
        port: u32,
    ) -> Result<PortHwCounters, NldevError> {
        let msgs = self.request(&Request::counter_status(dev_index, Some(dev_name), port))?;
        one(msgs, cmd::STAT_GET_STATUS, dev_name, parse::counter_status)
    }

    /// QP counter mode of one port. Read-only.
    pub fn qp_counter_mode(
        &mut self,
        dev_index: u32,
        dev_name: &str,
        port: u32,
    ) -> Result<QpCounterMode, NldevError> {
        let msgs = self.request(&Request::qp_counter_mode(dev_index, Some(dev_name), port))?;
        one(msgs, cmd::STAT_GET, dev_name, parse::qp_counter_mode)
    }

    /// Bound QP counters of one port.
    pub fn qp_counters(
        &mut self,
        dev_index: u32,
        dev_name: &str,
        port: u32,
    ) -> Result<Vec<BoundCounter>, NldevError> {
        let msgs = self.request(&Request::qp_counters(dev_index, Some(dev_name), port))?;
        let mut out = Vec::new();
        for m in &msgs {
            out.extend(parse::bound_counters(m)?);
        }
        Ok(out)
    }

    /// Resource counts of every device (`rdma res show`).
    pub fn resource_summary(&mut self) -> Result<Vec<ResourceSummary>, NldevError> {
        let msgs = self.request(&Request::resource_summary())?;
        Ok(msgs
            .iter()
            .map(parse::resource_summary)
            .collect::<Result<_, _>>()?)
    }

    /// Resources of `kind` on one device; user objects get `comm` from `/proc/<pid>/comm`.
    pub fn resources(
        &mut self,
        kind: ResourceKind,
        dev: &NlDevice,
    ) -> Result<Vec<Resource>, NldevError> {
        let msgs = self.request(&Request::resources(kind, dev.index, Some(&dev.name)))?;
        let mut out = Vec::new();
        for m in &msgs {
            out.extend(parse::resources(kind, m)?);
        }
        for r in &mut out {
            let owner = r.owner_mut();
            if let Some(pid) = owner.pid {
                owner.comm = task_comm(pid);
            }
        }
        Ok(out)
    }

    /// Resources of `kind` on every device.
    pub fn all_resources(&mut self, kind: ResourceKind) -> Result<Vec<Resource>, NldevError> {
        let mut out = Vec::new();
        for dev in self.devices()? {
            out.extend(self.resources(kind, &dev)?);
        }
        Ok(out)
    }
}

/// The single answer of a non-dump request, parsed.
fn one<T>(
    msgs: Vec<NldevMessage>,
    command: u8,
    dev_name: &str,
    f: impl Fn(&NldevMessage) -> Result<T, ParseError>,
) -> Result<T, NldevError> {
    match msgs.first() {
        Some(m) => Ok(f(m)?),
        None => Err(NldevError::Parse(ParseError {
            command: Some(command),
            attr: None,
            device: Some(dev_name.to_string()),
            kind: ParseErrorKind::Missing,
        })),
    }
}

/// The command name of a process (`/proc/<pid>/comm`, trimmed), as `rdma res show` prints it.
pub fn task_comm(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(text.trim_end_matches('\n').to_string())
}
