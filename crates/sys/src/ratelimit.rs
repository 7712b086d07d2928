//! Rate limits for warnings that can repeat as fast as the input that causes them (malformed
//! ingest lines, a failing accept): the first few are written, then at most one per period,
//! carrying how many were left out since the last one written. 100,000 bad lines make a
//! handful of log lines, not 100,000.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One repeated warning's limiter. `const`-constructible, so a warning site can keep its own
/// in a `static`, or in the state of the listener it belongs to.
#[derive(Debug)]
pub struct Repeated {
    /// Written unconditionally before limiting starts.
    first: u64,
    /// Then at most one per this period.
    period: Duration,
    state: Mutex<Tally>,
}

#[derive(Debug)]
struct Tally {
    seen: u64,
    suppressed: u64,
    last_written: Option<Instant>,
}

impl Repeated {
    pub const fn new(first: u64, period: Duration) -> Self {
        Repeated {
            first,
            period,
            state: Mutex::new(Tally {
                seen: 0,
                suppressed: 0,
                last_written: None,
            }),
        }
    }

    /// Whether this occurrence is to be written: `Some(n)` with `n` the occurrences left out
    /// since the last one written (to log alongside it), `None` to leave it out.
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(Instant::now())
    }

    fn allow_at(&self, now: Instant) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.seen += 1;
        let due = s.seen <= self.first
            || s.last_written
                .is_none_or(|t| now.saturating_duration_since(t) >= self.period);
        if due {
            s.last_written = Some(now);
            Some(std::mem::take(&mut s.suppressed))
        } else {
            s.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_are_written_then_one_per_period_with_the_count_left_out() {
        let r = Repeated::new(3, Duration::from_secs(5));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_millis(s);
        let written: Vec<(u64, u64)> = (0..100_000u64)
            // 100,000 occurrences over 12 seconds.
            .filter_map(|i| r.allow_at(at(i * 12_000 / 100_000)).map(|n| (i, n)))
            .collect();
        assert_eq!(written[..3], [(0, 0), (1, 0), (2, 0)]);
        // Then one at 5 s and one at 10 s, each with what was left out before it.
        assert_eq!(written.len(), 5, "{written:?}");
        let left_out: u64 = written.iter().map(|(_, n)| n).sum();
        let last = written.last().unwrap().0;
        assert_eq!(left_out, last + 1 - written.len() as u64);
    }

    #[test]
    fn a_quiet_period_lets_the_next_one_through() {
        let r = Repeated::new(1, Duration::from_secs(5));
        let t0 = Instant::now();
        assert_eq!(r.allow_at(t0), Some(0));
        assert_eq!(r.allow_at(t0 + Duration::from_secs(1)), None);
        assert_eq!(r.allow_at(t0 + Duration::from_secs(6)), Some(1));
    }
}
