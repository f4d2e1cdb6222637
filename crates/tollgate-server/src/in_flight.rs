//! The units held by the permits this replica acquired, per resource: the
//! gauge [`IN_FLIGHT`](crate::metrics::IN_FLIGHT).
//!
//! A permit is counted from the acquire that made it (answered with a
//! permit) until this replica sees it end: a release through it answered
//! `released: true`, its expiry as the store last answered it (at the
//! acquire, or at an extend through this replica), or a release or extend
//! through it answered `false` (the store no longer holds it: it expired
//! or was released elsewhere). Each permit is one entry of a table of at
//! most [`MAX_TRACKED`] permits, whatever the number of keys; past that, a
//! permit is not counted (a warning says so, once).
//!
//! What the gauge cannot see: a permit released through another replica
//! of the fleet is counted here until its expiry, and one extended
//! through another replica stops being counted at the expiry this replica
//! knew. Summed over the fleet it is exact when each client releases and
//! extends through the replica that acquired, and otherwise above the
//! truth by at most the units of permits released elsewhere within one
//! `ttl`.

use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tollgate::clock::SharedClock;

use crate::metrics::IN_FLIGHT;

/// The most permits counted at once, over every resource: about 100 bytes
/// each, 10 MB at most.
pub(crate) const MAX_TRACKED: usize = 100_000;

/// This replica's permits, counted per resource.
pub(crate) struct InFlight {
    clock: SharedClock,
    hasher: RandomState,
    state: Mutex<Tracked>,
    warned: AtomicBool,
}

/// One permit counted.
struct Counted {
    /// The policy whose gauge counts it.
    policy: Arc<str>,
    /// A hash of the resource and key its token names.
    holder: u64,
    cost: u64,
    /// When it expires, in the clock's nanoseconds.
    expires: u64,
}

#[derive(Default)]
struct Tracked {
    permits: HashMap<u128, Counted>,
    /// The permits by expiry, soonest first.
    expiries: BTreeSet<(u64, u128)>,
    /// The units counted per policy.
    units: HashMap<Arc<str>, u64>,
}

/// What the store answered of a permit a release or an extend named.
pub(crate) enum Ended {
    /// Released: its units are free.
    Released,
    /// Extended: it now lives this long.
    Extended(Duration),
    /// Neither: the store no longer holds it.
    Gone,
}

impl InFlight {
    /// An empty count, timed by `clock` (the service's).
    pub(crate) fn new(clock: SharedClock) -> Self {
        Self {
            clock,
            hasher: RandomState::new(),
            state: Mutex::new(Tracked::default()),
            warned: AtomicBool::new(false),
        }
    }

    /// Exports `policy`'s gauge at its current value (0 before any permit),
    /// so that a concurrency resource shows 0 rather than no data.
    pub(crate) fn register(&self, policy: &str) {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let units = state.units.get(policy).copied().unwrap_or(0);
        metrics::gauge!(IN_FLIGHT, "resource" => policy.to_owned()).set(units as f64);
    }

