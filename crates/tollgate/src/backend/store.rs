//! Custom stores: implement [`Store`] for your own storage and use it through
//! [`StoreBackend`].
//!
//! The adapter runs each decision as get → decide → set (or delete) while
//! holding one of a fixed number of key-sharded async locks, so decisions on
//! the same key made **through one `StoreBackend`** never interleave, and
//! memory does not grow with the number of keys. A compound policy's limits
//! are read, decided together and written under the one lock of the key. Atomicity across processes
//! sharing the same storage is a property of the store, not of this adapter:
//! two processes each running a `StoreBackend` over a plain key-value store
//! can race between their get and set. Use a backend with server-side atomic
//! decisions (such as the Redis backend) for shared limits.

mod holds;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::codec::{decode_permits, decode_record, encode_permits, encode_record, Record};
use super::key_locks::KeyLocks;
use super::keys::{namespace, CompoundKeys};
use super::{
    Answer, Backend, Binding, Call, Capabilities, LeaseAsk, Leased, Permitted, Receipt, Reserved, Scope,
};
use crate::clock::{Clock, SharedClock, SystemClock};
use crate::decision::Decision;
use crate::error::{BackendError, Error};
use crate::operation::Operation;
use crate::policy::MAX_LIMITS;
use crate::strategy::permits::{PermitOp, PermitSet};
use crate::strategy::Tick;
use crate::strategy::{self, LimitRate, State, Strategy};

/// The number of key-sharded locks per adapter unless configured otherwise.
pub(crate) const DEFAULT_LOCKS: usize = 1024;

/// A key-value store with expiry, the minimal shape the adapter needs.
///
/// Keys are the byte strings of the [key
/// layout](crate::_documentation::semantics_notes#key-layout); values are
/// opaque bytes (a [`Record`], read with
/// [`decode_record`]).
pub trait Store: Send + Sync + 'static {
    /// Reads the value stored under `key`, `None` when absent or expired.
    fn get(&self, key: &[u8]) -> impl Future<Output = Result<Option<Vec<u8>>, BackendError>> + Send;

    /// Stores `value` under `key`, expiring after `ttl` (always at least 1ns).
    fn set(
        &self,
        key: &[u8],
        value: Vec<u8>,
        ttl: Duration,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Deletes `key`; deleting an absent key is not an error.
    fn delete(&self, key: &[u8]) -> impl Future<Output = Result<(), BackendError>> + Send;
}

/// A shared store is a store: several adapters (standing for several
/// processes) can keep state in one.
impl<S: Store> Store for Arc<S> {
    fn get(&self, key: &[u8]) -> impl Future<Output = Result<Option<Vec<u8>>, BackendError>> + Send {
        S::get(self, key)
    }

    fn set(
        &self,
        key: &[u8],
        value: Vec<u8>,
        ttl: Duration,
    ) -> impl Future<Output = Result<(), BackendError>> + Send {
        S::set(self, key, value, ttl)
    }

    fn delete(&self, key: &[u8]) -> impl Future<Output = Result<(), BackendError>> + Send {
        S::delete(self, key)
    }
}

/// What every binding of one adapter shares.
struct Shared<S> {
    store: Arc<S>,
    locks: Arc<KeyLocks>,
    clock: SharedClock,
    tick: Tick,
}

impl<S> Clone for Shared<S> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            locks: self.locks.clone(),
            clock: self.clock.clone(),
            tick: self.tick,
        }
    }
}

/// Runs the strategies on top of a custom [`Store`].
///
/// Clones share the store and the locks.
pub struct StoreBackend<S> {
    shared: Shared<S>,
}

impl<S> Clone for StoreBackend<S> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<S: Store> StoreBackend<S> {
    /// An adapter over `store` on the system clock with 1,024
    /// locks and nanosecond ticks.
    pub fn new(store: S) -> Self {
        Self {
            shared: Shared {
                store: Arc::new(store),
                locks: Arc::new(KeyLocks::new(DEFAULT_LOCKS)),
                clock: Arc::new(SystemClock),
                tick: Tick::Nanos,
            },
        }
    }

    /// Uses `clock` instead of the system clock.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.shared.clock = Arc::new(clock);
        self
    }

    /// Uses `locks` key-sharded locks (rounded up to a power of two, at most
    /// 2^20).
    pub fn locks(mut self, count: usize) -> Self {
        self.shared.locks = Arc::new(KeyLocks::new(count));
        self
    }

    /// Counts time in `tick`s (microseconds suit stores whose numbers are
    /// doubles).
    pub fn tick(mut self, tick: Tick) -> Self {
        self.shared.tick = tick;
        self
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.shared.store
    }
}

