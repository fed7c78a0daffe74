//! `security-keys`: the rkey as a capability. Out-of-bounds WRITE, READ without REMOTE_READ
//! and an rkey from another PD are rejected; guessing the key byte of a known index mostly
//! fails, and each failure kills the connection; a type-2 memory window narrows and revokes
//! access (rxe does not enforce the window's bounds: detected and reported); deregistration
//! revokes the rkey; and the rkey travels in clear on the wire.
use crate::harness::{full_access, Device, ExpError, PairSpec, Run, Side, Vals};
use rdma_verbs::{AccessFlags, QpState, RemoteBuffer, SendOp, Sge, WcStatus};
use serde_json::json;
use std::time::{SystemTime, UNIX_EPOCH};

/// How many key guesses to try.
const GUESSES: u32 = 8;

/// WRITE 64 B from `src` to `remote`+`offset`, expecting `expected` on A's CQ.
fn write_and_expect(
    run: &mut Run<'_>,
    a: &Side,
    src: &rdma_verbs::MemoryRegion,
    remote: RemoteBuffer,
    offset: u64,
    what: &str,
    expected: WcStatus,
) -> Result<WcStatus, ExpError> {
    let shown = run.secret(remote.rkey.into());
    run.must_with(
        "ibv_post_send",
        format!("A: RDMA WRITE 64 B {what}"),
        || {
            a.qp.post_send(
                1,
                SendOp::Write { remote, offset },
                &[Sge {
                    mr: src,
                    offset: 0,
                    len: 64,
                }],
            )
        },
        |_| Vals::new().with("rkey", shown).with("offset", offset),
    )?;
    Ok(run.completion(&a.cq, "A's CQ", expected)?.status)
}

/// A small xorshift seeded from the clock (the guesses need not be cryptographic).
fn next_random(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    x
}

