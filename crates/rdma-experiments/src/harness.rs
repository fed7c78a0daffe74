//! The machinery every experiment uses: numbered steps reported as they happen, parts with
//! their own counter window and async events, cancellation (Ctrl-C) checked at every step,
//! and a helper that builds connected RC QP pairs on one device.
//!
//! Cleanup is ownership: every verbs object an experiment creates is a local value, so
//! returning early (an error, `?`, an interruption) drops them all in reverse order before
//! the runner reads the resource counts again.
use crate::decl::{Declaration, PartDecl};
use crate::observe::{changes, CounterProbe, ObserveError};
use crate::report::{secret, Errno, Expect, Expectation, Finding, PartReport, Step, StepResult};
use rdma_verbs::{
    AccessFlags, CompletionQueue, Context, GidEntry, GidType, PortAttr, ProtectionDomain,
    QueuePair, RcLink, RtrParams, RtsParams, VerbsError, WcStatus, WorkCompletion,
};
use rdmakit::catalog::Catalog;
use rdmakit::model::Snapshot;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why an experiment stopped early.
#[derive(Debug, thiserror::Error)]
pub enum ExpError {
    /// Ctrl-C.
    #[error("interrupted (Ctrl-C); cleanup ran")]
    Interrupted,
    /// A verbs call failed where the experiment needed it to work.
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    /// Anything else.
    #[error("{0}")]
    Failed(String),
}

/// What the runner reports while it runs (the text face prints these at once).
#[derive(Debug, Clone, Copy)]
pub enum Progress<'a> {
    /// A part begins.
    Part(&'a PartDecl),
    /// A step finished.
    Step(&'a Step),
}

/// Options of a run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The RDMA device (`rxe0`).
    pub device: String,
    /// Show keys and addresses instead of masking them.
    pub show_keys: bool,
    /// The sysfs root (`/sys`).
    pub sysfs_root: std::path::PathBuf,
}

/// How long to wait for a completion that should come quickly.
pub(crate) const WC_TIMEOUT: Duration = Duration::from_secs(5);

/// One running experiment.
pub(crate) struct Run<'a> {
    pub(crate) opts: &'a Options,
    cancel: &'a AtomicBool,
    sink: &'a mut dyn FnMut(Progress<'_>),
    pub(crate) decl: &'static Declaration,
    catalog: &'static Catalog,
    pub(crate) family: Option<String>,
    probe: CounterProbe,
    pub(crate) steps: Vec<Step>,
    pub(crate) parts: Vec<PartReport>,
    current: Option<(&'static PartDecl, Option<Snapshot>, Instant)>,
    pub(crate) findings: Vec<Finding>,
    pub(crate) data: Map<String, Value>,
    pub(crate) counter_note: Option<String>,
}