impl<S: Store> Backend for StoreBackend<S> {
    type Binding = StoreBinding<S>;

    /// Everything but one step of several parts, awaited.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            together: false,
            ..Capabilities::all(false)
        }
    }

    fn bind(&self, scope: &Scope<'_>) -> Result<StoreBinding<S>, Error> {
        // Policies have windows of at least 1 µs, at least one tick here.
        let limits = scope.policy.limits();
        let rates = scope.policy.limit_rates(self.shared.tick);
        let layout = match scope.policy.single() {
            Some(limit) => Layout::Single(namespace(scope.prefix, scope.resource, limit.strategy())),
            None => Layout::Compound(CompoundKeys::new(scope.prefix, scope.resource, limits)),
        };
        Ok(StoreBinding {
            shared: self.shared.clone(),
            layout,
            limits: rates.into_boxed_slice(),
        })
    }
}

/// Where a binding's state keys live.
enum Layout {
    /// One limit: its namespace followed by the caller's key.
    Single(Vec<u8>),
    /// Several limits: one key each, all in one hash slot.
    Compound(CompoundKeys),
}

/// One policy served by a [`StoreBackend`].
pub struct StoreBinding<S> {
    shared: Shared<S>,
    layout: Layout,
    limits: Box<[LimitRate]>,
}

impl<S: Store> StoreBinding<S> {
    fn keys(&self, key: &[u8]) -> Vec<Vec<u8>> {
        match &self.layout {
            Layout::Single(namespace) => {
                let mut full = Vec::with_capacity(namespace.len() + key.len());
                full.extend_from_slice(namespace);
                full.extend_from_slice(key);
                vec![full]
            }
            Layout::Compound(keys) => (0..keys.len()).map(|i| keys.key(i, key)).collect(),
        }
    }