pub(crate) fn run(run: &mut Run<'_>) -> Result<(), ExpError> {
    let dev = run.open_device()?;
    let mut src = run.must("ibv_reg_mr", "4 KiB attacker source buffer", || {
        dev.pd.register(4096, full_access())
    })?;
    src.write(0, &[0x5a; 64])?;
    let victim = run.must(
        "ibv_reg_mr",
        "4 KiB victim MR: LOCAL_WRITE|REMOTE_WRITE (no REMOTE_READ)",
        || {
            dev.pd
                .register(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
        },
    )?;

    run.part("out_of_bounds", Some(&dev.ctx))?;
    let (a, b) = run.pair(&dev, &PairSpec::default())?;
    // Claim the buffer is twice as long so the verbs layer lets the WR through.
    let lie = RemoteBuffer {
        len: victim.len() as u64 * 2,
        ..victim.remote()
    };
    write_and_expect(
        run,
        &a,
        &src,
        lie,
        victim.len() as u64,
        "at offset 4096 of a 4096 B MR (valid rkey, outside the range)",
        WcStatus::RemAccessErr,
    )?;
    run.qp_state(&b.qp, "B (the victim's QP)", Some(QpState::Err))?;
    drop((a, b));

    run.part("no_remote_read", Some(&dev.ctx))?;
    let (a, b) = run.pair(&dev, &PairSpec::default())?;
    run.must(
        "ibv_post_send",
        "A: RDMA READ 64 B from the victim MR (registered without REMOTE_READ)",
        || {
            a.qp.post_send(
                2,
                SendOp::Read {
                    remote: victim.remote(),
                    offset: 0,
                },
                &[Sge {
                    mr: &src,
                    offset: 0,
                    len: 64,
                }],
            )
        },
    )?;
    run.completion(&a.cq, "A's CQ", WcStatus::RemAccessErr)?;
    drop((a, b));

    run.part("other_pd", Some(&dev.ctx))?;
    let pd2 = run.must("ibv_alloc_pd", "a second PD (another tenant)", || {
        dev.ctx.alloc_pd()
    })?;
    let foreign = run.must("ibv_reg_mr", "4 KiB MR in PD 2, full remote access", || {
        pd2.register(4096, full_access())
    })?;
    let (a, b) = run.pair(&dev, &PairSpec::default())?;
    write_and_expect(
        run,
        &a,
        &src,
        foreign.remote(),
        0,
        "with PD 2's valid rkey, through B (a QP of PD 1)",
        WcStatus::RemAccessErr,
    )?;
    drop((a, b));
    drop(foreign);
    drop(pd2);

    run.part("guess", Some(&dev.ctx))?;
    let mut seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0x9e37_79b9)
        | 1;
    let known_index = victim.rkey() & !0xff;
    run.info(
        "threat model",
        format!(
            "the attacker knows the victim's address and the rkey's index bits (rxe: rkey = index << 8 | 8-bit key), and guesses the key byte: 1 chance in 256 per try; {GUESSES} tries"
        ),
        Vals::new().with("index_bits", run.secret(known_index.into())),
    );
    let (mut failed, mut succeeded) = (0u32, 0u32);
    for i in 1..=GUESSES {
        let guess = known_index | (next_random(&mut seed) & 0xff) as u32;
        let (a, b) = run.pair(&dev, &PairSpec::default())?;
        let remote = RemoteBuffer {
            rkey: guess,
            ..victim.remote()
        };
        let expected = if guess == victim.rkey() {
            WcStatus::Success
        } else {
            WcStatus::RemAccessErr
        };
        let got = write_and_expect(run, &a, &src, remote, 0, &format!("guess {i}"), expected)?;
        if got.is_success() {
            succeeded += 1;
        } else {
            failed += 1;
        }
        drop((a, b));
    }
    run.info(
        "tally",
        format!(
            "{GUESSES} guesses: {failed} rejected with REM_ACCESS_ERR, {succeeded} accepted. Each rejection killed both QPs: the victim's application saw no completion; on rxe no counter names it (mlx5 counts resp_remote_access_errors at the victim and req_remote_access_errors at the attacker)"
        ),
        Vals::new()
            .with("tries", GUESSES)
            .with("rejected", failed)
            .with("accepted", succeeded),
    );
    run.data.insert(
        "guess".into(),
        json!({"tries": GUESSES, "rejected": failed, "accepted": succeeded}),
    );

    run.part("memory_window", Some(&dev.ctx))?;
    memory_window(run, &dev, &src)?;

    run.part("dereg", Some(&dev.ctx))?;
    let (a, b) = run.pair(&dev, &PairSpec::default())?;
    let short_lived = run.must("ibv_reg_mr", "4 KiB MR that will be deregistered", || {
        dev.pd.register(4096, full_access())
    })?;
    let old = short_lived.remote();
    write_and_expect(
        run,
        &a,
        &src,
        old,
        0,
        "while the MR is registered",
        WcStatus::Success,
    )?;
    run.must("ibv_dereg_mr", "the MR (its rkey dies with it)", || {
        drop(short_lived);
        Ok(())
    })?;
    write_and_expect(
        run,
        &a,
        &src,
        old,
        0,
        "with the old rkey after ibv_dereg_mr",
        WcStatus::RemAccessErr,
    )?;
    drop((a, b));

    run.part("wire", Some(&dev.ctx))?;
    let r = victim.remote();
    run.info(
        "RoCE v2 packet layout",
        "Ethernet | IPv4 | UDP (dst port 4791) | BTH 12 B (opcode RDMA_WRITE_ONLY, dest QP, PSN) | RETH 16 B (virtual address 8 B, R_Key 4 B, DMA length 4 B) | payload | ICRC. Nothing is encrypted: anyone who can capture the link reads the rkey and the address.",
        Vals::new()
            .with("reth_va", run.secret(r.addr))
            .with("reth_rkey", run.secret(r.rkey.into()))
            .with("reth_dma_length", 64),
    );
    run.info(
        "note",
        "these values come from the work request, not a capture: rxe loops QPs of one device back in software, so nothing crosses eth0 here. Between two hosts, `tcpdump -i eth0 udp port 4791` shows them in clear.",
        Vals::new(),
    );
    run.end_part(Some(&dev.ctx));
    drop(victim);
    drop(src);
    Ok(())
}

