//! A sharded hash table of per-key strategy state.
//!
//! Each shard is a mutex around a `hashbrown` table, padded to its own cache
//! lines. A decision locks exactly one shard for the duration of one pure
//! strategy call (tens of nanoseconds), so decisions on the same key are
//! atomic and decisions on keys in different shards run in parallel. Keys are
//! hashed with a randomly seeded `ahash`, so clients cannot aim many keys at
//! one shard or one probe chain.
//!
//! Expired state is reclaimed in two ways, neither needing a call from the
//! user: a shard that grows to twice its size after its last sweep sweeps
//! itself before inserting (amortised O(1) per insert), and the background
//! janitor sweeps shards whose earliest expiry has passed.

use std::sync::{Mutex, MutexGuard, PoisonError};

use hashbrown::HashTable;

use super::stored_key::StoredKey;
use crate::clock::ClockHandle;
use crate::strategy::{clamp_time, Algorithm, Outcome, Rate};

/// Shards never sweep themselves below this many entries.
const MIN_SWEEP_LEN: usize = 64;

/// Sweeps only delete state that expired at least this long ago, so a clock
/// stepping back by up to this much can never bring back budget that deleted
/// state had used.
pub(crate) const CLOCK_STEP_TOLERANCE: u64 = 1_000_000_000;

struct Entry<S> {
    key: StoredKey,
    state: S,
}

struct ShardInner<S> {
    map: HashTable<Entry<S>>,
    /// Sweep before inserting once the shard holds this many entries.
    sweep_len: usize,
    /// No entry of this shard expires before this tick.
    earliest_expiry: u64,
}

#[repr(align(128))]
struct Shard<S> {
    inner: Mutex<ShardInner<S>>,
}

/// A sharded table holding the state of one strategy under one rate.
pub(crate) struct Table<A: Algorithm> {
    shards: Box<[Shard<A::State>]>,
    shard_mask: usize,
    hasher: ahash::RandomState,
    rate: Rate,
    clock: ClockHandle,
    reclaim: bool,
}

impl<A: Algorithm> Table<A> {
    /// A table of `shards` shards hashing keys with `hasher`. Tables that a
    /// compound decision locks together share one hasher, so a key falls in
    /// the same shard index of each.
    pub(crate) fn new(
        rate: Rate,
        clock: ClockHandle,
        shards: usize,
        reclaim: bool,
        hasher: ahash::RandomState,
    ) -> Self {
        let shards = shards.next_power_of_two().max(1);
        Self {
            shards: (0..shards)
                .map(|_| Shard {
                    inner: Mutex::new(ShardInner {
                        map: HashTable::new(),
                        sweep_len: MIN_SWEEP_LEN,
                        earliest_expiry: u64::MAX,
                    }),
                })
                .collect(),
            shard_mask: shards - 1,
            hasher,
            rate,
            clock,
            reclaim,
        }
    }

