//! Live verbs tests, run INSIDE the Soft-RoCE lab VM: two RC QPs on rxe0 connected to each
//! other over the RoCE v2 GID, moving real bytes with RDMA WRITE, SEND (with immediate) and
//! RDMA READ, plus the error paths (wrong rkey, refused transition) and CQ events.
use live_tests::LAB_DEVICE;
use rdma_verbs::{
    AccessFlags, AsyncEventType, CompletionQueue, Context, GidType, MemoryRegion, ProtectionDomain,
    QpState, QueuePair, RcLink, RtrParams, RtsParams, SendOp, Sge, VerbsError, WcOpcode, WcStatus,
    WorkCompletion,
};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(10);

/// Tests share rxe0; the one that takes eth0 down holds this exclusively.
static PORT: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    PORT.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    PORT.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
}

fn open() -> Arc<Context> {
    open_device()
}

fn open_device() -> Arc<Context> {
    rdma_verbs::open(LAB_DEVICE).unwrap_or_else(|e| {
        panic!(
            "FAIL: cannot open {LAB_DEVICE} ({e}); devices: {:?}. Run inside `rdmactl lab run`.",
            rdma_verbs::devices()
        )
    })
}

/// One side of the loopback: a QP with its own CQ and MR.
struct Side {
    qp: QueuePair,
    cq: Arc<CompletionQueue>,
    mr: MemoryRegion,
}

fn side(ctx: &Arc<Context>, pd: &Arc<ProtectionDomain>, cq_size: u32) -> Side {
    let cq = ctx.create_cq(cq_size).expect("create_cq");
    let qp = pd
        .create_rc_qp(&cq, &cq, Default::default())
        .expect("create_rc_qp");
    assert_eq!(qp.state().unwrap(), QpState::Reset);
    let mr = pd.register(4096, access()).expect("register MR");
    Side { qp, cq, mr }
}

/// Two QPs on rxe0 connected to each other through the RoCE v2 IPv4 GID.
fn connected_pair(ctx: &Arc<Context>) -> (Side, Side) {
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let a = side(ctx, &pd, 64);
    let b = side(ctx, &pd, 64);
    connect(ctx, &a.qp, &b.qp);
    (a, b)
}

fn connect(ctx: &Arc<Context>, a: &QueuePair, b: &QueuePair) {
    connect_with(ctx, a, b, RtsParams::default());
}

fn connect_with(ctx: &Arc<Context>, a: &QueuePair, b: &QueuePair, rts: RtsParams) {
    let gid = ctx.choose_gid(1, GidType::RoceV2).expect("choose_gid");
    assert_eq!(gid.gid_type, GidType::RoceV2);
    assert_eq!(
        gid.gid.to_string(),
        "::ffff:10.0.2.15",
        "the lab's IPv4 GID"
    );
    let mtu = ctx.query_port(1).unwrap().active_mtu;
    RcLink {
        rts,
        ..RcLink::new(1, mtu, access())
    }
    .connect_pair((a, &gid, 0x1000), (b, &gid, 0x2000))
    .expect("RESET -> INIT -> RTR -> RTS");
    assert_eq!(a.state().unwrap(), QpState::Rts);
    assert_eq!(b.state().unwrap(), QpState::Rts);
}

#[test]
fn each_transition_of_the_bring_up_lands_in_its_state() {
    let _port = shared();
    let ctx = open();
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let (a, b) = (side(&ctx, &pd, 16), side(&ctx, &pd, 16));
    let gid = ctx.choose_gid(1, GidType::RoceV2).expect("choose_gid");
    let mtu = ctx.query_port(1).unwrap().active_mtu;
    a.qp.to_init(1, access()).expect("to_init");
    assert_eq!(a.qp.state().unwrap(), QpState::Init);
    a.qp.to_rtr(&RtrParams {
        remote: b.qp.endpoint(&gid, 0x2000),
        port: 1,
        sgid_index: gid.index as u8,
        path_mtu: mtu,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
    })
    .expect("to_rtr");
    assert_eq!(a.qp.state().unwrap(), QpState::Rtr);
    a.qp.to_rts(&RtsParams {
        psn: 0x1000,
        ..RtsParams::default()
    })
    .expect("to_rts");
    assert_eq!(a.qp.state().unwrap(), QpState::Rts);
}

