//! A limiter's leases: per key, the units this process holds, until when,
//! and how fast it spends them, in sharded tables keyed by the caller's
//! key (hashed with a randomly seeded hasher, bounded in size).

use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use hashbrown::HashTable;
use metrics::Counter;
use tokio::sync::futures::OwnedNotified;
use tokio::sync::Notify;

use super::Lease;
use crate::backend::{LeaseAsk, Leased};
use crate::decision::Decision;
use crate::error::BackendError;

const SHARDS: usize = 16;

/// The leases of one limiter.
pub(crate) struct LeaseTable {
    max_units: u64,
    max_age: Duration,
    /// `max_age` in the clock's nanoseconds.
    age: u64,
    /// Names this table's leases to the store.
    lessee: u64,
    /// Allocated by the first request: a service may hold tens of
    /// thousands of limiters.
    shards: OnceLock<Box<[Mutex<Shard>]>>,
    hasher: ahash::RandomState,
    per_shard: usize,
    decisions: Counter,
    returned: Counter,
}

/// One shard of the table.
#[derive(Default)]
struct Shard {
    entries: HashTable<Entry>,
    /// When a full shard may next be swept of idle keys: at most once per
    /// `max_age`, so a flood of new keys costs no scan per request.
    next_sweep: u64,
}

/// One key's lease and spending.
struct Entry {
    key: Box<[u8]>,
    /// Unspent units of the lease (0: none).
    units: u64,
    /// When the lease ends, in the clock's nanoseconds.
    ends: u64,
    /// When the request for the lease was sent.
    taken: u64,
    /// The store time before which its units may be given back.
    return_before: u64,
    /// The store's decision of the request that took the lease: its
    /// `remaining` is what the store had left after the lease.
    decision: Decision,
    /// The request asking the store for a lease of the key, which the key's
    /// other requests wait for.
    flight: Option<Arc<Notify>>,
    /// Until when the key's requests ask the store one by one, without a
    /// lease and without waiting for each other: the store last granted no
    /// lease (the limit is near or reached) or failed.
    plain_until: u64,
    /// The units spent during the current and the previous period of
    /// `max_age`, the current one starting at `period`.
    period: u64,
    curr: u64,
    prev: u64,
}

impl Entry {
    /// Brings the spending periods forward to `now`.
    fn roll(&mut self, now: u64, age: u64) {
        let gone = now.saturating_sub(self.period) / age;
        if gone > 0 {
            self.prev = if gone == 1 { self.curr } else { 0 };
            self.curr = 0;
            self.period = self.period.saturating_add(gone.saturating_mul(age));
        }
    }

    /// The units spent during the last `age`, estimated from the two
    /// periods as the sliding window estimates its count.
    fn spent(&self, now: u64, age: u64) -> u64 {
        let into = now.saturating_sub(self.period).min(age);
        let earlier = (u128::from(self.prev) * u128::from(age - into) / u128::from(age)) as u64;
        earlier.saturating_add(self.curr)
    }

    /// Whether the entry holds nothing worth keeping at `now`: no lease, no
    /// request asking, and no spending during the last `age`.
    fn idle(&self, now: u64, age: u64) -> bool {
        self.units == 0 && self.flight.is_none() && now.saturating_sub(self.period) >= age.saturating_mul(2)
    }
}

/// What a request of cost 1 or more does about the leases.
pub(crate) enum Take<'t> {
    /// Admitted from the key's lease, the one taken at the time given (in
    /// the clock's nanoseconds: what [`LeaseTable::put_back`] names it by).
    Spent(Decision, u64),
    /// Waits for the request asking the store for a lease of the key, then
    /// looks again.
    Wait(OwnedNotified),
    /// Asks the store.
    Ask(LeaseCall<'t>),
}

