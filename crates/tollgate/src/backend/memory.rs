//! The in-memory backend: the embedded default.

use std::sync::Arc;
use std::time::Duration;

use super::cell::Stored;
use super::janitor::{self, Sweep};
use super::table::{LockedShard, Table};
use super::{Backend, Binding, Scope};
use crate::clock::{Clock, ClockHandle, SharedClock};
use crate::decision::{Decision, Tick};
use crate::error::{BackendError, ConfigError, Error};
use crate::policy::{Limit, MAX_LIMITS};
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
        if self.sweep_interval.is_zero() {
            return Err(ConfigError::new("sweep_interval", "must be longer than zero").into());
        }
        // One hasher for all of a policy's tables: a key falls in the same
        // shard index of each, which a compound decision locks together.
        let hasher = ahash::RandomState::new();
        let tables: Vec<Tables> = scope
            .policy
            .limits()
            .iter()
            .map(|limit| match limit.strategy() {
                Strategy::FixedWindow => Tables::Fixed(self.table(limit, &hasher)),
                Strategy::SlidingWindow => Tables::Sliding(self.table(limit, &hasher)),
                // The leaky-bucket meter runs the same GCRA as the token bucket.
                Strategy::TokenBucket | Strategy::LeakyBucket => Tables::Gcra(self.table(limit, &hasher)),
            })
            .collect();
        let limits: Vec<LimitRate> = scope
            .policy
            .limits()
            .iter()
            .map(|l| LimitRate {
                strategy: l.strategy(),
                rate: l.rate_nanos(),
            })
            .collect();
        let mut tables = tables.into_iter();
        let binding = match tables.len() {
            1 => Kind::Single(tables.next().expect("a policy has a limit")),
            _ => Kind::Compound {
                tables: tables.collect(),
                limits: limits.into_boxed_slice(),
            },
        };
        Ok(MemoryBinding { kind: binding })
    }
}

/// The table of one limit, typed by its strategy's state.
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

enum Kind {
    Single(Tables),
    Compound {
        tables: Box<[Tables]>,
        limits: Box<[LimitRate]>,
    },
}

/// The in-memory state of one policy: a table per limit.
pub struct MemoryBinding {
    kind: Kind,
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
        match &self.kind {
            Kind::Single(t) => std::slice::from_ref(t),
            Kind::Compound { tables, .. } => tables,
        }
    }

    /// Decides one request synchronously; the in-memory backend cannot fail.
    #[inline]
    pub fn check(&self, key: &[u8], cost: u64) -> Decision {
        match &self.kind {
            Kind::Single(tables) => {
                let (outcome, rate) = match tables {
                    Tables::Fixed(t) => (t.apply(key, cost), t.rate()),
                    Tables::Sliding(t) => (t.apply(key, cost), t.rate()),
                    Tables::Gcra(t) => (t.apply(key, cost), t.rate()),
                };
                Decision::from_outcome(outcome, rate.limit, Tick::Nanos)
            }
            Kind::Compound { tables, limits } => Self::check_all(tables, limits, key, cost),
        }
    }

    /// A compound decision: every limit's shard for the key is locked, in
    /// the order the limits are listed, for the whole decision. Every
    /// compound binding locks its own tables in the same order and nothing
    /// else holds two shard locks, so this cannot deadlock.
    fn check_all(tables: &[Tables], limits: &[LimitRate], key: &[u8], cost: u64) -> Decision {
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
        let compound = strategy::decide_all(limits, &before[..n], &mut after[..n], now, cost);
        for (i, shard) in locked[..n].iter_mut().enumerate() {
            if let Some(shard) = shard {
                shard.set(key, before[i], after[i], now);
            }
        }
        Decision::from_compound(compound, limits, Tick::Nanos)
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
}
