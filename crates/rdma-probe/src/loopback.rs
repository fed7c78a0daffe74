//! Loopback probes of one port: two RC QPs on the same device connected to each other
//! through the port's GID (RoCE v2 by default), exercised like perftest's latency tests with
//! one thread per QP.
//!
//! [`LoopbackProbe`] owns the connection and rebuilds it after any failure: a QP that saw an
//! error is in the ERR state, so the whole pair (QPs, CQs, MRs, PD) is dropped and made
//! again on the next run. Everything is owned by values with `Drop`, so nothing leaks.
use crate::clock::Clock;
use crate::cpu::CpuMeter;
use crate::failure::{FailureKind, ProbeFailure};
use crate::rc::{deltas_ns, one_completion, one_sided, pingpong, Limits, PortInfo, Side};
use crate::snapshot::ProbeOp;
use rdma_verbs::{Context, ProtectionDomain, RtsParams, SendOp, Sge};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Parameters of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunParams {
    /// Message size in bytes (at least 1).
    pub size: usize,
    /// Exchanges before timing starts.
    pub warmup: u64,
    /// Timed exchanges (samples).
    pub iterations: u64,
    /// Give up (TIMEOUT) after this long.
    pub timeout: Duration,
}

impl Default for RunParams {
    fn default() -> Self {
        RunParams {
            size: 64,
            warmup: 10,
            iterations: 100,
            timeout: Duration::from_secs(5),
        }
    }
}

/// Two connected sides on one device.
struct LoopbackPair {
    // Field order: sides (QPs, MRs) drop before the PD they belong to.
    a: Side,
    b: Side,
    _pd: Arc<ProtectionDomain>,
    /// Sequence numbers used so far (WRITE ping-pong polls for the next one).
    seq: u64,
}

impl LoopbackPair {
    fn new(ctx: &Arc<Context>, port: &PortInfo, size: usize) -> Result<Self, ProbeFailure> {
        let pd = ctx
            .alloc_pd()
            .map_err(|e| ProbeFailure::setup("alloc_pd", e))?;
        let a = Side::new(ctx, &pd, size, 0x1000)?;
        let b = Side::new(ctx, &pd, size, 0x2000)?;
        let (ea, eb) = (a.endpoint(port), b.endpoint(port));
        a.connect(port, eb, RtsParams::default())?;
        b.connect(port, ea, RtsParams::default())?;
        Ok(LoopbackPair {
            a,
            b,
            _pd: pd,
            seq: 0,
        })
    }

    /// One run of `op`; one-way latency samples in nanoseconds.
    fn run(
        &mut self,
        op: ProbeOp,
        p: &RunParams,
        clock: &Clock,
        cpu: Option<&AtomicU64>,
    ) -> Result<Vec<f64>, ProbeFailure> {
        let abort = AtomicBool::new(false);
        let cpus = crate::affinity::allowed_cpus();
        let limits = Limits {
            yield_spins: cpus.len() == 1 && op != ProbeOp::Read,
            ..Limits::new(&abort, Instant::now() + p.timeout, clock)
        };
        if op == ProbeOp::Read {
            return one_sided(
                &self.a,
                self.b.remote(),
                op,
                p.warmup,
                p.iterations,
                clock,
                &limits,
            );
        }
        let n = p.warmup + p.iterations;
        let mut stamps = Vec::with_capacity(p.iterations as usize + 1);
        let (a, b, seq) = (&mut self.a, &mut self.b, self.seq);
        let (ra, rb) = (a.remote(), b.remote());
        let (client, server) = std::thread::scope(|s| {
            let server = std::thread::Builder::new()
                .name("rdma-probe-peer".into())
                .spawn_scoped(s, || {
                    let _pin = cpus.get(1).map(|&c| crate::affinity::Pin::to(c));
                    let mut meter = CpuMeter::start();
                    let r = pingpong(b, ra, op, n, seq, false, clock, None, &limits);
                    if let Some(total) = cpu {
                        meter.flush(total);
                    }
                    if r.is_err() {
                        abort.store(true, Ordering::Relaxed);
                    }
                    r
                });
            let pin = cpus.get(1).map(|_| crate::affinity::Pin::to(cpus[0]));
            let client = pingpong(
                a,
                rb,
                op,
                n,
                seq,
                true,
                clock,
                Some((&mut stamps, p.warmup)),
                &limits,
            );
            drop(pin);
            if client.is_err() {
                abort.store(true, Ordering::Relaxed);
            }
            let server = match server {
                Ok(h) => h.join().unwrap_or_else(|_| {
                    Err(ProbeFailure::new(
                        FailureKind::Setup,
                        "probe thread panicked",
                    ))
                }),
                Err(e) => Err(ProbeFailure::new(
                    FailureKind::Setup,
                    format!("spawning the probe thread: {e}"),
                )),
            };
            (client, server)
        });
        // Report the side that really failed, not the one that was aborted because of it.
        match (client, server) {
            (Ok(()), Ok(())) => {
                self.seq += n;
                Ok(deltas_ns(&stamps, clock, op.rtt_factor()))
            }
            (Err(c), Err(s)) if c.detail.starts_with("aborted") => Err(s),
            (Err(c), _) => Err(c),
            (Ok(()), Err(s)) => Err(s),
        }
    }
}