impl LeaseTable {
    pub(crate) fn new(settings: Lease, decisions: Counter, returned: Counter) -> Self {
        let hasher = ahash::RandomState::new();
        let age = u64::try_from(settings.max_age().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1);
        Self {
            max_units: settings.max_units(),
            max_age: settings.max_age(),
            age,
            lessee: hasher.hash_one((std::process::id(), std::ptr::from_ref(&hasher) as usize)),
            shards: OnceLock::new(),
            hasher,
            per_shard: Lease::MAX_KEYS / SHARDS,
            decisions,
            returned,
        }
    }

    fn lock(&self, hash: u64) -> std::sync::MutexGuard<'_, Shard> {
        let shards = self
            .shards
            .get_or_init(|| (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect());
        // Entries are plain data: a panic elsewhere cannot leave one torn.
        shards[(hash >> 40) as usize % SHARDS]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// What a request of `cost >= 1` units for `key` at `now` does: spend
    /// from the key's lease, wait for the request asking the store for
    /// one, or ask the store itself (for a lease when the key is spent on
    /// fast enough, giving back what an ended lease left).
    pub(crate) fn take<'t>(&'t self, key: &'t [u8], cost: u64, now: u64) -> Take<'t> {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.lock(hash);
        let age = self.age;
        let Shard { entries, next_sweep } = &mut *shard;
        let entry = match entries.find_entry(hash, |e| &*e.key == key) {
            Ok(entry) => entry.into_mut(),
            Err(absent) => {
                let entries = absent.into_table();
                if entries.len() >= self.per_shard && now >= *next_sweep {
                    entries.retain(|e| !e.idle(now, age));
                    *next_sweep = now.saturating_add(age);
                }
                if entries.len() < self.per_shard {
                    let hasher = &self.hasher;
                    entries.insert_unique(
                        hash,
                        Entry {
                            key: key.into(),
                            units: 0,
                            ends: 0,
                            taken: 0,
                            return_before: 0,
                            decision: Decision::new(false, 0, 0, Duration::ZERO, None),
                            flight: None,
                            plain_until: 0,
                            period: now,
                            curr: 0,
                            prev: 0,
                        },
                        |e| hasher.hash_one(&e.key),
                    );
                }
                // A key seen once takes nothing more than its cost.
                return Take::Ask(self.call(
                    key,
                    LeaseAsk::new(cost, 0, self.lessee, self.max_age),
                    now,
                    false,
                ));
            }
        };
        entry.roll(now, age);
        if entry.units >= cost && now < entry.ends {
            entry.units -= cost;
            entry.curr = entry.curr.saturating_add(cost);
            self.decisions.increment(1);
            let mut decision = entry.decision;
            decision.remaining = entry.units.saturating_add(entry.decision.remaining);
            decision.reset = entry
                .decision
                .reset
                .saturating_sub(Duration::from_nanos(now - entry.taken.min(now)));
            return Take::Spent(decision, entry.taken);
        }
        if let Some(flight) = &entry.flight {
            // Registered under the lock: the settling request wakes it.
            return Take::Wait(flight.clone().notified_owned());
        }
        let mut ask = LeaseAsk::new(cost, 0, self.lessee, self.max_age);
        if entry.units > 0 {
            // The lease ended or is too small: its units go back with this
            // call.
            ask = ask.returning(entry.units, entry.return_before);
            entry.units = 0;
        }
        if cost < self.max_units && now >= entry.plain_until {
            ask.want = (self.max_units - cost).min(entry.spent(now, age));
        }
        let flying = ask.want > 0;
        if flying {
            entry.flight = Some(Arc::new(Notify::new()));
        }
        Take::Ask(self.call(key, ask, now, flying))
    }

    fn call<'t>(&'t self, key: &'t [u8], ask: LeaseAsk, sent: u64, flying: bool) -> LeaseCall<'t> {
        LeaseCall {
            table: self,
            key,
            ask,
            sent,
            flying,
        }
    }

    /// Puts back `cost` units of `key` spent from the lease taken at
    /// `lease` ([`Take::Spent`]) for a request that was not made after all
    /// (another part of it was denied), while that lease still runs at
    /// `now`. Units of a lease ended or replaced since stay spent (at most
    /// their cost of under-admission, as any lease's unspent units).
    pub(crate) fn put_back(&self, key: &[u8], cost: u64, lease: u64, now: u64) {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.lock(hash);
        if let Ok(entry) = shard.entries.find_entry(hash, |e| &*e.key == key) {
            let entry = entry.into_mut();
            if entry.taken == lease && now < entry.ends {
                entry.units = entry.units.saturating_add(cost);
                entry.curr = entry.curr.saturating_sub(cost);
            }
        }
    }

    /// Ends `key`'s lease (an operation is about to change its state):
    /// the units it left and the store time before which they may be given
    /// back, when it had any.
    pub(crate) fn end(&self, key: &[u8]) -> Option<LeaseAsk> {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.lock(hash);
        let entry = shard
            .entries
            .find_entry(hash, |e| &*e.key == key)
            .ok()?
            .into_mut();
        self.end_entry(entry)
    }

    /// Ends `entry`'s lease: the call that gives back its unspent units,
    /// when it had any.
    fn end_entry(&self, entry: &mut Entry) -> Option<LeaseAsk> {
        entry.ends = 0;
        let units = std::mem::take(&mut entry.units);
        (units > 0)
            .then(|| LeaseAsk::new(0, 0, self.lessee, self.max_age).returning(units, entry.return_before))
    }

    /// Ends every lease: the keys with units left and the calls that give
    /// them back.
    pub(crate) fn end_all(&self) -> Vec<(Box<[u8]>, LeaseAsk)> {
        let mut out = Vec::new();
        let Some(shards) = self.shards.get() else {
            return out;
        };
        for shard in shards.iter() {
            let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            for entry in shard.entries.iter_mut() {
                if let Some(ask) = self.end_entry(entry) {
                    out.push((entry.key.clone(), ask));
                }
            }
        }
        out
    }

    /// Counts units given back.
    pub(crate) fn count_returned(&self, units: u64) {
        if units > 0 {
            self.returned.increment(units);
        }
    }

    /// The number of keys tracked, for tests.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards.get().map_or(0, |shards| {
            shards
                .iter()
                .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).entries.len())
                .sum()
        })
    }
}

