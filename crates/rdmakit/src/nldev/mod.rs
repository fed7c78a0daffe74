//! The RDMA netlink (nldev) client: the numbers ([`ids`]), the one attribute policy
//! ([`policy`]), the message type on netlink-packet-core and the requests ([`message`]),
//! typed parsers ([`parse`]) into the types of [`types`], the socket client on netlink-sys
//! ([`client`]) and device/link events ([`monitor`]).
//!
//! Read-only: this module can dump devices, ports, counters and resources, but has no request
//! that sets anything (no `SET`, `STAT_SET`, `STAT_DEL`, `NEWLINK`). Memory keys and addresses
//! are parsed into [`types::Secret`] and never printed or serialized.

pub mod client;
pub mod error;
pub mod ids;
pub mod message;
pub mod monitor;
pub mod parse;
pub mod policy;
pub mod types;

pub use client::NldevClient;
pub use error::{NldevError, ParseError, ParseErrorKind};
pub use message::{NldevMessage, Request};
pub use monitor::Monitor;
pub use types::*;
