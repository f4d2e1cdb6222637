//! The local deny cache: denied-until times of over-limit keys.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use hashbrown::HashTable;
use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;

use crate::decision::Decision;
use crate::policy::Limit;
use crate::strategy::Strategy;

/// Settings of a limiter's local deny cache (see the [module
/// docs](crate::protection)).
///
/// When the store denies a unit request for a key with `retry_after = d`,
/// the limiter remembers "denied until now + d" and answers that key's
/// requests of cost 1 or more as denied until then without asking the
/// store: `remaining` 0, `retry_after` the time left, `limit` and
/// [`bound_by`](Decision::bound_by) those of the limit that denied (for a
/// compound policy, the binding limit). Peeks (cost 0) still go to the
/// store. `retry_after` and `reset` of a cached answer are lower bounds when
/// other processes keep spending on the same key.
///
/// Memory is bounded: at most [`capacity`](Self::capacity) keys, none
/// longer than [`max_key_len`](Self::max_key_len) bytes; entries leave when
/// their time is up. When the cache is full, a new denial is not cached
/// (expired entries are dropped first), so a flood of distinct keys costs
/// round trips, never memory. Hits are counted in
/// `tollgate_deny_cache_hits_total`.
///
/// An admission that leaves nothing (`remaining` 0) under a policy of one
/// fixed window, token bucket or leaky bucket, without leases, is cached
/// the same way, as the denial every unit request meets until the key has
/// a unit again: the end of the window's bucket, or `reset − (L − 1)·T`
/// for a bucket (`T` at least the backend's interval, so never longer than
/// the store's own denial).
///
/// When a cached denial runs out, one request of the key asks the store
/// while the key's other requests in this process wait for its answer
/// (single flight): a denial, or an admission that leaves nothing, is
/// cached again and answers them all; an admission with units left lets
/// the next waiting request ask, one at a time. So an over-limit key costs
/// about one store call per admission (two for a sliding window) however
/// many callers it has, instead of one per caller. A failure of the store
/// releases every waiting request to the store (and so to the fail
/// policy).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DenyCache {
    capacity: usize,
    max_key_len: usize,
}

impl Default for DenyCache {
    fn default() -> Self {
        Self::new()
    }
}

impl DenyCache {
    /// The number of keys cached unless configured otherwise.
    pub(crate) const DEFAULT_CAPACITY: usize = 10_000;
    /// The longest key cached unless configured otherwise, in bytes.
    pub(crate) const DEFAULT_MAX_KEY_LEN: usize = 256;

    /// A cache of 10,000 keys of up to 256 bytes.
    pub const fn new() -> Self {
        Self {
            capacity: Self::DEFAULT_CAPACITY,
            max_key_len: Self::DEFAULT_MAX_KEY_LEN,
        }
    }

    /// Caches at most `capacity` keys (0 turns the cache off).
    pub const fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// Caches no key longer than `bytes`.
    pub const fn max_key_len(mut self, bytes: usize) -> Self {
        self.max_key_len = bytes;
        self
    }

    /// The most keys cached, as set with [`capacity`](Self::capacity)
    /// (named apart from that setter), for showing the settings.
    pub const fn get_capacity(&self) -> usize {
        self.capacity
    }

    /// The longest key cached, in bytes, as set with
    /// [`max_key_len`](Self::max_key_len), for showing the settings.
    pub const fn get_max_key_len(&self) -> usize {
        self.max_key_len
    }
}

/// A cached denial, in nanoseconds of the limiter's local clock.
#[derive(Clone, Copy, Debug)]
struct Denial {
    until: u64,
    reset_at: u64,
    limit: u64,
    bound_by: usize,
}

struct Entry {
    key: Box<[u8]>,
    denial: Denial,
    /// Set once the denial has run out: who asks the store for the key.
    probe: Option<Probe>,
}

/// The single flight of an expired denial.
struct Probe {
    /// Wakes the requests waiting for the answer.
    notify: Arc<Notify>,
    /// A request is asking the store.
    claimed: bool,
}

