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

/// A UTC wall-clock time as a person reads it: the civil date and the time of day of
/// `unix_secs` seconds after 1970-01-01T00:00:00Z, as `(year, month, day, hour, minute,
/// second)`. For the names of files and the times in a report, where one formatting crate for
/// one date would be more than the job.
pub fn utc_civil(unix_secs: u64) -> (i64, i64, i64, u64, u64, u64) {
    let days = (unix_secs / 86_400) as i64;
    let secs = unix_secs % 86_400;
    // Days since 1970-01-01 to a civil date (Howard Hinnant's `civil_from_days`).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, secs / 3600, secs / 60 % 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_times_are_utc_dates_across_leap_days_and_centuries() {
        assert_eq!(utc_civil(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(utc_civil(951_782_400), (2000, 2, 29, 0, 0, 0));
        assert_eq!(utc_civil(1_796_684_399), (2026, 12, 7, 22, 59, 59));
        assert_eq!(utc_civil(4_107_542_400), (2100, 3, 1, 0, 0, 0));
    }

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