impl<'a> Run<'a> {
    pub(crate) fn new(
        opts: &'a Options,
        cancel: &'a AtomicBool,
        sink: &'a mut dyn FnMut(Progress<'_>),
        decl: &'static Declaration,
        catalog: &'static Catalog,
        probe: CounterProbe,
        family: Option<String>,
    ) -> Run<'a> {
        Run {
            opts,
            cancel,
            sink,
            decl,
            catalog,
            family,
            probe,
            steps: Vec::new(),
            parts: Vec::new(),
            current: None,
            findings: Vec::new(),
            data: Map::new(),
            counter_note: None,
        }
    }

    pub(crate) fn probe(&mut self) -> &mut CounterProbe {
        &mut self.probe
    }

    /// Stop if Ctrl-C was pressed.
    pub(crate) fn check_cancel(&self) -> Result<(), ExpError> {
        if self.cancel.load(Ordering::Relaxed) {
            Err(ExpError::Interrupted)
        } else {
            Ok(())
        }
    }

    /// The cancellation flag, for worker loops.
    pub(crate) fn cancel_flag(&self) -> &'a AtomicBool {
        self.cancel
    }

    /// A summary step of a measured loop: `ok` says whether every completion succeeded.
    pub(crate) fn outcome_step(
        &mut self,
        verb: &str,
        detail: String,
        ok: bool,
        wc_status: Option<String>,
        values: Vals,
    ) {
        let mut s = Self::blank(
            verb,
            detail,
            if ok {
                StepResult::Ok
            } else {
                StepResult::Error
            },
        );
        s.wc_status = Some(wc_status.unwrap_or_else(|| "SUCCESS".into()));
        s.expected = Some("SUCCESS".into());
        s.as_expected = Some(ok);
        s.values = values.0;
        self.push(s);
    }

    /// A key or address for display.
    pub(crate) fn secret(&self, value: u64) -> Value {
        secret(value, self.opts.show_keys)
    }

    /// End the current part (reading its counters and the async events of `ctx`) and begin
    /// the declared part `name`.
    pub(crate) fn part(&mut self, name: &str, ctx: Option<&Context>) -> Result<(), ExpError> {
        self.end_part(ctx);
        self.check_cancel()?;
        let decl = self.decl.part(name).ok_or_else(|| {
            ExpError::Failed(format!("{}: undeclared part {name}", self.decl.name()))
        })?;
        (self.sink)(Progress::Part(decl));
        let before = match self.probe.read() {
            Ok(s) => Some(s),
            Err(e) => {
                self.counter_note = Some(e.to_string());
                None
            }
        };
        self.current = Some((decl, before, Instant::now()));
        Ok(())
    }

    /// A counter reading once the counters stopped moving (two readings 20 ms apart with no
    /// change), or the last one after 1 s of movement (traffic that is not this
    /// experiment's); the first error ends the wait.
    fn settled_read(&mut self) -> Result<Snapshot, ObserveError> {
        const GAP: Duration = Duration::from_millis(20);
        const BOUND: Duration = Duration::from_secs(1);
        let started = Instant::now();
        std::thread::sleep(Duration::from_millis(5));
        let mut last = self.probe.read()?;
        loop {
            std::thread::sleep(GAP);
            let now = self.probe.read()?;
            if changes(&last, &now, self.catalog).is_empty() || started.elapsed() >= BOUND {
                return Ok(now);
            }
            last = now;
        }
    }

    /// Close the open part, if any.
    pub(crate) fn end_part(&mut self, ctx: Option<&Context>) {
        let Some((decl, before, started)) = self.current.take() else {
            return;
        };
        let mut async_events = Vec::new();
        if let Some(ctx) = ctx {
            let mut wait = Duration::from_millis(30);
            while let Ok(Some(ev)) = ctx.next_async_event(wait) {
                let what = match ev.element {
                    rdma_verbs::EventElement::Qp(n) => format!(" (QP {n})"),
                    rdma_verbs::EventElement::Port(p) => format!(" (port {p})"),
                    _ => String::new(),
                };
                async_events.push(format!("{}{what}", ev.event_type.name()));
                wait = Duration::ZERO;
            }
        }
        // Let the last packets of the part land before reading: rxe counts them in softirq
        // and tasklet context, which a loaded (TCG) host can delay well past the completion,
        // and a straggler read late lands in the next part's window (seen: a "nothing sent"
        // part with rcvd_pkts moved). Read until two readings 20 ms apart agree, at most 1 s.
        let after = self.settled_read();
        let all = match (before, after) {
            (Some(b), Ok(a)) => changes(&b, &a, self.catalog),
            (_, Err(e)) => {
                self.counter_note = Some(e.to_string());
                Vec::new()
            }
            (None, Ok(_)) => Vec::new(),
        };
        let applicable = self.family.as_deref() == Some(self.decl.family) && !all.is_empty();
        let find = |name: &str| {
            all.iter()
                .filter(|c| c.name == name && c.source == "hw")
                .map(|c| c.delta)
                .reduce(|a, b| a + b)
        };
        let mut expectations = Vec::new();
        for (list, expect) in [(decl.moves, Expect::Moves), (decl.stays, Expect::Stays)] {
            for counter in list {
                let delta = find(counter);
                let met = match (applicable, delta) {
                    (true, Some(d)) => Some(match expect {
                        Expect::Moves => d > 0,
                        Expect::Stays => d == 0,
                    }),
                    _ => None,
                };
                expectations.push(Expectation {
                    counter,
                    expect,
                    delta,
                    met,
                });
            }
        }
        self.parts.push(PartReport {
            name: decl.name,
            title: decl.title,
            duration_ms: started.elapsed().as_millis() as u64,
            counters_moved: all.into_iter().filter(|c| c.delta > 0).collect(),
            async_events,
            expectations,
        });
    }

    fn push(&mut self, mut step: Step) {
        step.n = self.steps.len() + 1;
        step.part = self.current.as_ref().map(|(d, _, _)| d.name);
        (self.sink)(Progress::Step(&step));
        self.steps.push(step);
    }

    fn blank(verb: &str, detail: String, result: StepResult) -> Step {
        Step {
            n: 0,
            part: None,
            verb: verb.to_string(),
            detail,
            result,
            errno: None,
            wc_status: None,
            wc_opcode: None,
            expected: None,
            as_expected: None,
            elapsed_us: None,
            values: BTreeMap::new(),
        }
    }

    /// A reading or an explanation (no call).
    pub(crate) fn info(&mut self, verb: &str, detail: impl Into<String>, values: Vals) {
        let mut s = Self::blank(verb, detail.into(), StepResult::Info);
        s.values = values.0;
        self.push(s);
    }

    /// A call that must succeed: recorded, and its error aborts the experiment.
    pub(crate) fn must<T>(
        &mut self,
        verb: &str,
        detail: impl Into<String>,
        f: impl FnOnce() -> Result<T, VerbsError>,
    ) -> Result<T, ExpError> {
        self.must_with(verb, detail, f, |_| Vals::new())
    }

    /// Like [`must`](Self::must), with values taken from the result.
    pub(crate) fn must_with<T>(
        &mut self,
        verb: &str,
        detail: impl Into<String>,
        f: impl FnOnce() -> Result<T, VerbsError>,
        values: impl FnOnce(&T) -> Vals,
    ) -> Result<T, ExpError> {
        self.check_cancel()?;
        let t0 = Instant::now();
        let r = f();
        let us = t0.elapsed().as_secs_f64() * 1e6;
        let mut s = Self::blank(verb, detail.into(), StepResult::Ok);
        s.elapsed_us = Some(us);
        s.expected = Some("success".into());
        match r {
            Ok(v) => {
                s.values = values(&v).0;
                s.as_expected = Some(true);
                self.push(s);
                Ok(v)
            }
            Err(e) => {
                s.result = StepResult::Error;
                s.errno = errno_of(&e).map(Errno::new);
                s.as_expected = Some(false);
                s.values
                    .insert("error".into(), Value::String(e.to_string()));
                self.push(s);
                Err(ExpError::Verbs(e))
            }
        }
    }

    /// A call the lesson expects to fail with `errno`: recorded either way, never aborts.
    /// Returns the value when it unexpectedly succeeded.
    pub(crate) fn expect_errno<T>(
        &mut self,
        verb: &str,
        detail: impl Into<String>,
        errno: i32,
        f: impl FnOnce() -> Result<T, VerbsError>,
    ) -> Result<Option<T>, ExpError> {
        self.check_cancel()?;
        let t0 = Instant::now();
        let r = f();
        let mut s = Self::blank(verb, detail.into(), StepResult::Error);
        s.elapsed_us = Some(t0.elapsed().as_secs_f64() * 1e6);
        s.expected = Some(crate::report::errno_name(errno).to_string());
        match r {
            Ok(v) => {
                s.result = StepResult::Ok;
                s.as_expected = Some(false);
                self.push(s);
                Ok(Some(v))
            }
            Err(e) => {
                let got = errno_of(&e);
                s.errno = got.map(Errno::new);
                s.as_expected = Some(got == Some(errno));
                s.values
                    .insert("error".into(), Value::String(e.to_string()));
                self.push(s);
                Ok(None)
            }
        }
    }

    /// A call with no fixed prediction: recorded with its result or errno, never aborts.
    pub(crate) fn attempt<T>(
        &mut self,
        verb: &str,
        detail: impl Into<String>,
        f: impl FnOnce() -> Result<T, VerbsError>,
    ) -> Result<Option<T>, ExpError> {
        self.check_cancel()?;
        let t0 = Instant::now();
        let r = f();
        let mut s = Self::blank(verb, detail.into(), StepResult::Ok);
        s.elapsed_us = Some(t0.elapsed().as_secs_f64() * 1e6);
        match r {
            Ok(v) => {
                self.push(s);
                Ok(Some(v))
            }
            Err(e) => {
                s.result = StepResult::Error;
                s.errno = errno_of(&e).map(Errno::new);
                s.values
                    .insert("error".into(), Value::String(e.to_string()));
                self.push(s);
                Ok(None)
            }
        }
    }

    /// Wait for one completion on `cq` and record it against the expected status. Nothing
    /// arriving within the timeout is an error of the experiment.
    pub(crate) fn completion(
        &mut self,
        cq: &CompletionQueue,
        detail: impl Into<String>,
        expected: WcStatus,
    ) -> Result<WorkCompletion, ExpError> {
        self.completion_within(cq, detail, Some(expected), WC_TIMEOUT)?
            .ok_or_else(|| ExpError::Failed("no completion arrived within 5 s".into()))
    }

    /// Wait for one completion that the verbs spec says is `spec` and a known driver reports
    /// as `alt`: either counts as expected; the caller reports the difference as a finding.
    pub(crate) fn completion_either(
        &mut self,
        cq: &CompletionQueue,
        detail: impl Into<String>,
        spec: WcStatus,
        alt: WcStatus,
    ) -> Result<WorkCompletion, ExpError> {
        self.completion_inner(cq, detail.into(), Some(spec), Some(alt), WC_TIMEOUT)?
            .ok_or_else(|| ExpError::Failed("no completion arrived within 5 s".into()))
    }

    /// Wait up to `timeout` for one completion; `None` (recorded) when none came.
    pub(crate) fn completion_within(
        &mut self,
        cq: &CompletionQueue,
        detail: impl Into<String>,
        expected: Option<WcStatus>,
        timeout: Duration,
    ) -> Result<Option<WorkCompletion>, ExpError> {
        self.completion_inner(cq, detail.into(), expected, None, timeout)
    }

    fn completion_inner(
        &mut self,
        cq: &CompletionQueue,
        detail: String,
        expected: Option<WcStatus>,
        alt: Option<WcStatus>,
        timeout: Duration,
    ) -> Result<Option<WorkCompletion>, ExpError> {
        self.check_cancel()?;
        let t0 = Instant::now();
        let got = cq.poll_until(1, timeout)?;
        let us = t0.elapsed().as_secs_f64() * 1e6;
        let mut s = Self::blank("ibv_poll_cq", detail, StepResult::Ok);
        s.elapsed_us = Some(us);
        s.expected = match (expected, alt) {
            (Some(e), Some(a)) => Some(format!("{} (spec) or {} (rxe)", e.name(), a.name())),
            (e, _) => e.map(|e| e.name().to_string()),
        };
        let wc = got.first().copied();
        match wc {
            Some(wc) => {
                s.result = if wc.status.is_success() {
                    StepResult::Ok
                } else {
                    StepResult::Error
                };
                s.wc_status = Some(wc.status.name().to_string());
                if wc.status.is_success() {
                    s.wc_opcode = Some(wc.opcode.name().to_string());
                    s.values.insert("byte_len".into(), wc.byte_len.into());
                    if let Some(imm) = wc.imm_data {
                        s.values
                            .insert("imm_data".into(), format!("{imm:#x}").into());
                    }
                } else {
                    s.values.insert("vendor_err".into(), wc.vendor_err.into());
                }
                s.values.insert("qp_num".into(), wc.qp_num.into());
                s.as_expected = expected.map(|e| e == wc.status || alt == Some(wc.status));
            }
            None => {
                s.result = StepResult::Info;
                s.wc_status = None;
                s.values
                    .insert("note".into(), "no completion within the timeout".into());
                s.as_expected = expected.map(|_| false);
            }
        }
        self.push(s);
        Ok(wc)
    }

    /// Record that `cq` holds no completion (a one-sided target): polled once, nothing.
    pub(crate) fn no_completion(
        &mut self,
        cq: &CompletionQueue,
        detail: impl Into<String>,
    ) -> Result<bool, ExpError> {
        self.check_cancel()?;
        let wc = cq.poll_one()?;
        let mut s = Self::blank("ibv_poll_cq", detail.into(), StepResult::Info);
        s.expected = Some("empty".into());
        s.as_expected = Some(wc.is_none());
        if let Some(wc) = wc {
            s.wc_status = Some(wc.status.name().to_string());
        }
        self.push(s);
        Ok(wc.is_none())
    }

    /// Record a QP's state as the device reports it.
    pub(crate) fn qp_state(
        &mut self,
        qp: &QueuePair,
        who: &str,
        expected: Option<rdma_verbs::QpState>,
    ) -> Result<rdma_verbs::QpState, ExpError> {
        let st = qp.state()?;
        let mut s = Self::blank(
            "ibv_query_qp",
            format!("{who} (QP {}) state", qp.qp_num()),
            StepResult::Ok,
        );
        s.values.insert("state".into(), st.name().into());
        s.expected = expected.map(|e| e.name().to_string());
        s.as_expected = expected.map(|e| e == st);
        self.push(s);
        Ok(st)
    }

    /// Add a finding.
    pub(crate) fn finding(&mut self, id: &'static str, text: impl Into<String>) {
        self.findings.push(Finding {
            id,
            text: text.into(),
        });
    }
}