/// A request on its way to the store for a lease: it records the answer
/// ([`LeaseCall::settle`]), and, dropped before that, lets the key's
/// waiting requests ask for themselves.
pub(crate) struct LeaseCall<'t> {
    table: &'t LeaseTable,
    key: &'t [u8],
    ask: LeaseAsk,
    /// When the request was sent, in the clock's nanoseconds.
    sent: u64,
    /// Whether the key's other requests wait for this one.
    flying: bool,
}

impl LeaseCall<'_> {
    /// What to ask the store.
    pub(crate) fn ask(&self) -> LeaseAsk {
        self.ask
    }

    /// Whether the key's other requests wait for this one's answer.
    pub(crate) fn flying(&self) -> bool {
        self.flying
    }

    /// Records the store's answer: the lease it granted, the units the
    /// request spent. Returns the request's decision, its `remaining`
    /// counting the lease's units.
    pub(crate) fn settle(mut self, result: Result<Leased, BackendError>) -> Result<Decision, BackendError> {
        let table = self.table;
        let hash = table.hasher.hash_one(self.key);
        let mut shard = table.lock(hash);
        let entry = shard
            .entries
            .find_entry(hash, |e| &*e.key == self.key)
            .ok()
            .map(|e| e.into_mut());
        if let Some(entry) = entry {
            if self.flying {
                if let Some(flight) = entry.flight.take() {
                    flight.notify_waiters();
                }
                self.flying = false;
                if result.as_ref().map_or(true, |leased| leased.extra == 0) {
                    // No lease now: the waiters, and the key's requests for
                    // a while, ask one by one instead of queueing behind
                    // each other.
                    entry.plain_until = self.sent.saturating_add(table.age);
                }
            }
            if let Ok(leased) = &result {
                if leased.decision.allowed {
                    entry.roll(self.sent, table.age);
                    entry.curr = entry.curr.saturating_add(self.ask.cost);
                }
                if leased.extra > 0 {
                    let life = leased.window_left.map_or(table.max_age, |w| w.min(table.max_age));
                    entry.units = leased.extra;
                    entry.taken = self.sent;
                    entry.ends = self
                        .sent
                        .saturating_add(u64::try_from(life.as_nanos()).unwrap_or(u64::MAX));
                    entry.return_before = leased.return_before;
                    entry.decision = leased.decision;
                }
            }
        }
        drop(shard);
        if result.is_ok() {
            table.count_returned(self.ask.returning);
        }
        result.map(|leased| {
            let mut decision = leased.decision;
            decision.remaining = decision.remaining.saturating_add(leased.extra);
            decision
        })
    }
}