/// What a request of cost 1 or more does about the cache.
pub(crate) enum Lookup {
    /// Denied from the cache.
    Denied(Decision),
    /// Asks the store; `claimed` when it asks for the requests that wait on
    /// its key, and must then [`DenyTable::settle`] (or drop a [`Claim`]).
    Ask { claimed: bool },
    /// Waits for the request that asks the store, then looks again.
    Wait(OwnedNotified),
}

/// How a claimed request's store call ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Settled {
    /// The store denied and the denial is cached: it answers the waiters.
    Cached,
    /// The store decided without a denial to cache: the next waiter asks.
    Decided,
    /// The store failed: every waiter asks it.
    Failed,
}

const SHARDS: usize = 16;

/// How long, at least, every unit request of a key is denied after an
/// admission under `limit` that left nothing (`remaining` 0), counted from
/// when the store decided; `None` when something remains, or when the
/// decision does not tell (a sliding window's next admission depends on
/// its two counts).
///
/// A fixed window admits nothing more until its bucket ends, at `reset`.
/// A token or leaky bucket (GCRA, `reset` the time until it is full again)
/// admits a unit again once it is `(L − 1)·T` from full: after `reset −
/// (L − 1)·T`. `T` is taken as `max(1 µs, ⌊W / L⌋ ns)`, at least the
/// interval a backend counting nanoseconds or microseconds computes, so the
/// time is never longer than the store's own denial would be.
pub(crate) fn exhausted_for(limit: &Limit, decision: &Decision) -> Option<Duration> {
    if !decision.allowed || decision.remaining > 0 || decision.fail_open || decision.fallback {
        return None;
    }
    let denied_for = match limit.strategy() {
        Strategy::FixedWindow => decision.reset,
        Strategy::TokenBucket | Strategy::LeakyBucket => {
            let l = u128::from(limit.limit());
            let interval = (limit.window().as_nanos() / l).max(1_000);
            let refill = u64::try_from(interval * (l - 1)).ok()?;
            decision.reset.checked_sub(Duration::from_nanos(refill))?
        }
        // A release frees a concurrency limit's units at any time.
        Strategy::SlidingWindow | Strategy::Concurrency => return None,
    };
    (!denied_for.is_zero()).then_some(denied_for)
}

/// The cache itself: sharded tables of denials keyed by the caller's key,
/// hashed with a randomly seeded hasher. The shards are allocated by the
/// first denial cached: a service may hold tens of thousands of limiters,
/// most of which never deny.
pub(crate) struct DenyTable {
    shards: OnceLock<Box<[Mutex<HashTable<Entry>>]>>,
    hasher: ahash::RandomState,
    per_shard: usize,
    max_key_len: usize,
}

impl DenyTable {
    pub(crate) fn new(settings: DenyCache) -> Self {
        Self {
            shards: OnceLock::new(),
            hasher: ahash::RandomState::new(),
            per_shard: settings.capacity.div_ceil(SHARDS),
            max_key_len: settings.max_key_len,
        }
    }

