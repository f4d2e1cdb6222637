//! The local deny cache: denied-until times of over-limit keys.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use hashbrown::HashTable;

use crate::decision::Decision;

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
    pub const DEFAULT_CAPACITY: usize = 10_000;
    /// The longest key cached unless configured otherwise, in bytes.
    pub const DEFAULT_MAX_KEY_LEN: usize = 256;

    /// A cache of [`DEFAULT_CAPACITY`](Self::DEFAULT_CAPACITY) keys of up to
    /// [`DEFAULT_MAX_KEY_LEN`](Self::DEFAULT_MAX_KEY_LEN) bytes.
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
}

const SHARDS: usize = 16;

/// The cache itself: sharded tables of denials keyed by the caller's key,
/// hashed with a randomly seeded hasher.
pub(crate) struct DenyTable {
    shards: Box<[Mutex<HashTable<Entry>>]>,
    hasher: ahash::RandomState,
    per_shard: usize,
    max_key_len: usize,
}

impl DenyTable {
    pub(crate) fn new(settings: DenyCache) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashTable::new())).collect(),
            hasher: ahash::RandomState::new(),
            per_shard: settings.capacity.div_ceil(SHARDS),
            max_key_len: settings.max_key_len,
        }
    }

    fn shard(&self, hash: u64) -> std::sync::MutexGuard<'_, HashTable<Entry>> {
        // Entries are plain data: a panic elsewhere cannot leave one torn.
        self.shards[(hash >> 40) as usize % SHARDS]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The cached denial of `key` at `now`, if one is still running.
    pub(crate) fn get(&self, key: &[u8], now: u64) -> Option<Decision> {
        if key.len() > self.max_key_len || self.per_shard == 0 {
            return None;
        }
        let hash = self.hasher.hash_one(key);
        let mut shard = self.shard(hash);
        let entry = shard.find_entry(hash, |e| &*e.key == key).ok()?;
        let denial = entry.get().denial;
        if denial.until <= now {
            entry.remove();
            return None;
        }
        let mut decision = Decision::new(
            false,
            denial.limit,
            0,
            Duration::from_nanos(denial.reset_at.saturating_sub(now)),
            Some(Duration::from_nanos(denial.until - now)),
        );
        decision.bound_by = denial.bound_by;
        Some(decision)
    }

    /// Remembers a denial the store made for a unit request of `key`, asked
    /// at `asked` (read before the request was sent, so the cached time
    /// never outlasts the store's own).
    pub(crate) fn insert(&self, key: &[u8], asked: u64, decision: &Decision) {
        let Some(retry) = decision.retry_after else {
            return;
        };
        if decision.allowed || key.len() > self.max_key_len || self.per_shard == 0 {
            return;
        }
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let denial = Denial {
            until: asked.saturating_add(nanos(retry)),
            reset_at: asked.saturating_add(nanos(decision.reset)),
            limit: decision.limit,
            bound_by: decision.bound_by,
        };
        let hash = self.hasher.hash_one(key);
        let mut shard = self.shard(hash);
        match shard.find_entry(hash, |e| &*e.key == key) {
            Ok(mut entry) => entry.get_mut().denial = denial,
            Err(_) => {
                if shard.len() >= self.per_shard {
                    shard.retain(|e| e.denial.until > asked);
                    if shard.len() >= self.per_shard {
                        return;
                    }
                }
                let hasher = &self.hasher;
                shard.insert_unique(
                    hash,
                    Entry {
                        key: key.into(),
                        denial,
                    },
                    |e| hasher.hash_one(&e.key),
                );
            }
        }
    }

    /// Forgets `key`'s denial (its state changed by an operation).
    pub(crate) fn remove(&self, key: &[u8]) {
        let hash = self.hasher.hash_one(key);
        if let Ok(entry) = self.shard(hash).find_entry(hash, |e| &*e.key == key) {
            entry.remove();
        }
    }

    /// The number of cached keys, expired or not.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        (0..SHARDS)
            .map(|i| {
                self.shards[i]
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .len()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
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
    fn a_denial_is_answered_until_its_time_is_up() {
        let table = DenyTable::new(DenyCache::new());
        table.insert(b"k", 1_000_000, &denied(10));
        let hit = table.get(b"k", 4_000_000).expect("cached");
        assert_eq!(hit.retry_after, Some(Duration::from_millis(7)));
        assert_eq!(hit.reset, Duration::from_millis(17));
        assert_eq!((hit.allowed, hit.remaining, hit.limit), (false, 0, 5));
        assert!(table.get(b"k", 11_000_000).is_none());
        assert_eq!(table.len(), 0, "an expired entry leaves when read");
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

    #[test]
    fn admissions_and_denials_without_a_retry_are_not_cached() {
        let table = DenyTable::new(DenyCache::new());
        table.insert(b"a", 0, &Decision::new(true, 5, 4, Duration::ZERO, None));
        table.insert(b"b", 0, &Decision::new(false, 5, 0, Duration::ZERO, None));
        assert_eq!(table.len(), 0);
    }
}