impl Drop for LeaseCall<'_> {
    fn drop(&mut self) {
        if !self.flying {
            return;
        }
        let hash = self.table.hasher.hash_one(self.key);
        let mut shard = self.table.lock(hash);
        if let Ok(mut entry) = shard.entries.find_entry(hash, |e| &*e.key == self.key) {
            if let Some(flight) = entry.get_mut().flight.take() {
                flight.notify_waiters();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> LeaseTable {
        LeaseTable::new(
            Lease::new(64, Duration::from_millis(100)),
            Counter::noop(),
            Counter::noop(),
        )
    }

    #[test]
    fn a_flood_of_keys_is_bounded_and_idle_keys_make_room() {
        let table = table();
        for i in 0..(Lease::MAX_KEYS + Lease::MAX_KEYS / 4) {
            let key = format!("flood-{i}");
            assert!(matches!(table.take(key.as_bytes(), 1, 0), Take::Ask(_)));
        }
        let full = table.len();
        assert!(full <= Lease::MAX_KEYS && full > Lease::MAX_KEYS / 2, "{full}");
        // Two ages later the flood is idle: a new key is tracked again.
        let later = 200_000_001;
        assert!(matches!(table.take(b"new", 1, later), Take::Ask(_)));
        assert!(table.len() < full, "idle keys dropped");
    }

    #[test]
    fn a_key_spent_on_asks_for_a_lease_and_the_others_wait_for_it() {
        let table = table();
        let Take::Ask(first) = table.take(b"k", 1, 0) else {
            panic!("asks");
        };
        assert_eq!(first.ask().want, 0, "a key seen once leases nothing");
        let decision = Decision::new(true, 100, 99, Duration::from_secs(1), None);
        first
            .settle(Ok(Leased::new(decision, 0, None, u64::MAX)))
            .unwrap();
        let Take::Ask(second) = table.take(b"k", 1, 10) else {
            panic!("asks");
        };
        assert_eq!(second.ask().want, 1, "one unit spent during the last max_age");
        assert!(matches!(table.take(b"k", 1, 11), Take::Wait(_)));
        let leased = Decision::new(true, 100, 97, Duration::from_secs(1), None);
        let got = second.settle(Ok(Leased::new(leased, 1, None, u64::MAX))).unwrap();
        assert_eq!(got.remaining, 98, "the store's remaining and the lease's unit");
        let Take::Spent(spent, lease) = table.take(b"k", 1, 12) else {
            panic!("spent from the lease");
        };
        assert_eq!(spent.remaining, 97);
        // Put back while the lease runs, the unit is spent again.
        table.put_back(b"k", 1, lease, 13);
        let Take::Spent(again, _) = table.take(b"k", 1, 14) else {
            panic!("spent from the lease");
        };
        assert_eq!(again.remaining, 97, "the unit put back was the lease's");
        // Named by another lease, nothing is put back.
        table.put_back(b"k", 1, lease + 1, 15);
        assert!(
            matches!(table.take(b"k", 1, 16), Take::Ask(_)),
            "the lease is spent"
        );
    }
}