    /// Counts the permit `id` of `cost` units that `resource`'s `key`
    /// acquired under `policy`, expiring in `expires_in`.
    pub(crate) fn acquired(
        &self,
        policy: &str,
        (resource, key, id): (&str, &[u8], u128),
        cost: u64,
        expires_in: Duration,
    ) {
        let now = self.clock.now_nanos();
        let expires = now.saturating_add(nanos(expires_in));
        let holder = self.hasher.hash_one((resource, key));
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.sweep(now);
        if state.permits.len() >= MAX_TRACKED {
            drop(state);
            if !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    "more than {MAX_TRACKED} permits held at once: {IN_FLIGHT} counts no more until some end"
                );
            }
            return;
        }
        let policy: Arc<str> = match state.units.get_key_value(policy) {
            Some((name, _)) => name.clone(),
            None => Arc::from(policy),
        };
        let counted = Counted {
            policy: policy.clone(),
            holder,
            cost,
            expires,
        };
        if let Some(old) = state.permits.insert(id, counted) {
            // An identifier is never made twice; were it, the later wins.
            state.forget(id, &old);
        }
        state.expiries.insert((expires, id));
        state.add(&policy, cost as i128);
    }

    /// Applies what the store answered of the permit `id` of `resource`'s
    /// `key`: released, extended, or gone. A permit this replica did not
    /// acquire (or no longer counts) changes nothing.
    pub(crate) fn ended(&self, (resource, key, id): (&str, &[u8], u128), ended: Ended) {
        let now = self.clock.now_nanos();
        let holder = self.hasher.hash_one((resource, key));
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.sweep(now);
        let Some(counted) = state.permits.get_mut(&id).filter(|c| c.holder == holder) else {
            return;
        };
        match ended {
            Ended::Extended(expires_in) => {
                let (before, after) = (counted.expires, now.saturating_add(nanos(expires_in)));
                counted.expires = after;
                state.expiries.remove(&(before, id));
                state.expiries.insert((after, id));
            }
            Ended::Released | Ended::Gone => {
                if let Some(counted) = state.permits.remove(&id) {
                    state.forget(id, &counted);
                }
            }
        }
    }

    /// Drops the permits expired by now: called before `/metrics` renders.
    pub(crate) fn sweep(&self) {
        let now = self.clock.now_nanos();
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .sweep(now);
    }
}

impl Tracked {
    /// Drops the permits whose expiry is at or before `now`.
    fn sweep(&mut self, now: u64) {
        while let Some(&(expires, id)) = self.expiries.first() {
            if expires > now {
                break;
            }
            self.expiries.pop_first();
            if let Some(counted) = self.permits.remove(&id) {
                self.add(&counted.policy, -(counted.cost as i128));
            }
        }
    }

    /// Takes a permit already out of `permits` off its expiry and gauge.
    fn forget(&mut self, id: u128, counted: &Counted) {
        self.expiries.remove(&(counted.expires, id));
        self.add(&counted.policy, -(counted.cost as i128));
    }

    /// Adds `delta` units to `policy`'s count and exports it.
    fn add(&mut self, policy: &Arc<str>, delta: i128) {
        let units = self.units.entry(policy.clone()).or_insert(0);
        *units = u64::try_from((*units as i128 + delta).max(0)).unwrap_or(u64::MAX);
        metrics::gauge!(IN_FLIGHT, "resource" => policy.to_string()).set(*units as f64);
    }
}

/// A duration in nanoseconds, saturating.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::clock::ManualClock;

    fn units(flight: &InFlight, policy: &str) -> u64 {
        let state = flight.state.lock().unwrap();
        state.units.get(policy).copied().unwrap_or(0)
    }

    #[test]
    fn permits_count_until_released_gone_or_expired_and_extends_move_the_expiry() {
        let clock = ManualClock::new(Duration::from_secs(1_000));
        let flight = InFlight::new(Arc::new(clock.clone()));
        let ttl = Duration::from_secs(10);
        for id in 1..=4 {
            flight.acquired("exports", ("exports", b"k", id), id as u64, ttl);
        }
        assert_eq!(units(&flight, "exports"), 10);
        flight.ended(("exports", b"k", 1), Ended::Released);
        flight.ended(("exports", b"k", 1), Ended::Released);
        assert_eq!(units(&flight, "exports"), 9, "a release counts once");
        flight.ended(("exports", b"other", 2), Ended::Released);
        assert_eq!(units(&flight, "exports"), 9, "another key's token frees nothing");
        flight.ended(("exports", b"k", 2), Ended::Gone);
        assert_eq!(units(&flight, "exports"), 7);
        clock.advance(Duration::from_secs(5));
        flight.ended(("exports", b"k", 3), Ended::Extended(ttl));
        clock.advance(Duration::from_secs(5));
        flight.sweep();
        assert_eq!(units(&flight, "exports"), 3, "permit 4 expired, 3 was extended");
        clock.advance(Duration::from_secs(5));
        flight.sweep();
        assert_eq!(units(&flight, "exports"), 0);
        assert!(flight.state.lock().unwrap().expiries.is_empty());
    }
}
