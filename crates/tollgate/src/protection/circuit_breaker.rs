//! The circuit breaker in front of a failing store.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Settings of a limiter's circuit breaker (see the [module
/// docs](crate::protection)).
///
/// After [`failures`](Self::failures) consecutive backend errors the breaker
/// opens: for [`cooldown`](Self::cooldown) the limiter does not call the
/// store and applies its fail policy at once. Then one request probes the
/// store while the others still see the breaker open. A probe that succeeds
/// closes the breaker; one that fails opens it again for twice the previous
/// cool-down, up to [`max_cooldown`](Self::max_cooldown). Before its
/// decision a probe re-establishes the backend's connection
/// ([`Call::Reconnect`](crate::backend::Call::Reconnect)), so a store that
/// comes back is used again within `max_cooldown` of accepting connections
/// (plus the reconnection and the probe's round trip), and after an idle
/// spell the first request goes to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CircuitBreaker {
    failures: u32,
    cooldown: Duration,
    max_cooldown: Duration,
}

impl Default for CircuitBreaker {
    fn default() -> Self {
        Self::new()
    }
}

impl CircuitBreaker {
    /// Opens after 3 consecutive failures, for 100 ms at first, growing to
    /// at most 500 ms: a store that is back decides again within half a
    /// second, for a probe every 500 ms per limiter while it is down.
    pub const fn new() -> Self {
        Self {
            failures: 3,
            cooldown: Duration::from_millis(100),
            max_cooldown: Duration::from_millis(500),
        }
    }

    /// Opens after `failures` consecutive failures (at least 1).
    pub const fn failures(mut self, failures: u32) -> Self {
        self.failures = if failures == 0 { 1 } else { failures };
        self
    }

    /// The first cool-down after the breaker opens.
    pub const fn cooldown(mut self, cooldown: Duration) -> Self {
        self.cooldown = cooldown;
        self
    }

    /// The longest cool-down, reached by doubling after each failed probe.
    pub const fn max_cooldown(mut self, max: Duration) -> Self {
        self.max_cooldown = max;
        self
    }
}

/// Whether a request may go to the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    /// The breaker is closed: call the store.
    Closed,
    /// The cool-down is over and this request is the one probe.
    Probe,
    /// The breaker is open: do not call the store for this long.
    Open(Duration),
}

/// The breaker's state, shared by every request of one limiter; lock-free.
pub(crate) struct Breaker {
    settings: CircuitBreaker,
    /// Consecutive failures since the last success.
    failures: AtomicU32,
    /// While open: the end of the cool-down in local nanoseconds; 0 while
    /// closed.
    open_until: AtomicU64,
    /// The current cool-down in nanoseconds.
    cooldown: AtomicU64,
    /// Whether a probe is out.
    probing: AtomicBool,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
}

impl Breaker {
    pub(crate) fn new(settings: CircuitBreaker) -> Self {
        Self {
            settings,
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            cooldown: AtomicU64::new(nanos(settings.cooldown)),
            probing: AtomicBool::new(false),
        }
    }

    /// Whether a request at `now` may call the store.
    #[inline]
    pub(crate) fn gate(&self, now: u64) -> Gate {
        let until = self.open_until.load(Ordering::Acquire);
        if until == 0 {
            return Gate::Closed;
        }
        if now < until {
            return Gate::Open(Duration::from_nanos(until - now));
        }
        match self
            .probing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Gate::Probe,
            Err(_) => Gate::Open(Duration::ZERO),
        }
    }

    /// Records the result of a store call that `gate` let through, finished
    /// at `now`.
    pub(crate) fn record(&self, gate: Gate, ok: bool, now: u64) {
        if ok {
            if self.failures.load(Ordering::Relaxed) != 0 {
                self.failures.store(0, Ordering::Relaxed);
            }
            if gate == Gate::Probe {
                self.cooldown
                    .store(nanos(self.settings.cooldown), Ordering::Relaxed);
                self.open_until.store(0, Ordering::Release);
                self.probing.store(false, Ordering::Release);
            }
            return;
        }
        let failures = self.failures.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        if gate == Gate::Probe {
            let doubled = self
                .cooldown
                .load(Ordering::Relaxed)
                .saturating_mul(2)
                .min(nanos(self.settings.max_cooldown));
            self.cooldown.store(doubled, Ordering::Relaxed);
            self.open_until
                .store(now.saturating_add(doubled).max(1), Ordering::Release);
            self.probing.store(false, Ordering::Release);
        } else if failures >= self.settings.failures {
            let cooldown = self.cooldown.load(Ordering::Relaxed);
            // Only the first failure past the threshold opens the breaker;
            // later ones (calls that were already out) leave it as it is.
            let _ = self.open_until.compare_exchange(
                0,
                now.saturating_add(cooldown).max(1),
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }

    /// Gives up a probe whose call never finished (its future was dropped):
    /// the next request probes instead.
    pub(crate) fn abandon_probe(&self) {
        self.probing.store(false, Ordering::Release);
    }

    /// The consecutive failures counted so far.
    pub(crate) fn failures(&self) -> u32 {
        self.failures.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn opens_after_consecutive_failures_and_grows_its_cooldown_per_failed_probe() {
        let b = Breaker::new(CircuitBreaker::new());
        for _ in 0..3 {
            assert_eq!(b.gate(0), Gate::Closed);
            b.record(Gate::Closed, false, 0);
        }
        assert_eq!(b.gate(50 * MS), Gate::Open(Duration::from_millis(50)));
        assert_eq!(b.gate(100 * MS), Gate::Probe);
        assert_eq!(
            b.gate(100 * MS),
            Gate::Open(Duration::ZERO),
            "one probe at a time"
        );
        b.record(Gate::Probe, false, 100 * MS);
        assert_eq!(b.gate(299 * MS), Gate::Open(Duration::from_millis(1)));
        let mut now = 300 * MS;
        for expected_ms in [400, 500, 500] {
            assert_eq!(b.gate(now), Gate::Probe);
            b.record(Gate::Probe, false, now);
            assert_eq!(b.gate(now), Gate::Open(Duration::from_millis(expected_ms)));
            now += expected_ms * MS;
        }
        assert_eq!(b.gate(now), Gate::Probe);
        b.record(Gate::Probe, true, now);
        assert_eq!((b.gate(now), b.failures()), (Gate::Closed, 0));
        // Closed again with the first cool-down.
        for _ in 0..3 {
            b.record(Gate::Closed, false, now);
        }
        assert_eq!(b.gate(now), Gate::Open(Duration::from_millis(100)));
    }

    #[test]
    fn a_success_resets_the_count_of_failures() {
        let b = Breaker::new(CircuitBreaker::new().failures(2));
        b.record(Gate::Closed, false, 0);
        b.record(Gate::Closed, true, 0);
        b.record(Gate::Closed, false, 0);
        assert_eq!(b.gate(0), Gate::Closed);
        b.record(Gate::Closed, false, 0);
        assert!(matches!(b.gate(0), Gate::Open(_)));
    }
}