/// Bind a 256 B window, write inside, invalidate, write again (rejected); then bind a second
/// window on a fresh pair and write outside its bounds but inside the MR.
fn memory_window(
    run: &mut Run<'_>,
    dev: &Device,
    src: &rdma_verbs::MemoryRegion,
) -> Result<(), ExpError> {
    let attr = dev.ctx.query_device()?;
    run.info(
        "ibv_query_device",
        format!("max_mw {}", attr.max_mw),
        Vals::new().with("max_mw", attr.max_mw),
    );
    let mut base = run.must(
        "ibv_reg_mr",
        "4 KiB MR with MW_BIND (windows may be bound to it)",
        || {
            dev.pd.register(
                4096,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::MW_BIND,
            )
        },
    )?;
    // The bytes a write outside the second window would land on start as zeros (a fresh MR
    // is zeroed; written here because the windows borrow the MR from now on).
    base.write(1024, &[0u8; 64])?;
    let (a, b) = run.pair(dev, &PairSpec::default())?;
    let mut mw = run.must("ibv_alloc_mw", "type 2 window on PD 1", || {
        dev.pd.alloc_mw(&base)
    })?;
    run.must(
        "ibv_post_send",
        "B: IBV_WR_BIND_MW: window = bytes 0..256 of the MR, REMOTE_WRITE",
        || b.qp.bind_mw(20, &mut mw, 0, 256, AccessFlags::REMOTE_WRITE),
    )?;
    run.completion(&b.cq, "B's CQ: the bind", WcStatus::Success)?;
    let window = mw
        .remote()
        .ok_or_else(|| ExpError::Failed("window not bound".into()))?;
    write_and_expect(
        run,
        &a,
        src,
        window,
        0,
        "through the window at offset 0",
        WcStatus::Success,
    )?;
    run.must(
        "ibv_post_send",
        "B: IBV_WR_LOCAL_INV of the window's rkey",
        || b.qp.invalidate(21, window.rkey),
    )?;
    run.completion(&b.cq, "B's CQ: the invalidation", WcStatus::Success)?;
    write_and_expect(
        run,
        &a,
        src,
        window,
        0,
        "through the invalidated window",
        WcStatus::RemAccessErr,
    )?;
    drop((a, b));

    // Bounds: a second window, a fresh pair, a write at offset 1024 of a 256 B window.
    let (a, b) = run.pair(dev, &PairSpec::default())?;
    let mut mw2 = run.must("ibv_alloc_mw", "a second type 2 window", || {
        dev.pd.alloc_mw(&base)
    })?;
    run.must(
        "ibv_post_send",
        "B: IBV_WR_BIND_MW: bytes 0..256, REMOTE_WRITE",
        || {
            b.qp.bind_mw(22, &mut mw2, 0, 256, AccessFlags::REMOTE_WRITE)
        },
    )?;
    run.completion(&b.cq, "B's CQ: the bind", WcStatus::Success)?;
    let w2 = mw2
        .remote()
        .ok_or_else(|| ExpError::Failed("window not bound".into()))?;
    let outside = RemoteBuffer {
        len: base.len() as u64,
        ..w2
    };
    let shown = run.secret(outside.rkey.into());
    run.must_with(
        "ibv_post_send",
        "A: RDMA WRITE 64 B through the window at offset 1024 (outside its 256 B, inside the MR)",
        || {
            a.qp.post_send(
                23,
                SendOp::Write {
                    remote: outside,
                    offset: 1024,
                },
                &[Sge {
                    mr: src,
                    offset: 0,
                    len: 64,
                }],
            )
        },
        |_| Vals::new().with("rkey", shown),
    )?;
    let wc = run.completion_within(
        &a.cq,
        "A's CQ: the verbs spec says REM_ACCESS_ERR; whether the device enforces it is what this step finds out",
        None,
        crate::harness::WC_TIMEOUT,
    )?;
    let landed = base.to_vec(1024, 64)? == vec![0x5a; 64];
    let enforced = matches!(wc, Some(w) if w.status == WcStatus::RemAccessErr) && !landed;
    run.info(
        "read",
        format!("bytes at MR offset 1024 written: {landed}; window bounds enforced: {enforced}"),
        Vals::new()
            .with("landed_outside_window", landed)
            .with("bounds_enforced", enforced),
    );
    if enforced {
        run.finding(
            "mw_bounds_enforced",
            "the device rejected a write outside the window's range (REM_ACCESS_ERR), as the verbs spec requires",
        );
    } else {
        run.finding(
            "mw_bounds_not_enforced",
            "rxe does not enforce memory window bounds: a write through a 256 B type-2 window landed 1024 bytes into its MR. rxe checks only the underlying MR's range. Hardware (mlx5, irdma, bnxt_re) checks the window's own address range and completes such a write with REM_ACCESS_ERR. Do not rely on windows for isolation on Soft-RoCE.",
        );
    }
    run.data.insert(
        "memory_window".into(),
        json!({"window_bytes": 256, "write_offset": 1024, "bounds_enforced": enforced, "landed_outside_window": landed}),
    );
    // Windows first: a bound type-2 window holds a reference on its QP, and rxe's
    // ibv_destroy_qp waits (tens of seconds) for it to go.
    run.must(
        "ibv_dealloc_mw",
        "both windows (unbinds the one still bound)",
        || {
            drop(mw2);
            drop(mw);
            Ok(())
        },
    )?;
    drop((a, b));
    drop(base);
    Ok(())
}
