//! The in-memory backend: the embedded default.

use std::sync::Arc;
use std::time::Duration;

use super::blocks::Blocks;
use super::cell::Stored;
use super::janitor::{self, Sweep};
use super::table::{LockedShard, Table};
use super::{Backend, Binding, Scope};
use crate::clock::{Clock, ClockHandle, SharedClock};
use crate::decision::{Decision, Tick};
use crate::error::{BackendError, ConfigError, Error};
use crate::operation::Operation;
use crate::policy::{Limit, Policy, MAX_LIMITS};
use crate::strategy::{self, Algorithm, FixedWindow, LimitRate, SlidingWindow, State, Strategy, TokenBucket};

/// The default interval between background sweeps of expired state.
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// In-process state: a sharded table per policy, no global lock, memory
/// proportional to the number of active keys.
///
/// Cloning is cheap and clones share configuration (not state: every policy
/// bound to the backend gets its own table). [Concurrency in the in-memory
/// backend](crate::_documentation::concurrency) describes how it is built.
#[derive(Clone)]
pub struct MemoryBackend {
    clock: ClockHandle,
    shards: usize,
    sweep_interval: Duration,
    reclaim: bool,
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("shards", &self.shards)
            .field("sweep_interval", &self.sweep_interval)
            .field("reclaim", &self.reclaim)
            .finish_non_exhaustive()
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    /// A backend on the system clock with a shard count suited to this
    /// machine (16 per available core, at least 64).
    pub fn new() -> Self {
        let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
        Self {
            clock: ClockHandle::System,
            shards: (cores * 16).max(64).next_power_of_two(),
            sweep_interval: DEFAULT_SWEEP_INTERVAL,
            reclaim: true,
        }
    }

    /// Uses `clock` instead of the system clock (e.g. a [`crate::ManualClock`]).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = ClockHandle::of(clock);
        self
    }

    /// Uses a shared clock handle.
    pub fn shared_clock(mut self, clock: SharedClock) -> Self {
        self.clock = ClockHandle::Shared(clock);
        self
    }

    /// Sets the number of shards per table (rounded up to a power of two).
    pub fn shards(mut self, shards: usize) -> Self {
        self.shards = shards.clamp(1, 1 << 16).next_power_of_two();
        self
    }

    /// Sets how often the background janitor sweeps expired state
    /// (default [`DEFAULT_SWEEP_INTERVAL`]).
    pub fn sweep_interval(mut self, every: Duration) -> Self {
        self.sweep_interval = every;
        self
    }

    /// Whether expired state is deleted (default `true`).
    ///
    /// Deleted state is equivalent to absent state only while time moves
    /// forward (sweeps keep state for a second past its expiry to absorb
    /// small clock steps). Turn reclaiming off for replays whose clock jumps
    /// back arbitrarily, such as an unsorted trace: decisions then follow the
    /// strategy functions exactly, and memory grows with every key seen.
    pub fn reclaim(mut self, reclaim: bool) -> Self {
        self.reclaim = reclaim;
        self
    }

    fn table<A: Algorithm<State: Stored> + 'static>(
        &self,
        limit: &Limit,
        hasher: &ahash::RandomState,
    ) -> Arc<Table<A>> {
        let table = Arc::new(Table::<A>::new(
            limit.rate_nanos(),
            self.clock.clone(),
            self.shards,
            self.reclaim,
            hasher.clone(),
        ));
        if self.reclaim {
            let weak = Arc::downgrade(&table);
            janitor::register(weak, self.sweep_interval);
        }
        table
    }
}

impl<A: Algorithm<State: Stored>> Sweep for Table<A> {
    fn sweep(&self) -> usize {
        Table::sweep(self)
    }
}

impl Backend for MemoryBackend {
    type Binding = MemoryBinding;

    fn bind(&self, scope: &Scope<'_>) -> Result<MemoryBinding, Error> {
        self.bind_keeping(scope, None)
    }

