//! [`RcLink`]: the one RESET -> INIT -> RTR -> RTS sequence of an RC connection.

use super::params::{QpEndpoint, RtrParams, RtsParams};
use super::QueuePair;
use crate::codes::Mtu;
use crate::error::VerbsError;
use crate::gid::GidEntry;
use crate::mr::AccessFlags;

/// How an RC connection is brought up: the one RESET -> INIT -> RTR -> RTS sequence of the
/// workspace (probes, experiments, `rdmactl wire`, the live tests), with the parameters that
/// differ between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcLink {
    /// Local port of both ends.
    pub port: u8,
    /// Path MTU (at most the ports' active MTU).
    pub path_mtu: Mtu,
    /// Remote access rights granted to the peer (set at INIT).
    pub access: AccessFlags,
    /// Incoming RDMA READ/atomic in flight.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code (12 = 0.64 ms).
    pub min_rnr_timer: u8,
    /// Timeouts and retries of RTS; its `psn` is replaced by each end's own first PSN.
    pub rts: RtsParams,
}

impl RcLink {
    /// A link on `port` with perftest's defaults: one READ in flight, RNR timer 12, and
    /// [`RtsParams::default`].
    pub fn new(port: u8, path_mtu: Mtu, access: AccessFlags) -> RcLink {
        RcLink {
            port,
            path_mtu,
            access,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            rts: RtsParams::default(),
        }
    }

    /// Bring `qp` from RESET to RTS towards `remote`, sending from `gid` with first PSN
    /// `psn` (what the peer must get as `remote.psn`). The error names the transition that
    /// failed.
    pub fn connect(
        &self,
        qp: &QueuePair,
        gid: &GidEntry,
        psn: u32,
        remote: QpEndpoint,
    ) -> Result<(), VerbsError> {
        qp.to_init(self.port, self.access)?;
        qp.to_rtr(&RtrParams {
            remote,
            port: self.port,
            sgid_index: u8::try_from(gid.index).map_err(|_| {
                VerbsError::InvalidArgument(format!("GID index {} over 255", gid.index))
            })?,
            path_mtu: self.path_mtu,
            max_dest_rd_atomic: self.max_dest_rd_atomic,
            min_rnr_timer: self.min_rnr_timer,
        })?;
        qp.to_rts(&RtsParams { psn, ..self.rts })
    }

    /// Connect two QPs to each other (on one device or two): each end is the QP, the GID it
    /// sends from and its first PSN.
    pub fn connect_pair(
        &self,
        a: (&QueuePair, &GidEntry, u32),
        b: (&QueuePair, &GidEntry, u32),
    ) -> Result<(), VerbsError> {
        let ep_a = a.0.endpoint(a.1, a.2);
        let ep_b = b.0.endpoint(b.1, b.2);
        self.connect(a.0, a.1, ep_a.psn, ep_b)?;
        self.connect(b.0, b.1, ep_b.psn, ep_a)
    }
}