    /// Runs `f` on the records of every limit of `key` under the key's one
    /// lock and writes back the records it changed. `f` gets the records
    /// before and fills the records after.
    async fn update<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(&[Record], &mut [Record], u64) -> R,
    ) -> Result<R, BackendError> {
        self.update_leasing(key, None, |before, after, now, _| f(before, after, now))
            .await
    }

    /// [`Self::update`] for a request of `lessee` (its number and how long
    /// it counts, in ticks), when there is one: counts it among the key's
    /// lessees, under the key's lock, and gives `f` the number of lessees
    /// (1 without one).
    async fn update_leasing<R>(
        &self,
        key: &[u8],
        lessee: Option<(u64, u64)>,
        f: impl FnOnce(&[Record], &mut [Record], u64, u64) -> R,
    ) -> Result<R, BackendError> {
        let keys = self.keys(key);
        // All of a key's limits share the lock of its first state key.
        let _guard = self.shared.locks.lock(&keys[0]).await;
        self.update_locked(&keys, lessee, f).await
    }

    /// [`Self::update_leasing`] on the state keys `keys`, whose lock the
    /// caller holds.
    async fn update_locked<R>(
        &self,
        keys: &[Vec<u8>],
        lessee: Option<(u64, u64)>,
        f: impl FnOnce(&[Record], &mut [Record], u64, u64) -> R,
    ) -> Result<R, BackendError> {
        let shared = &self.shared;
        let n = keys.len();
        let lessees = match lessee {
            Some((id, age)) => self.count_lessee(&keys[0], id, age).await?,
            None => 1,
        };
        let mut before = [Record::default(); MAX_LIMITS];
        for (i, full) in keys.iter().enumerate() {
            if let Some(bytes) = shared.store.get(full).await? {
                before[i] = decode_record(&bytes)?;
            }
        }
        // Clamped as the strategies clamp it, so the expiries below measure
        // from the time the decision used.
        let now = strategy::clamp_time(shared.tick.from_nanos(shared.clock.now_nanos()));
        let mut after = before;
        let result = f(&before[..n], &mut after[..n], now, lessees);
        for (i, full) in keys.iter().enumerate() {
            if after[i] == before[i] {
                continue;
            }
            match encode_record(&after[i]) {
                Some(value) => {
                    let state_end = after[i]
                        .state
                        .map_or(0, |state| strategy::expires_at(&self.limits[i].rate, &state));
                    let end = state_end.max(after[i].blocked_until.unwrap_or(0));
                    let ttl = end.saturating_sub(now).max(1);
                    shared.store.set(full, value, shared.tick.duration(ttl)).await?;
                }
                None if before[i] != Record::default() => shared.store.delete(full).await?,
                None => {}
            }
        }
        Ok(result)
    }

    /// Counts lessee `id` among the processes leasing the state key
    /// `first` for the next `age` ticks, in a record beside it
    /// (`{first}:lessees`, 16 bytes per process, each dropped when its
    /// time is up), and returns how many there are, `id` included.
    async fn count_lessee(&self, first: &[u8], id: u64, age: u64) -> Result<u64, BackendError> {
        let shared = &self.shared;
        let now = strategy::clamp_time(shared.tick.from_nanos(shared.clock.now_nanos()));
        let mut record = first.to_vec();
        record.extend_from_slice(b":lessees");
        let stored = shared.store.get(&record).await?.unwrap_or_default();
        let mut kept: Vec<u8> = Vec::with_capacity(stored.len() + 16);
        for entry in stored.chunks_exact(16) {
            let (who, until) = entry.split_at(8);
            let who = u64::from_le_bytes(who.try_into().unwrap_or_default());
            let until = u64::from_le_bytes(until.try_into().unwrap_or_default());
            if who != id && until > now {
                kept.extend_from_slice(entry);
            }
        }
        kept.extend_from_slice(&id.to_le_bytes());
        kept.extend_from_slice(&now.saturating_add(age).to_le_bytes());
        let count = (kept.len() / 16) as u64;
        shared
            .store
            .set(&record, kept, shared.tick.duration(age.max(1)))
            .await?;
        Ok(count)
    }

    async fn run_lease(&self, key: &[u8], ask: LeaseAsk) -> Result<Leased, BackendError> {
        let limits = &self.limits;
        let tick = self.shared.tick;
        let age = tick.from_nanos(u64::try_from(ask.max_age.as_nanos()).unwrap_or(u64::MAX));
        let lessee = (ask.want > 0).then_some((ask.lessee, age));
        self.update_leasing(key, lessee, |before, after, now, lessees| {
            let n = before.len();
            let mut states = states_of(before);
            strategy::give_back(limits, &mut states[..n], now, ask.returning, ask.return_before);
            if let Some(decision) = blocked(limits, before, &states[..n], now, tick) {
                // Nothing is charged or leased; the units given back stay
                // given back, the block kept.
                for (record, state) in after.iter_mut().zip(&states[..n]) {
                    record.state = *state;
                }
                return Leased::new(decision, 0, None, u64::MAX);
            }
            let mut next = [None; MAX_LIMITS];
            let leased = strategy::lease_all(
                limits,
                &states[..n],
                &mut next[..n],
                now,
                ask.cost,
                ask.want,
                lessees,
            );
            let returned_before = strategy::return_before(limits, &next[..n]);
            unblocked(after, next);
            let decision = Decision::from_compound(leased.compound, limits, tick);
            Leased::new(
                decision,
                leased.extra,
                leased
                    .window_end
                    .map(|end| tick.duration(end.saturating_sub(now))),
                returned_before,
            )
        })
        .await
    }

    async fn run_reserve(
        &self,
        key: &[u8],
        cost: u64,
        max_delay: Duration,
    ) -> Result<Reserved, BackendError> {
        let limits = &self.limits;
        let tick = self.shared.tick;
        let max_delay = tick.from_nanos(u64::try_from(max_delay.as_nanos()).unwrap_or(u64::MAX));
        self.update(key, |before, after, now| {
            let n = before.len();
            let states = states_of(before);
            if let Some(decision) = blocked(limits, before, &states[..n], now, tick) {
                return Reserved::new(decision, Duration::ZERO, None);
            }
            let mut next = [None; MAX_LIMITS];
            let reserved = strategy::reserve_all(limits, &states[..n], &mut next[..n], now, cost, max_delay);
            unblocked(after, next);
            let decision = Decision::from_compound(reserved.compound, limits, tick);
            if reserved.beyond_max_delay {
                return Reserved::beyond_max_delay(decision);
            }
            let receipt = (decision.allowed && cost > 0)
                .then(|| Receipt::new(cost, now.saturating_add(reserved.delay), &next[..n]));
            Reserved::new(decision, tick.duration(reserved.delay), receipt)
        })
        .await
    }

    async fn run_cancel(&self, key: &[u8], receipt: &Receipt) -> Result<bool, BackendError> {
        let limits = &self.limits;
        self.update(key, |before, after, now| {
            let n = before.len();
            let states = states_of(before);
            let mut next = [None; MAX_LIMITS];
            let given = blocked_until(before, now).is_none()
                && strategy::cancel_all(
                    limits,
                    &states[..n],
                    &mut next[..n],
                    now,
                    receipt.cost(),
                    receipt.states(),
                    receipt.proceed(),
                );
            if given {
                for (record, state) in after.iter_mut().zip(next) {
                    record.state = state;
                }
            }
            given
        })
        .await
    }

    /// Decides `cost` units for `key`, charged only when admitted or,
    /// `charged`, whether admitted or not ([`Call::Charge`]).
    async fn run(&self, key: &[u8], cost: u64, charged: bool) -> Result<Decision, BackendError> {
        let limits = &self.limits;
        let tick = self.shared.tick;
        self.update(key, |before, after, now| {
            let n = before.len();
            let states = states_of(before);
            let states = &states[..n];
            if let Some(decision) = blocked(limits, before, states, now, tick) {
                // Nothing changes, and the decision says until when.
                return decision;
            }
            let mut next = [None; MAX_LIMITS];
            let decide: strategy::DecideAll = if charged {
                strategy::charge_all
            } else {
                strategy::decide_all
            };
            let compound = decide(limits, states, &mut next[..n], now, cost);
            unblocked(after, next);
            Decision::from_compound(compound, limits, tick)
        })
        .await
    }

    async fn run_operation(&self, key: &[u8], op: Operation) -> Result<(), BackendError> {
        let limits = &self.limits;
        let tick = self.shared.tick;
        self.update(key, |before, after, now| {
            for (i, limit) in limits.iter().enumerate() {
                let state = before[i].state;
                after[i] = match op {
                    Operation::Reset => Record::default(),
                    Operation::Block(duration) => {
                        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
                        let until = now.saturating_add(tick.from_nanos(nanos));
                        Record {
                            state,
                            blocked_until: (until > now).then_some(until),
                        }
                    }
                    Operation::Refund(cost) => Record {
                        state: strategy::refund(limit.strategy, &limit.rate, state, now, cost),
                        ..before[i]
                    },
                    Operation::Penalty(cost) => Record {
                        state: strategy::penalty(limit.strategy, &limit.rate, state, now, cost),
                        ..before[i]
                    },
                };
            }
        })
        .await
    }
}

