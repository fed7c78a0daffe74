//! The RC building blocks every probe shares: one side of a connection (QP, send and receive
//! CQs, one MR) and the hot loops, written the way perftest's `run_iter_lat_*` are so the
//! numbers compare: one thread per QP, raw CQ polling (no allocation), memory polling for
//! RDMA WRITE ping-pong, a timestamp per post.
//!
//! MR layout of a side: bytes `[0, size)` receive incoming messages, `[size, 2*size)` hold
//! what this side sends. The last byte of a message carries a sequence number, so the
//! receiver of an RDMA WRITE knows a new message landed by polling one byte.
use crate::clock::Clock;
use crate::failure::{FailureKind, ProbeFailure};
use crate::snapshot::ProbeOp;
use rdma_verbs::{
    AccessFlags, CompletionQueue, Context, GidEntry, MemoryRegion, Mtu, ProtectionDomain, QpCaps,
    QpEndpoint, QueuePair, RcLink, RemoteBuffer, RtsParams, SendOp, Sge, WcStatus,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Largest message sent inline (perftest's default inline size for latency tests).
const MAX_INLINE: usize = 220;

/// Receives kept posted on each side.
pub(crate) const RECV_DEPTH: u32 = 16;

/// Access every probe MR and QP grants.
pub(crate) fn probe_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
}

/// Where a side sends from and how it addresses itself.
#[derive(Debug, Clone)]
pub(crate) struct PortInfo {
    pub port: u8,
    pub gid: GidEntry,
    pub lid: u16,
    pub mtu: Mtu,
}

impl PortInfo {
    /// Port attributes and the GID to use (`gid_index`, else RoCE v2 as `choose_gid` picks).
    pub fn query(ctx: &Context, port: u8, gid_index: Option<u8>) -> Result<Self, ProbeFailure> {
        let attr = ctx
            .query_port(port)
            .map_err(|e| ProbeFailure::setup("query_port", e))?;
        let gid = match gid_index {
            Some(i) => ctx
                .gid_table(port)
                .map_err(|e| ProbeFailure::setup("gid_table", e))?
                .into_iter()
                .find(|g| g.index == u32::from(i))
                .ok_or_else(|| {
                    ProbeFailure::new(
                        FailureKind::Setup,
                        format!("{} port {port} has no GID index {i}", ctx.name()),
                    )
                })?,
            None => ctx
                .choose_gid(port, rdma_verbs::GidType::RoceV2)
                .map_err(|e| ProbeFailure::setup("choose_gid", e))?,
        };
        Ok(PortInfo {
            port,
            gid,
            lid: attr.lid,
            mtu: attr.active_mtu,
        })
    }
}

/// One end of an RC connection.
pub(crate) struct Side {
    pub qp: QueuePair,
    pub send_cq: Arc<CompletionQueue>,
    pub recv_cq: Arc<CompletionQueue>,
    pub mr: MemoryRegion,
    pub size: usize,
    pub psn: u32,
    /// SENDs and WRITEs carry their data inline.
    pub inline: bool,
}

impl Side {
    /// A QP with its own send and receive CQs and a `2 * size` MR, receives posted.
    pub fn new(
        ctx: &Arc<Context>,
        pd: &Arc<ProtectionDomain>,
        size: usize,
        psn: u32,
    ) -> Result<Side, ProbeFailure> {
        let send_cq = ctx
            .create_cq(RECV_DEPTH * 2)
            .map_err(|e| ProbeFailure::setup("create_cq", e))?;
        let recv_cq = ctx
            .create_cq(RECV_DEPTH * 2)
            .map_err(|e| ProbeFailure::setup("create_cq", e))?;
        let caps = QpCaps {
            max_send_wr: 16,
            max_recv_wr: RECV_DEPTH,
            // Small messages go inline, as perftest sends them (its default up to 220 bytes).
            max_inline_data: if size <= MAX_INLINE { size as u32 } else { 0 },
            ..QpCaps::default()
        };
        // A device that grants no inline data refuses the QP: ask again without.
        let qp = pd
            .create_rc_qp(&send_cq, &recv_cq, caps)
            .or_else(|_| {
                pd.create_rc_qp(
                    &send_cq,
                    &recv_cq,
                    QpCaps {
                        max_inline_data: 0,
                        ..caps
                    },
                )
            })
            .map_err(|e| ProbeFailure::setup("create_rc_qp", e))?;
        let inline = size <= qp.max_inline_data() as usize;
        let mr = pd
            .register(size * 2, probe_access())
            .map_err(|e| ProbeFailure::setup("register", e))?;
        Ok(Side {
            qp,
            send_cq,
            recv_cq,
            mr,
            size,
            psn: psn & 0x00ff_ffff,
            inline,
        })
    }

    /// What the peer needs to connect to this side.
    pub fn endpoint(&self, port: &PortInfo) -> QpEndpoint {
        let mut ep = self.qp.endpoint(&port.gid, self.psn);
        ep.lid = port.lid;
        ep
    }

    /// The receive region, for the peer's RDMA WRITE/READ.
    pub fn remote(&self) -> RemoteBuffer {
        let mut r = self.mr.remote();
        r.len = self.size as u64;
        r
    }

    /// RESET -> INIT -> RTR -> RTS towards `remote`, then post the receives (before the
    /// peer learns it may send: the loopback connects both sides first, the peer server
    /// answers the handshake after this returns).
    pub fn connect(
        &self,
        port: &PortInfo,
        remote: QpEndpoint,
        rts: RtsParams,
    ) -> Result<(), ProbeFailure> {
        RcLink {
            rts,
            ..RcLink::new(port.port, port.mtu, probe_access())
        }
        .connect(&self.qp, &port.gid, self.psn, remote)
        .map_err(|e| ProbeFailure::setup("connect", e))?;
        for i in 0..RECV_DEPTH {
            self.post_recv(u64::from(i))?;
        }
        Ok(())
    }

    fn post_recv(&self, wr_id: u64) -> Result<(), ProbeFailure> {
        let sge = Sge {
            mr: &self.mr,
            offset: 0,
            len: self.size as u32,
        };
        self.qp.post_recv(wr_id, &[sge]).map_err(ProbeFailure::post)
    }

    /// Post a SEND or WRITE of the outgoing message (inline when the QP allows it).
    fn post_outgoing(&self, wr_id: u64, op: SendOp) -> Result<(), ProbeFailure> {
        let sge = [self.send_sge()];
        if self.inline {
            self.qp.post_send_inline(wr_id, op, &sge)
        } else {
            self.qp.post_send(wr_id, op, &sge)
        }
        .map_err(ProbeFailure::post)
    }

    fn send_sge(&self) -> Sge<'_> {
        Sge {
            mr: &self.mr,
            offset: self.size,
            len: self.size as u32,
        }
    }

    /// Put sequence byte `seq` at the end of the outgoing message.
    fn stamp_outgoing(&mut self, seq: u8) -> Result<(), ProbeFailure> {
        self.mr
            .write(self.size * 2 - 1, &[seq])
            .map_err(|e| ProbeFailure::setup("MR write", e))
    }
}

