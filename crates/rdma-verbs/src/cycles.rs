//! The CPU's cycle counter (`rdtsc` on x86_64), for latency probes that cannot afford a
//! clock call per sample: `Instant::now()` costs ~1.1 us in the TCG lab VM, a cycle read
//! tens of nanoseconds. perftest times with the same counter (`get_cycles`).
//!
//! It lives here because reading it needs `unsafe` and this is the workspace's only crate
//! allowed that. The counter is raw ticks: callers calibrate it against the monotonic clock
//! and check that it is usable (invariant, monotonic) before trusting it.

/// The current cycle count, or `None` on an architecture without a supported counter.
#[inline]
pub fn cycles() -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` exists on every x86_64 CPU, reads no memory and has no
        // preconditions; the kernel may trap it (prctl PR_SET_TSC), which we never enable.
        Some(unsafe { core::arch::x86_64::_rdtsc() })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_counter_moves_forward_while_time_passes() {
        let a = cycles().expect("x86_64 has rdtsc");
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = cycles().expect("x86_64 has rdtsc");
        assert!(b > a, "{a} -> {b}");
    }
}
