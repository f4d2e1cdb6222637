//! Sets of records kept per key in memory, beside a binding's rate tables:
//! a policy's unsettled holds. A sharded map from key to its set, each change made by
//! one of the pure functions in [`crate::strategy`] under its shard's lock;
//! the janitor sweeps the keys whose records have all expired (or that
//! hold none).

use std::sync::{Mutex, PoisonError};

use hashbrown::HashMap;

use super::janitor::Sweep;
use crate::clock::ClockHandle;
use crate::strategy::holds::HoldSet;

/// A set of records of one key.
pub(crate) trait KeySet: Default + Send + 'static {
    /// Whether the set holds nothing (the absent state).
    fn is_empty(&self) -> bool;
    /// The tick from which every record has expired.
    fn expires_at(&self) -> u64;
}

impl KeySet for HoldSet {
    fn is_empty(&self) -> bool {
        HoldSet::is_empty(self)
    }

    fn expires_at(&self) -> u64 {
        HoldSet::expires_at(self)
    }
}

/// One shard of [`KeySets`]: keys to their sets.
type Shard<S> = HashMap<Box<[u8]>, S, ahash::RandomState>;

/// The sets of every key, in nanoseconds of one clock.
pub(crate) struct KeySets<S> {
    shards: Box<[Mutex<Shard<S>>]>,
    hasher: ahash::RandomState,
    clock: ClockHandle,
}

impl<S: KeySet> KeySets<S> {
    /// No set yet, in `shards` shards (a power of two).
    pub(crate) fn new(clock: ClockHandle, shards: usize, hasher: ahash::RandomState) -> Self {
        let shards = (0..shards.max(1))
            .map(|_| Mutex::new(HashMap::with_hasher(hasher.clone())))
            .collect();
        Self {
            shards,
            hasher,
            clock,
        }
    }

    pub(crate) fn now(&self) -> u64 {
        self.clock.now_nanos()
    }

    fn shard(&self, key: &[u8]) -> std::sync::MutexGuard<'_, Shard<S>> {
        let hash = self.hasher.hash_one(key);
        let at = (hash >> 40) as usize & (self.shards.len() - 1);
        self.shards[at].lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on `key`'s set (empty when it has none) at the clock's
    /// now. A set left empty stays until the next sweep, so that a key
    /// recorded and taken in turn allocates nothing (an empty set answers
    /// as an absent one).
    pub(crate) fn apply<R>(&self, key: &[u8], f: impl FnOnce(&mut S, u64) -> R) -> R {
        let now = self.now();
        let mut shard = self.shard(key);
        if let Some(set) = shard.get_mut(key) {
            return f(set, now);
        }
        let mut set = S::default();
        let result = f(&mut set, now);
        if !set.is_empty() {
            shard.insert(key.into(), set);
        }
        result
    }

    /// Removes `key`'s set (a reset).
    pub(crate) fn clear(&self, key: &[u8]) {
        self.shard(key).remove(key);
    }
}

impl<S: KeySet + Sync> Sweep for KeySets<S> {
    /// Removes the keys whose records have all expired.
    fn sweep(&self) -> usize {
        let now = self.now();
        let mut freed = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            let before = shard.len();
            shard.retain(|_, set| set.expires_at() > now);
            freed += (before - shard.len()) * std::mem::size_of::<(Box<[u8]>, S)>();
        }
        freed
    }
}