    /// Keeps the table (the keys' state) of every limit whose strategy and
    /// window stay, and the blocks; the new limits decide on them with their
    /// own `L`.
    fn rebind(
        &self,
        scope: &Scope<'_>,
        previous: &MemoryBinding,
        previous_policy: &Policy,
    ) -> Result<MemoryBinding, Error> {
        self.bind_keeping(scope, Some((previous, previous_policy)))
    }
}

impl MemoryBackend {
    fn bind_keeping(
        &self,
        scope: &Scope<'_>,
        previous: Option<(&MemoryBinding, &Policy)>,
    ) -> Result<MemoryBinding, Error> {
        if self.sweep_interval.is_zero() {
            return Err(ConfigError::new("sweep_interval", "must be longer than zero").into());
        }
        // One hasher for all of a policy's tables: a key falls in the same
        // shard index of each, which a compound decision locks together.
        // Kept tables bring theirs.
        let hasher = match previous {
            Some((binding, _)) => binding.tables[0].hasher().clone(),
            None => ahash::RandomState::new(),
        };
        let kept = |limit: &Limit| {
            let (binding, policy) = previous?;
            let i = policy
                .limits()
                .iter()
                .position(|l| l.strategy() == limit.strategy() && l.window() == limit.window())?;
            Some(binding.tables[i].clone())
        };
        let tables: Box<[Tables]> = scope
            .policy
            .limits()
            .iter()
            .map(|limit| {
                kept(limit).unwrap_or_else(|| match limit.strategy() {
                    Strategy::FixedWindow => Tables::Fixed(self.table(limit, &hasher)),
                    Strategy::SlidingWindow => Tables::Sliding(self.table(limit, &hasher)),
                    // The leaky-bucket meter runs the same GCRA as the token bucket.
                    Strategy::TokenBucket | Strategy::LeakyBucket => Tables::Gcra(self.table(limit, &hasher)),
                })
            })
            .collect();
        Ok(MemoryBinding {
            tables,
            limits: scope.policy.limit_rates(Tick::Nanos).into_boxed_slice(),
            blocks: previous.map_or_else(|| Arc::new(Blocks::new()), |(b, _)| b.blocks.clone()),
        })
    }
}

/// The table of one limit, typed by its strategy's state.
#[derive(Clone)]
enum Tables {
    Fixed(Arc<Table<FixedWindow>>),
    Sliding(Arc<Table<SlidingWindow>>),
    Gcra(Arc<Table<TokenBucket>>),
}

impl Tables {
    fn name(&self) -> &'static str {
        match self {
            Tables::Fixed(_) => "fixed_window",
            Tables::Sliding(_) => "sliding_window",
            Tables::Gcra(_) => "gcra",
        }
    }

    fn len(&self) -> usize {
        match self {
            Tables::Fixed(t) => t.len(),
            Tables::Sliding(t) => t.len(),
            Tables::Gcra(t) => t.len(),
        }
    }

    fn sweep(&self) {
        match self {
            Tables::Fixed(t) => t.sweep(),
            Tables::Sliding(t) => t.sweep(),
            Tables::Gcra(t) => t.sweep(),
        };
    }

    fn now(&self) -> u64 {
        match self {
            Tables::Fixed(t) => t.now(),
            Tables::Sliding(t) => t.now(),
            Tables::Gcra(t) => t.now(),
        }
    }

    fn hasher(&self) -> &ahash::RandomState {
        match self {
            Tables::Fixed(t) => t.hasher(),
            Tables::Sliding(t) => t.hasher(),
            Tables::Gcra(t) => t.hasher(),
        }
    }

    fn hash(&self, key: &[u8]) -> u64 {
        match self {
            Tables::Fixed(t) => t.hash(key),
            Tables::Sliding(t) => t.hash(key),
            Tables::Gcra(t) => t.hash(key),
        }
    }

    fn lock_shard_of(&self, hash: u64) -> Locked<'_> {
        match self {
            Tables::Fixed(t) => Locked::Fixed(t.lock_shard_of(hash)),
            Tables::Sliding(t) => Locked::Sliding(t.lock_shard_of(hash)),
            Tables::Gcra(t) => Locked::Gcra(t.lock_shard_of(hash)),
        }
    }
}

