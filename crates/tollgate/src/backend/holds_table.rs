//! The unsettled holds of one in-memory binding ([estimates
//! settled](crate::_documentation::semantics#estimates-settled)), made
//! with the first hold: a service may hold tens of thousands of bindings
//! that never see one.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::janitor;
use super::key_sets::KeySets;
use crate::clock::ClockHandle;
use crate::strategy::holds::{HoldId, HoldRecord, HoldSet};

/// A binding's holds, kept across a policy's replacement as its blocks are.
pub(crate) struct Holds {
    sets: OnceLock<Arc<KeySets<HoldSet>>>,
    clock: ClockHandle,
    shards: usize,
    sweep_interval: Duration,
}

impl Holds {
    /// No hold yet; the table, when made, has `shards` shards on `clock`
    /// and is swept every `sweep_interval`.
    pub(crate) fn new(clock: ClockHandle, shards: usize, sweep_interval: Duration) -> Self {
        Self {
            sets: OnceLock::new(),
            clock,
            shards,
            sweep_interval,
        }
    }

    fn sets(&self) -> &KeySets<HoldSet> {
        self.sets.get_or_init(|| {
            let sets = Arc::new(KeySets::new(
                self.clock.clone(),
                self.shards,
                ahash::RandomState::new(),
            ));
            let weak = Arc::downgrade(&sets);
            janitor::register(weak, self.sweep_interval);
            sets
        })
    }

    /// Records `hold` for `key`.
    pub(crate) fn record(&self, key: &[u8], hold: HoldRecord) {
        self.sets().apply(key, |set, now| set.record(hold, now));
    }

    /// Takes the hold `id` of `key` out, when it is recorded and has not
    /// expired.
    pub(crate) fn take(&self, key: &[u8], id: HoldId) -> Option<HoldRecord> {
        let sets = self.sets.get()?;
        sets.apply(key, |set, now| set.take(id, now))
    }

    /// Forgets every hold of `key` (a reset: what they charged is gone).
    pub(crate) fn clear(&self, key: &[u8]) {
        if let Some(sets) = self.sets.get() {
            sets.clear(key);
        }
    }
}