/// Loopback probes of one device port; keeps its connection between runs.
pub struct LoopbackProbe {
    device: String,
    port: u8,
    gid_index: Option<u8>,
    size: usize,
    // Field order: the pair drops before the context.
    pair: Option<LoopbackPair>,
    ctx: Option<(Arc<Context>, PortInfo)>,
    rebuilds: u64,
    cpu_sink: Option<Arc<AtomicU64>>,
}

impl std::fmt::Debug for LoopbackProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopbackProbe")
            .field("device", &self.device)
            .field("port", &self.port)
            .field("connected", &self.pair.is_some())
            .finish()
    }
}

impl LoopbackProbe {
    /// Probes of `device` port `port` with `size`-byte messages; GID `gid_index`, or the
    /// RoCE v2 one `choose_gid` picks. Nothing is opened until the first run.
    pub fn new(device: &str, port: u8, gid_index: Option<u8>, size: usize) -> Self {
        LoopbackProbe {
            device: device.to_string(),
            port,
            gid_index,
            size: size.max(1),
            pair: None,
            ctx: None,
            rebuilds: 0,
            cpu_sink: None,
        }
    }

    /// Add the CPU time of the helper thread (the second QP's) to `total` (nanoseconds).
    pub fn with_cpu_sink(mut self, total: Arc<AtomicU64>) -> Self {
        self.cpu_sink = Some(total);
        self
    }

    /// The device.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The port.
    pub fn port(&self) -> u8 {
        self.port
    }

    /// The GID index in use (after the first run).
    pub fn gid_index(&self) -> Option<u32> {
        self.ctx.as_ref().map(|(_, p)| p.gid.index)
    }

    /// How many times the connection was (re)built.
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds
    }

    fn pair(&mut self) -> Result<&mut LoopbackPair, ProbeFailure> {
        if self.ctx.is_none() {
            let ctx = rdma_verbs::open(&self.device)
                .map_err(|e| ProbeFailure::setup(&format!("open {}", self.device), e))?;
            let port = PortInfo::query(&ctx, self.port, self.gid_index)?;
            self.ctx = Some((ctx, port));
        }
        if self.pair.is_none() {
            let (ctx, port) = self.ctx.as_ref().expect("set above");
            let pair = LoopbackPair::new(ctx, port, self.size);
            if pair.is_err() {
                // The device may have gone or changed: reopen next time.
                self.ctx = None;
            }
            self.pair = Some(pair?);
            self.rebuilds += 1;
        }
        Ok(self.pair.as_mut().expect("set above"))
    }

    /// One run of `op` (the message size given at creation wins over `p.size`). Returns
    /// one-way latency samples in nanoseconds (READ: the full round trip). On failure the
    /// connection is dropped and rebuilt by the next run.
    pub fn run(
        &mut self,
        op: ProbeOp,
        p: &RunParams,
        clock: &Clock,
    ) -> Result<Vec<f64>, ProbeFailure> {
        let cpu = self.cpu_sink.clone();
        let result = self
            .pair()
            .and_then(|pair| pair.run(op, p, clock, cpu.as_deref()));
        if result.is_err() {
            self.pair = None;
        }
        result
    }

    /// Exercise the error path: an RDMA WRITE with a corrupted rkey, which the responder must
    /// refuse (`REM_ACCESS_ERR`). Returns that failure; the connection is rebuilt next run.
    pub fn inject_remote_access_error(&mut self) -> Result<ProbeFailure, ProbeFailure> {
        let pair = self.pair()?;
        let mut bad = pair.b.remote();
        bad.rkey ^= 0x00ff_ff00;
        let abort = AtomicBool::new(false);
        let clock = Clock::monotonic();
        let limits = Limits::new(&abort, Instant::now() + Duration::from_secs(5), &clock);
        let sge = Sge {
            mr: &pair.a.mr,
            offset: 0,
            len: 1,
        };
        let r = pair
            .a
            .qp
            .post_send(
                1,
                SendOp::Write {
                    remote: bad,
                    offset: 0,
                },
                &[sge],
            )
            .map_err(ProbeFailure::post)
            .and_then(|()| one_completion(&pair.a.send_cq, &limits));
        self.pair = None;
        match r {
            Err(f) => Ok(f),
            Ok(()) => Err(ProbeFailure::new(
                FailureKind::Setup,
                "a WRITE with a corrupted rkey succeeded",
            )),
        }
    }
}
