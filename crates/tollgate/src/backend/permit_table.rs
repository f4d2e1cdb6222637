//! A concurrency limit's permits in memory: each key's [`PermitSet`] in an
//! entry of its own, found through a sharded map, and kept by each permit
//! it holds, so that a permit's release and extension go straight to its
//! key's entry, with no second lookup of the key and no copy of it.
//!
//! An acquisition looks the key up and changes its set under the shard's
//! lock, then takes the entry's lock for the set. A held permit's release
//! or extension takes the entry's lock alone. An entry leaves its map only
//! under both locks (a reset, or the janitor's sweep of a key whose
//! permits have all expired), and its set is emptied as it leaves: a
//! permit that kept it finds no permit there, as it would in the map
//! (reset or expired), and no acquisition can reach it any more.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use hashbrown::HashTable;

use super::janitor::Sweep;
use super::stored_key::StoredKey;
use crate::clock::ClockHandle;
use crate::strategy::permits::{PermitOp, PermitOutcome, PermitSet};
use crate::strategy::Rate;

/// What every entry of a table applies an operation with.
struct Rules {
    /// `L`, and the `ttl` as the window, in nanoseconds.
    rate: Rate,
    clock: ClockHandle,
}

/// One key's permits, shared by its table's map and the permits it holds.
pub(crate) struct PermitEntry {
    /// Inline up to 15 bytes, as the rate tables store keys.
    key: StoredKey,
    rules: Arc<Rules>,
    set: Mutex<PermitSet>,
}

impl PermitEntry {
    /// The key whose permits these are.
    pub(crate) fn key(&self) -> &[u8] {
        self.key.as_bytes()
    }

    /// The concurrency limit `L`.
    pub(crate) fn limit(&self) -> u64 {
        self.rules.rate.limit
    }

    /// Applies `op` (a release or an extension of a permit held here) to
    /// the key's permits now; an entry reset or swept out of its table
    /// holds none.
    #[inline]
    pub(crate) fn apply(&self, op: PermitOp) -> PermitOutcome {
        let now = self.rules.clock.now_nanos();
        op.apply(&mut lock(&self.set), &self.rules.rate, now)
    }
}

/// One shard of a [`PermitTable`]: its keys' entries, by the key's hash.
type Shard = HashTable<Arc<PermitEntry>>;

/// The permits of every key of one concurrency limit.
pub(crate) struct PermitTable {
    shards: Box<[Mutex<Shard>]>,
    hasher: ahash::RandomState,
    rules: Arc<Rules>,
}

/// Locks `mutex`, whose data every holder leaves consistent (nothing it
/// guards is left half-changed by a panic).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl PermitTable {
    /// No permit yet, under `rate` (`L` and the `ttl` as its window, in
    /// nanoseconds of `clock`), in `shards` shards (a power of two).
    pub(crate) fn new(rate: Rate, clock: ClockHandle, shards: usize, hasher: ahash::RandomState) -> Self {
        Self {
            shards: (0..shards.max(1)).map(|_| Mutex::new(HashTable::new())).collect(),
            hasher,
            rules: Arc::new(Rules { rate, clock }),
        }
    }

    /// The concurrency limit `L`.
    pub(crate) fn limit(&self) -> u64 {
        self.rules.rate.limit
    }

    pub(crate) fn now(&self) -> u64 {
        self.rules.clock.now_nanos()
    }

    pub(crate) fn clock(&self) -> ClockHandle {
        self.rules.clock.clone()
    }

    pub(crate) fn hasher(&self) -> &ahash::RandomState {
        &self.hasher
    }

    /// Applies `op` to `key`'s permits now.
    pub(crate) fn apply(&self, key: &[u8], op: PermitOp) -> PermitOutcome {
        self.apply_keeping(key, op).0
    }

    /// Applies `op` to `key`'s permits now, and when it made a permit
    /// (an admitted acquisition of at least one unit), the key's entry,
    /// where that permit is released and extended.
    pub(crate) fn apply_keeping(
        &self,
        key: &[u8],
        op: PermitOp,
    ) -> (PermitOutcome, Option<Arc<PermitEntry>>) {
        let now = self.now();
        let hash = self.hasher.hash_one(key);
        let mut shard = lock(self.shard(hash));
        if let Some(entry) = shard.find(hash, |e| e.key.matches(key)) {
            let outcome = op.apply(&mut lock(&entry.set), &self.rules.rate, now);
            return (outcome, made(op, &outcome).then(|| Arc::clone(entry)));
        }
        // A set left empty stays until the next sweep, so that a key
        // acquired and released in turn allocates nothing (an empty set
        // answers as an absent one); one that stays empty is not kept.
        let mut set = PermitSet::default();
        let outcome = op.apply(&mut set, &self.rules.rate, now);
        if set.is_empty() {
            return (outcome, None);
        }
        let entry = Arc::new(PermitEntry {
            key: StoredKey::new(key),
            rules: Arc::clone(&self.rules),
            set: Mutex::new(set),
        });
        let kept = made(op, &outcome).then(|| Arc::clone(&entry));
        shard.insert_unique(hash, entry, |e| self.hasher.hash_one(e.key()));
        (outcome, kept)
    }

    fn shard(&self, hash: u64) -> &Mutex<Shard> {
        &self.shards[(hash >> 40) as usize & (self.shards.len() - 1)]
    }

    /// Frees every permit of `key` (a reset).
    pub(crate) fn clear(&self, key: &[u8]) {
        let hash = self.hasher.hash_one(key);
        let mut shard = lock(self.shard(hash));
        if let Ok(found) = shard.find_entry(hash, |e| e.key.matches(key)) {
            let (entry, _) = found.remove();
            *lock(&entry.set) = PermitSet::default();
        }
    }

    /// The number of keys holding an entry.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }
}

/// Whether `op`, answered `outcome`, made a permit.
fn made(op: PermitOp, outcome: &PermitOutcome) -> bool {
    matches!(op, PermitOp::Acquire { cost, .. } if cost > 0) && outcome.expires_in.is_some()
}

impl Sweep for PermitTable {
    /// Removes the keys whose permits have all expired.
    fn sweep(&self) -> usize {
        let now = self.now();
        let mut freed = 0;
        for shard in self.shards.iter() {
            lock(shard).retain(|entry| {
                let mut set = lock(&entry.set);
                if set.expires_at() > now {
                    return true;
                }
                *set = PermitSet::default();
                let heap = if entry.key.owns_heap() {
                    entry.key().len()
                } else {
                    0
                };
                freed += std::mem::size_of::<PermitEntry>() + heap;
                false
            });
        }
        freed
    }
}