/// The state of each limit in `records`.
fn states_of(records: &[Record]) -> [Option<State>; MAX_LIMITS] {
    let mut states = [None; MAX_LIMITS];
    for (state, record) in states.iter_mut().zip(records) {
        *state = record.state;
    }
    states
}

/// When the block on a key whose limits hold `records` ends, if it is
/// still running at `now`.
fn blocked_until(records: &[Record], now: u64) -> Option<u64> {
    records
        .iter()
        .filter_map(|r| r.blocked_until)
        .max()
        .filter(|&until| until > now)
}

/// The decision for a key whose limits hold `records` (their states
/// `states`) while a block on it runs at `now`: denied until the block
/// ends, the reset that of a peek. `None` when the key is not blocked.
fn blocked(
    limits: &[LimitRate],
    records: &[Record],
    states: &[Option<State>],
    now: u64,
    tick: Tick,
) -> Option<Decision> {
    let until = blocked_until(records, now)?;
    let mut peeked = [None; MAX_LIMITS];
    let reset = strategy::decide_all(limits, states, &mut peeked[..states.len()], now, 0)
        .outcome
        .reset;
    Some(Decision::blocked(until - now, reset, limits[0].rate.limit, tick))
}

/// Fills `after` with the states `next`, no block on any (a decision that
/// charged ends an expired block).
fn unblocked(after: &mut [Record], next: [Option<State>; MAX_LIMITS]) {
    for (record, state) in after.iter_mut().zip(next) {
        *record = Record {
            state,
            blocked_until: None,
        };
    }
}

impl<S: Store> Binding for StoreBinding<S> {
    /// Each call reads the key's records, decides with the pure functions
    /// and writes what they return, under the key's lock (see
    /// [`StoreBackend`]). Several parts are decided part by part.
    async fn call(&self, call: Call<'_, Self>) -> Result<Answer, BackendError> {
        if self.limits[0].strategy == Strategy::Concurrency {
            return self.call_permits(call).await;
        }
        Ok(match call {
            Call::Decide { key, cost } => Answer::Decided(self.run(key, cost, false).await?),
            Call::Charge { key, cost } => Answer::Decided(self.run(key, cost, true).await?),
            Call::Lease { key, ask } => Answer::Leased(self.run_lease(key, ask).await?),
            Call::Reserve { key, cost, max_delay } => {
                Answer::Reserved(Box::new(self.run_reserve(key, cost, max_delay).await?))
            }
            Call::Cancel { key, receipt } => Answer::Cancelled(self.run_cancel(key, receipt).await?),
            Call::Operate { key, op } => {
                self.run_operation(key, op).await?;
                if op == Operation::Reset {
                    // What the holds charged is gone with the state.
                    self.forget_holds(key).await?;
                }
                Answer::Done
            }
            Call::Together(_) => Answer::Apart,
            Call::Reconnect => Answer::Done,
            Call::Hold { key, id, estimate } => Answer::Decided(self.run_hold(key, id, estimate).await?),
            Call::Settle { key, id, used } => Answer::Settled(self.run_settle(key, id, used).await?),
            Call::Permit { .. } => return Err(call.unsupported()),
        })
    }
}

