//! `cq-modes`: waiting for an incoming message by busy polling vs by sleeping on a completion
//! channel (`ibv_req_notify_cq`, poll(2) on the channel fd, `ibv_get_cq_event` +
//! `ibv_ack_cq_events`, poll again). A sender thread on QP B sends a 64 B SEND every few
//! hundred microseconds; the receiver thread on QP A measures how late it noticed each one
//! and how much CPU it burnt waiting.
//!
//! Why a receiver and not the requester's own completion: rxe runs a loopback transfer inside
//! the `ibv_post_send` doorbell syscall, so a requester's completion is already queued when
//! the post returns and there is nothing to wait for.
use crate::harness::{full_access, percentiles, r1, ExpError, PairSpec, Run, Vals};
use crate::observe::thread_cpu_ns;
use rdma_verbs::{SendOp, Sge, VerbsError};
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Messages per mode.
const ITERATIONS: usize = 200;
/// Pause between the receiver being ready and the next send.
const GAP: Duration = Duration::from_micros(300);
/// Receives kept posted.
const RECV_DEPTH: usize = 8;

/// What the receiving thread measured.
struct Measured {
    latencies_us: Vec<f64>,
    cpu_ns: u64,
    wall_s: f64,
    wakeups: u64,
    empty_polls: u64,
    failures: usize,
}

