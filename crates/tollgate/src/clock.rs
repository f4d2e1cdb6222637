//! Time sources.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of the current time, in nanoseconds since the Unix epoch.
///
/// Backends read their clock once per decision. Implementations must be cheap
/// and thread-safe; they need not be monotonic (strategies handle time that
/// goes backwards without admitting more than the limit).
pub trait Clock: Send + Sync + 'static {
    /// Nanoseconds since the Unix epoch.
    fn now_nanos(&self) -> u64;
}

/// The system's wall clock (the default).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

/// A clock that only moves when told to; clones share the same time.
///
/// Use it in tests and replays: advance it instead of sleeping.
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading `start` after the Unix epoch.
    pub fn new(start: Duration) -> Self {
        let clock = Self::default();
        clock.set(start);
        clock
    }

    /// Sets the time to `since_epoch` (it may go backwards).
    pub fn set(&self, since_epoch: Duration) {
        self.set_nanos(u64::try_from(since_epoch.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Sets the time in nanoseconds since the epoch.
    pub fn set_nanos(&self, nanos: u64) {
        self.nanos.store(nanos, Ordering::SeqCst);
    }

    /// Moves the time forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let _ = self
            .nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| Some(n.saturating_add(by)));
    }
}

impl Clock for ManualClock {
    fn now_nanos(&self) -> u64 {
        self.nanos.load(Ordering::SeqCst)
    }
}

/// A shareable clock handle.
pub type SharedClock = Arc<dyn Clock>;
