//! Blocked keys of one in-memory binding.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use hashbrown::HashMap;

/// The keys an operator blocked, with the tick each block ends.
///
/// Blocks are rare, so decisions look them up only while any exist: the
/// common path reads one counter that nothing writes. The map is allocated
/// by the first block: a service may hold tens of thousands of bindings
/// that never see one.
pub(crate) struct Blocks {
    active: AtomicUsize,
    map: Mutex<Option<Box<Map>>>,
}

type Map = HashMap<Box<[u8]>, u64, ahash::RandomState>;

impl Blocks {
    pub(crate) fn new() -> Self {
        Self {
            active: AtomicUsize::new(0),
            map: Mutex::new(None),
        }
    }

    /// Whether any key may be blocked.
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.active.load(Ordering::Acquire) != 0
    }

    fn map(&self) -> std::sync::MutexGuard<'_, Option<Box<Map>>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The end of `key`'s block when it is still running at `now`.
    pub(crate) fn until(&self, key: &[u8], now: u64) -> Option<u64> {
        let mut map = self.map();
        let map = map.as_mut()?;
        match map.get(key) {
            Some(&until) if until > now => Some(until),
            Some(_) => {
                map.remove(key);
                self.active.store(map.len(), Ordering::Release);
                None
            }
            None => None,
        }
    }

    /// Blocks `key` until `until`, or lifts its block (`None`); drops
    /// blocks that ended before `now`.
    pub(crate) fn set(&self, key: &[u8], until: Option<u64>, now: u64) {
        let mut map = self.map();
        let map = map.get_or_insert_with(|| Box::new(HashMap::with_hasher(ahash::RandomState::new())));
        map.retain(|_, end| *end > now);
        match until {
            Some(until) if until > now => {
                map.insert(key.into(), until);
            }
            _ => {
                map.remove(key);
            }
        }
        self.active.store(map.len(), Ordering::Release);
    }
}
