//! The unsettled holds of one in-memory binding ([estimates
//! settled](crate::_documentation::semantics#estimates-settled)), made
//! with the first hold: a service may hold tens of thousands of bindings
//! that never see one, and an Envoy descriptor's limiter must stay within
//! a kilobyte (`tests/envoy_memory.rs`), so until then this is one word
//! (an `ArcSwapOption`, where a `OnceLock` would take two).

use std::sync::Arc;

use arc_swap::ArcSwapOption;

use super::janitor::{self, DEFAULT_SWEEP_INTERVAL};
use super::key_sets::KeySets;
use super::lazy;
use crate::clock::ClockHandle;
use crate::strategy::holds::{HoldId, HoldRecord, HoldSet};

/// The shards of a holds table: holds are rarer than decisions, and a
/// settle locks one shard briefly.
const SHARDS: usize = 16;

/// A binding's holds, kept across a policy's replacement as its blocks are.
#[derive(Default)]
pub(crate) struct Holds(ArcSwapOption<KeySets<HoldSet>>);

impl Holds {
    /// The table, made now if no hold made it before: it reads `clock` and
    /// is swept as the binding's tables are.
    fn sets(&self, clock: impl FnOnce() -> ClockHandle) -> Arc<KeySets<HoldSet>> {
        let (sets, made) = lazy::get_or_make(&self.0, || {
            KeySets::new(clock(), SHARDS, ahash::RandomState::new())
        });
        if made {
            janitor::register(
                Arc::downgrade(&sets) as std::sync::Weak<_>,
                DEFAULT_SWEEP_INTERVAL,
            );
        }
        sets
    }

    /// Records `hold` for `key`.
    pub(crate) fn record(&self, key: &[u8], hold: HoldRecord, clock: impl FnOnce() -> ClockHandle) {
        self.sets(clock).apply(key, |set, now| set.record(hold, now));
    }

    /// Takes the hold `id` of `key` out, when it is recorded and has not
    /// expired.
    pub(crate) fn take(&self, key: &[u8], id: HoldId) -> Option<HoldRecord> {
        let sets = self.0.load_full()?;
        sets.apply(key, |set, now| set.take(id, now))
    }

    /// Forgets every hold of `key` (a reset: what they charged is gone).
    pub(crate) fn clear(&self, key: &[u8]) {
        if let Some(sets) = self.0.load_full() {
            sets.clear(key);
        }
    }
}
