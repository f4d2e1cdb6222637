//! Blocked keys of one in-memory binding.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};

use arc_swap::ArcSwapOption;
use hashbrown::HashMap;

use super::lazy;

/// The keys an operator blocked, with the tick each block ends.
///
/// Blocks are rare, so decisions look them up only while any exist: the
/// common path reads one counter that nothing writes. The map is allocated
/// by the first block: a service may hold tens of thousands of bindings
/// that never see one, so until then blocks take twelve bytes.
pub(crate) struct Blocks {
    /// How many keys are blocked (at most `u32::MAX` counted: only whether
    /// it is zero is read).
    active: AtomicU32,
    map: ArcSwapOption<Mutex<Map>>,
}

type Map = HashMap<Box<[u8]>, u64, ahash::RandomState>;

impl Blocks {
    pub(crate) fn new() -> Self {
        Self {
            active: AtomicU32::new(0),
            map: ArcSwapOption::empty(),
        }
    }

    /// Whether any key may be blocked.
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.active.load(Ordering::Acquire) != 0
    }

    /// The end of `key`'s block when it is still running at `now`.
    pub(crate) fn until(&self, key: &[u8], now: u64) -> Option<u64> {
        let map = self.map.load_full()?;
        let mut map = map.lock().unwrap_or_else(PoisonError::into_inner);
        match map.get(key) {
            Some(&until) if until > now => Some(until),
            Some(_) => {
                map.remove(key);
                self.active
                    .store(u32::try_from(map.len()).unwrap_or(u32::MAX), Ordering::Release);
                None
            }
            None => None,
        }
    }

    /// Blocks `key` until `until`, or lifts its block (`None`); drops
    /// blocks that ended before `now`.
    pub(crate) fn set(&self, key: &[u8], until: Option<u64>, now: u64) {
        let (map, _) = lazy::get_or_make(&self.map, || {
            Mutex::new(HashMap::with_hasher(ahash::RandomState::new()))
        });
        let mut map = map.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|_, end| *end > now);
        match until {
            Some(until) if until > now => {
                map.insert(key.into(), until);
            }
            _ => {
                map.remove(key);
            }
        }
        self.active
            .store(u32::try_from(map.len()).unwrap_or(u32::MAX), Ordering::Release);
    }
}
