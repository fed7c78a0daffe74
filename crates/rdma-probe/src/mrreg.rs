//! MR registration time: how long `ibv_reg_mr` takes for fresh buffers of each size.
//!
//! The timed span is [`rdma_verbs::ProtectionDomain::register`]: allocating the zeroed,
//! page-aligned buffer (lazy for large sizes) and registering it, which pins every page and
//! so faults it in. That is what an application pays for a new MR. Deregistration is not
//! timed. The MR is dropped (deregistered and freed) right after each measurement.
use crate::failure::ProbeFailure;
use rdma_verbs::{AccessFlags, Context};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Default sizes: 4 KiB, 64 KiB, 1 MiB, 16 MiB, 64 MiB.
pub const DEFAULT_MR_SIZES: &[usize] = &[4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20];

/// One registration timing.
#[derive(Debug)]
pub struct Registration {
    /// Buffer size in bytes.
    pub size: usize,
    /// Time to allocate and register, or why it failed.
    pub result: Result<Duration, ProbeFailure>,
}

/// Register (and drop) one MR of each size on `ctx`, timing each registration.
pub fn time_registrations(
    ctx: &Arc<Context>,
    sizes: &[usize],
) -> Result<Vec<Registration>, ProbeFailure> {
    let pd = ctx
        .alloc_pd()
        .map_err(|e| ProbeFailure::setup("alloc_pd", e))?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    Ok(sizes
        .iter()
        .map(|&size| {
            let start = Instant::now();
            let mr = pd.register(size, access);
            let elapsed = start.elapsed();
            let result = match mr {
                Ok(mr) => {
                    drop(mr);
                    Ok(elapsed)
                }
                Err(e) => Err(ProbeFailure::setup(&format!("register {size} bytes"), e)),
            };
            Registration { size, result }
        })
        .collect())
}
