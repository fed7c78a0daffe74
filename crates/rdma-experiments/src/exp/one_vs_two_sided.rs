//! `one-vs-two-sided`: the same 64 B transfer as SEND/RECV, RDMA WRITE, WRITE_WITH_IMM and
//! RDMA READ between two QPs, with one application thread per side: who gets a completion,
//! the latency (median, p99) and the CPU each side's thread spends per message, plus the
//! machine's CPU (on rxe the kernel does the NIC's work).
use crate::harness::{full_access, percentiles, r1, ExpError, PairSpec, Run, Side, Vals};
use crate::observe::{machine_jiffies, thread_cpu_ns};
use rdma_verbs::{MemoryRegion, SendOp, Sge, WcStatus};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Messages per operation.
pub(crate) const ITERATIONS: usize = 300;
/// Receives kept posted by the target.
const RECV_DEPTH: usize = 16;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Send,
    Write,
    WriteImm,
    Read,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Send => "SEND/RECV",
            Op::Write => "RDMA_WRITE",
            Op::WriteImm => "RDMA_WRITE_WITH_IMM",
            Op::Read => "RDMA_READ",
        }
    }

    fn part(self) -> &'static str {
        match self {
            Op::Send => "send_recv",
            Op::Write => "write",
            Op::WriteImm => "write_imm",
            Op::Read => "read",
        }
    }

    fn target_consumes_receive(self) -> bool {
        matches!(self, Op::Send | Op::WriteImm)
    }
}

/// What the target thread measured.
struct TargetResult {
    completions: usize,
    cpu_ns: u64,
    errors: usize,
}

/// The target side: for two-sided ops keep receives posted and reap them; else just wait.
fn target(
    b: &Side,
    buf: &MemoryRegion,
    op: Op,
    done: &AtomicBool,
) -> Result<TargetResult, rdma_verbs::VerbsError> {
    let cpu0 = thread_cpu_ns().unwrap_or(0);
    let mut completions = 0;
    let mut errors = 0;
    if op.target_consumes_receive() {
        let sge = [Sge {
            mr: buf,
            offset: 0,
            len: 64,
        }];
        while completions < ITERATIONS && !done.load(Ordering::Relaxed) {
            match b.cq.poll_one()? {
                Some(wc) => {
                    completions += 1;
                    if !wc.status.is_success() {
                        errors += 1;
                    }
                    b.qp.post_recv(100, &sge)?;
                }
                None => std::hint::spin_loop(),
            }
        }
    } else {
        // One-sided: the target application has nothing to do. Sleep until the end.
        while !done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(2));
        }
        let mut rest = Vec::new();
        b.cq.poll_into(&mut rest, 64)?;
        completions = rest.len();
    }
    Ok(TargetResult {
        completions,
        cpu_ns: thread_cpu_ns().unwrap_or(0).saturating_sub(cpu0),
        errors,
    })
}

/// What the requester thread measured.
struct RequesterResult {
    latencies_us: Vec<f64>,
    cpu_ns: u64,
    completions: usize,
    first_error: Option<WcStatus>,
}

/// Post one op at a time and busy-poll its completion.
fn requester(
    a: &Side,
    src: &MemoryRegion,
    dst: &MemoryRegion,
    op: Op,
    cancel: &dyn Fn() -> bool,
) -> Result<RequesterResult, rdma_verbs::VerbsError> {
    let sge = [Sge {
        mr: src,
        offset: 0,
        len: 64,
    }];
    let remote = dst.remote();
    let cpu0 = thread_cpu_ns().unwrap_or(0);
    let mut latencies_us = Vec::with_capacity(ITERATIONS);
    let mut completions = 0;
    let mut first_error = None;
    for i in 0..ITERATIONS {
        if cancel() {
            break;
        }
        let send_op = match op {
            Op::Send => SendOp::Send,
            Op::Write => SendOp::Write { remote, offset: 0 },
            Op::WriteImm => SendOp::WriteWithImm {
                remote,
                offset: 0,
                imm: i as u32,
            },
            Op::Read => SendOp::Read { remote, offset: 0 },
        };
        let t0 = Instant::now();
        a.qp.post_send(i as u64, send_op, &sge)?;
        let deadline = t0 + Duration::from_secs(5);
        loop {
            if let Some(wc) = a.cq.poll_one()? {
                completions += 1;
                if !wc.status.is_success() && first_error.is_none() {
                    first_error = Some(wc.status);
                }
                break;
            }
            if Instant::now() > deadline {
                return Ok(RequesterResult {
                    latencies_us,
                    cpu_ns: thread_cpu_ns().unwrap_or(0).saturating_sub(cpu0),
                    completions,
                    first_error: Some(WcStatus::RespTimeoutErr),
                });
            }
            std::hint::spin_loop();
        }
        latencies_us.push(t0.elapsed().as_secs_f64() * 1e6);
        if first_error.is_some() {
            break;
        }
    }
    Ok(RequesterResult {
        latencies_us,
        cpu_ns: thread_cpu_ns().unwrap_or(0).saturating_sub(cpu0),
        completions,
        first_error,
    })
}