fn one(cq: &CompletionQueue) -> WorkCompletion {
    let wcs = cq.poll_until(1, TIMEOUT).expect("poll");
    assert_eq!(wcs.len(), 1, "no completion within {TIMEOUT:?}");
    wcs[0]
}

#[test]
fn rc_write_lands_in_the_remote_buffer() {
    let _port = shared();
    let ctx = open();
    let (mut a, b) = connected_pair(&ctx);
    let payload = b"rdma write over rxe0 loopback";
    a.mr.write(0, payload).unwrap();
    a.qp.post_send(
        11,
        SendOp::Write {
            remote: b.mr.remote(),
            offset: 128,
        },
        &[Sge {
            mr: &a.mr,
            offset: 0,
            len: payload.len() as u32,
        }],
    )
    .expect("post WRITE");
    let wc = one(&a.cq);
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert_eq!(wc.opcode, WcOpcode::RdmaWrite);
    assert_eq!(wc.wr_id, 11);
    assert_eq!(wc.qp_num, a.qp.qp_num());
    assert_eq!(b.mr.to_vec(128, payload.len()).unwrap(), payload);
    // The bytes around the target range are untouched.
    assert_eq!(b.mr.to_vec(0, 128).unwrap(), vec![0u8; 128]);
    // A WRITE consumes no receive: the responder's CQ stays empty.
    assert!(b.cq.poll_one().unwrap().is_none());
}

#[test]
fn rc_send_with_immediate_is_received() {
    let _port = shared();
    let ctx = open();
    let (mut a, b) = connected_pair(&ctx);
    b.qp.post_recv(
        77,
        &[Sge {
            mr: &b.mr,
            offset: 1024,
            len: 256,
        }],
    )
    .expect("post_recv");
    let payload: Vec<u8> = (0..200u8).collect();
    a.mr.write(512, &payload).unwrap();
    a.qp.post_send(
        12,
        SendOp::SendWithImm(0xcafe_f00d),
        &[Sge {
            mr: &a.mr,
            offset: 512,
            len: payload.len() as u32,
        }],
    )
    .expect("post SEND");
    let sent = one(&a.cq);
    assert_eq!(sent.status, WcStatus::Success, "{sent:?}");
    assert_eq!(sent.opcode, WcOpcode::Send);
    let got = one(&b.cq);
    assert_eq!(got.status, WcStatus::Success, "{got:?}");
    assert_eq!(got.opcode, WcOpcode::Recv);
    assert_eq!(got.wr_id, 77);
    assert_eq!(got.byte_len, payload.len() as u32);
    assert_eq!(got.imm_data, Some(0xcafe_f00d));
    assert_eq!(got.qp_num, b.qp.qp_num());
    assert_eq!(b.mr.to_vec(1024, payload.len()).unwrap(), payload);
}

#[test]
fn rc_read_fetches_remote_bytes() {
    let _port = shared();
    let ctx = open();
    let (a, mut b) = connected_pair(&ctx);
    b.mr.write(3000, b"read me back").unwrap();
    a.qp.post_send(
        13,
        SendOp::Read {
            remote: b.mr.remote(),
            offset: 3000,
        },
        &[Sge {
            mr: &a.mr,
            offset: 100,
            len: 12,
        }],
    )
    .expect("post READ");
    let wc = one(&a.cq);
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert_eq!(wc.opcode, WcOpcode::RdmaRead);
    assert_eq!(a.mr.to_vec(100, 12).unwrap(), b"read me back");
}

#[test]
fn wrong_rkey_is_a_remote_access_error_and_the_qp_goes_to_err() {
    let _port = shared();
    let ctx = open();
    let (a, b) = connected_pair(&ctx);
    let mut remote = b.mr.remote();
    remote.rkey ^= 0x5a5a_0000;
    a.qp.post_send(
        14,
        SendOp::Write { remote, offset: 0 },
        &[Sge {
            mr: &a.mr,
            offset: 0,
            len: 8,
        }],
    )
    .expect("post WRITE");
    let wc = one(&a.cq);
    assert_eq!(wc.status, WcStatus::RemAccessErr, "{wc:?}");
    assert_eq!(wc.wr_id, 14);
    // The cached state would still say RTS; the queried one does not.
    assert_eq!(a.qp.state().unwrap(), QpState::Err);
    assert_eq!(b.mr.to_vec(0, 8).unwrap(), vec![0u8; 8], "nothing landed");
}

