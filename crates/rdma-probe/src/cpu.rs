//! CPU time of the calling thread, for the engine's own cost accounting.
//!
//! Read from `/proc/thread-self/schedstat` (first field: nanoseconds on a CPU, exact, kept
//! by the scheduler), falling back to `/proc/thread-self/stat` utime+stime (clock ticks,
//! 10 ms granularity). No `unsafe`, no libc call.

use std::sync::atomic::{AtomicU64, Ordering};

/// CPU time this thread has used so far, in nanoseconds; `None` without procfs.
pub fn thread_cpu_ns() -> Option<u64> {
    if let Ok(s) = std::fs::read_to_string("/proc/thread-self/schedstat") {
        if let Some(ns) = s.split_whitespace().next().and_then(|v| v.parse().ok()) {
            return Some(ns);
        }
    }
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // Fields after the ")" that closes the command name: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    // USER_HZ is 100 on every Linux ABI.
    Some((utime + stime) * 10_000_000)
}

/// Adds a thread's CPU time to a shared total, in slices (call [`CpuMeter::flush`] often).
#[derive(Debug)]
pub struct CpuMeter {
    last: Option<u64>,
}

impl CpuMeter {
    /// Start measuring the calling thread.
    pub fn start() -> Self {
        CpuMeter {
            last: thread_cpu_ns(),
        }
    }

    /// Add the CPU time used since the previous flush to `total` (nanoseconds).
    pub fn flush(&mut self, total: &AtomicU64) {
        let now = thread_cpu_ns();
        if let (Some(before), Some(after)) = (self.last, now) {
            total.fetch_add(after.saturating_sub(before), Ordering::Relaxed);
        }
        self.last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_time_is_readable_and_never_goes_back() {
        let a = thread_cpu_ns().expect("procfs on Linux");
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let b = thread_cpu_ns().unwrap();
        assert!(b >= a, "{a} -> {b}");
        let total = AtomicU64::new(0);
        let mut m = CpuMeter::start();
        m.flush(&total);
        m.flush(&total);
        assert!(total.load(Ordering::Relaxed) < 60_000_000_000);
    }
}