    fn lock(&self, index: usize) -> MutexGuard<'_, ShardInner<A::State>> {
        // A panic while holding a shard cannot leave an entry half-written
        // (strategies are pure), so a poisoned lock is still consistent.
        self.shards[index]
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The current clock reading in nanoseconds.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        self.clock.now_nanos()
    }

    /// The hasher of keys, shared by the tables a compound decision locks
    /// together.
    pub(crate) fn hasher(&self) -> &ahash::RandomState {
        &self.hasher
    }

    /// The hash of `key`, which picks both its shard and its slot.
    #[inline]
    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn shard_index(&self, hash: u64) -> usize {
        // hashbrown uses the low bits for the slot and the top 7 for tags.
        (hash >> 40) as usize & self.shard_mask
    }

    /// Applies one request for `key` at the clock's current time: runs the
    /// strategy under `rate` on the key's state and stores the state it
    /// returns. `rate` has the table's window; its limit may differ from the
    /// one the table was made with (a policy whose limit changed at run time
    /// keeps its table).
    #[inline]
    pub(crate) fn apply(&self, rate: &Rate, key: &[u8], cost: u64) -> Outcome {
        // Read the clock before locking: the read overlaps hashing, and the
        // critical section stays short. Two threads racing on one key may
        // then apply their decisions out of timestamp order by the length of
        // the race; strategies treat such a step back as "no time passed".
        let now = self.clock.now_nanos();
        let hash = self.hasher.hash_one(key);
        let mut shard = self.lock(self.shard_index(hash));
        match shard.map.find_entry(hash, |e| e.key.as_bytes() == key) {
            Ok(mut occupied) => {
                let before = occupied.get().state;
                let (outcome, next) = A::decide(rate, Some(before), now, cost);
                match next {
                    // Denied and peeked requests usually change nothing.
                    Some(state) if state == before => {}
                    Some(state) => {
                        occupied.get_mut().state = state;
                        let expiry = A::expires_at(&self.rate, &state);
                        shard.earliest_expiry = shard.earliest_expiry.min(expiry);
                    }
                    None => {
                        occupied.remove();
                    }
                }
                outcome
            }
            Err(_) => {
                let (outcome, next) = A::decide(rate, None, now, cost);
                if let Some(state) = next {
                    self.insert(&mut shard, hash, key, state, now);
                }
                outcome
            }
        }
    }

    /// Inserts state for a key that holds none, sweeping the shard first
    /// when it has doubled since its last sweep.
    fn insert(&self, shard: &mut ShardInner<A::State>, hash: u64, key: &[u8], state: A::State, now: u64) {
        if self.reclaim && shard.map.len() >= shard.sweep_len {
            self.sweep_shard(shard, now);
        }
        let expiry = A::expires_at(&self.rate, &state);
        shard.earliest_expiry = shard.earliest_expiry.min(expiry);
        let hasher = &self.hasher;
        shard.map.insert_unique(
            hash,
            Entry {
                key: StoredKey::new(key),
                state,
            },
            |e| hasher.hash_one(e.key.as_bytes()),
        );
    }

    /// Locks the shard that holds keys of `hash`, for a decision that reads
    /// and writes several tables under one lock scope.
    pub(crate) fn lock_shard_of(&self, hash: u64) -> LockedShard<'_, A> {
        LockedShard {
            table: self,
            shard: self.lock(self.shard_index(hash)),
            hash,
        }
    }

    /// Removes every entry that expired [`CLOCK_STEP_TOLERANCE`] before
    /// `now` and gives back memory when the shard has shrunk well below its
    /// capacity; returns the approximate bytes of table memory freed.
    ///
    /// The table shrinks once fewer than a quarter of its slots are used,
    /// to twice the entries left: a shard that keeps its size between
    /// sweeps is never reallocated, and one must lose half its entries
    /// again before the next shrink.
    ///
    /// `now` is clamped like the strategies' clock readings: state a
    /// decision still counts as live is never deleted.
    fn sweep_shard(&self, shard: &mut ShardInner<A::State>, now: u64) -> usize {
        let now = clamp_time(now).saturating_sub(CLOCK_STEP_TOLERANCE);
        let rate = &self.rate;
        let mut earliest = u64::MAX;
        shard.map.retain(|e| {
            let expiry = A::expires_at(rate, &e.state);
            earliest = earliest.min(expiry);
            expiry > now
        });
        // `earliest` may name a removed entry; it stays a valid lower bound.
        shard.earliest_expiry = earliest;
        let len = shard.map.len();
        shard.sweep_len = (len * 2).max(MIN_SWEEP_LEN);
        // Slots counted from the allocation: `capacity()` leaves out slots
        // that removed entries left as tombstones, which still take memory.
        let allocated = shard.map.allocation_size();
        let slots = allocated / (std::mem::size_of::<Entry<A::State>>() + 1);
        if slots <= (len * 4).max(MIN_SWEEP_LEN) {
            return 0;
        }
        let hasher = &self.hasher;
        shard
            .map
            .shrink_to(len * 2, |e| hasher.hash_one(e.key.as_bytes()));
        allocated.saturating_sub(shard.map.allocation_size())
    }

    /// Sweeps every shard whose earliest expiry has passed; returns the
    /// approximate bytes of table memory freed.
    pub(crate) fn sweep(&self) -> usize {
        let now = clamp_time(self.clock.now_nanos());
        let mut freed = 0;
        for index in 0..self.shards.len() {
            let mut shard = self.lock(index);
            if shard.earliest_expiry.saturating_add(CLOCK_STEP_TOLERANCE) <= now {
                freed += self.sweep_shard(&mut shard, now);
            }
        }
        freed
    }

    /// The number of slots the shards hold, used or not.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        (0..self.shards.len()).map(|i| self.lock(i).map.capacity()).sum()
    }

    /// The number of keys with stored state.
    pub(crate) fn len(&self) -> usize {
        (0..self.shards.len()).map(|i| self.lock(i).map.len()).sum()
    }
}