    /// The shard of `hash`; `None` before any denial was cached.
    fn shard(&self, hash: u64) -> Option<std::sync::MutexGuard<'_, HashTable<Entry>>> {
        let shards = self.shards.get()?;
        Some(Self::lock(shards, hash))
    }

    /// The shard of `hash`, allocating the shards first if need be.
    fn shard_for_insert(&self, hash: u64) -> std::sync::MutexGuard<'_, HashTable<Entry>> {
        let shards = self
            .shards
            .get_or_init(|| (0..SHARDS).map(|_| Mutex::new(HashTable::new())).collect());
        Self::lock(shards, hash)
    }

    fn lock(shards: &[Mutex<HashTable<Entry>>], hash: u64) -> std::sync::MutexGuard<'_, HashTable<Entry>> {
        // Entries are plain data: a panic elsewhere cannot leave one torn.
        shards[(hash >> 40) as usize % SHARDS]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The cached denial of `key` at `now`, if one is still running,
    /// without taking part in a single flight (a claim it makes is released
    /// at once, and it never waits): what the tests read the cache with.
    #[cfg(test)]
    pub(crate) fn get(&self, key: &[u8], now: u64) -> Option<Decision> {
        match self.lookup(key, now) {
            Lookup::Denied(decision) => Some(decision),
            Lookup::Ask { claimed: true } => {
                self.settle(key, Settled::Decided);
                None
            }
            _ => None,
        }
    }

    /// What a request of cost 1 or more for `key` at `now` does: take the
    /// cached denial, ask the store (claiming the key's single flight when
    /// its denial has just run out), or wait for the request that asks.
    pub(crate) fn lookup(&self, key: &[u8], now: u64) -> Lookup {
        if key.len() > self.max_key_len || self.per_shard == 0 {
            return Lookup::Ask { claimed: false };
        }
        let hash = self.hasher.hash_one(key);
        let Some(mut shard) = self.shard(hash) else {
            return Lookup::Ask { claimed: false };
        };
        let Ok(mut entry) = shard.find_entry(hash, |e| &*e.key == key) else {
            return Lookup::Ask { claimed: false };
        };
        let entry = entry.get_mut();
        let denial = entry.denial;
        if denial.until > now {
            let mut decision = Decision::new(
                false,
                denial.limit,
                0,
                Duration::from_nanos(denial.reset_at.saturating_sub(now)),
                Some(Duration::from_nanos(denial.until - now)),
            );
            decision.bound_by = denial.bound_by;
            return Lookup::Denied(decision);
        }
        match &mut entry.probe {
            None => {
                entry.probe = Some(Probe {
                    notify: Arc::new(Notify::new()),
                    claimed: true,
                });
                Lookup::Ask { claimed: true }
            }
            Some(probe) if !probe.claimed => {
                probe.claimed = true;
                Lookup::Ask { claimed: true }
            }
            // Registered under the lock: a settle that follows wakes it.
            Some(probe) => Lookup::Wait(probe.notify.clone().notified_owned()),
        }
    }

    /// Ends the single flight a [`Lookup::Ask`] claimed for `key`.
    pub(crate) fn settle(&self, key: &[u8], how: Settled) {
        let hash = self.hasher.hash_one(key);
        let Some(mut shard) = self.shard(hash) else {
            return;
        };
        let Ok(mut entry) = shard.find_entry(hash, |e| &*e.key == key) else {
            return;
        };
        match how {
            // `insert` has taken the probe and woken the waiters.
            Settled::Cached => {}
            Settled::Decided => {
                if let Some(probe) = &mut entry.get_mut().probe {
                    probe.claimed = false;
                    probe.notify.notify_one();
                }
            }
            Settled::Failed => {
                if let Some(probe) = &entry.get().probe {
                    probe.notify.notify_waiters();
                }
                entry.remove();
            }
        }
    }

    /// Remembers a denial the store made for a unit request of `key`, asked
    /// at `asked` (read before the request was sent, so the cached time
    /// never outlasts the store's own).
    ///
    /// Returns whether the denial was cached.
    pub(crate) fn insert(&self, key: &[u8], asked: u64, decision: &Decision) -> bool {
        match decision.retry_after {
            Some(retry) if !decision.allowed => self.cache(key, asked, retry, decision),
            _ => false,
        }
    }

    /// Remembers an admission of `key` under the single `limit` of its
    /// policy that left nothing for a unit request, asked at `asked`, as
    /// the denial that every unit request meets until the key has a unit
    /// again ([`exhausted_for`]): the requests waiting on the key's single
    /// flight are answered by it instead of asking the store one by one.
    ///
    /// Returns whether it was cached.
    pub(crate) fn insert_exhausted(
        &self,
        key: &[u8],
        asked: u64,
        decision: &Decision,
        limit: &Limit,
    ) -> bool {
        match exhausted_for(limit, decision) {
            Some(denied_for) => self.cache(key, asked, denied_for, decision),
            None => false,
        }
    }

    /// Caches `key` as denied for `denied_for` from `asked`, with the
    /// `reset`, limit and binding limit of the store's `decision`.
    fn cache(&self, key: &[u8], asked: u64, denied_for: Duration, decision: &Decision) -> bool {
        if key.len() > self.max_key_len || self.per_shard == 0 {
            return false;
        }
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let denial = Denial {
            until: asked.saturating_add(nanos(denied_for)),
            reset_at: asked.saturating_add(nanos(decision.reset)),
            limit: decision.limit,
            bound_by: decision.bound_by,
        };
        let hash = self.hasher.hash_one(key);
        let mut shard = self.shard_for_insert(hash);
        match shard.find_entry(hash, |e| &*e.key == key) {
            Ok(mut entry) => {
                let entry = entry.get_mut();
                entry.denial = denial;
                // The waiters of an expired denial take the new one.
                if let Some(probe) = entry.probe.take() {
                    probe.notify.notify_waiters();
                }
            }
            Err(_) => {
                if shard.len() >= self.per_shard {
                    shard.retain(|e| {
                        let keep = e.denial.until > asked || e.probe.as_ref().is_some_and(|p| p.claimed);
                        if let (false, Some(probe)) = (keep, &e.probe) {
                            probe.notify.notify_waiters();
                        }
                        keep
                    });
                    if shard.len() >= self.per_shard {
                        return false;
                    }
                }
                let hasher = &self.hasher;
                shard.insert_unique(
                    hash,
                    Entry {
                        key: key.into(),
                        denial,
                        probe: None,
                    },
                    |e| hasher.hash_one(&e.key),
                );
            }
        }
        true
    }

    /// Forgets `key`'s denial (its state changed by an operation); requests
    /// waiting on it ask the store.
    pub(crate) fn remove(&self, key: &[u8]) {
        let hash = self.hasher.hash_one(key);
        let Some(mut shard) = self.shard(hash) else {
            return;
        };
        if let Ok(entry) = shard.find_entry(hash, |e| &*e.key == key) {
            if let Some(probe) = &entry.get().probe {
                probe.notify.notify_waiters();
            }
            entry.remove();
        }
    }
    /// The number of cached keys, expired or not.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards.get().map_or(0, |shards| {
            shards
                .iter()
                .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).len())
                .sum()
        })
    }
}

