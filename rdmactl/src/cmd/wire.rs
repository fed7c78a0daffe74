//! The `wire` experiment: what a sniffer learns from RoCE v2 traffic.
//!
//! One RDMA WRITE from rxe_a to rxe_b (the lab's two devices on the veth pair; loopback on
//! one rxe device never reaches a netdev) while an AF_PACKET capture listens on rxe_b's
//! netdev. The captured UDP 4791 packets are decoded (BTH: opcode, destination QP, PSN;
//! RETH: remote address, rkey, length) and compared with what the program used. The lesson:
//! RoCE carries the remote address and rkey in clear text, so anyone on the path can learn
//! them, and anyone who can inject packets can use them. The address and rkey are masked
//! unless `--show-keys` is given; the JSON then also carries the raw frames (hex).
//!
//! Hook: `rdmactl experiment run wire [--json] [--show-keys]` calls [`run_wire`].
use anyhow::{bail, Context as _, Result};
use rdma_trace::capture::Capture;
use rdma_trace::wire::{self, RocePacket, MASKED};
use rdma_verbs::{AccessFlags, GidType, RcLink, SendOp, Sge, WcStatus};
use serde_json::json;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The requester device.
const DEVICE_A: &str = "rxe_a";
/// The responder device; we capture on its netdev.
const DEVICE_B: &str = "rxe_b";
/// What the WRITE carries.
const PAYLOAD: &[u8] = b"what does the wire say about this write?";
/// Offset of the WRITE into the responder's MR.
const TARGET_OFFSET: u64 = 256;
/// First PSNs of the requester and the responder (24 bits; easy to spot in a capture).
const PSN_A: u32 = 0x00a0a0;
const PSN_B: u32 = 0x00b0b0;

/// One captured, decoded frame.
struct Seen {
    packet: RocePacket,
    frame: Vec<u8>,
}