pub(crate) fn run(run: &mut Run<'_>) -> Result<(), ExpError> {
    let dev = run.open_device()?;
    let access = full_access();
    let mut src = run.must("ibv_reg_mr", "4 KiB on A (64 B used)", || {
        dev.pd.register(4096, access)
    })?;
    let dst = run.must("ibv_reg_mr", "4 KiB on B (64 B used)", || {
        dev.pd.register(4096, access)
    })?;
    src.write(0, &[0x11; 64])?;
    let (a, b) = run.pair(&dev, &PairSpec::default())?;
    let hz = 100.0; // USER_HZ: /proc/stat counts in 1/100 s on Linux
    let mut table = Vec::new();
    for op in [Op::Send, Op::Write, Op::WriteImm, Op::Read] {
        run.part(op.part(), Some(&dev.ctx))?;
        if op.target_consumes_receive() {
            run.must(
                "ibv_post_recv",
                format!("B: {RECV_DEPTH} receives of 64 B (B's thread reposts each one it reaps)"),
                || {
                    for _ in 0..RECV_DEPTH {
                        b.qp.post_recv(
                            100,
                            &[Sge {
                                mr: &dst,
                                offset: 0,
                                len: 64,
                            }],
                        )?;
                    }
                    Ok(())
                },
            )?;
        }
        let done = AtomicBool::new(false);
        let jiffies0 = machine_jiffies();
        let wall0 = Instant::now();
        let cancel_flag = run.cancel_flag();
        let cancel = || cancel_flag.load(Ordering::Relaxed);
        let (req, tgt) = std::thread::scope(|s| {
            let t = s.spawn(|| target(&b, &dst, op, &done));
            let r = requester(&a, &src, &dst, op, &cancel);
            // Let the target reap the last receive, then stop it.
            if op.target_consumes_receive() {
                std::thread::sleep(Duration::from_millis(20));
            }
            done.store(true, Ordering::Relaxed);
            (r, t.join())
        });
        let wall = wall0.elapsed().as_secs_f64();
        let jiffies1 = machine_jiffies();
        run.check_cancel()?;
        let req = req?;
        let tgt = tgt.map_err(|_| ExpError::Failed("the target thread panicked".into()))??;
        let n = req.latencies_us.len().max(1) as f64;
        let mut lat = req.latencies_us.clone();
        let (p50, p99) = percentiles(&mut lat);
        let machine_busy_us = match (jiffies0, jiffies1) {
            (Some((b0, _)), Some((b1, _))) => (b1.saturating_sub(b0)) as f64 / hz * 1e6,
            _ => 0.0,
        };
        let row = json!({
            "op": op.name(),
            "messages": req.latencies_us.len(),
            "requester_completions": req.completions,
            "target_completions": tgt.completions,
            "target_errors": tgt.errors,
            "first_error": req.first_error.map(|s| s.name()),
            "latency_us_median": r1(p50),
            "latency_us_p99": r1(p99),
            "requester_cpu_us_per_msg": r1(req.cpu_ns as f64 / 1e3 / n),
            "target_cpu_us_per_msg": r1(tgt.cpu_ns as f64 / 1e3 / n),
            "machine_busy_us_per_msg": r1(machine_busy_us / n),
            "wall_s": r1(wall * 10.0) / 10.0,
        });
        let mut s_vals = Vals::new();
        if let Some(map) = row.as_object() {
            for (k, v) in map {
                s_vals = s_vals.with(k, v.clone());
            }
        }
        let ok = req.first_error.is_none() && tgt.errors == 0;
        run.outcome_step(
            "ibv_post_send + ibv_poll_cq",
            format!(
                "{}: {} x 64 B; completions A={} B={}; latency median {:.1} us p99 {:.1} us; CPU per message A {:.1} us, B {:.1} us",
                op.name(),
                req.latencies_us.len(),
                req.completions,
                tgt.completions,
                p50,
                p99,
                req.cpu_ns as f64 / 1e3 / n,
                tgt.cpu_ns as f64 / 1e3 / n
            ),
            ok,
            req.first_error.map(|s| s.name().to_string()),
            s_vals,
        );
        table.push(row);
    }
    run.end_part(Some(&dev.ctx));
    let rnr: u64 = run
        .parts
        .iter()
        .filter(|p| p.name == "send_recv" || p.name == "write_imm")
        .flat_map(|p| p.counters_moved.iter())
        .filter(|c| &*c.name == "send_rnr_err")
        .map(|c| c.delta)
        .sum();
    if rnr > 0 {
        run.finding(
            "receiver_outran",
            format!(
                "the two-sided parts hit {rnr} RNR NAKs although B kept {RECV_DEPTH} receives posted: A only waits for its own completion (the ACK), so it can run {RECV_DEPTH} messages ahead of B's application; when B's queue ran dry the responder answered RNR and A retried after the RNR timer. Two-sided traffic is flow-controlled by the receiver's posted buffers; WRITE and READ never need one."
            ),
        );
    }
    run.info(
        "summary",
        "SEND and WRITE_WITH_IMM consume a receive and wake the target; WRITE and READ complete only at the requester, and the target thread slept through them. rxe runs the target's transport in the kernel, so the machine's busy time moves even when the target application's does not; on a hardware RNIC that work is on the NIC.",
        Vals::new(),
    );
    run.data.insert("operations".into(), json!(table));
    run.data.insert("iterations".into(), json!(ITERATIONS));
    drop((a, b));
    Ok(())
}