/// A locked shard of one limit's table, read and written as [`State`].
enum Locked<'a> {
    Fixed(LockedShard<'a, FixedWindow>),
    Sliding(LockedShard<'a, SlidingWindow>),
    Gcra(LockedShard<'a, TokenBucket>),
}

impl Locked<'_> {
    fn get(&self, key: &[u8]) -> Option<State> {
        match self {
            Locked::Fixed(s) => get_any(s, key),
            Locked::Sliding(s) => get_any(s, key),
            Locked::Gcra(s) => get_any(s, key),
        }
    }

    /// Stores `after` over `before`; the states are of this table's kind,
    /// as [`strategy::decide_all`] returns them.
    fn set(&mut self, key: &[u8], before: Option<State>, after: Option<State>, now: u64) {
        match self {
            Locked::Fixed(s) => set_any(s, key, before, after, now),
            Locked::Sliding(s) => set_any(s, key, before, after, now),
            Locked::Gcra(s) => set_any(s, key, before, after, now),
        }
    }
}

/// A strategy whose state is one variant of [`State`].
trait StateVariant: Algorithm<State: Stored> {
    fn wrap(state: Self::State) -> State;
    fn unwrap(state: State) -> Option<Self::State>;
}

impl StateVariant for FixedWindow {
    fn wrap(state: Self::State) -> State {
        State::FixedWindow(state)
    }
    fn unwrap(state: State) -> Option<Self::State> {
        match state {
            State::FixedWindow(s) => Some(s),
            _ => None,
        }
    }
}

impl StateVariant for SlidingWindow {
    fn wrap(state: Self::State) -> State {
        State::SlidingWindow(state)
    }
    fn unwrap(state: State) -> Option<Self::State> {
        match state {
            State::SlidingWindow(s) => Some(s),
            _ => None,
        }
    }
}

impl StateVariant for TokenBucket {
    fn wrap(state: Self::State) -> State {
        State::Gcra(state)
    }
    fn unwrap(state: State) -> Option<Self::State> {
        match state {
            State::Gcra(s) => Some(s),
            _ => None,
        }
    }
}

fn get_any<A: StateVariant>(shard: &LockedShard<'_, A>, key: &[u8]) -> Option<State> {
    shard.get(key).map(A::wrap)
}

fn set_any<A: StateVariant>(
    shard: &mut LockedShard<'_, A>,
    key: &[u8],
    before: Option<State>,
    after: Option<State>,
    now: u64,
) {
    shard.set(key, before.and_then(A::unwrap), after.and_then(A::unwrap), now);
}

/// The in-memory state of one policy: a table per limit.
pub struct MemoryBinding {
    /// One table per limit, in the policy's order.
    tables: Box<[Tables]>,
    /// The limits in nanosecond ticks, in the same order.
    limits: Box<[LimitRate]>,
    blocks: Arc<Blocks>,
}

impl std::fmt::Debug for MemoryBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tables: Vec<&str> = self.tables().iter().map(Tables::name).collect();
        f.debug_struct("MemoryBinding")
            .field("tables", &tables)
            .field("keys", &self.len())
            .finish()
    }
}

impl MemoryBinding {
    fn tables(&self) -> &[Tables] {
        &self.tables
    }

    /// Decides one request synchronously; the in-memory backend cannot fail.
    #[inline]
    pub fn check(&self, key: &[u8], cost: u64) -> Decision {
        if self.blocks.any() {
            if let Some(decision) = self.check_blocked(key) {
                return decision;
            }
        }
        if let ([table], [limit]) = (&*self.tables, &*self.limits) {
            let rate = &limit.rate;
            let outcome = match table {
                Tables::Fixed(t) => t.apply(rate, key, cost),
                Tables::Sliding(t) => t.apply(rate, key, cost),
                Tables::Gcra(t) => t.apply(rate, key, cost),
            };
            return Decision::from_outcome(outcome, rate.limit, Tick::Nanos);
        }
        let limits = &self.limits;
        self.update(key, |before, after, now| {
            let compound = strategy::decide_all(limits, before, after, now, cost);
            Decision::from_compound(compound, limits, Tick::Nanos)
        })
    }