/// One table's shard, locked for a key's hash (see [`Table::lock_shard_of`]).
pub(crate) struct LockedShard<'a, A: Algorithm> {
    table: &'a Table<A>,
    shard: MutexGuard<'a, ShardInner<A::State>>,
    hash: u64,
}

impl<A: Algorithm> LockedShard<'_, A> {
    /// The state stored for `key`.
    pub(crate) fn get(&self, key: &[u8]) -> Option<A::State> {
        self.shard
            .map
            .find(self.hash, |e| e.key.as_bytes() == key)
            .map(|e| e.state)
    }

    /// Replaces the state of `key`, which held `before` (as [`Self::get`]
    /// returned it under this same lock), with `after`.
    pub(crate) fn set(&mut self, key: &[u8], before: Option<A::State>, after: Option<A::State>, now: u64) {
        let shard = &mut *self.shard;
        match (before, after) {
            (before, after) if before == after => {}
            (None, Some(state)) => self.table.insert(shard, self.hash, key, state, now),
            (Some(_), after) => {
                if let Ok(mut occupied) = shard.map.find_entry(self.hash, |e| e.key.as_bytes() == key) {
                    match after {
                        Some(state) => {
                            occupied.get_mut().state = state;
                            let expiry = A::expires_at(&self.table.rate, &state);
                            shard.earliest_expiry = shard.earliest_expiry.min(expiry);
                        }
                        None => {
                            occupied.remove();
                        }
                    }
                }
            }
            (None, None) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;
    use crate::strategy::TokenBucket;

    #[test]
    fn emptied_tables_shrink_and_steady_ones_keep_their_slots() {
        const SHARDS: usize = 4;
        let clock = ManualClock::new(Duration::from_secs(1_000));
        // One request per second per key: a key's state lasts one second.
        let rate = Rate::new(1, 1_000_000_000);
        let table = Table::<TokenBucket>::new(
            rate,
            ClockHandle::of(clock.clone()),
            SHARDS,
            true,
            ahash::RandomState::new(),
        );
        for i in 0..100_000u32 {
            table.apply(&rate, &i.to_le_bytes(), 1);
        }
        let full = table.capacity();
        assert!(full >= 100_000);

        // All but 1,000 keys expire (past the sweeps' clock-step tolerance).
        clock.advance(Duration::from_secs(3));
        for i in 0..1_000u32 {
            table.apply(&rate, &i.to_le_bytes(), 1);
        }
        let freed = table.sweep();
        assert_eq!(table.len(), 1_000);
        let shrunk = table.capacity();
        assert!(
            shrunk <= 4 * 1_000,
            "{shrunk} slots kept for 1,000 keys (from {full})"
        );
        assert!(freed >= (full - shrunk) * std::mem::size_of::<Entry<crate::strategy::GcraState>>());

        // The same keys stay active: sweeps neither shrink nor reallocate.
        for _ in 0..3 {
            clock.advance(Duration::from_millis(999));
            for i in 0..1_000u32 {
                table.apply(&rate, &i.to_le_bytes(), 1);
            }
            assert_eq!(table.sweep(), 0);
            assert_eq!(table.capacity(), shrunk);
        }

        // Everything expires: the tables hold no slots at all.
        clock.advance(Duration::from_secs(3));
        assert!(table.sweep() > 0);
        assert_eq!((table.len(), table.capacity()), (0, 0));
    }
}