pub(crate) fn run(run: &mut Run<'_>) -> Result<(), ExpError> {
    let dev = run.open_device()?;
    let access = full_access();
    let rbuf = run.must("ibv_reg_mr", "4 KiB receive buffer on A", || {
        dev.pd.register(4096, access)
    })?;
    let sbuf = run.must("ibv_reg_mr", "4 KiB send buffer on B", || {
        dev.pd.register(4096, access)
    })?;
    let spec = PairSpec {
        channel_a: true,
        ..PairSpec::default()
    };
    let (a, b) = run.pair(&dev, &spec)?;
    run.info(
        "ibv_create_comp_channel",
        format!("A's CQ has a completion channel (an fd the kernel makes readable on a CQ event). B's thread sends {ITERATIONS} x 64 B, {} us after A is ready each time; A waits for each.", GAP.as_micros()),
        Vals::new(),
    );
    let recv = [Sge {
        mr: &rbuf,
        offset: 0,
        len: 64,
    }];
    let mut rows = Vec::new();
    for (part, events) in [("busy_poll", false), ("events", true)] {
        run.part(part, Some(&dev.ctx))?;
        for _ in 0..RECV_DEPTH {
            a.qp.post_recv(1, &recv)?;
        }
        let base = Instant::now();
        let sent_at = AtomicU64::new(0);
        let received = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let cancel = run.cancel_flag();
        let sender = |b_qp: &rdma_verbs::QueuePair,
                      b_cq: &rdma_verbs::CompletionQueue|
         -> Result<(), VerbsError> {
            let sge = [Sge {
                mr: &sbuf,
                offset: 0,
                len: 64,
            }];
            for i in 0..ITERATIONS {
                while received.load(Ordering::Acquire) < i {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(());
                    }
                    std::thread::yield_now();
                }
                std::thread::sleep(GAP);
                sent_at.store(base.elapsed().as_nanos() as u64, Ordering::Release);
                b_qp.post_send(i as u64, SendOp::Send, &sge)?;
                b_cq.poll_until(1, Duration::from_secs(5))?;
            }
            Ok(())
        };
        let receiver = || -> Result<Measured, VerbsError> {
            let cpu0 = thread_cpu_ns().unwrap_or(0);
            let wall0 = Instant::now();
            let mut m = Measured {
                latencies_us: Vec::with_capacity(ITERATIONS),
                cpu_ns: 0,
                wall_s: 0.0,
                wakeups: 0,
                empty_polls: 0,
                failures: 0,
            };
            for i in 0..ITERATIONS {
                if cancel.load(Ordering::Relaxed) {
                    break;
                }
                let deadline = Instant::now() + Duration::from_secs(5);
                let wc = loop {
                    if let Some(wc) = a.cq.poll_one()? {
                        break Some(wc);
                    }
                    if Instant::now() > deadline {
                        break None;
                    }
                    if events {
                        // Arm, poll once more (a completion may have landed before arming),
                        // then sleep until the kernel signals the channel.
                        a.cq.req_notify(false)?;
                        if let Some(wc) = a.cq.poll_one()? {
                            break Some(wc);
                        }
                        if a.cq.wait(Duration::from_secs(5))? {
                            m.wakeups += 1;
                        }
                    } else {
                        m.empty_polls += 1;
                        std::hint::spin_loop();
                    }
                };
                let now = base.elapsed().as_nanos() as u64;
                let sent = sent_at.load(Ordering::Acquire);
                m.latencies_us.push(now.saturating_sub(sent) as f64 / 1e3);
                match wc {
                    Some(wc) if wc.status.is_success() => {}
                    _ => m.failures += 1,
                }
                a.qp.post_recv(1, &recv)?;
                received.store(i + 1, Ordering::Release);
            }
            m.cpu_ns = thread_cpu_ns().unwrap_or(0).saturating_sub(cpu0);
            m.wall_s = wall0.elapsed().as_secs_f64();
            Ok(m)
        };
        let (measured, sent) = std::thread::scope(|s| {
            let t = s.spawn(|| sender(&b.qp, &b.cq));
            let r = receiver();
            stop.store(true, Ordering::Relaxed);
            (r, t.join())
        });
        run.check_cancel()?;
        let mut m = measured?;
        sent.map_err(|_| ExpError::Failed("the sender thread panicked".into()))??;
        // Consume an event left pending by the last arm, so the next part starts clean.
        while a.cq.wait(Duration::ZERO)? {}
        let n = m.latencies_us.len().max(1) as f64;
        let (p50, p99) = percentiles(&mut m.latencies_us);
        let cpu_us = m.cpu_ns as f64 / 1e3;
        let share = cpu_us / (m.wall_s * 1e6).max(1.0);
        let row = json!({
            "mode": part,
            "messages": m.latencies_us.len(),
            "failures": m.failures,
            "latency_us_median": r1(p50),
            "latency_us_p99": r1(p99),
            "cpu_us_per_msg": r1(cpu_us / n),
            "cpu_share_of_wall": (share * 100.0).round() / 100.0,
            "wakeups": m.wakeups,
            "empty_polls_per_msg": r1(m.empty_polls as f64 / n),
        });
        let mut vals = Vals::new();
        if let Some(map) = row.as_object() {
            for (k, v) in map {
                vals = vals.with(k, v.clone());
            }
        }
        run.outcome_step(
            if events {
                "ibv_req_notify_cq + ibv_get_cq_event + ibv_poll_cq"
            } else {
                "ibv_poll_cq (spin)"
            },
            format!(
                "{part}: noticed {} messages {p50:.1} us (median) / {p99:.1} us (p99) after they were posted; receiver CPU {:.1} us per message, {:.0}% of the wall time",
                m.latencies_us.len(),
                cpu_us / n,
                share * 100.0
            ),
            m.failures == 0,
            None,
            vals,
        );
        rows.push(row);
    }
    run.end_part(Some(&dev.ctx));
    let median = |i: usize| rows[i]["latency_us_median"].as_f64().unwrap_or(0.0);
    if median(0) > median(1) {
        run.finding(
            "busy_poll_starved",
            format!(
                "here busy polling noticed messages later than sleeping ({:.0} us vs {:.0} us median): the spinning receiver shares {} CPUs with the sender thread and with rxe, which does the NIC's work in the kernel on the same CPUs. Busy polling wins only when the poller has a core to itself.",
                median(0),
                median(1),
                std::thread::available_parallelism().map_or(0, |n| n.get())
            ),
        );
    }
    run.info(
        "summary",
        "busy polling keeps a core at ~100% while it waits and, on a core of its own, notices a message first; the channel sleeps in the kernel and pays a wake-up and two syscalls per message. Real applications poll for a while, then arm the CQ and sleep.",
        Vals::new(),
    );
    run.data.insert("modes".into(), json!(rows));
    drop((a, b));
    Ok(())
}
