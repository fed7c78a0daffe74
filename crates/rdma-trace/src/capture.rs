//! Capture frames from one network interface with an AF_PACKET socket (what tcpdump does,
//! without libpcap): ETH_P_ALL, filtered to one interface by the link-layer address each
//! `recvfrom` returns, so the socket needs no unsafe bind. Needs CAP_NET_RAW (root in the
//! lab). Only RoCE v2 frames are decoded by the caller; everything is kept in memory.
use nix::sys::socket::{
    recvfrom, setsockopt, socket, sockopt, AddressFamily, LinkAddr, SockFlag, SockProtocol,
    SockType,
};
use nix::sys::time::TimeVal;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

/// `sll_pkttype` of a frame this host sent.
pub const PACKET_OUTGOING: u8 = 4;

/// One captured frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Interface index it was seen on.
    pub ifindex: u32,
    /// True when sent by this host (seen on its way out).
    pub outgoing: bool,
    /// The frame, from the Ethernet header on.
    pub bytes: Vec<u8>,
}

/// A raw packet socket listening on one interface.
#[derive(Debug)]
pub struct Capture {
    fd: OwnedFd,
    ifindex: u32,
    buf: Vec<u8>,
}

/// Why capturing failed.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// No such interface.
    #[error("no network interface {0}")]
    NoInterface(String),
    /// The socket could not be opened (usually: CAP_NET_RAW missing).
    #[error("cannot open a packet socket (needs CAP_NET_RAW or root): {0}")]
    Socket(nix::Error),
    /// Receiving failed.
    #[error("capture failed: {0}")]
    Recv(nix::Error),
}

impl Capture {
    /// Open a capture on `ifname`; `recv` returns after at most `timeout` without a frame.
    pub fn open(ifname: &str, timeout: Duration) -> Result<Capture, CaptureError> {
        let ifindex = nix::net::if_::if_nametoindex(ifname)
            .map_err(|_| CaptureError::NoInterface(ifname.to_string()))?;
        let fd = socket(
            AddressFamily::Packet,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::EthAll,
        )
        .map_err(CaptureError::Socket)?;
        let tv = TimeVal::new(
            timeout.as_secs() as _,
            timeout.subsec_micros().max(1000) as _,
        );
        setsockopt(&fd, sockopt::ReceiveTimeout, &tv).map_err(CaptureError::Socket)?;
        // Room for the largest frame on the lab's netdevs (MTU 1500; 64 KiB for offloads).
        setsockopt(&fd, sockopt::RcvBuf, &(4 << 20)).map_err(CaptureError::Socket)?;
        Ok(Capture {
            fd,
            ifindex,
            buf: vec![0u8; 65536],
        })
    }

    /// The next frame seen on the interface, or `None` when the timeout passed.
    pub fn recv(&mut self) -> Result<Option<Frame>, CaptureError> {
        loop {
            match recvfrom::<LinkAddr>(self.fd.as_raw_fd(), &mut self.buf) {
                Ok((n, Some(addr))) if addr.ifindex() == self.ifindex as usize => {
                    return Ok(Some(Frame {
                        ifindex: self.ifindex,
                        outgoing: addr.pkttype() == PACKET_OUTGOING,
                        bytes: self.buf[..n].to_vec(),
                    }));
                }
                Ok(_) => continue,
                Err(nix::Error::EAGAIN) => return Ok(None),
                Err(nix::Error::EINTR) => continue,
                Err(e) => return Err(CaptureError::Recv(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_interface_is_named_in_the_error() {
        let err = Capture::open("no-such-if0", Duration::from_millis(10)).unwrap_err();
        assert!(err.to_string().contains("no-such-if0"), "{err}");
    }
}