#[test]
fn refused_transitions_carry_both_states_and_the_errno() {
    let _port = shared();
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let s = side(&ctx, &pd, 16);
    let err = s.qp.to_rts(&RtsParams::default()).unwrap_err();
    match &err {
        VerbsError::QpTransition {
            current,
            requested,
            source,
            qp_num,
            ..
        } => {
            assert_eq!(*current, QpState::Reset);
            assert_eq!(*requested, QpState::Rts);
            assert_eq!(*qp_num, s.qp.qp_num());
            assert!(source.raw_os_error().is_some(), "{source}");
        }
        other => panic!("expected QpTransition, got {other}"),
    }
    assert_eq!(s.qp.state().unwrap(), QpState::Reset);
}

#[test]
fn sges_outside_their_mr_are_refused_before_posting() {
    let _port = shared();
    let ctx = open();
    let (a, b) = connected_pair(&ctx);
    let err =
        a.qp.post_send(
            1,
            SendOp::Write {
                remote: b.mr.remote(),
                offset: 4090,
            },
            &[Sge {
                mr: &a.mr,
                offset: 0,
                len: 16,
            }],
        )
        .unwrap_err();
    assert!(matches!(err, VerbsError::InvalidArgument(_)), "{err}");
    let err =
        a.qp.post_recv(
            2,
            &[Sge {
                mr: &a.mr,
                offset: 4000,
                len: 200,
            }],
        )
        .unwrap_err();
    assert!(matches!(err, VerbsError::InvalidArgument(_)), "{err}");
    assert!(a.cq.poll_one().unwrap().is_none());
}

#[test]
fn completion_channel_wakes_up_on_a_completion() {
    let _port = shared();
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq_a = ctx.create_cq_with_channel(16).expect("CQ with channel");
    let cq_b = ctx.create_cq(16).unwrap();
    let qp_a = pd.create_rc_qp(&cq_a, &cq_a, Default::default()).unwrap();
    let qp_b = pd.create_rc_qp(&cq_b, &cq_b, Default::default()).unwrap();
    connect(&ctx, &qp_a, &qp_b);
    let mut mr_a = pd.register(64, access()).unwrap();
    let mr_b = pd.register(64, access()).unwrap();

    cq_a.req_notify(false).unwrap();
    assert!(
        !cq_a.wait(Duration::from_millis(50)).unwrap(),
        "no event before any work"
    );
    mr_a.write(0, b"wake").unwrap();
    qp_a.post_send(
        5,
        SendOp::Write {
            remote: mr_b.remote(),
            offset: 0,
        },
        &[Sge {
            mr: &mr_a,
            offset: 0,
            len: 4,
        }],
    )
    .unwrap();
    assert!(cq_a.wait(TIMEOUT).unwrap(), "completion event");
    let wc = one(&cq_a);
    assert_eq!(wc.status, WcStatus::Success);
    assert_eq!(mr_b.to_vec(0, 4).unwrap(), b"wake");
    // A CQ without a channel refuses to wait.
    assert!(cq_b.wait(Duration::from_millis(1)).is_err());
}

#[test]
fn cq_overrun_raises_a_cq_err_async_event() {
    let _port = shared();
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let small = ctx.create_cq(1).unwrap();
    let cq_b = ctx.create_cq(16).unwrap();
    let caps = rdma_verbs::QpCaps {
        max_send_wr: 256,
        ..Default::default()
    };
    let qp_a = pd.create_rc_qp(&small, &small, caps).unwrap();
    let qp_b = pd.create_rc_qp(&cq_b, &cq_b, Default::default()).unwrap();
    connect(&ctx, &qp_a, &qp_b);
    let mr_a = pd.register(64, access()).unwrap();
    let mr_b = pd.register(64, access()).unwrap();
    // Drain stale events (none expected), then overrun the CQ without polling it.
    while ctx.next_async_event(Duration::ZERO).unwrap().is_some() {}
    let n = small.capacity() + 4;
    for i in 0..n {
        qp_a.post_send(
            u64::from(i),
            SendOp::Write {
                remote: mr_b.remote(),
                offset: 0,
            },
            &[Sge {
                mr: &mr_a,
                offset: 0,
                len: 8,
            }],
        )
        .unwrap();
    }
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + TIMEOUT;
    while std::time::Instant::now() < deadline {
        if let Some(ev) = ctx.next_async_event(Duration::from_millis(200)).unwrap() {
            seen.push(ev);
            if ev.event_type == AsyncEventType::CqErr {
                break;
            }
        }
    }
    assert!(
        seen.iter().any(|e| e.event_type == AsyncEventType::CqErr),
        "expected CQ_ERR after posting {n} WRs into a CQ of {}: saw {seen:?}",
        small.capacity()
    );
}

