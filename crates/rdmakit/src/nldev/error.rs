//! Errors of the nldev client: parse errors that say which command, attribute and device they
//! are about, and request errors (socket, kernel error codes, no RDMA netlink at all).

use std::fmt;

/// What was wrong with a message or attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseErrorKind {
    /// The netlink framing (message header or attribute header) is broken or truncated.
    Framing(String),
    /// The message is not an nldev message (another client or a control message).
    NotNldev {
        /// The netlink message type that was found.
        message_type: u16,
    },
    /// An integer attribute whose length does not match its type.
    WrongLength {
        /// Bytes the policy expects.
        expected: usize,
        /// Bytes found.
        found: usize,
    },
    /// A string attribute that is empty or not NUL-terminated.
    NotNulTerminated,
    /// A nested attribute whose content is not a valid attribute stream.
    BadNested(String),
    /// A required attribute is missing.
    Missing,
    /// A value outside what the field can hold (e.g. a bad socket address family).
    BadValue(String),
}

impl fmt::Display for ParseErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseErrorKind::Framing(detail) => write!(f, "broken netlink framing: {detail}"),
            ParseErrorKind::NotNldev { message_type } => {
                write!(f, "not an nldev message (type {message_type:#06x})")
            }
            ParseErrorKind::WrongLength { expected, found } => {
                write!(f, "wrong length: expected {expected} bytes, found {found}")
            }
            ParseErrorKind::NotNulTerminated => f.write_str("string is not NUL-terminated"),
            ParseErrorKind::BadNested(detail) => write!(f, "bad nested attribute: {detail}"),
            ParseErrorKind::Missing => f.write_str("required attribute missing"),
            ParseErrorKind::BadValue(detail) => write!(f, "bad value: {detail}"),
        }
    }
}

/// A malformed nldev message, with everything needed to find the culprit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The nldev command of the message (`None` when the header itself was unreadable).
    pub command: Option<u8>,
    /// The attribute concerned (`None` for message-level problems).
    pub attr: Option<u16>,
    /// The device concerned, when its name was already parsed.
    pub device: Option<String>,
    /// What is wrong.
    pub kind: ParseErrorKind,
}

impl ParseError {
    /// A message-level error without attribute or device.
    pub fn message(command: Option<u8>, kind: ParseErrorKind) -> ParseError {
        ParseError {
            command,
            attr: None,
            device: None,
            kind,
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.command {
            Some(c) => match super::ids::cmd::name(c) {
                Some(name) => write!(f, "nldev {name}")?,
                None => write!(f, "nldev command {c}")?,
            },
            None => f.write_str("nldev message")?,
        }
        if let Some(device) = &self.device {
            write!(f, " (device {device})")?;
        }
        if let Some(attr) = self.attr {
            match super::policy::attr_name(attr) {
                Some(name) => write!(f, ": attribute {name} ({attr})")?,
                None => write!(f, ": attribute {attr}")?,
            }
        }
        write!(f, ": {}", self.kind)
    }
}

impl std::error::Error for ParseError {}

/// A failed nldev request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NldevError {
    /// The kernel has no RDMA netlink (`NETLINK_RDMA` unsupported: no ib_core loaded).
    #[error("no RDMA netlink in this kernel (is ib_core loaded?): {0}")]
    NoRdma(#[source] std::io::Error),
    /// A socket operation failed.
    #[error("netlink {what} failed: {source}")]
    Io {
        /// What was being done (`send RES_QP_GET`).
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The kernel answered with an error code.
    #[error("kernel rejected nldev {command}{}: {}", device.as_ref().map(|d| format!(" for {d}")).unwrap_or_default(), std::io::Error::from_raw_os_error(*errno))]
    Kernel {
        /// Command name.
        command: String,
        /// The device the request was about.
        device: Option<String>,
        /// Positive errno.
        errno: i32,
    },
    /// A reply did not parse.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// No answer came within the receive timeout ([`super::NldevClient::set_receive_timeout`]).
    #[error("nldev {command}: no answer within the receive timeout")]
    Timeout {
        /// Command name.
        command: String,
    },
    /// The caller stopped consuming a dump (a cap or a deadline), with its reason.
    #[error("{0}")]
    Stopped(String),
}

impl NldevError {
    /// True when there is no RDMA netlink to talk to (exit code 3 in rdmactl).
    pub fn is_no_rdma(&self) -> bool {
        matches!(self, NldevError::NoRdma(_))
    }
}

impl NldevError {
    /// The positive errno of a kernel or socket error, if any.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NldevError::NoRdma(e) | NldevError::Io { source: e, .. } => e.raw_os_error(),
            NldevError::Kernel { errno, .. } => Some(*errno),
            NldevError::Parse(_) | NldevError::Timeout { .. } | NldevError::Stopped(_) => None,
        }
    }

    /// This error as a snapshot problem (`origin: netlink`) about `request`
    /// (e.g. `STAT_GET rxe0/1`), for sources that keep going after one failed request.
    pub fn to_source_error(&self, request: &str, port: Option<u32>) -> crate::model::SourceError {
        use crate::model::{ErrorOrigin, SourceError, SourceErrorKind};
        const EPERM: i32 = 1;
        const EACCES: i32 = 13;
        const EINVAL: i32 = 22;
        const EOPNOTSUPP: i32 = 95;
        let kind = match self {
            NldevError::NoRdma(_) => SourceErrorKind::NotAvailable,
            NldevError::Parse(_) => SourceErrorKind::Unparsable,
            _ => match self.errno() {
                Some(EPERM) | Some(EACCES) => SourceErrorKind::PermissionDenied,
                Some(EINVAL) => SourceErrorKind::InvalidArgument,
                Some(EOPNOTSUPP) => SourceErrorKind::NotAvailable,
                _ => SourceErrorKind::Io,
            },
        };
        let device = match self {
            NldevError::Kernel { device, .. } => device.clone(),
            NldevError::Parse(p) => p.device.clone(),
            _ => None,
        };
        SourceError {
            origin: ErrorOrigin::Netlink,
            device,
            port,
            path: request.to_string(),
            kind,
            detail: self.to_string(),
        }
    }
}
