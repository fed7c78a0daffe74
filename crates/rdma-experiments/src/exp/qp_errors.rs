//! `qp-errors`: provoke each completion error on a fresh connected pair and show the
//! completion on each side, the QP state afterwards, the async events (rxe raises none for
//! these) and the counters that moved: RNR_RETRY_EXC_ERR, REM_ACCESS_ERR, LOC_LEN_ERR,
//! LOC_PROT_ERR, RETRY_EXC_ERR and WR_FLUSH_ERR.
use crate::harness::{full_access, ExpError, PairSpec, Run, Vals};
use rdma_verbs::{QpState, RemoteBuffer, RtsParams, SendOp, Sge, WcStatus};
use serde_json::json;
use std::time::{Duration, Instant};

/// A wrong key with the right index: only the 8-bit key part differs.
pub(crate) fn wrong_key(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(0x55) & 0xff)
}

pub(crate) fn run(run: &mut Run<'_>) -> Result<(), ExpError> {
    let dev = run.open_device()?;
    let access = full_access();
    let mut src = run.must("ibv_reg_mr", "4 KiB source buffer", || {
        dev.pd.register(4096, access)
    })?;
    src.write(0, &[0xab; 64])?;
    let sge64 = Sge {
        mr: &src,
        offset: 0,
        len: 64,
    };

    // 1. RNR: nobody posted a receive, and A may not retry.
    run.part("rnr", Some(&dev.ctx))?;
    let spec = PairSpec {
        rts_a: RtsParams {
            rnr_retry: 0,
            ..RtsParams::default()
        },
        ..PairSpec::default()
    };
    let (a, b) = run.pair(&dev, &spec)?;
    run.must(
        "ibv_post_send",
        "A: SEND 64 B; B has no receive posted; A's rnr_retry=0",
        || a.qp.post_send(1, SendOp::Send, &[sge64]),
    )?;
    let t0 = Instant::now();
    run.completion(&a.cq, "A's CQ", WcStatus::RnrRetryExcErr)?;
    let rnr_ms = t0.elapsed().as_secs_f64() * 1e3;
    run.qp_state(&a.qp, "A (requester)", Some(QpState::Err))?;
    run.qp_state(&b.qp, "B (responder)", None)?;
    run.data
        .insert("rnr_ms".into(), json!(crate::harness::r1(rnr_ms)));
    drop((a, b));

    // 2. Wrong rkey.
    run.part("rem_access", Some(&dev.ctx))?;
    let (a, b) = run.pair(&dev, &PairSpec::default())?;
    let dst = run.must("ibv_reg_mr", "4 KiB target on B's side", || {
        dev.pd.register(4096, access)
    })?;
    let bad = RemoteBuffer {
        rkey: wrong_key(dst.rkey()),
        ..dst.remote()
    };
    let shown = run.secret(bad.rkey.into());
    run.must_with(
        "ibv_post_send",
        "A: RDMA WRITE 64 B to B's MR with a wrong rkey (right index, wrong key byte)",
        || {
            a.qp.post_send(
                2,
                SendOp::Write {
                    remote: bad,
                    offset: 0,
                },
                &[sge64],
            )
        },
        |_| Vals::new().with("rkey_used", shown),
    )?;
    run.completion(&a.cq, "A's CQ", WcStatus::RemAccessErr)?;
    run.qp_state(&a.qp, "A (requester)", Some(QpState::Err))?;
    run.qp_state(
        &b.qp,
        "B (responder: rejected the rkey)",
        Some(QpState::Err),
    )?;
    run.no_completion(&b.cq, "B's CQ: the target application is not told")?;
    let untouched = dst.to_vec(0, 64)? == vec![0u8; 64];
    run.info(
        "read",
        format!("B's buffer untouched: {untouched}"),
        Vals::new().with("untouched", untouched),
    );
    drop((a, b));
    drop(dst);

    // 3. Receive too small.
    run.part("loc_len", Some(&dev.ctx))?;
    let (a, b) = run.pair(&dev, &PairSpec::default())?;
    let small = run.must("ibv_reg_mr", "16 B receive buffer on B", || {
        dev.pd.register(16, access)
    })?;
    run.must("ibv_post_recv", "B: one receive of 16 B", || {
        b.qp.post_recv(3, &[Sge::whole(&small)])
    })?;
    run.must("ibv_post_send", "A: SEND 64 B", || {
        a.qp.post_send(4, SendOp::Send, &[sge64])
    })?;
    let rx = run.completion_either(
        &b.cq,
        "B's CQ (receiver)",
        WcStatus::LocLenErr,
        WcStatus::LocQpOpErr,
    )?;
    let tx = run.completion_either(
        &a.cq,
        "A's CQ (sender: the peer NAKed the request)",
        WcStatus::RemInvReqErr,
        WcStatus::RemOpErr,
    )?;
    if rx.status == WcStatus::LocQpOpErr {
        run.finding(
            "loc_len_reported_as_loc_qp_op_err",
            format!(
                "this device completes a SEND larger than the posted receive with LOC_QP_OP_ERR at the receiver and {} at the sender; the verbs spec (and hardware such as mlx5) says LOC_LEN_ERR and REM_INV_REQ_ERR. rxe on Linux 6.1 treats the overflow as a malformed receive WQE. Handle both in error paths.",
                tx.status.name()
            ),
        );
    }
    run.qp_state(&b.qp, "B", Some(QpState::Err))?;
    drop((a, b));
    drop(small);

    // 4. Wrong lkey on the sender.
    run.part("loc_prot", Some(&dev.ctx))?;
    let (a, b) = run.pair(&dev, &PairSpec::default())?;
    let rbuf = run.must("ibv_reg_mr", "4 KiB receive buffer on B", || {
        dev.pd.register(4096, access)
    })?;
    run.must("ibv_post_recv", "B: one receive of 4 KiB", || {
        b.qp.post_recv(5, &[Sge::whole(&rbuf)])
    })?;
    let forged = wrong_key(src.lkey());
    let shown = run.secret(forged.into());
    run.must_with(
        "ibv_post_send",
        "A: SEND 64 B from its buffer, but with a wrong lkey",
        || a.qp.post_send_with_lkey(6, SendOp::Send, &[sge64], forged),
        |_| Vals::new().with("lkey_used", shown),
    )?;
    let wc = run.completion_either(&a.cq, "A's CQ", WcStatus::LocProtErr, WcStatus::LocQpOpErr)?;
    if wc.status == WcStatus::LocQpOpErr {
        run.finding(
            "loc_prot_reported_as_loc_qp_op_err",
            "this device completes a send whose SGE has a wrong lkey with LOC_QP_OP_ERR; the verbs spec (and hardware such as mlx5) says LOC_PROT_ERR. rxe on Linux 6.1 maps the failed lkey lookup (EINVAL) to LOC_QP_OP_ERR and reserves LOC_PROT_ERR for EFAULT.",
        );
    }
    run.qp_state(&a.qp, "A", Some(QpState::Err))?;
    run.no_completion(&b.cq, "B's CQ: nothing was sent")?;
    drop((a, b));
    drop(rbuf);

    // 5. The peer disappears: transport retries run out.
    run.part("retry_exc", Some(&dev.ctx))?;
    let rts = RtsParams {
        retry_cnt: 2,
        timeout: 12,
        ..RtsParams::default()
    };
    let (a, b) = run.pair(
        &dev,
        &PairSpec {
            rts_a: rts,
            ..PairSpec::default()
        },
    )?;
    let dst = run.must("ibv_reg_mr", "4 KiB target", || {
        dev.pd.register(4096, access)
    })?;
    let remote = dst.remote();
    let b_num = b.qp.qp_num();
    run.must(
        "ibv_destroy_qp",
        format!("B (QP {b_num}): the peer is gone"),
        || {
            drop(b);
            Ok(())
        },
    )?;
    run.must(
        "ibv_post_send",
        "A: RDMA WRITE 64 B to the destroyed QP (retry_cnt=2, timeout=12: 16.8 ms per try)",
        || {
            a.qp.post_send(7, SendOp::Write { remote, offset: 0 }, &[sge64])
        },
    )?;
    let t0 = Instant::now();
    run.completion(&a.cq, "A's CQ after the retries", WcStatus::RetryExcErr)?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    run.info(
        "time",
        format!("RETRY_EXC_ERR after {ms:.0} ms: (retry_cnt + 1) x 4.096 us x 2^timeout, at least"),
        Vals::new().with("ms", crate::harness::r1(ms)),
    );
    run.data
        .insert("retry_exc_ms".into(), json!(crate::harness::r1(ms)));
    run.qp_state(&a.qp, "A", Some(QpState::Err))?;
    drop(a);
    drop(dst);

    // 6. Flush: what was queued when the QP entered ERR, and what is posted after.
    run.part("flush", Some(&dev.ctx))?;
    let (a, b) = run.pair(&dev, &PairSpec::default())?;
    let rbuf = run.must("ibv_reg_mr", "4 KiB receive buffer on B", || {
        dev.pd.register(4096, access)
    })?;
    for id in [10, 11] {
        run.must("ibv_post_recv", format!("B: receive wr_id={id}"), || {
            b.qp.post_recv(id, &[Sge::whole(&rbuf)])
        })?;
    }
    run.must("ibv_modify_qp", "B RTS -> ERR", || b.qp.to_error())?;
    for id in [10, 11] {
        run.completion(
            &b.cq,
            format!("B's CQ: receive wr_id={id} flushed"),
            WcStatus::WrFlushErr,
        )?;
    }
    let posted = run.attempt(
        "ibv_post_send",
        "B (in ERR): SEND 64 B; the verbs spec lets a QP in ERR accept posts and flush them",
        || b.qp.post_send(12, SendOp::Send, &[Sge::whole(&rbuf)]),
    )?;
    if posted.is_some() {
        run.completion(
            &b.cq,
            "B's CQ: the send posted in ERR",
            WcStatus::WrFlushErr,
        )?;
    }
    run.completion_within(
        &a.cq,
        "A's CQ: A never hears of it (B sent nothing)",
        None,
        Duration::from_millis(50),
    )?;
    run.end_part(Some(&dev.ctx));
    drop((a, b));
    drop(rbuf);
    let events: Vec<String> = run
        .parts
        .iter()
        .flat_map(|p| {
            p.async_events
                .iter()
                .map(move |e| format!("{}: {e}", p.name))
        })
        .collect();
    if events.is_empty() {
        run.finding(
            "no_async_event_for_wc_errors",
            "none of these errors raised an asynchronous event on this device: it reports them only as work completions (rxe never does; hardware such as mlx5 raises QP_FATAL, QP_REQ_ERR or QP_ACCESS_ERR on the QP that failed, so watch the async fd too)",
        );
    } else {
        run.finding(
            "async_events_for_wc_errors",
            format!("async events that arrived: {}", events.join(", ")),
        );
    }
    Ok(())
}
