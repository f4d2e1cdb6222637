//! Durations as whole milliseconds, the unit of the service's JSON and of
//! the command's reports.

use std::time::Duration;

/// `d` in whole milliseconds, rounded up (a client that waits this long has
/// waited at least `d`), saturating at `u64::MAX`.
pub fn ceil_millis(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_and_saturates() {
        assert_eq!(ceil_millis(Duration::ZERO), 0);
        assert_eq!(ceil_millis(Duration::from_nanos(1)), 1);
        assert_eq!(ceil_millis(Duration::from_nanos(1_000_001)), 2);
        assert_eq!(ceil_millis(Duration::from_nanos(2_999_999)), 3);
        assert_eq!(ceil_millis(Duration::from_millis(12_000)), 12_000);
        assert_eq!(ceil_millis(Duration::MAX), u64::MAX);
    }
}
