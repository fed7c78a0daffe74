//! Log lines for events that a peer can cause at will (refused handshakes, dropped UD
//! datagrams): the first event of each kind is logged at once, later ones at most once per
//! period, with the number left unlogged in between. The counters (`ServerStats`,
//! `UdStats`) count every event; the log only says that it happens and why.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often one kind of peer-caused event is logged at most.
pub const LOG_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct Kind {
    last: Instant,
    suppressed: u64,
}

/// A rate limit per event kind (a small, fixed set of names: reasons).
#[derive(Debug)]
pub struct RateLimited {
    every: Duration,
    kinds: Mutex<HashMap<&'static str, Kind>>,
}

impl Default for RateLimited {
    fn default() -> Self {
        RateLimited::new(LOG_EVERY)
    }
}

impl RateLimited {
    /// At most one line per kind per `every`.
    pub fn new(every: Duration) -> Self {
        RateLimited {
            every,
            kinds: Mutex::new(HashMap::new()),
        }
    }

    /// One event of `kind` at `now`: `Some(n)` when it is to be logged, `n` being the events
    /// of this kind not logged since the last line; `None` when it is only counted.
    pub fn check(&self, kind: &'static str, now: Instant) -> Option<u64> {
        let mut kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        match kinds.get_mut(kind) {
            None => {
                kinds.insert(
                    kind,
                    Kind {
                        last: now,
                        suppressed: 0,
                    },
                );
                Some(0)
            }
            Some(k) if now.saturating_duration_since(k.last) >= self.every => {
                let n = k.suppressed;
                (k.last, k.suppressed) = (now, 0);
                Some(n)
            }
            Some(k) => {
                k.suppressed += 1;
                None
            }
        }
    }
}

/// The tail of a rate-limited line: how many were not logged, and when the next one comes.
pub fn suppressed_note(n: u64) -> String {
    if n == 0 {
        format!(
            "(more of these are counted, and logged at most once every {} s)",
            LOG_EVERY.as_secs()
        )
    } else {
        format!(
            "({n} more since the last line; logged at most once every {} s)",
            LOG_EVERY.as_secs()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_event_of_a_kind_is_logged_then_at_most_one_per_period_with_the_count() {
        let r = RateLimited::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(r.check("busy", t0), Some(0));
        // A flood within the period: counted, not logged.
        for i in 1..=1000 {
            assert_eq!(r.check("busy", t0 + Duration::from_millis(i)), None);
        }
        // Another kind has its own limit.
        assert_eq!(r.check("malformed", t0 + Duration::from_secs(1)), Some(0));
        assert_eq!(r.check("malformed", t0 + Duration::from_secs(2)), None);
        // After the period: one line, saying how many were left out.
        assert_eq!(r.check("busy", t0 + Duration::from_secs(60)), Some(1000));
        assert_eq!(r.check("busy", t0 + Duration::from_secs(61)), None);
        assert_eq!(r.check("busy", t0 + Duration::from_secs(200)), Some(1));
        // A clock that goes backwards never panics and never logs early.
        assert_eq!(r.check("busy", t0), None);
        assert!(suppressed_note(0).contains("at most once every 60 s"));
        assert!(suppressed_note(7).starts_with("(7 more"));
    }
}
