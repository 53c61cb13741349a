//! The wall clock as Unix time: the one place the workspace turns `SystemTime` into seconds.
//!
//! Nothing else in proto calls it; the sans-IO code takes times as values.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Time from the Unix epoch to `t`; zero for times before the epoch.
pub fn since_epoch(t: SystemTime) -> Duration {
    t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO)
}

/// Seconds from the Unix epoch to `t`, negative before it, saturating at the ends of `i64`.
pub fn unix_seconds(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
        Err(before) => {
            let before = before.duration();
            // Round towards minus infinity, as `div_euclid` does for the calendar.
            let secs = before.as_secs() + u64::from(before.subsec_nanos() > 0);
            i64::try_from(secs).map_or(i64::MIN, |s| -s)
        }
    }
}

/// The wall clock now as time since the Unix epoch (zero if the clock is set before 1970).
pub fn now_since_epoch() -> Duration {
    since_epoch(SystemTime::now())
}

/// The wall clock now as Unix seconds.
pub fn unix_now() -> i64 {
    unix_seconds(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_count_from_the_epoch_and_floor_before_it() {
        assert_eq!(unix_seconds(UNIX_EPOCH), 0);
        assert_eq!(unix_seconds(UNIX_EPOCH + Duration::from_millis(1_999)), 1);
        assert_eq!(unix_seconds(UNIX_EPOCH - Duration::from_secs(1)), -1);
        assert_eq!(unix_seconds(UNIX_EPOCH - Duration::from_millis(1)), -1);
    }

    #[test]
    fn times_before_the_epoch_are_zero_since_it() {
        assert_eq!(
            since_epoch(UNIX_EPOCH - Duration::from_secs(5)),
            Duration::ZERO
        );
        assert_eq!(
            since_epoch(UNIX_EPOCH + Duration::from_millis(1_500)),
            Duration::from_millis(1_500)
        );
    }
}