    /// The decision for a blocked key: denied until the block ends, the
    /// state untouched.
    #[cold]
    fn check_blocked(&self, key: &[u8]) -> Option<Decision> {
        let now = self.tables()[0].now();
        let until = self.blocks.until(key, now)?;
        let limits = &self.limits;
        let peek = self.update(key, |before, after, now| {
            after.copy_from_slice(before);
            let mut ignored = [None; MAX_LIMITS];
            strategy::decide_all(limits, before, &mut ignored[..before.len()], now, 0)
        });
        Some(Decision::blocked(
            until - now,
            peek.outcome.reset,
            limits[0].rate.limit,
            Tick::Nanos,
        ))
    }

    /// Runs `f` on the key's state of every limit, all locked together:
    /// the shard for the key in each limit's table, in the order the
    /// limits are listed. Every binding locks its own tables in that same
    /// order and nothing else holds two shard locks, so this cannot
    /// deadlock. `f` gets the states before and fills the states after.
    fn update<R>(&self, key: &[u8], f: impl FnOnce(&[Option<State>], &mut [Option<State>], u64) -> R) -> R {
        let tables = self.tables();
        let now = tables[0].now();
        let hash = tables[0].hash(key);
        let mut locked: [Option<Locked<'_>>; MAX_LIMITS] = [const { None }; MAX_LIMITS];
        let mut before = [None; MAX_LIMITS];
        for (i, table) in tables.iter().enumerate() {
            let shard = table.lock_shard_of(hash);
            before[i] = shard.get(key);
            locked[i] = Some(shard);
        }
        let n = tables.len();
        let mut after = [None; MAX_LIMITS];
        let result = f(&before[..n], &mut after[..n], now);
        for (i, shard) in locked[..n].iter_mut().enumerate() {
            if let Some(shard) = shard {
                shard.set(key, before[i], after[i], now);
            }
        }
        result
    }

    /// Applies a per-key operation synchronously; the in-memory backend
    /// cannot fail. The caller validates the argument
    /// ([`Operation::validate`]).
    pub fn operate_now(&self, key: &[u8], op: Operation) {
        let limits = &self.limits;
        match op {
            Operation::Block(duration) => {
                let now = self.tables()[0].now();
                let until = now.saturating_add(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
                self.blocks.set(key, Some(until), now);
            }
            Operation::Reset => {
                self.update(key, |_, after, _| after.fill(None));
                let now = self.tables()[0].now();
                self.blocks.set(key, None, now);
            }
            Operation::Refund(cost) | Operation::Penalty(cost) => self.update(key, |before, after, now| {
                for (i, limit) in limits.iter().enumerate() {
                    after[i] = match op {
                        Operation::Refund(_) => {
                            strategy::refund(limit.strategy, &limit.rate, before[i], now, cost)
                        }
                        _ => strategy::penalty(limit.strategy, &limit.rate, before[i], now, cost),
                    };
                }
            }),
        }
    }

    /// The number of keys that hold state, summed over the policy's limits.
    pub fn len(&self) -> usize {
        self.tables().iter().map(Tables::len).sum()
    }

    /// Whether no key holds state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes all expired state now (the janitor does this on its own).
    pub fn sweep(&self) {
        self.tables().iter().for_each(Tables::sweep);
    }
}

impl Binding for MemoryBinding {
    #[inline]
    fn apply(
        &self,
        key: &[u8],
        cost: u64,
    ) -> impl std::future::Future<Output = Result<Decision, BackendError>> + Send {
        std::future::ready(Ok(self.check(key, cost)))
    }

    fn operate(
        &self,
        key: &[u8],
        op: Operation,
    ) -> impl std::future::Future<Output = Result<(), BackendError>> + Send {
        self.operate_now(key, op);
        std::future::ready(Ok(()))
    }
}