/// A claimed single flight, released for the next waiter if its request is
/// dropped before the store answers.
pub(crate) struct Claim<'a> {
    table: &'a DenyTable,
    key: &'a [u8],
    armed: bool,
}

impl<'a> Claim<'a> {
    /// The claim a [`Lookup::Ask`] with `claimed` made.
    pub(crate) fn new(table: &'a DenyTable, key: &'a [u8]) -> Self {
        Self {
            table,
            key,
            armed: true,
        }
    }

    /// Ends the single flight.
    pub(crate) fn settle(mut self, how: Settled) {
        self.armed = false;
        self.table.settle(self.key, how);
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.table.settle(self.key, Settled::Decided);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use super::*;

    fn denied(retry_ms: u64) -> Decision {
        Decision::new(
            false,
            5,
            0,
            Duration::from_millis(retry_ms * 2),
            Some(Duration::from_millis(retry_ms)),
        )
    }

    #[test]
    fn the_shards_are_allocated_by_the_first_cached_denial() {
        let table = DenyTable::new(DenyCache::new());
        assert!(table.get(b"k", 0).is_none());
        table.remove(b"k");
        table.settle(b"k", Settled::Decided);
        assert!(table.shards.get().is_none(), "looking up allocates nothing");
        let mut admitted = denied(10);
        admitted.allowed = true;
        assert!(!table.insert(b"k", 0, &admitted));
        assert!(table.shards.get().is_none(), "an admission is not cached");
        assert!(table.insert(b"k", 0, &denied(10)));
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn a_denial_is_answered_until_its_time_is_up() {
        let table = DenyTable::new(DenyCache::new());
        table.insert(b"k", 1_000_000, &denied(10));
        let hit = table.get(b"k", 4_000_000).expect("cached");
        assert_eq!(hit.retry_after, Some(Duration::from_millis(7)));
        assert_eq!(hit.reset, Duration::from_millis(17));
        assert_eq!((hit.allowed, hit.remaining, hit.limit), (false, 0, 5));
        assert!(table.get(b"k", 11_000_000).is_none());
    }

    #[test]
    fn one_request_asks_the_store_when_a_denial_runs_out() {
        let table = DenyTable::new(DenyCache::new());
        let claimed = |lookup: Lookup| matches!(lookup, Lookup::Ask { claimed: true });
        let waits = |lookup: Lookup| matches!(lookup, Lookup::Wait(_));
        // A key never denied: every request asks, none waits.
        assert!(matches!(table.lookup(b"k", 0), Lookup::Ask { claimed: false }));
        table.insert(b"k", 1_000_000, &denied(10));
        // Run out: the first claims, the others wait.
        assert!(claimed(table.lookup(b"k", 11_000_000)));
        assert!(waits(table.lookup(b"k", 11_000_000)));
        // Admitted: the next claims, one at a time.
        table.settle(b"k", Settled::Decided);
        assert!(claimed(table.lookup(b"k", 11_000_001)));
        assert!(waits(table.lookup(b"k", 11_000_001)));
        // Denied again and cached: the waiters are answered, and woken.
        let Lookup::Wait(waiter) = table.lookup(b"k", 11_000_001) else {
            panic!("not waiting")
        };
        assert!(table.insert(b"k", 11_000_001, &denied(10)));
        table.settle(b"k", Settled::Cached);
        let mut waiter = std::pin::pin!(waiter);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(
            waiter.as_mut().poll(&mut cx).is_ready(),
            "the waiter was not woken"
        );
        assert!(matches!(table.lookup(b"k", 11_000_002), Lookup::Denied(_)));
        // A failure releases everyone: the entry is gone.
        assert!(claimed(table.lookup(b"k", 30_000_000)));
        let Lookup::Wait(waiter) = table.lookup(b"k", 30_000_000) else {
            panic!("not waiting")
        };
        table.settle(b"k", Settled::Failed);
        assert!(std::pin::pin!(waiter).poll(&mut cx).is_ready());
        assert_eq!(table.len(), 0);
        assert!(matches!(
            table.lookup(b"k", 30_000_000),
            Lookup::Ask { claimed: false }
        ));
        // A claim dropped unanswered passes to the next request.
        table.insert(b"k", 40_000_000, &denied(1));
        assert!(claimed(table.lookup(b"k", 42_000_000)));
        drop(Claim::new(&table, b"k"));
        assert!(claimed(table.lookup(b"k", 42_000_000)));
    }

    #[test]
    fn the_cache_holds_no_more_than_its_capacity_and_no_long_keys() {
        let settings = DenyCache::new().capacity(64).max_key_len(8);
        assert_eq!((settings.get_capacity(), settings.get_max_key_len()), (64, 8));
        let table = DenyTable::new(settings);
        for i in 0..10_000u32 {
            table.insert(&i.to_le_bytes(), 0, &denied(1_000));
        }
        assert!(table.len() <= 64, "{} entries", table.len());
        table.insert(b"longer than eight", 0, &denied(1_000));
        assert!(table.get(b"longer than eight", 1).is_none());
        // Once the entries expire, new keys find room again.
        table.insert(b"late", 2_000_000_000, &denied(1_000));
        assert!(table.get(b"late", 2_000_000_001).is_some());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        /// Against the pure decision functions, in nanosecond and
        /// microsecond ticks: after an admission that left nothing, a unit
        /// request at the same instant would be denied for `retry_after`;
        /// `exhausted_for` is never longer, and equal to it where the bound
        /// is exact (a fixed window, or a bucket whose interval is the one
        /// it assumes).
        #[test]
        fn an_exhausting_admission_is_a_denial_until_a_unit_is_back(
            strategy in proptest::sample::select(vec![
                Strategy::FixedWindow,
                Strategy::TokenBucket,
                Strategy::LeakyBucket,
            ]),
            limit in 1u64..40,
            window_us in proptest::prop_oneof![1u64..100, 1u64..5_000_000],
            extra_ns in proptest::prop_oneof![proptest::strategy::Just(0u64), 0u64..1_000],
            micros in proptest::bool::ANY,
            start in 0u64..10_000_000_000,
            // Gaps in hundredths of the interval W / L: a key spending
            // faster than it refills runs out.
            steps in proptest::collection::vec((1u64..6, 0u64..200), 1..200),
        ) {
            use crate::strategy::Tick;
            use crate::strategy;
            let window = Duration::from_nanos(window_us * 1_000 + extra_ns);
            let limit = Limit::new(strategy, limit, window).unwrap();
            let (tick, rate, tick_ns) = if micros {
                (Tick::Micros, limit.rate_micros(), 1_000)
            } else {
                (Tick::Nanos, limit.rate_nanos(), 1)
            };
            let assumed = (window.as_nanos() / u128::from(rate.limit)).max(1_000);
            let exact = strategy == Strategy::FixedWindow || assumed == u128::from(rate.interval * tick_ns);
            let mut now = start / tick_ns;
            let mut state = None;
            let interval_ns = u64::try_from(window.as_nanos()).unwrap() / rate.limit;
            for (cost, gap) in steps {
                now += gap * interval_ns / 100 / tick_ns;
                let (outcome, next) = strategy::decide(strategy, &rate, state, now, cost);
                state = next;
                let decision = Decision::from_outcome(outcome, rate.limit, tick);
                let got = exhausted_for(&limit, &decision).unwrap_or(Duration::ZERO);
                if !(decision.allowed && decision.remaining == 0) {
                    proptest::prop_assert_eq!(got, Duration::ZERO);
                    continue;
                }
                // A unit request at the same instant, not charged.
                let (unit, _) = strategy::decide(strategy, &rate, state, now, 1);
                proptest::prop_assert!(!unit.allowed);
                let denied_for = tick.duration(unit.retry_after.unwrap());
                proptest::prop_assert!(got <= denied_for, "{:?} cached, denied for {:?}", got, denied_for);
                if exact {
                    proptest::prop_assert_eq!(got, denied_for);
                }
            }
        }
    }

    #[test]
    fn only_an_admission_that_left_nothing_is_cached_as_exhausted() {
        let minute = Duration::from_secs(60);
        let fixed = Limit::new(Strategy::FixedWindow, 5, minute).unwrap();
        let sliding = Limit::new(Strategy::SlidingWindow, 5, minute).unwrap();
        let exhausted = Decision::new(true, 5, 0, Duration::from_secs(20), None);
        let table = DenyTable::new(DenyCache::new());
        assert!(!table.insert_exhausted(
            b"k",
            0,
            &Decision::new(true, 5, 1, Duration::from_secs(20), None),
            &fixed
        ));
        assert!(!table.insert_exhausted(b"k", 0, &exhausted, &sliding));
        let mut fail_open = exhausted;
        fail_open.fail_open = true;
        assert!(!table.insert_exhausted(b"k", 0, &fail_open, &fixed));
        assert_eq!(table.len(), 0);
        assert!(table.insert_exhausted(b"k", 1_000, &exhausted, &fixed));
        let hit = table.get(b"k", 2_000).expect("cached");
        assert_eq!(
            hit.retry_after,
            Some(Duration::from_secs(20) - Duration::from_nanos(1_000))
        );
        assert!((!hit.allowed && hit.remaining == 0 && hit.limit == 5));
    }

    #[test]
    fn admissions_and_denials_without_a_retry_are_not_cached() {
        let table = DenyTable::new(DenyCache::new());
        table.insert(b"a", 0, &Decision::new(true, 5, 4, Duration::ZERO, None));
        table.insert(b"b", 0, &Decision::new(false, 5, 0, Duration::ZERO, None));
        assert_eq!(table.len(), 0);
    }
}