#[test]
fn send_without_a_receive_and_no_rnr_retry_fails_with_rnr_retry_exc_err() {
    let _port = shared();
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let a = side(&ctx, &pd, 16);
    let b = side(&ctx, &pd, 16);
    connect_with(
        &ctx,
        &a.qp,
        &b.qp,
        RtsParams {
            rnr_retry: 0,
            ..Default::default()
        },
    );
    a.qp.post_send(21, SendOp::Send, &[Sge::whole(&a.mr)])
        .expect("post SEND");
    let wc = one(&a.cq);
    assert_eq!(wc.status, WcStatus::RnrRetryExcErr, "{wc:?}");
    assert_eq!(wc.status.raw(), 13);
    assert_eq!(wc.wr_id, 21);
    assert_eq!(a.qp.state().unwrap(), QpState::Err);
}

#[test]
fn children_keep_their_parents_alive() {
    let _port = shared();
    let (mut a, b) = {
        // The context and PD handles go out of scope here; the QPs, CQs and MRs hold them.
        let ctx = open();
        connected_pair(&ctx)
    };
    a.mr.write(0, b"still here").unwrap();
    a.qp.post_send(
        31,
        SendOp::Write {
            remote: b.mr.remote(),
            offset: 0,
        },
        &[Sge {
            mr: &a.mr,
            offset: 0,
            len: 10,
        }],
    )
    .unwrap();
    let wc = one(&a.cq);
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert_eq!(b.mr.to_vec(0, 10).unwrap(), b"still here");
    assert_eq!(a.qp.context().name(), LAB_DEVICE);
    // Dropping in any order must not panic (QP before CQ and PD is enforced by the Arcs).
    drop(a.cq);
    drop(b.mr);
    drop(a.qp);
}

fn ip_link(state: &str) {
    let out = std::process::Command::new("ip")
        .args(["link", "set", "eth0", state])
        .output()
        .expect("FAIL: cannot run ip");
    assert!(out.status.success(), "ip link set eth0 {state}: {out:?}");
}

#[test]
fn eth0_down_and_up_raise_port_events_for_port_1() {
    let _port = exclusive();
    let ctx = open_device();
    while ctx.next_async_event(Duration::ZERO).unwrap().is_some() {}
    ip_link("down");
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + TIMEOUT;
    while std::time::Instant::now() < deadline
        && !seen
            .iter()
            .any(|e: &rdma_verbs::AsyncEvent| e.event_type == AsyncEventType::PortErr)
    {
        seen.extend(ctx.next_async_event(Duration::from_millis(200)).unwrap());
    }
    let down_state = ctx.query_port(1).unwrap().state;
    ip_link("up");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline
        && !seen
            .iter()
            .any(|e| e.event_type == AsyncEventType::PortActive)
    {
        seen.extend(ctx.next_async_event(Duration::from_millis(200)).unwrap());
    }
    // Leave the lab as we found it: ACTIVE with both RoCE v2 GIDs, before judging.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline
        && (ctx.query_port(1).unwrap().state != rdma_verbs::PortState::Active
            || ctx.gid_table(1).unwrap().len() < 2)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        ctx.query_port(1).unwrap().state,
        rdma_verbs::PortState::Active,
        "rxe0 did not come back"
    );
    assert!(
        ctx.gid_table(1).unwrap().len() >= 2,
        "GIDs did not come back"
    );
    assert_ne!(
        down_state,
        rdma_verbs::PortState::Active,
        "port stayed ACTIVE with eth0 down"
    );
    let err = seen
        .iter()
        .find(|e| e.event_type == AsyncEventType::PortErr)
        .unwrap_or_else(|| panic!("no PORT_ERR after eth0 down: {seen:?}"));
    assert_eq!(err.element, rdma_verbs::EventElement::Port(1));
    let up = seen
        .iter()
        .find(|e| e.event_type == AsyncEventType::PortActive)
        .unwrap_or_else(|| panic!("no PORT_ACTIVE after eth0 up: {seen:?}"));
    assert_eq!(up.element, rdma_verbs::EventElement::Port(1));
}
