//! The one clock the relay and the wrapper share: CLOCK_MONOTONIC, read in nanoseconds.
//!
//! The wrapper runs in another process, so it cannot share an `Instant` with the relay; both
//! read the same kernel monotonic clock instead, and the relay turns readings into milliseconds
//! since its own epoch (the `t` of trace v2).

use correlator::Millis;

/// The current CLOCK_MONOTONIC reading in nanoseconds.
pub fn mono_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Milliseconds since an epoch on the monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    epoch_ns: u64,
}

impl Clock {
    /// A clock whose epoch is now.
    pub fn start() -> Self {
        Clock {
            epoch_ns: mono_ns(),
        }
    }

    /// Milliseconds from the epoch to a monotonic reading (0 for readings before the epoch).
    pub fn ms_at(&self, mono_ns: u64) -> Millis {
        mono_ns.saturating_sub(self.epoch_ns) as f64 / 1e6
    }

    /// Milliseconds since the epoch, now.
    pub fn now_ms(&self) -> Millis {
        self.ms_at(mono_ns())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_map_to_milliseconds_since_the_epoch() {
        let c = Clock {
            epoch_ns: 5_000_000,
        };
        assert_eq!(c.ms_at(5_000_000), 0.0);
        assert_eq!(c.ms_at(7_500_000), 2.5);
        assert_eq!(c.ms_at(1), 0.0);
        assert!(Clock::start().now_ms() >= 0.0);
    }
}
