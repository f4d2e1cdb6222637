//! Locks that make an Envoy request's charge-then-refund of several
//! descriptors one step with respect to every other Envoy request of this
//! process: each `(resource, key)` hashes to one of a fixed set of async
//! locks, and a request holds the locks of all its descriptors, taken in
//! ascending order (so two requests never wait for each other in a cycle).

use std::hash::{BuildHasher, Hash, Hasher};

use tokio::sync::{Mutex, MutexGuard};

/// The number of locks: enough that unrelated keys rarely share one.
const STRIPES: usize = 256;

/// A fixed set of locks, picked by hashing.
pub(crate) struct Stripes {
    locks: Box<[Mutex<()>]>,
    hasher: std::collections::hash_map::RandomState,
}

impl Default for Stripes {
    fn default() -> Self {
        Self {
            locks: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            hasher: Default::default(),
        }
    }
}

impl Stripes {
    /// The lock index of `(resource, key)`.
    pub(crate) fn index(&self, resource: &str, key: &[u8]) -> usize {
        let mut h = self.hasher.build_hasher();
        resource.hash(&mut h);
        key.hash(&mut h);
        (h.finish() % STRIPES as u64) as usize
    }

    /// Takes the locks of `indices` (any order, repeats allowed) in
    /// ascending order; they are held until the guards are dropped.
    pub(crate) async fn lock(&self, mut indices: Vec<usize>) -> Vec<MutexGuard<'_, ()>> {
        indices.sort_unstable();
        indices.dedup();
        let mut guards = Vec::with_capacity(indices.len());
        for i in indices {
            guards.push(self.locks[i].lock().await);
        }
        guards
    }
}
