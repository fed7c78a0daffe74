//! Keeping the two threads of a ping-pong run on different CPUs.
//!
//! Two busy-polling threads that the scheduler puts on the same CPU take turns by time slice,
//! so every exchange costs a slice (2-4 ms measured in the lab VM instead of ~15 us). perftest
//! runs two processes and usually escapes this; threads of one process were co-located in
//! about half of the lab runs. So for the length of a run each thread is pinned to its own
//! allowed CPU and its previous mask restored afterwards. With a single allowed CPU there is
//! nothing to pin: the spin loops yield instead (see `rc::Limits`).
use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

/// The CPUs the calling thread may run on.
pub(crate) fn allowed_cpus() -> Vec<usize> {
    let Ok(set) = sched_getaffinity(Pid::from_raw(0)) else {
        return Vec::new();
    };
    (0..CpuSet::count())
        .filter(|&i| set.is_set(i).unwrap_or(false))
        .collect()
}

/// Pins the calling thread to one CPU until dropped, then restores its mask.
pub(crate) struct Pin {
    previous: Option<CpuSet>,
}

impl Pin {
    /// Pin to `cpu`; a failure leaves the thread unpinned (the run still works, maybe slower).
    pub fn to(cpu: usize) -> Pin {
        let me = Pid::from_raw(0);
        let Ok(previous) = sched_getaffinity(me) else {
            return Pin { previous: None };
        };
        let mut one = CpuSet::new();
        if one.set(cpu).is_err() || sched_setaffinity(me, &one).is_err() {
            return Pin { previous: None };
        }
        Pin {
            previous: Some(previous),
        }
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        if let Some(prev) = &self.previous {
            let _ = sched_setaffinity(Pid::from_raw(0), prev);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinning_is_undone_on_drop() {
        let before = allowed_cpus();
        assert!(!before.is_empty());
        {
            let _pin = Pin::to(before[0]);
            assert_eq!(allowed_cpus(), vec![before[0]]);
        }
        assert_eq!(allowed_cpus(), before);
    }
}