/// The errno inside a verbs error, when it carries one.
pub(crate) fn errno_of(e: &VerbsError) -> Option<i32> {
    use std::error::Error as _;
    let mut src: Option<&(dyn std::error::Error + 'static)> = e.source();
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return io.raw_os_error();
        }
        src = s.source();
    }
    None
}

/// A small builder for step values.
#[derive(Debug, Default)]
pub(crate) struct Vals(pub(crate) BTreeMap<String, Value>);

impl Vals {
    pub(crate) fn new() -> Vals {
        Vals::default()
    }

    pub(crate) fn with(mut self, k: &str, v: impl Into<Value>) -> Vals {
        self.0.insert(k.to_string(), v.into());
        self
    }
}

/// An open device with one PD, the chosen GID and port attributes.
pub(crate) struct Device {
    pub(crate) ctx: Arc<Context>,
    pub(crate) pd: Arc<ProtectionDomain>,
    pub(crate) gid: GidEntry,
    pub(crate) port: PortAttr,
}

/// One side of a pair.
pub(crate) struct Side {
    pub(crate) qp: QueuePair,
    pub(crate) cq: Arc<CompletionQueue>,
}

/// How to build a pair.
#[derive(Clone)]
pub(crate) struct PairSpec {
    pub(crate) rts_a: RtsParams,
    pub(crate) rts_b: RtsParams,
    pub(crate) access: AccessFlags,
    pub(crate) channel_a: bool,
    pub(crate) pd_b: Option<Arc<ProtectionDomain>>,
}