/// Why a loop stops early besides its own failure.
pub(crate) struct Limits<'a> {
    pub abort: &'a AtomicBool,
    pub deadline: Instant,
    /// Yield the CPU on every idle spin (both threads share one CPU).
    pub yield_spins: bool,
    /// The run's clock, to notice a long wait cheaply.
    pub clock: &'a Clock,
}

impl<'a> Limits<'a> {
    /// Limits of a run that ends at `deadline` or when `abort` is set.
    pub fn new(abort: &'a AtomicBool, deadline: Instant, clock: &'a Clock) -> Self {
        Limits {
            abort,
            deadline,
            yield_spins: false,
            clock,
        }
    }
}

impl Limits<'_> {
    /// Called every few hundred spins: abort or deadline.
    #[cold]
    fn check(&self) -> Result<(), ProbeFailure> {
        if self.abort.load(Ordering::Relaxed) {
            return Err(ProbeFailure::new(
                FailureKind::Timeout,
                "aborted: the other side failed",
            ));
        }
        if Instant::now() >= self.deadline {
            return Err(ProbeFailure::new(
                FailureKind::Timeout,
                "no completion before the deadline",
            ));
        }
        Ok(())
    }
}

/// How long a wait spins before it starts yielding the CPU: far above a Soft-RoCE one-way
/// time under emulation (~15 us), far below a scheduler tick (4 ms).
const YIELD_AFTER: std::time::Duration = std::time::Duration::from_micros(200);

