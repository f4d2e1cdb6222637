//! Holds on a custom store ([estimates
//! settled](crate::_documentation::semantics#estimates-settled)): a key's
//! unsettled holds are kept under its first state key followed by
//! `:holds`, read and written under the key's one lock with its states.

use super::{unblocked, Store, StoreBinding};
use crate::backend::codec::{decode_holds, encode_holds};
use crate::backend::Settled;
use crate::decision::Decision;
use crate::error::BackendError;
use crate::policy::MAX_LIMITS;
use crate::strategy::holds::{self, HoldId, HoldRecord, HoldSet};
use crate::strategy::{self, Tick};

impl<S: Store> StoreBinding<S> {
    /// Decides `estimate` units for `key` and, admitted with at least one
    /// unit, records the hold `id` with the decision's time, all under
    /// the key's lock ([`Call::Hold`](crate::backend::Call::Hold)).
    pub(super) async fn run_hold(
        &self,
        key: &[u8],
        id: HoldId,
        estimate: u64,
    ) -> Result<Decision, BackendError> {
        let (limits, tick) = (&self.limits, self.shared.tick);
        let keys = self.keys(key);
        let _guard = self.shared.locks.lock(&keys[0]).await;
        let (decision, now) = self
            .update_locked(&keys, None, |before, after, now, _| {
                let n = before.len();
                let states = super::states_of(before);
                if let Some(decision) = super::blocked(limits, before, &states[..n], now, tick) {
                    return (decision, now);
                }
                let mut next = [None; MAX_LIMITS];
                let compound = strategy::decide_all(limits, &states[..n], &mut next[..n], now, estimate);
                unblocked(after, next);
                (Decision::from_compound(compound, limits, tick), now)
            })
            .await?;
        if decision.allowed && estimate > 0 {
            let hold = HoldRecord::taken(id, estimate, now, limits);
            let stored = holds_key(&keys[0]);
            let mut set = self.read_holds(&stored).await?;
            set.record(hold, now);
            self.write_holds(&stored, &set, now).await?;
        }
        Ok(decision)
    }

    /// Settles the hold `id` of `key` with `used` units, once, under the
    /// key's lock ([`Call::Settle`](crate::backend::Call::Settle)).
    pub(super) async fn run_settle(
        &self,
        key: &[u8],
        id: HoldId,
        used: u64,
    ) -> Result<Settled, BackendError> {
        let (limits, tick) = (&self.limits, self.shared.tick);
        let keys = self.keys(key);
        let guard = self.shared.locks.lock(&keys[0]).await;
        let stored = holds_key(&keys[0]);
        let mut set = self.read_holds(&stored).await?;
        let now = strategy::clamp_time(tick.from_nanos(self.shared.clock.now_nanos()));
        let taken = set.take(id, now);
        self.write_holds(&stored, &set, now).await?;
        let Some(taken) = taken else {
            // No hold: a peek, as a decision of cost 0 answers it (a
            // blocked key's denial included).
            drop(guard);
            return Ok(Settled::new(false, self.run(key, 0, false).await?));
        };
        let decision = self
            .update_locked(&keys, None, |before, after, now, _| {
                let n = before.len();
                let states = super::states_of(before);
                let mut next = [None; MAX_LIMITS];
                let compound = holds::settle_all(limits, &states[..n], &mut next[..n], now, &taken, used);
                for (record, state) in after.iter_mut().zip(next) {
                    record.state = state;
                }
                Decision::from_compound(compound, limits, tick)
            })
            .await?;
        Ok(Settled::new(true, decision))
    }

    /// Forgets every hold of `key` (a reset).
    pub(super) async fn forget_holds(&self, key: &[u8]) -> Result<(), BackendError> {
        let keys = self.keys(key);
        let _guard = self.shared.locks.lock(&keys[0]).await;
        self.shared.store.delete(&holds_key(&keys[0])).await
    }

    async fn read_holds(&self, stored: &[u8]) -> Result<HoldSet, BackendError> {
        match self.shared.store.get(stored).await? {
            Some(bytes) => decode_holds(&bytes),
            None => Ok(HoldSet::default()),
        }
    }

    /// Writes `set` under `stored`, expiring with its last hold; deletes
    /// it when empty.
    async fn write_holds(&self, stored: &[u8], set: &HoldSet, now: u64) -> Result<(), BackendError> {
        if set.is_empty() {
            return self.shared.store.delete(stored).await;
        }
        let ttl = set.expires_at().saturating_sub(now).max(1);
        let ttl = Tick::duration(self.shared.tick, ttl);
        self.shared.store.set(stored, encode_holds(set), ttl).await
    }
}

/// Where the holds of the key whose first state key is `first` are kept.
fn holds_key(first: &[u8]) -> Vec<u8> {
    [first, b":holds"].concat()
}
