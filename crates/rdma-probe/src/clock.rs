//! The probe clock: the cheapest reliable monotonic time source, chosen by measurement.
//!
//! Candidates are the CPU cycle counter ([`rdma_verbs::cycles`], what perftest's
//! `get_cycles` reads) and `Instant::now()` (`clock_gettime(CLOCK_MONOTONIC)`). In the TCG lab
//! VM the kernel's clocksource is not the TSC, so `Instant::now()` is a system call (~1.1 us),
//! too dear for a probe whose samples are ~15 us. The cycle counter is used when it is
//! reliable: it never went backwards over a burst of reads, and calibrations against the
//! monotonic clock show an invariant rate (the median of five 10 ms windows, at least three
//! of them within 2% of it). Otherwise the monotonic clock is used.
use std::time::{Duration, Instant};

pub use crate::snapshot::{ClockInfo, ClockSource};

/// A calibrated clock returning raw ticks; convert differences with [`Clock::ticks_to_ns`].
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    source: ClockSource,
    ns_per_tick: f64,
    base: Instant,
    info: ClockInfo,
}

const COST_READS: u32 = 2000;

fn monotonic_cost_ns() -> f64 {
    let start = Instant::now();
    let mut last = start;
    for _ in 0..COST_READS {
        last = std::hint::black_box(Instant::now());
    }
    (last - start).as_nanos() as f64 / f64::from(COST_READS)
}

/// Ticks per nanosecond of the cycle counter over `window`, if it moved forward.
fn tsc_rate(window: Duration) -> Option<f64> {
    let (c0, t0) = (rdma_verbs::cycles()?, Instant::now());
    std::thread::sleep(window);
    let (c1, t1) = (rdma_verbs::cycles()?, Instant::now());
    let ns = (t1 - t0).as_nanos() as f64;
    (c1 > c0 && ns > 0.0).then(|| (c1 - c0) as f64 / ns)
}

/// `(cost per read ns, never went backwards)` of the cycle counter.
fn tsc_cost() -> Option<(f64, bool)> {
    let t0 = Instant::now();
    let mut prev = rdma_verbs::cycles()?;
    let mut monotonic = true;
    for _ in 0..COST_READS {
        let c = rdma_verbs::cycles()?;
        monotonic &= c >= prev;
        prev = c;
    }
    Some((
        t0.elapsed().as_nanos() as f64 / f64::from(COST_READS),
        monotonic,
    ))
}

impl Clock {
    /// The monotonic clock, without calibration (for callers that want no choice).
    pub fn monotonic() -> Clock {
        let cost = monotonic_cost_ns();
        Clock {
            source: ClockSource::Monotonic,
            ns_per_tick: 1.0,
            base: Instant::now(),
            info: ClockInfo {
                source: ClockSource::Monotonic,
                read_cost_ns: cost,
                monotonic_cost_ns: cost,
                tsc_cost_ns: None,
                tsc_ghz: None,
            },
        }
    }

    /// Measure both sources and pick the cheapest reliable one (takes ~60 ms).
    pub fn calibrate() -> Clock {
        let mut clock = Clock::monotonic();
        let Some((tsc_cost, monotonic)) = tsc_cost() else {
            return clock;
        };
        clock.info.tsc_cost_ns = Some(tsc_cost);
        // Five short windows; a window in which this thread (or, in a VM, the vCPU) was
        // descheduled between the two reads is an outlier, so take the median and require a
        // majority to agree with it.
        let window = Duration::from_millis(10);
        let mut rates: Vec<f64> = (0..5).filter_map(|_| tsc_rate(window)).collect();
        if rates.len() < 3 {
            return clock;
        }
        rates.sort_by(f64::total_cmp);
        let r1 = rates[rates.len() / 2];
        let agreeing = rates.iter().filter(|r| (*r - r1).abs() / r1 < 0.02).count();
        let stable = agreeing >= 3;
        let plausible = (0.05..20.0).contains(&r1);
        if monotonic && stable && plausible && tsc_cost < clock.info.monotonic_cost_ns {
            let rate = r1;
            clock.source = ClockSource::Tsc;
            clock.ns_per_tick = 1.0 / rate;
            clock.info.source = ClockSource::Tsc;
            clock.info.read_cost_ns = tsc_cost;
            clock.info.tsc_ghz = Some(rate);
        }
        clock
    }

    /// Now, in ticks of this clock.
    #[inline]
    pub fn now(&self) -> u64 {
        match self.source {
            ClockSource::Tsc => rdma_verbs::cycles().unwrap_or(0),
            ClockSource::Monotonic => self.base.elapsed().as_nanos() as u64,
        }
    }

    /// A tick difference in nanoseconds.
    #[inline]
    pub fn ticks_to_ns(&self, ticks: u64) -> f64 {
        ticks as f64 * self.ns_per_tick
    }

    /// What was measured.
    pub fn info(&self) -> ClockInfo {
        self.info
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_picks_a_source_that_moves_forward() {
        let c = Clock::calibrate();
        let a = c.now();
        std::thread::sleep(Duration::from_millis(5));
        let b = c.now();
        assert!(b > a, "{:?}: {a} -> {b}", c.info());
        assert!(c.ticks_to_ns(b - a) > 0.0);
        let info = c.info();
        assert!(info.read_cost_ns > 0.0 && info.monotonic_cost_ns > 0.0);
        if info.source == ClockSource::Tsc {
            assert!(info.tsc_ghz.is_some());
            assert!(info.read_cost_ns <= info.monotonic_cost_ns);
        }
    }

    #[test]
    fn the_monotonic_clock_counts_nanoseconds() {
        let c = Clock::monotonic();
        assert_eq!(c.info().source, ClockSource::Monotonic);
        assert_eq!(c.ticks_to_ns(1500), 1500.0);
    }
}
