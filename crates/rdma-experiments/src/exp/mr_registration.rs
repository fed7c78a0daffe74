//! `mr-registration`: register 4 KiB .. 1 GiB (capped by the guest's free memory), timing
//! registration and deregistration and reading VmPin/VmLck; the access rule the kernel
//! enforces (REMOTE_WRITE needs LOCAL_WRITE: EINVAL); registering again pays again.
use crate::harness::{full_access, r1, ExpError, Run, Vals};
use crate::observe::{meminfo_kb, memlock_limit, status_kb};
use rdma_verbs::AccessFlags;
use serde_json::{json, Value};
use std::time::Instant;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
const GIB: usize = 1024 * MIB;
/// Sizes to try, smallest first.
const SIZES: [usize; 6] = [4 * KIB, 64 * KIB, MIB, 16 * MIB, 256 * MIB, GIB];
/// Memory left to the rest of the guest when capping sizes.
const RESERVE: usize = 256 * MIB;

fn human(bytes: usize) -> String {
    match bytes {
        b if b >= GIB => format!("{} GiB", b / GIB),
        b if b >= MIB => format!("{} MiB", b / MIB),
        b => format!("{} KiB", b / KIB),
    }
}

pub(crate) fn run(run: &mut Run<'_>) -> Result<(), ExpError> {
    let dev = run.open_device()?;
    run.part("sizes", Some(&dev.ctx))?;
    let avail_kb = meminfo_kb("MemAvailable").unwrap_or(0);
    let cap = (avail_kb as usize * KIB).saturating_sub(RESERVE);
    run.info(
        "read /proc/meminfo, /proc/self/limits",
        format!(
            "MemAvailable {} MiB: sizes above {} MiB are skipped (registration pins real pages; {} MiB stay for the rest of the system)",
            avail_kb / 1024,
            cap / MIB,
            RESERVE / MIB
        ),
        Vals::new()
            .with("mem_available_kb", avail_kb)
            .with("cap_bytes", cap as u64)
            .with("memlock_limit", memlock_limit().unwrap_or_else(|| "unknown".into())),
    );
    let mut rows = Vec::new();
    for size in SIZES {
        if size > cap {
            run.info(
                "skip",
                format!(
                    "{}: more than the {} MiB this guest can pin now (give the VM more memory to try it)",
                    human(size),
                    cap / MIB
                ),
                Vals::new().with("bytes", size as u64).with("skipped", true),
            );
            rows.push(json!({"bytes": size, "skipped": true}));
            continue;
        }
        let pin0 = status_kb("VmPin");
        let t0 = Instant::now();
        let mr = run.must_with(
            "ibv_reg_mr",
            format!("{} LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ", human(size)),
            || dev.pd.register(size, full_access()),
            |_| Vals::new().with("bytes", size as u64),
        )?;
        let reg_us = t0.elapsed().as_secs_f64() * 1e6;
        let pin1 = status_kb("VmPin");
        let lck1 = status_kb("VmLck");
        let keys = Vals::new()
            .with("lkey", run.secret(mr.lkey().into()))
            .with("rkey", run.secret(mr.rkey().into()))
            .with("addr", run.secret(mr.addr()))
            .with("lkey_equals_rkey", mr.lkey() == mr.rkey())
            .with("vm_pin_kb", pin1.unwrap_or(0))
            .with("vm_lck_kb", lck1.unwrap_or(0));
        run.info(
            "read /proc/self/status",
            format!(
                "while registered: VmPin {} kB (was {} kB), VmLck {} kB: pinned pages are counted in VmPin, not VmLck (no mlock)",
                pin1.unwrap_or(0),
                pin0.unwrap_or(0),
                lck1.unwrap_or(0)
            ),
            keys,
        );
        let t1 = Instant::now();
        run.must("ibv_dereg_mr", human(size), || {
            drop(mr);
            Ok(())
        })?;
        let dereg_us = t1.elapsed().as_secs_f64() * 1e6;
        let pin2 = status_kb("VmPin");
        let pages = (size / 4096).max(1) as f64;
        rows.push(json!({
            "bytes": size,
            "skipped": false,
            "reg_us": r1(reg_us),
            "dereg_us": r1(dereg_us),
            "reg_ns_per_page": r1(reg_us * 1000.0 / pages),
            "vm_pin_kb_before": pin0,
            "vm_pin_kb_registered": pin1,
            "vm_pin_kb_after": pin2,
            "vm_lck_kb_registered": lck1,
        }));
    }
    run.data.insert("sizes".into(), Value::Array(rows));
    run.info(
        "note",
        "the registration time includes faulting in the freshly allocated (zero) pages: ibv_reg_mr pins every page, so the first touch happens here",
        Vals::new(),
    );

    run.part("access", Some(&dev.ctx))?;
    run.expect_errno(
        "ibv_reg_mr",
        "4 KiB REMOTE_WRITE without LOCAL_WRITE (the remote side could write what we may not)",
        libc_einval(),
        || dev.pd.register_unvalidated(4096, AccessFlags::REMOTE_WRITE),
    )?;
    run.expect_errno(
        "ibv_reg_mr",
        "4 KiB REMOTE_ATOMIC without LOCAL_WRITE",
        libc_einval(),
        || {
            dev.pd
                .register_unvalidated(4096, AccessFlags::REMOTE_ATOMIC)
        },
    )?;
    let ro = run.must(
        "ibv_reg_mr",
        "4 KiB REMOTE_READ only (legal: peers may read, nobody writes)",
        || dev.pd.register_unvalidated(4096, AccessFlags::REMOTE_READ),
    )?;
    drop(ro);

    run.part("rereg", Some(&dev.ctx))?;
    let size = 16 * MIB;
    let mut times = Vec::new();
    let mut last_rkey: Option<u32> = None;
    let mut changed = Vec::new();
    for i in 1..=3 {
        let t0 = Instant::now();
        let mr = run.must(
            "ibv_reg_mr",
            format!("{} again (round {i})", human(size)),
            || dev.pd.register(size, full_access()),
        )?;
        times.push(r1(t0.elapsed().as_secs_f64() * 1e6));
        if let Some(prev) = last_rkey {
            changed.push(prev != mr.rkey());
        }
        last_rkey = Some(mr.rkey());
        drop(mr);
    }
    run.info(
        "compare",
        format!(
            "3 registrations of {}: {:?} us each: every registration pins and maps again (hence registration caches); a new registration gets a new rkey, the old one is dead",
            human(size),
            times
        ),
        Vals::new().with("reg_us", json!(times)).with("rkey_changed", json!(changed)),
    );
    run.data.insert(
        "rereg".into(),
        json!({"bytes": size, "reg_us": times, "rkey_changed": changed}),
    );
    run.end_part(Some(&dev.ctx));
    Ok(())
}

/// EINVAL, spelled once.
fn libc_einval() -> i32 {
    22
}
