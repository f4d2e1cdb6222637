//! The clocks a limiter reads: [`SystemClock`] by default, a
//! [`ManualClock`] that a test moves by hand, or any [`Clock`] of your own,
//! shared as a [`SharedClock`].

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
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
///
/// Reading the wall clock through the kernel costs about as much as a whole
/// in-memory decision. This clock instead reads the CPU's time-stamp
/// counter (through `quanta`, which falls back to the monotonic clock where
/// there is no usable counter) and adds it to a wall-clock reading taken at
/// most 250 ms earlier by the same thread. Between anchors
/// it follows the counter's calibrated rate, so it can differ from
/// `SystemTime::now()` by the counter's calibration error over one anchor
/// period (microseconds); a re-anchor may step it back by as much, which
/// every strategy handles without admitting more than its limit.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl SystemClock {
    /// How long a thread's wall-clock anchor is used before it is refreshed.
    pub(crate) const REANCHOR: Duration = Duration::from_millis(250);

    /// Reads `SystemTime::now()` in nanoseconds since the epoch.
    pub(crate) fn wall_nanos() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

fn counter() -> &'static quanta::Clock {
    static COUNTER: OnceLock<quanta::Clock> = OnceLock::new();
    COUNTER.get_or_init(quanta::Clock::new)
}

thread_local! {
    /// (raw counter, wall nanoseconds) read together; raw 0 means unset.
    static ANCHOR: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

impl Clock for SystemClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        let counter = counter();
        let raw = counter.raw();
        ANCHOR.with(|anchor| {
            let (raw0, wall0) = anchor.get();
            let elapsed = counter.delta_as_nanos(raw0, raw);
            if raw0 != 0 && elapsed < Self::REANCHOR.as_nanos() as u64 {
                return wall0 + elapsed;
            }
            let wall = Self::wall_nanos();
            anchor.set((counter.raw().max(1), wall));
            wall
        })
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

/// The clock the [`Arc`] points to, so that a [`SharedClock`] can be given
/// wherever a clock is asked for (`local_clock(shared.clone())`).
impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }
}

/// A clock as held by a backend: the system clock is called directly (and
/// inlined into the decision path), any other clock through a shared pointer.
#[derive(Clone)]
pub(crate) enum ClockHandle {
    System,
    Shared(SharedClock),
}

impl ClockHandle {
    /// Wraps `clock`, recognising the system clock.
    pub(crate) fn of<C: Clock>(clock: C) -> Self {
        if std::any::TypeId::of::<C>() == std::any::TypeId::of::<SystemClock>() {
            ClockHandle::System
        } else {
            ClockHandle::Shared(Arc::new(clock))
        }
    }

    #[inline]
    pub(crate) fn now_nanos(&self) -> u64 {
        match self {
            ClockHandle::System => SystemClock.now_nanos(),
            ClockHandle::Shared(clock) => clock.now_nanos(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_tracks_the_wall_clock() {
        let clock = SystemClock;
        for _ in 0..1_000 {
            // Bracketed by two kernel readings, so a thread descheduled
            // between the reads (a loaded machine) cannot fail the test.
            let before = SystemClock::wall_nanos();
            let ours = clock.now_nanos();
            let after = SystemClock::wall_nanos();
            // Well inside a millisecond of the kernel's wall clock.
            assert!(
                ours + 1_000_000 > before && ours < after + 1_000_000,
                "{ours}ns is not within 1ms of the wall clock's [{before}, {after}]"
            );
        }
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(Duration::from_secs(5));
        let other = clock.clone();
        assert_eq!(clock.now_nanos(), 5_000_000_000);
        other.advance(Duration::from_millis(1));
        assert_eq!(clock.now_nanos(), 5_001_000_000);
        clock.set(Duration::from_secs(1));
        assert_eq!(other.now_nanos(), 1_000_000_000);
    }
}