impl Default for PairSpec {
    fn default() -> Self {
        PairSpec {
            rts_a: RtsParams::default(),
            rts_b: RtsParams::default(),
            access: full_access(),
            channel_a: false,
            pd_b: None,
        }
    }
}

/// LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ.
pub(crate) fn full_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
}

impl Run<'_> {
    /// Open the device, allocate a PD, pick the GID (recorded as steps).
    pub(crate) fn open_device(&mut self) -> Result<Device, ExpError> {
        let name = self.opts.device.clone();
        let ctx = self.must("ibv_open_device", name.clone(), || rdma_verbs::open(&name))?;
        let port = self.must_with(
            "ibv_query_port",
            format!("{name} port 1"),
            || ctx.query_port(1),
            |p| {
                Vals::new()
                    .with("state", p.state.name())
                    .with("active_mtu", p.active_mtu.bytes().unwrap_or(0))
                    .with("link_layer", p.link_layer.name())
            },
        )?;
        let gid = self.must_with(
            "ibv_query_gid_table",
            "choose the source GID (RoCE v2, IPv4-mapped first)",
            || ctx.choose_gid(1, GidType::RoceV2),
            |g| {
                Vals::new()
                    .with("gid_index", g.index)
                    .with("gid", g.gid.to_string())
                    .with("gid_type", g.gid_type.name())
            },
        )?;
        let pd = self.must("ibv_alloc_pd", name.clone(), || ctx.alloc_pd())?;
        Ok(Device { ctx, pd, gid, port })
    }

    /// Two RC QPs on the device, connected to each other (one recorded step).
    pub(crate) fn pair(&mut self, dev: &Device, spec: &PairSpec) -> Result<(Side, Side), ExpError> {
        self.check_cancel()?;
        let t0 = Instant::now();
        let build = || -> Result<(Side, Side), VerbsError> {
            let cq_a = if spec.channel_a {
                dev.ctx.create_cq_with_channel(128)?
            } else {
                dev.ctx.create_cq(128)?
            };
            let cq_b = dev.ctx.create_cq(128)?;
            let pd_b = spec.pd_b.clone().unwrap_or_else(|| Arc::clone(&dev.pd));
            let a = dev.pd.create_rc_qp(&cq_a, &cq_a, Default::default())?;
            let b = pd_b.create_rc_qp(&cq_b, &cq_b, Default::default())?;
            connect(dev, &a, &b, spec.access, &spec.rts_a)?;
            connect(dev, &b, &a, spec.access, &spec.rts_b)?;
            Ok((Side { qp: a, cq: cq_a }, Side { qp: b, cq: cq_b }))
        };
        let r = build();
        let us = t0.elapsed().as_secs_f64() * 1e6;
        match r {
            Ok((a, b)) => {
                let mut s = Self::blank(
                    "ibv_create_qp + ibv_modify_qp",
                    format!(
                        "RC pair: QP {} <-> QP {}, both RESET->INIT->RTR->RTS (A: retry_cnt={} rnr_retry={} timeout={})",
                        a.qp.qp_num(),
                        b.qp.qp_num(),
                        spec.rts_a.retry_cnt,
                        spec.rts_a.rnr_retry,
                        spec.rts_a.timeout
                    ),
                    StepResult::Ok,
                );
                s.elapsed_us = Some(us);
                s.values.insert("qp_a".into(), a.qp.qp_num().into());
                s.values.insert("qp_b".into(), b.qp.qp_num().into());
                self.push(s);
                Ok((a, b))
            }
            Err(e) => {
                let mut s = Self::blank(
                    "ibv_create_qp + ibv_modify_qp",
                    "RC pair".to_string(),
                    StepResult::Error,
                );
                s.errno = errno_of(&e).map(Errno::new);
                s.values.insert("error".into(), e.to_string().into());
                self.push(s);
                Err(e.into())
            }
        }
    }
}