impl<S: Store> StoreBinding<S> {
    /// The answer to `call` on a concurrency limit, whose permits are kept
    /// under the key's state key followed by `:permits` (its record holds
    /// only a block): a decision (a report's or a reservation's too) is
    /// whether a permit would be granted now, holding nothing; a reset
    /// frees the key's permits, a block denies its acquisitions until it
    /// ends, a refund or a penalty changes nothing.
    async fn call_permits(&self, call: Call<'_, Self>) -> Result<Answer, BackendError> {
        let peek = |key, cost| self.run_permit(key, PermitOp::Peek { cost });
        Ok(match call {
            Call::Permit { key, op } => Answer::Permitted(self.run_permit(key, op).await?),
            Call::Decide { key, cost } | Call::Charge { key, cost } => {
                Answer::Decided(peek(key, cost).await?.decision)
            }
            Call::Reserve { key, cost, .. } => {
                let decision = peek(key, cost).await?.decision;
                Answer::Reserved(Box::new(Reserved::new(decision, Duration::ZERO, None)))
            }
            Call::Cancel { .. } => Answer::Cancelled(false),
            Call::Operate { key, op } => {
                if let Operation::Reset | Operation::Block(_) = op {
                    self.run_operation(key, op).await?;
                }
                if op == Operation::Reset {
                    let _guard = self.shared.locks.lock(&self.keys(key)[0]).await;
                    self.shared.store.delete(&self.permits_key(key)).await?;
                }
                Answer::Done
            }
            Call::Together(_) => Answer::Apart,
            Call::Reconnect => Answer::Done,
            Call::Lease { .. } | Call::Hold { .. } | Call::Settle { .. } => return Err(call.unsupported()),
        })
    }

    /// Where `key`'s permits are stored.
    fn permits_key(&self, key: &[u8]) -> Vec<u8> {
        let mut full = self.keys(key).swap_remove(0);
        full.extend_from_slice(b":permits");
        full
    }

    /// Applies `op` to `key`'s permits under the key's lock, an
    /// acquisition of a blocked key denied until the block ends.
    async fn run_permit(&self, key: &[u8], op: PermitOp) -> Result<Permitted, BackendError> {
        let shared = &self.shared;
        let state_key = self.keys(key).swap_remove(0);
        let _guard = shared.locks.lock(&state_key).await;
        let now = strategy::clamp_time(shared.tick.from_nanos(shared.clock.now_nanos()));
        let rate = &self.limits[0].rate;
        let stored = self.permits_key(key);
        let mut set = match shared.store.get(&stored).await? {
            Some(bytes) => decode_permits(&bytes)?,
            None => PermitSet::default(),
        };
        if let PermitOp::Acquire { .. } | PermitOp::Peek { .. } = op {
            let record = match shared.store.get(&state_key).await? {
                Some(bytes) => decode_record(&bytes)?,
                None => Record::default(),
            };
            if let Some(until) = blocked_until(&[record], now) {
                let peek = PermitOp::Peek { cost: 0 }.apply(&mut set.clone(), rate, now);
                let decision = Decision::blocked(until - now, peek.reset, rate.limit, shared.tick);
                return Ok(Permitted::from_outcome(peek, rate.limit, shared.tick).with_decision(decision));
            }
        }
        let before = set.clone();
        let outcome = op.apply(&mut set, rate, now);
        if set.is_empty() && !before.is_empty() {
            shared.store.delete(&stored).await?;
        } else if set != before && !set.is_empty() {
            let ttl = set.expires_at().saturating_sub(now).max(1);
            shared
                .store
                .set(&stored, encode_permits(&set), shared.tick.duration(ttl))
                .await?;
        }
        Ok(Permitted::from_outcome(outcome, rate.limit, shared.tick))
    }
}
