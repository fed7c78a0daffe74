use super::post::{check_inline, sge_storage, SendOp, EMPTY_SGE, INLINE_SGES};
use super::{QpCaps, RtrAttr, RtsParams};
use crate::codes::QpState;
use crate::error::VerbsError;
use crate::mr::RemoteBuffer;
use rdma_mummy_sys::ibv_qp_attr_mask as M;

#[test]
fn short_sge_lists_live_on_the_stack() {
    let mut stack = [EMPTY_SGE; INLINE_SGES];
    let mut heap = Vec::new();
    assert_eq!(sge_storage(&mut stack, &mut heap, 3).len(), 3);
    assert!(heap.is_empty(), "no allocation for 3 SGEs");
    assert_eq!(sge_storage(&mut stack, &mut heap, 9).len(), 9);
    assert_eq!(heap.len(), 9);
}

#[test]
fn inline_data_is_bounded_and_never_on_a_read() {
    assert!(check_inline(&SendOp::Send, 64, 64).is_ok());
    assert!(check_inline(&SendOp::Send, 65, 64).is_err());
    assert!(check_inline(&SendOp::SendWithImm(1), 0, 0).is_ok());
    let remote = RemoteBuffer {
        addr: 0,
        rkey: 0,
        len: 64,
    };
    assert!(check_inline(&SendOp::Write { remote, offset: 0 }, 32, 64).is_ok());
    assert!(check_inline(&SendOp::Read { remote, offset: 0 }, 8, 64).is_err());
}

#[test]
fn default_caps_and_rts_params_are_sane() {
    let c = QpCaps::default();
    assert!(c.max_send_wr > 0 && c.max_recv_wr > 0);
    let r = RtsParams::default();
    assert_eq!((r.retry_cnt, r.rnr_retry, r.timeout), (7, 7, 14));
}

#[test]
fn qp_state_codes_follow_the_transition_order() {
    let order = [QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts];
    for pair in order.windows(2) {
        assert_eq!(pair[0].raw() + 1, pair[1].raw());
    }
    assert_eq!(QpState::from_raw(6), QpState::Err);
}

#[test]
fn rtr_attributes_are_distinct_mask_bits_matching_the_full_rtr_mask() {
    let all = RtrAttr::ALL.iter().fold(0u32, |m, a| {
        assert_eq!(m & a.mask_bit(), 0, "{a:?} shares a bit");
        assert!(a.ibv_name().starts_with("IBV_QP_"));
        m | a.mask_bit()
    });
    let rtr = M::IBV_QP_AV.0
        | M::IBV_QP_PATH_MTU.0
        | M::IBV_QP_DEST_QPN.0
        | M::IBV_QP_RQ_PSN.0
        | M::IBV_QP_MAX_DEST_RD_ATOMIC.0
        | M::IBV_QP_MIN_RNR_TIMER.0;
    assert_eq!(all, rtr);
}

#[test]
fn transition_errors_name_both_states_and_the_errno() {
    let e = VerbsError::QpTransition {
        device: "rxe0".into(),
        qp_num: 17,
        current: QpState::Reset,
        requested: QpState::Rts,
        source: std::io::Error::from_raw_os_error(libc::EINVAL),
    };
    let s = e.to_string();
    assert!(s.contains("RESET -> RTS"), "{s}");
    assert!(s.contains("QP 17"), "{s}");
    assert!(s.contains("Invalid argument"), "{s}");
}