/// Bring `qp` to RTS towards `peer`.
pub(crate) fn connect(
    dev: &Device,
    qp: &QueuePair,
    peer: &QueuePair,
    access: AccessFlags,
    rts: &RtsParams,
) -> Result<(), VerbsError> {
    RcLink {
        max_dest_rd_atomic: MAX_DEST_RD_ATOMIC,
        min_rnr_timer: MIN_RNR_TIMER,
        rts: *rts,
        ..RcLink::new(1, dev.port.active_mtu, access)
    }
    .connect(qp, &dev.gid, rts.psn, peer.endpoint(&dev.gid, 0))
}

/// Incoming READs in flight the experiments' QPs accept.
const MAX_DEST_RD_ATOMIC: u8 = 4;
/// The experiments' RNR timer code (1 = 0.01 ms: RNR retries come quickly).
const MIN_RNR_TIMER: u8 = 1;

/// The RTR parameters towards `peer` on the same device (for the experiments that walk the
/// transitions one by one; [`connect`] takes the same values).
pub(crate) fn rtr_params(dev: &Device, peer: &QueuePair) -> RtrParams {
    RtrParams {
        remote: peer.endpoint(&dev.gid, 0),
        port: 1,
        sgid_index: dev.gid.index as u8,
        path_mtu: dev.port.active_mtu,
        max_dest_rd_atomic: MAX_DEST_RD_ATOMIC,
        min_rnr_timer: MIN_RNR_TIMER,
    }
}

/// Median and 99th percentile of microsecond samples.
pub(crate) fn percentiles(samples: &mut [f64]) -> (f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0);
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

/// Round to 0.1.
pub(crate) fn r1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_set() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        let (p50, p99) = percentiles(&mut v);
        assert_eq!(p50, 51.0);
        assert_eq!(p99, 99.0);
        assert_eq!(percentiles(&mut []), (0.0, 0.0));
        assert_eq!(r1(1.26), 1.3);
    }

    #[test]
    fn errno_is_found_in_verbs_errors() {
        let e = VerbsError::Call {
            op: "ibv_reg_mr",
            object: "x".into(),
            source: std::io::Error::from_raw_os_error(22),
        };
        assert_eq!(errno_of(&e), Some(22));
        assert_eq!(errno_of(&VerbsError::InvalidArgument("x".into())), None);
    }
}
