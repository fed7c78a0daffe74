//! Why a probe failed, in the words the metrics use: a work-completion status name
//! (`RNR_RETRY_EXC_ERR`, `RETRY_EXC_ERR`, ...) or one of the probe's own failure names.
use rdma_verbs::{VerbsError, WcStatus};

/// The failure label of a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// A work completion with this (non-success) status.
    Wc(WcStatus),
    /// No completion (or no incoming message) before the run's deadline.
    Timeout,
    /// Creating or connecting the QPs, CQs, MRs or PD failed.
    Setup,
    /// `ibv_post_send`/`ibv_post_recv` refused a work request.
    Post,
    /// The TCP connection to a peer could not be made (refused, or no route).
    Connect,
    /// The TCP connection to a peer timed out or the host is unreachable (SYNs unanswered,
    /// or an ICMP unreachable / no route).
    HostUnreachable,
    /// The peer handshake failed or was refused (wrong secret, replay, garbage).
    Handshake,
    /// The peer closed its control connection.
    PeerClosed,
    /// No RDMA stack, or the device is gone.
    NoDevice,
}

impl FailureKind {
    /// The label value: the WC status name, or `TIMEOUT`, `SETUP_ERR`, `POST_ERR`,
    /// `CONNECT_ERR`, `HOST_UNREACHABLE`, `HANDSHAKE_ERR`, `PEER_CLOSED`, `NO_DEVICE`.
    pub fn name(&self) -> String {
        match self {
            FailureKind::Wc(s) => s.name().to_string(),
            FailureKind::Timeout => "TIMEOUT".into(),
            FailureKind::Setup => "SETUP_ERR".into(),
            FailureKind::Post => "POST_ERR".into(),
            FailureKind::Connect => "CONNECT_ERR".into(),
            FailureKind::HostUnreachable => "HOST_UNREACHABLE".into(),
            FailureKind::Handshake => "HANDSHAKE_ERR".into(),
            FailureKind::PeerClosed => "PEER_CLOSED".into(),
            FailureKind::NoDevice => "NO_DEVICE".into(),
        }
    }
}

/// A failed probe: what kind, and a message for logs (never keys or addresses).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {detail}", kind.name())]
pub struct ProbeFailure {
    /// The failure label.
    pub kind: FailureKind,
    /// What happened.
    pub detail: String,
}

impl ProbeFailure {
    /// A failure of `kind`.
    pub fn new(kind: FailureKind, detail: impl Into<String>) -> Self {
        ProbeFailure {
            kind,
            detail: detail.into(),
        }
    }

    /// A setup step failed with a verbs error (no device -> `NO_DEVICE`).
    pub fn setup(what: &str, e: VerbsError) -> Self {
        let kind = if e.is_no_rdma() {
            FailureKind::NoDevice
        } else {
            FailureKind::Setup
        };
        ProbeFailure::new(kind, format!("{what}: {e}"))
    }

    /// A post was refused.
    pub fn post(e: VerbsError) -> Self {
        ProbeFailure::new(FailureKind::Post, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_wc_status_names_or_our_own() {
        assert_eq!(
            FailureKind::Wc(WcStatus::RnrRetryExcErr).name(),
            "RNR_RETRY_EXC_ERR"
        );
        assert_eq!(FailureKind::Timeout.name(), "TIMEOUT");
        let f = ProbeFailure::setup(
            "open",
            VerbsError::DeviceNotFound {
                name: "x".into(),
                available: vec![],
            },
        );
        assert_eq!(f.kind, FailureKind::NoDevice);
        assert!(f.to_string().starts_with("NO_DEVICE: open"), "{f}");
    }
}