/// Spin on `f` until it yields a value; check the limits every 512 spins; after
/// [`YIELD_AFTER`] of waiting, yield the CPU on every spin.
#[inline]
fn spin<T>(
    limits: &Limits<'_>,
    mut f: impl FnMut() -> Result<Option<T>, ProbeFailure>,
) -> Result<T, ProbeFailure> {
    let mut spins = 0u32;
    let mut started: Option<u64> = None;
    let mut yielding = limits.yield_spins;
    loop {
        if let Some(v) = f()? {
            return Ok(v);
        }
        spins = spins.wrapping_add(1);
        if spins & 511 == 0 {
            limits.check()?;
        }
        if !yielding && spins & 63 == 0 {
            let now = limits.clock.now();
            let t0 = *started.get_or_insert(now);
            yielding =
                limits.clock.ticks_to_ns(now.saturating_sub(t0)) > YIELD_AFTER.as_nanos() as f64;
        }
        // Past a few typical round trips, let whatever else wants this CPU run: on a
        // software RDMA device the kernel threads that move our packets may be waiting for
        // it, and would otherwise get it only at the next scheduler tick (4 ms stalls).
        if yielding {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Wait for one completion on `cq` and require success.
#[inline]
pub(crate) fn one_completion(
    cq: &CompletionQueue,
    limits: &Limits<'_>,
) -> Result<(), ProbeFailure> {
    let wc = spin(limits, || {
        cq.poll_one()
            .map_err(|e| ProbeFailure::new(FailureKind::Setup, e.to_string()))
    })?;
    if wc.status == WcStatus::Success {
        Ok(())
    } else {
        Err(ProbeFailure::new(
            FailureKind::Wc(wc.status),
            format!(
                "work completion {} (vendor error {})",
                wc.status, wc.vendor_err
            ),
        ))
    }
}

/// One side of a ping-pong run (SEND or WRITE), like perftest's `run_iter_lat_send/write`.
///
/// Both sides run `n` exchanges; the client sends first. `seq0` continues the sequence
/// numbers of earlier runs on the same connection (the receive region still holds the last
/// one). With `stamps`, the client records a timestamp before each post from exchange
/// `skip` on, plus one after the last reply: consecutive differences are round trips.
#[allow(clippy::too_many_arguments)]
pub(crate) fn pingpong(
    side: &mut Side,
    peer: RemoteBuffer,
    op: ProbeOp,
    n: u64,
    seq0: u64,
    client: bool,
    clock: &Clock,
    mut stamps: Option<(&mut Vec<u64>, u64)>,
    limits: &Limits<'_>,
) -> Result<(), ProbeFailure> {
    let last = side.size - 1;
    let (mut scnt, mut rcnt, mut ccnt) = (0u64, 0u64, 0u64);
    while scnt < n || rcnt < n || ccnt < n {
        if rcnt < n && !(scnt == 0 && client) {
            rcnt += 1;
            match op {
                ProbeOp::Write => {
                    let want = (seq0 + rcnt) as u8;
                    spin(limits, || {
                        let b = side
                            .mr
                            .load_u8_volatile(last)
                            .map_err(|e| ProbeFailure::setup("MR read", e))?;
                        Ok((b == want).then_some(()))
                    })?;
                }
                _ => {
                    one_completion(&side.recv_cq, limits)?;
                    side.post_recv(rcnt)?;
                }
            }
        }
        if scnt < n {
            if let Some((v, skip)) = stamps.as_mut() {
                if scnt >= *skip {
                    v.push(clock.now());
                }
            }
            scnt += 1;
            let sop = match op {
                ProbeOp::Write => {
                    side.stamp_outgoing((seq0 + scnt) as u8)?;
                    SendOp::Write {
                        remote: peer,
                        offset: 0,
                    }
                }
                _ => SendOp::Send,
            };
            side.post_outgoing(scnt, sop)?;
        }
        if ccnt < n {
            one_completion(&side.send_cq, limits)?;
            ccnt += 1;
        }
    }
    if let Some((v, _)) = stamps {
        v.push(clock.now());
    }
    Ok(())
}

/// A one-sided run (RDMA READ, or RDMA WRITE timed to its completion): post, wait for the
/// completion, repeat. Timestamps as in [`pingpong`]. Returns round trips in nanoseconds.
pub(crate) fn one_sided(
    side: &Side,
    peer: RemoteBuffer,
    op: ProbeOp,
    warmup: u64,
    iters: u64,
    clock: &Clock,
    limits: &Limits<'_>,
) -> Result<Vec<f64>, ProbeFailure> {
    let mut stamps = Vec::with_capacity(iters as usize + 1);
    for i in 0..warmup + iters {
        if i >= warmup {
            stamps.push(clock.now());
        }
        let sop = match op {
            ProbeOp::Read => SendOp::Read {
                remote: peer,
                offset: 0,
            },
            _ => SendOp::Write {
                remote: peer,
                offset: 0,
            },
        };
        // READ lands in the receive region, WRITE goes out of the send region.
        match op {
            ProbeOp::Read => {
                let sge = Sge {
                    mr: &side.mr,
                    offset: 0,
                    len: side.size as u32,
                };
                side.qp
                    .post_send(i, sop, &[sge])
                    .map_err(ProbeFailure::post)?;
            }
            _ => side.post_outgoing(i, sop)?,
        }
        one_completion(&side.send_cq, limits)?;
    }
    stamps.push(clock.now());
    Ok(deltas_ns(&stamps, clock, 1.0))
}

/// Differences of consecutive timestamps, in nanoseconds, divided by `factor`.
pub(crate) fn deltas_ns(stamps: &[u64], clock: &Clock, factor: f64) -> Vec<f64> {
    stamps
        .windows(2)
        .map(|w| clock.ticks_to_ns(w[1].saturating_sub(w[0])) / factor)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_parse_and_carry_perftests_rtt_factor() {
        assert_eq!("WRITE".parse::<ProbeOp>(), Ok(ProbeOp::Write));
        assert!("atomic".parse::<ProbeOp>().is_err());
        assert_eq!(ProbeOp::Write.rtt_factor(), 2.0);
        assert_eq!(ProbeOp::Read.rtt_factor(), 1.0);
        assert_eq!(ProbeOp::Send.perftest_name(), "Send");
    }

    #[test]
    fn deltas_are_consecutive_differences_scaled() {
        let c = Clock::monotonic();
        assert_eq!(deltas_ns(&[10, 30, 70], &c, 2.0), vec![10.0, 20.0]);
        assert!(deltas_ns(&[5], &c, 1.0).is_empty());
    }
}