/// Run the experiment; the exit code is 0 when the WRITE was seen on the wire with the rkey
/// the program used.
pub fn run_wire(json: bool, show_keys: bool) -> Result<ExitCode> {
    let devices =
        rdma_verbs::devices().map_err(|e| crate::exit::CodedError::no_rdma(e.to_string()))?;
    for name in [DEVICE_A, DEVICE_B] {
        if !devices.iter().any(|d| d.name == name) {
            return Err(crate::exit::CodedError::no_rdma(format!(
                "the wire experiment needs the lab's devices {DEVICE_A} and {DEVICE_B} (a veth \
                 pair); {name} is missing. Run it in `rdmactl lab run --devices 2 -- ...`"
            )));
        }
    }
    let ctx_a = rdma_verbs::open(DEVICE_A)?;
    let ctx_b = rdma_verbs::open(DEVICE_B)?;
    let gid_a = ctx_a.choose_gid(1, GidType::RoceV2)?;
    let gid_b = ctx_b.choose_gid(1, GidType::RoceV2)?;
    let netdev = gid_b
        .netdev
        .clone()
        .context("rxe_b's GID has no netdev to capture on")?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let pd_a = ctx_a.alloc_pd()?;
    let pd_b = ctx_b.alloc_pd()?;
    let cq_a = ctx_a.create_cq(16)?;
    let cq_b = ctx_b.create_cq(16)?;
    let qp_a = pd_a.create_rc_qp(&cq_a, &cq_a, Default::default())?;
    let qp_b = pd_b.create_rc_qp(&cq_b, &cq_b, Default::default())?;
    let mut mr_a = pd_a.register(4096, access)?;
    let mr_b = pd_b.register(4096, access)?;
    // Both ends are veth devices with the same MTU.
    let mtu = ctx_a.query_port(1)?.active_mtu;
    RcLink::new(1, mtu, access).connect_pair((&qp_a, &gid_a, PSN_A), (&qp_b, &gid_b, PSN_B))?;

    // Capture in the background while the WRITE runs.
    let mut cap = Capture::open(&netdev, Duration::from_millis(50))?;
    let stop = Arc::new(AtomicBool::new(false));
    let capture = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || -> Result<Vec<Seen>> {
            let mut seen = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if let Some(frame) = cap.recv()? {
                    if let Ok(packet) = wire::parse_ethernet(&frame.bytes) {
                        seen.push(Seen {
                            packet,
                            frame: frame.bytes,
                        });
                    }
                }
            }
            Ok(seen)
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let remote = mr_b.remote();
    mr_a.write(0, PAYLOAD)?;
    qp_a.post_send(
        1,
        SendOp::Write {
            remote,
            offset: TARGET_OFFSET,
        },
        &[Sge {
            mr: &mr_a,
            offset: 0,
            len: PAYLOAD.len() as u32,
        }],
    )?;
    let wcs = cq_a.poll_until(1, Duration::from_secs(10))?;
    let status = wcs.first().map(|wc| wc.status);
    // Let the ACK arrive at the capture too.
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_millis(300) {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    let seen = capture
        .join()
        .map_err(|_| anyhow::anyhow!("the capture thread panicked"))??;
    if status != Some(WcStatus::Success) {
        bail!("the RDMA WRITE did not complete successfully: {status:?}");
    }
    let landed = mr_b.to_vec(TARGET_OFFSET as usize, PAYLOAD.len())? == PAYLOAD;

    let used_va = remote.addr + TARGET_OFFSET;
    let write = seen
        .iter()
        .find(|s| s.packet.reth.is_some() && s.packet.bth.dest_qp == qp_b.qp_num());
    let rkey_matches = write.is_some_and(|s| s.packet.reth.is_some_and(|r| r.rkey == remote.rkey));
    let va_matches = write.is_some_and(|s| s.packet.reth.is_some_and(|r| r.va == used_va));

    if json {
        let secret = |v: serde_json::Value| if show_keys { v } else { json!(MASKED) };
        let mut out = json!({
            "experiment": "wire",
            "requester": { "device": DEVICE_A, "gid": gid_a.gid.to_string(), "qp_num": qp_a.qp_num() },
            "responder": { "device": DEVICE_B, "gid": gid_b.gid.to_string(), "qp_num": qp_b.qp_num(), "netdev": netdev },
            "write": {
                "len": PAYLOAD.len(),
                "first_psn": PSN_A,
                "va": secret(json!(format!("{used_va:#x}"))),
                "rkey": secret(json!(remote.rkey)),
                "completed": true,
                "landed": landed,
            },
            "packets": seen.iter().map(|s| s.packet.to_json(show_keys)).collect::<Vec<_>>(),
            "write_seen": write.is_some(),
            "rkey_matches": rkey_matches,
            "va_matches": va_matches,
            "masked": if show_keys { json!([]) } else { json!(["va", "rkey"]) },
        });
        if show_keys {
            out["frames_hex"] = json!(seen
                .iter()
                .map(|s| wire::to_hex(&s.frame))
                .collect::<Vec<_>>());
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "RDMA WRITE of {} bytes: {DEVICE_A} qp {:#x} ({}) -> {DEVICE_B} qp {:#x} ({}), captured on {netdev}",
            PAYLOAD.len(),
            qp_a.qp_num(),
            gid_a.gid,
            qp_b.qp_num(),
            gid_b.gid
        );
        if show_keys {
            println!(
                "the program used: remote address {used_va:#x}, rkey {:#x}",
                remote.rkey
            );
        } else {
            println!("the program used: remote address {MASKED}, rkey {MASKED}");
        }
        println!("\n{} RoCE v2 packets on the wire:", seen.len());
        for s in &seen {
            println!("  {}", s.packet.line(show_keys));
        }
        println!();
        match write {
            Some(_) => {
                println!(
                    "A sniffer on {netdev} learned the destination QP, the PSNs, the length, and from \
                     the RETH the remote address and the rkey ({}). With them, anyone who can put \
                     packets on this network can forge a WRITE into that memory: RoCE v2 has no \
                     encryption or authentication of its own. Isolate RDMA networks, register MRs \
                     only as long as needed, prefer memory windows with short-lived rkeys.",
                    if rkey_matches && va_matches {
                        "the same values the program used"
                    } else {
                        "compare them with what the program used"
                    }
                );
            }
            None => println!("the WRITE was not seen on {netdev}: no RETH to show"),
        }
        if !show_keys {
            println!(
                "\nmasked: the remote address (va) and rkey. Run with --show-keys to see them: \
                 showing them is the point of this experiment, do it only in a lab."
            );
        }
    }
    if write.is_some() && rkey_matches && landed {
        Ok(ExitCode::SUCCESS)
    } else {
        if !json {
            eprintln!("rdmactl: the WRITE's RETH was not captured with the program's rkey");
        }
        Ok(ExitCode::from(crate::exit::FAILURE))
    }
}
