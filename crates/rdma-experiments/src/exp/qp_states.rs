//! `qp-states`: walk RESET -> INIT -> RTR -> RTS printing what each transition needs; skip a
//! state and leave out an attribute to get the real EINVAL; move data in RTS; then SQD (with
//! its SQ_DRAINED event), back to RTS, ERR, RESET and INIT again.
use crate::harness::{full_access, rtr_params, ExpError, Run, Vals, WC_TIMEOUT};
use rdma_verbs::{QpState, RtrAttr, RtsParams, SendOp, Sge, WcStatus};

const EINVAL: i32 = 22;

pub(crate) fn run(run: &mut Run<'_>) -> Result<(), ExpError> {
    let dev = run.open_device()?;
    run.part("walk", Some(&dev.ctx))?;
    let cq_a = run.must("ibv_create_cq", "64 entries for QP A", || {
        dev.ctx.create_cq(64)
    })?;
    let cq_b = run.must("ibv_create_cq", "64 entries for QP B", || {
        dev.ctx.create_cq(64)
    })?;
    let a = run.must_with(
        "ibv_create_qp",
        "RC QP A: max_send_wr=64 max_recv_wr=64 max_sge=1",
        || dev.pd.create_rc_qp(&cq_a, &cq_a, Default::default()),
        |q| Vals::new().with("qp_num", q.qp_num()),
    )?;
    let b = run.must_with(
        "ibv_create_qp",
        "RC QP B",
        || dev.pd.create_rc_qp(&cq_b, &cq_b, Default::default()),
        |q| Vals::new().with("qp_num", q.qp_num()),
    )?;
    run.qp_state(&a, "A after create", Some(QpState::Reset))?;

    let access = full_access();
    run.must_with(
        "ibv_modify_qp",
        "A RESET -> INIT: IBV_QP_STATE|IBV_QP_PKEY_INDEX|IBV_QP_PORT|IBV_QP_ACCESS_FLAGS",
        || a.to_init(1, access),
        |_| {
            Vals::new()
                .with("port_num", 1)
                .with("pkey_index", 0)
                .with("qp_access_flags", access.to_string())
        },
    )?;
    run.qp_state(&a, "A", Some(QpState::Init))?;
    // The receive stays queued until A enters ERR below; its MR lives until then.
    let recv_mr = run.must("ibv_reg_mr", "64 B receive buffer", || {
        dev.pd.register(64, access)
    })?;
    run.must(
        "ibv_post_recv",
        "on A in INIT: receives may be posted from INIT on (sends need RTS)",
        || a.post_recv(1, &[Sge::whole(&recv_mr)]),
    )?;

    let rtr_a = rtr_params(&dev, &b);
    run.must_with(
        "ibv_modify_qp",
        "A INIT -> RTR: IBV_QP_STATE|AV|PATH_MTU|DEST_QPN|RQ_PSN|MAX_DEST_RD_ATOMIC|MIN_RNR_TIMER",
        || a.to_rtr(&rtr_a),
        |_| {
            Vals::new()
                .with("dest_qp_num", rtr_a.remote.qp_num)
                .with("rq_psn", rtr_a.remote.psn)
                .with("path_mtu", rtr_a.path_mtu.bytes().unwrap_or(0))
                .with("dgid", rtr_a.remote.gid.to_string())
                .with("sgid_index", rtr_a.sgid_index)
                .with("max_dest_rd_atomic", rtr_a.max_dest_rd_atomic)
                .with("min_rnr_timer", rtr_a.min_rnr_timer)
        },
    )?;
    run.qp_state(&a, "A", Some(QpState::Rtr))?;
    let rts = RtsParams::default();
    run.must_with(
        "ibv_modify_qp",
        "A RTR -> RTS: IBV_QP_STATE|SQ_PSN|TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC",
        || a.to_rts(&rts),
        |_| {
            Vals::new()
                .with("sq_psn", rts.psn)
                .with("timeout", rts.timeout)
                .with("retry_cnt", rts.retry_cnt)
                .with("rnr_retry", rts.rnr_retry)
                .with("max_rd_atomic", rts.max_rd_atomic)
        },
    )?;
    run.qp_state(&a, "A", Some(QpState::Rts))?;

    // B is still in RESET: try the shortcuts.
    run.part("illegal", Some(&dev.ctx))?;
    run.expect_errno(
        "ibv_modify_qp",
        "B RESET -> RTR (skipping INIT)",
        EINVAL,
        || b.to_rtr(&rtr_params(&dev, &a)),
    )?;
    run.expect_errno(
        "ibv_modify_qp",
        "B RESET -> RTS (skipping INIT and RTR)",
        EINVAL,
        || b.to_rts(&RtsParams::default()),
    )?;
    run.qp_state(&b, "B after the refused transitions", Some(QpState::Reset))?;
    run.must("ibv_modify_qp", "B RESET -> INIT", || b.to_init(1, access))?;
    for omit in [RtrAttr::Av, RtrAttr::DestQpn, RtrAttr::PathMtu] {
        run.expect_errno(
            "ibv_modify_qp",
            format!("B INIT -> RTR without {}", omit.ibv_name()),
            EINVAL,
            || b.to_rtr_omitting(&rtr_params(&dev, &a), &[omit]),
        )?;
    }
    run.qp_state(&b, "B after the refused RTR", Some(QpState::Init))?;

    run.must("ibv_modify_qp", "B INIT -> RTR -> RTS towards A", || {
        b.to_rtr(&rtr_params(&dev, &a))?;
        b.to_rts(&RtsParams::default())
    })?;
    run.qp_state(&b, "B", Some(QpState::Rts))?;

    run.part("traffic", Some(&dev.ctx))?;
    let mut src = run.must("ibv_reg_mr", "64 B source on A", || {
        dev.pd.register(64, access)
    })?;
    let dst = run.must("ibv_reg_mr", "64 B target on B", || {
        dev.pd.register(64, access)
    })?;
    src.write(0, b"state machine walked")?;
    run.must("ibv_post_send", "A: RDMA WRITE 20 B into B's MR", || {
        a.post_send(
            1,
            SendOp::Write {
                remote: dst.remote(),
                offset: 0,
            },
            &[Sge {
                mr: &src,
                offset: 0,
                len: 20,
            }],
        )
    })?;
    run.completion(&cq_a, "A's send CQ", WcStatus::Success)?;
    let landed = dst.to_vec(0, 20)? == b"state machine walked";
    run.info(
        "read",
        format!("B's buffer holds the bytes: {landed}"),
        Vals::new().with("data_landed", landed),
    );

    run.part("drain_and_reset", Some(&dev.ctx))?;
    run.must(
        "ibv_modify_qp",
        "A RTS -> SQD with IBV_QP_EN_SQD_ASYNC_NOTIFY",
        || a.to_sqd(),
    )?;
    let st = a.state()?;
    run.info(
        "ibv_query_qp",
        format!("A state {} (SQD, or still draining)", st.name()),
        Vals::new().with("state", st.name()),
    );
    let ev = dev.ctx.next_async_event(WC_TIMEOUT)?;
    let got = ev.map(|e| e.event_type.name().to_string());
    run.info(
        "ibv_get_async_event",
        format!(
            "async event after SQD: {}",
            got.clone().unwrap_or_else(|| "none within 5 s".into())
        ),
        Vals::new()
            .with("event", got.clone().unwrap_or_default())
            .with("expected", "SQ_DRAINED"),
    );
    run.must("ibv_modify_qp", "A SQD -> RTS", || a.resume_from_sqd())?;
    run.qp_state(&a, "A", Some(QpState::Rts))?;
    run.must(
        "ibv_modify_qp",
        "A RTS -> ERR (flushes what is queued)",
        || a.to_error(),
    )?;
    run.qp_state(&a, "A", Some(QpState::Err))?;
    run.must("ibv_modify_qp", "A ERR -> RESET", || a.reset())?;
    run.qp_state(&a, "A", Some(QpState::Reset))?;
    run.must(
        "ibv_modify_qp",
        "A RESET -> INIT: the same QP can be reused",
        || a.to_init(1, access),
    )?;
    run.qp_state(&a, "A", Some(QpState::Init))?;
    // Drain what the flush put on the CQ (the receive posted in INIT).
    let mut flushed = Vec::new();
    cq_a.poll_into(&mut flushed, 16)?;
    run.info(
        "ibv_poll_cq",
        format!(
            "A's CQ after ERR: {} completion(s) {:?}",
            flushed.len(),
            flushed.iter().map(|w| w.status.name()).collect::<Vec<_>>()
        ),
        Vals::new().with(
            "statuses",
            flushed
                .iter()
                .map(|w| w.status.name().to_string())
                .collect::<Vec<_>>(),
        ),
    );
    run.end_part(Some(&dev.ctx));
    // QPs go before the MR their flushed receive pointed at.
    drop((a, b));
    drop(recv_mr);
    Ok(())
}
