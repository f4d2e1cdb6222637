//! Key-sharded async locks: what makes a read-decide-write on a store
//! without atomic scripts one step for every key, without one lock per key.

use std::hash::Hash;

use tokio::sync::{Mutex, MutexGuard};

/// A fixed set of async locks, one picked for each key by hashing it.
///
/// Keys that hash to the same lock wait for each other; with enough locks
/// unrelated keys rarely do, and memory stays bounded however many keys
/// clients send. The hasher is keyed at random per set (DoS-resistant: a
/// client cannot aim its keys at one lock). A holder of several locks takes
/// them with [`lock_all`](Self::lock_all), in ascending order, so two
/// holders never wait for each other in a cycle.
///
/// The [`StoreBackend`](crate::backend::store::StoreBackend) adapter holds one; a service
/// that needs several keys decided as one step in its process can hold
/// another.
#[derive(Debug)]
pub(crate) struct KeyLocks {
    locks: Box<[Mutex<()>]>,
    hasher: ahash::RandomState,
}

impl KeyLocks {
    /// The most locks a set holds.
    pub(crate) const MAX: usize = 1 << 20;

    /// `count` locks, rounded up to a power of two, between 1 and
    /// [`MAX`](Self::MAX).
    pub(crate) fn new(count: usize) -> Self {
        let count = count.clamp(1, Self::MAX).next_power_of_two();
        Self {
            locks: (0..count).map(|_| Mutex::new(())).collect(),
            hasher: ahash::RandomState::new(),
        }
    }

    /// How many locks the set holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.locks.len()
    }

    /// The index of the lock of `key` (any hashable value: bytes, or a
    /// tuple such as `(resource, key)`).
    pub(crate) fn index(&self, key: impl Hash) -> usize {
        self.hasher.hash_one(key) as usize & (self.locks.len() - 1)
    }

    /// Waits for the lock of `key`; it is held until the guard is dropped.
    pub(crate) async fn lock(&self, key: impl Hash) -> MutexGuard<'_, ()> {
        self.locks[self.index(key)].lock().await
    }

    /// Waits for the locks of `indices` (from [`index`](Self::index); any
    /// order, repeats allowed), taking them in ascending order; they are
    /// held until the guards are dropped.
    ///
    /// # Panics
    ///
    /// When an index is not below [`len`](Self::len).
    pub(crate) async fn lock_all(&self, mut indices: Vec<usize>) -> Vec<MutexGuard<'_, ()>> {
        indices.sort_unstable();
        indices.dedup();
        let mut guards = Vec::with_capacity(indices.len());
        for i in indices {
            guards.push(self.locks[i].lock().await);
        }
        guards
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_powers_of_two_within_bounds() {
        assert_eq!(KeyLocks::new(0).len(), 1);
        assert_eq!(KeyLocks::new(3).len(), 4);
        assert_eq!(KeyLocks::new(256).len(), 256);
        assert_eq!(KeyLocks::new(usize::MAX).len(), KeyLocks::MAX);
    }

    #[tokio::test]
    async fn a_key_waits_for_its_lock_and_locks_are_taken_in_order() {
        let locks = KeyLocks::new(64);
        let held = locks.lock(b"a".as_slice()).await;
        let index = locks.index(b"a".as_slice());
        assert!(locks.locks[index].try_lock().is_err(), "the key's lock is held");
        drop(held);
        // Repeats and any order: each lock once, ascending, all held.
        let guards = locks.lock_all(vec![5, 1, 5, 3]).await;
        assert_eq!(guards.len(), 3);
        for i in [1, 3, 5] {
            assert!(locks.locks[i].try_lock().is_err());
        }
        drop(guards);
        assert!(locks.locks[5].try_lock().is_ok());
    }
}
