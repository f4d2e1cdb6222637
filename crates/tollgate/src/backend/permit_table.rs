//! The in-memory permits of one concurrency limit: a sharded map from key
//! to its [`PermitSet`], each operation one of the pure functions in
//! [`crate::strategy::permits`] under its shard's lock.

use std::sync::{Mutex, PoisonError};

use hashbrown::HashMap;

use super::janitor::Sweep;
use crate::clock::ClockHandle;
use crate::strategy::permits::{PermitOp, PermitOutcome, PermitSet};
use crate::strategy::Rate;

type Shard = HashMap<Box<[u8]>, PermitSet, ahash::RandomState>;

/// The permits of every key of one concurrency limit, in nanoseconds.
pub(crate) struct PermitTable {
    shards: Box<[Mutex<Shard>]>,
    hasher: ahash::RandomState,
    clock: ClockHandle,
    rate: Rate,
}

impl PermitTable {
    /// An empty table of `shards` shards (a power of two) for `rate`.
    pub(crate) fn new(rate: Rate, clock: ClockHandle, shards: usize, hasher: ahash::RandomState) -> Self {
        let shards = (0..shards.max(1))
            .map(|_| Mutex::new(HashMap::with_hasher(hasher.clone())))
            .collect();
        Self {
            shards,
            hasher,
            clock,
            rate,
        }
    }

    pub(crate) fn now(&self) -> u64 {
        self.clock.now_nanos()
    }

    /// The concurrency limit `L`.
    pub(crate) fn limit(&self) -> u64 {
        self.rate.limit
    }

    pub(crate) fn hasher(&self) -> &ahash::RandomState {
        &self.hasher
    }

    fn shard(&self, key: &[u8]) -> std::sync::MutexGuard<'_, Shard> {
        let hash = self.hasher.hash_one(key);
        let at = (hash >> 40) as usize & (self.shards.len() - 1);
        self.shards[at].lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies `op` to `key`'s permits now; a key left with none is
    /// removed.
    pub(crate) fn apply(&self, key: &[u8], op: PermitOp) -> PermitOutcome {
        let now = self.now();
        let mut shard = self.shard(key);
        if let Some(set) = shard.get_mut(key) {
            let outcome = op.apply(set, &self.rate, now);
            if set.is_empty() {
                shard.remove(key);
            }
            return outcome;
        }
        let mut set = PermitSet::default();
        let outcome = op.apply(&mut set, &self.rate, now);
        if !set.is_empty() {
            shard.insert(key.into(), set);
        }
        outcome
    }

    /// Frees every permit of `key` (a reset).
    pub(crate) fn clear(&self, key: &[u8]) {
        self.shard(key).remove(key);
    }

    /// The number of keys holding permits.
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }
}

impl Sweep for PermitTable {
    /// Removes the keys whose permits have all expired.
    fn sweep(&self) -> usize {
        let now = self.now();
        let mut freed = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            let before = shard.len();
            shard.retain(|_, set| set.expires_at() > now);
            freed += (before - shard.len()) * std::mem::size_of::<(Box<[u8]>, PermitSet)>();
        }
        freed
    }
}
