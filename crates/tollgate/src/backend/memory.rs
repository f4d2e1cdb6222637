//! The in-memory backend: the embedded default.

use std::num::NonZeroU64;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::blocks::Blocks;
use super::cell::StateCell;
use super::cell::Stored;
use super::holds_table::Holds;
use super::janitor::{self, Sweep, DEFAULT_SWEEP_INTERVAL};
use super::permit_table::{PermitEntry, PermitTable};
use super::reclaim;
use super::snapshot::{write_entry, Entries, Registry, StateFileError, StateSnapshot};
use super::table::{lanes_for, CellOf, LockedShard, Table};
use super::{
    Answer, Backend, Binding, Call, Capabilities, CompoundKeys, Permitted, Receipt, Reserved, Scope, Settled,
};
use crate::clock::{Clock, ClockHandle, SharedClock};
use crate::decision::Decision;
use crate::error::{BackendError, ConfigError, Error};
use crate::operation::Operation;
use crate::policy::{Limit, Policy, MAX_LIMITS};
use crate::strategy::holds::{self, HoldId, HoldRecord};
use crate::strategy::permits::{PermitOp, PermitOutcome};
use crate::strategy::Tick;
use crate::strategy::{self, Algorithm, FixedWindow, LimitRate, SlidingWindow, State, Strategy, TokenBucket};

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
    lanes: usize,
    sweep_interval: Duration,
    reclaim: bool,
    /// The tables bound so far, for [`Self::snapshot`], and the state
    /// [`Self::restore`] keeps for the tables bound next; shared by clones.
    registry: Arc<Registry>,
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("shards", &self.shards)
            .field("lanes", &self.lanes)
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
    /// machine (16 per available core, at least 64) and a lane per core
    /// (see [`Self::lanes`]).
    pub fn new() -> Self {
        let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
        Self {
            clock: ClockHandle::System,
            shards: (cores * 16).max(64).next_power_of_two(),
            lanes: lanes_for(cores),
            sweep_interval: DEFAULT_SWEEP_INTERVAL,
            reclaim: true,
            registry: Arc::default(),
        }
    }

    /// Uses `clock` instead of the system clock (e.g. a [`crate::clock::ManualClock`]).
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

    /// Sets the number of lanes per shard (rounded up to a power of two, at
    /// most 8; default: one per available core).
    ///
    /// Each lane is a slot array of its own: a thread inserts new keys into
    /// its lane and finds them there first, so keys that stay with one
    /// thread never share a cache line with another thread's keys, and
    /// threads on different cores do not slow each other down. A key
    /// decided on by a thread of another lane is still found, with one more
    /// probe. One lane gives the layout of a single shared array.
    pub fn lanes(mut self, lanes: usize) -> Self {
        self.lanes = lanes_for(lanes);
        self
    }

    /// Sets how often the background janitor sweeps expired state
    /// (default 1 s).
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

    fn table<A: StateVariant + 'static>(
        &self,
        limit: &Limit,
        hasher: &ahash::RandomState,
        name: Option<Box<[u8]>>,
    ) -> Arc<Table<A>> {
        let table = Arc::new(Table::<A>::new(
            limit.rate_nanos(),
            self.clock.clone(),
            (self.shards, self.lanes),
            self.reclaim,
            hasher.clone(),
        ));
        if self.reclaim {
            let weak = Arc::downgrade(&table);
            janitor::register(weak, self.sweep_interval);
        }
        if let Some(name) = name {
            let entries: Arc<dyn Entries> = table.clone();
            for (key, state) in self.registry.bound(name, Arc::downgrade(&entries)) {
                if let Some(state) = A::unwrap(state) {
                    table.restore_entry(&key, state);
                }
            }
        }
        table
    }

    /// The permits of a concurrency limit, swept by the janitor (in
    /// memory only: a state file keeps no permits, whose holders are gone
    /// after a restart).
    fn permit_table(&self, limit: &Limit, hasher: &ahash::RandomState) -> Arc<PermitTable> {
        let rate = limit.rate_nanos();
        let table = Arc::new(PermitTable::new(
            rate,
            self.clock.clone(),
            self.shards,
            hasher.clone(),
        ));
        let weak = Arc::downgrade(&table);
        janitor::register(weak, self.sweep_interval);
        table
    }

    /// Records the tables bound from now on (by this backend and its
    /// clones), so that [`Self::snapshot`] can copy their state (default:
    /// not recorded; [`Self::restore`] records too). A record costs about a
    /// hundred bytes per limit, which a backend that is never saved need
    /// not pay.
    #[must_use]
    pub fn snapshots(self) -> Self {
        self.registry.record();
        self
    }

    /// The state of every key of every table this backend (or a clone of
    /// it) bound after [`Self::snapshots`] or [`Self::restore`] and that is
    /// still in use: what [`Self::restore`] gives back after a restart,
    /// with [`StateSnapshot::save`] and [`StateSnapshot::load`] between.
    ///
    /// Each shard is read under its mutex, which only keys being added or
    /// deleted wait for: decisions on known keys go on meanwhile, and the
    /// snapshot holds each key as one of them left it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, MemoryBackend, Policy, Strategy};
    ///
    /// let policy = Policy::new(Strategy::FixedWindow, 10, Duration::from_secs(3_600))?;
    /// let before = MemoryBackend::new().snapshots();
    /// let limiter = Limiter::builder().backend(before.clone()).policy(policy).build()?;
    /// limiter.check_n("tenant", 4);
    /// let saved = before.snapshot();
    /// assert_eq!(saved.keys(), 1);
    ///
    /// // After a restart: the same policy, bound after the restore.
    /// let after = MemoryBackend::new().restore(saved);
    /// let limiter = Limiter::builder().backend(after).policy(policy).build()?;
    /// assert_eq!(limiter.check("tenant").remaining, 5);
    /// # Ok::<(), tollgate::Error>(())
    /// ```
    pub fn snapshot(&self) -> StateSnapshot {
        self.registry.snapshot()
    }

    /// Saves what [`Self::snapshot`] would take to `path`, atomically as
    /// [`StateSnapshot::save`] does, but without holding it all in memory
    /// and at most `bytes_per_second` on average: a few shards at a time,
    /// each copied under its mutex into a buffer of a few hundred
    /// kilobytes, summed and written, the thread asleep between chunks.
    /// Returns how many keys it wrote.
    ///
    /// This is the save for a process that keeps deciding meanwhile:
    /// nothing of it runs at full speed, and the memory it holds does not
    /// grow with the keys. A snapshot taken and written at once moves tens
    /// of megabytes through memory in tens of milliseconds, which on one
    /// 2-vCPU VM moved the p99 of decisions on the other core 1.27× to
    /// 1.50× (`benches/state_file.rs`, docs/performance.md, "Saving the
    /// state"). A million keys (35 MB) take about 0.3 s at 128 MiB/s. The
    /// keys are read shard by shard over that time, each as a decision left
    /// it, as [`Self::snapshot`] reads them.
    ///
    /// # Errors
    ///
    /// [`StateFileError::Io`] when a step fails; `path` is then as it was.
    pub fn save_paced(&self, path: &Path, bytes_per_second: NonZeroU64) -> Result<u64, StateFileError> {
        self.registry.save_paced(path, bytes_per_second)
    }

    /// Gives the tables bound from now on the state `snapshot` holds for
    /// them: a table takes the entries saved under its name (its key
    /// prefix, resource, strategy and window, as in the [key
    /// layout](crate::_documentation::semantics_notes#key-layout)), once.
    /// States that have expired by then are left out; the others continue
    /// exactly, as their times are the wall clock's.
    #[must_use]
    pub fn restore(self, snapshot: StateSnapshot) -> Self {
        self.registry.restore(snapshot);
        self
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

    /// In-memory state is decided on at once, and cannot fail; it
    /// charges, operates, reserves and keeps permits, and has nothing to
    /// lease or to decide in one step with other parts.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            decides_now: true,
            charges: true,
            operates: true,
            reserves: true,
            permits: true,
            settles: true,
            ..Capabilities::default()
        }
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
            let i = policy.limits().iter().position(|l| l.same_windows(limit))?;
            Some(binding.tables[i].clone())
        };
        // The tables' names, for a backend that records them for snapshots.
        let names = self
            .registry
            .recording()
            .then(|| CompoundKeys::new(scope.prefix, scope.resource, scope.policy.limits()));
        let tables: Box<[Tables]> = scope
            .policy
            .limits()
            .iter()
            .enumerate()
            .map(|(i, limit)| {
                kept(limit).unwrap_or_else(|| {
                    let name = names.as_ref().map(|names| names.table_name(i));
                    match limit.strategy() {
                        Strategy::FixedWindow => Tables::Fixed(self.table(limit, &hasher, name)),
                        Strategy::SlidingWindow => Tables::Sliding(self.table(limit, &hasher, name)),
                        // The leaky-bucket meter runs the same GCRA as the token bucket.
                        Strategy::TokenBucket | Strategy::LeakyBucket => {
                            Tables::Gcra(self.table(limit, &hasher, name))
                        }
                        Strategy::Concurrency => Tables::Permits(self.permit_table(limit, &hasher)),
                    }
                })
            })
            .collect();
        Ok(MemoryBinding {
            tables,
            limits: scope.policy.limit_rates(Tick::Nanos).into_boxed_slice(),
            keyed: previous.map_or_else(
                || {
                    Arc::new(Keyed {
                        blocks: Blocks::new(),
                        holds: Holds::default(),
                    })
                },
                |(b, _)| b.keyed.clone(),
            ),
        })
    }
}

/// The table of one limit, typed by its strategy's state.
#[derive(Clone)]
enum Tables {
    Fixed(Arc<Table<FixedWindow>>),
    Sliding(Arc<Table<SlidingWindow>>),
    Gcra(Arc<Table<TokenBucket>>),
    /// A concurrency limit's permits: the policy's only limit, so that
    /// every call on it is answered from here
    /// ([`MemoryBinding::answer_permits`]) and never reaches the rate
    /// tables' shard locks and cells.
    Permits(Arc<PermitTable>),
}

impl Tables {
    fn name(&self) -> &'static str {
        match self {
            Tables::Fixed(_) => "fixed_window",
            Tables::Sliding(_) => "sliding_window",
            Tables::Gcra(_) => "gcra",
            Tables::Permits(_) => "concurrency",
        }
    }

    fn len(&self) -> usize {
        match self {
            Tables::Fixed(t) => t.len(),
            Tables::Sliding(t) => t.len(),
            Tables::Gcra(t) => t.len(),
            Tables::Permits(t) => t.len(),
        }
    }

    fn sweep(&self) {
        match self {
            Tables::Fixed(t) => t.sweep(),
            Tables::Sliding(t) => t.sweep(),
            Tables::Gcra(t) => t.sweep(),
            Tables::Permits(t) => t.sweep(),
        };
    }

    fn now(&self) -> u64 {
        match self {
            Tables::Fixed(t) => t.now(),
            Tables::Sliding(t) => t.now(),
            Tables::Gcra(t) => t.now(),
            Tables::Permits(t) => t.now(),
        }
    }

    fn clock(&self) -> ClockHandle {
        match self {
            Tables::Fixed(t) => t.clock(),
            Tables::Sliding(t) => t.clock(),
            Tables::Gcra(t) => t.clock(),
            Tables::Permits(t) => t.clock(),
        }
    }

    fn hasher(&self) -> &ahash::RandomState {
        match self {
            Tables::Fixed(t) => t.hasher(),
            Tables::Sliding(t) => t.hasher(),
            Tables::Gcra(t) => t.hasher(),
            Tables::Permits(t) => t.hasher(),
        }
    }

    fn hash(&self, key: &[u8]) -> u64 {
        match self {
            Tables::Fixed(t) => t.hash(key),
            Tables::Sliding(t) => t.hash(key),
            Tables::Gcra(t) => t.hash(key),
            Tables::Permits(t) => t.hasher().hash_one(key),
        }
    }

    fn lock_shard_of(&self, hash: u64) -> Locked<'_> {
        match self {
            Tables::Fixed(t) => Locked::Fixed(t.lock_shard_of(hash)),
            Tables::Sliding(t) => Locked::Sliding(t.lock_shard_of(hash)),
            Tables::Gcra(t) => Locked::Gcra(t.lock_shard_of(hash)),
            Tables::Permits(_) => Locked::Nothing,
        }
    }

    #[inline]
    fn try_hold<'s>(
        &'s self,
        section: &'s reclaim::Section,
        hash: u64,
        key: &[u8],
    ) -> Option<(CellRef<'s>, State)> {
        Some(match self {
            Tables::Fixed(t) => {
                let (cell, state) = t.try_hold(section, hash, key)?;
                (CellRef::Fixed(cell), FixedWindow::wrap(state))
            }
            Tables::Sliding(t) => {
                let (cell, state) = t.try_hold(section, hash, key)?;
                (CellRef::Sliding(cell), SlidingWindow::wrap(state))
            }
            Tables::Gcra(t) => {
                let (cell, state) = t.try_hold(section, hash, key)?;
                (CellRef::Gcra(cell), TokenBucket::wrap(state))
            }
            Tables::Permits(_) => return None,
        })
    }
}

/// A locked shard of one limit's table, read and written as [`State`].
enum Locked<'a> {
    Fixed(LockedShard<'a, FixedWindow>),
    Sliding(LockedShard<'a, SlidingWindow>),
    Gcra(LockedShard<'a, TokenBucket>),
    /// A concurrency limit's table, which holds no rate state: the rate
    /// functions store nothing for it.
    Nothing,
}

impl Locked<'_> {
    fn get(&mut self, key: &[u8]) -> Option<State> {
        match self {
            Locked::Fixed(s) => s.get(key).map(FixedWindow::wrap),
            Locked::Sliding(s) => s.get(key).map(SlidingWindow::wrap),
            Locked::Gcra(s) => s.get(key).map(TokenBucket::wrap),
            Locked::Nothing => None,
        }
    }

    /// Stores `after`, of this table's kind as [`strategy::decide_all`]
    /// returns it, for the key [`Self::get`] read.
    fn set(&mut self, key: &[u8], after: Option<State>, now: u64) {
        match self {
            Locked::Fixed(s) => s.set(key, after.and_then(FixedWindow::unwrap), now),
            Locked::Sliding(s) => s.set(key, after.and_then(SlidingWindow::unwrap), now),
            Locked::Gcra(s) => s.set(key, after.and_then(TokenBucket::unwrap), now),
            Locked::Nothing => {}
        }
    }
}

/// A key's cell in one limit's table, held without a lock.
#[derive(Clone, Copy)]
enum CellRef<'s> {
    Fixed(&'s CellOf<FixedWindow>),
    Sliding(&'s CellOf<SlidingWindow>),
    Gcra(&'s CellOf<TokenBucket>),
}

impl CellRef<'_> {
    /// Stores `after` (of this cell's kind) through `table`, the cell's
    /// table, and lets the cell go.
    #[inline]
    fn release(self, table: &Tables, hash: u64, after: State) {
        match (self, table, after) {
            (CellRef::Fixed(c), Tables::Fixed(t), State::FixedWindow(s)) => t.release_held(hash, c, s),
            (CellRef::Sliding(c), Tables::Sliding(t), State::SlidingWindow(s)) => t.release_held(hash, c, s),
            (CellRef::Gcra(c), Tables::Gcra(t), State::Gcra(s)) => t.release_held(hash, c, s),
            _ => unreachable!("a limit's state is of its table's kind"),
        }
    }

    /// Lets the cell go with the state it held.
    fn restore(self, before: State) {
        match (self, before) {
            (CellRef::Fixed(c), State::FixedWindow(s)) => c.release(s),
            (CellRef::Sliding(c), State::SlidingWindow(s)) => c.release(s),
            (CellRef::Gcra(c), State::Gcra(s)) => c.release(s),
            _ => unreachable!("a cell's state is of its kind"),
        }
    }
}

/// The cells a lock-free compound decision holds, one per limit in the
/// policy's order, with their states; dropped, it lets them go as they were.
struct HeldCells<'s> {
    cells: [Option<CellRef<'s>>; MAX_LIMITS],
    before: [Option<State>; MAX_LIMITS],
    len: usize,
}

impl<'s> HeldCells<'s> {
    #[inline]
    fn new() -> Self {
        Self {
            cells: [None; MAX_LIMITS],
            before: [None; MAX_LIMITS],
            len: 0,
        }
    }

    #[inline]
    fn push(&mut self, (cell, state): (CellRef<'s>, State)) {
        self.cells[self.len] = Some(cell);
        self.before[self.len] = Some(state);
        self.len += 1;
    }

    /// The states the cells held.
    #[inline]
    fn before(&self) -> &[Option<State>] {
        &self.before[..self.len]
    }

    /// Stores `after[i]` in cell `i` of `tables[i]` and lets them all go;
    /// `None` (every cell let go as it was) when a state becomes absent,
    /// which only the locked path can store.
    #[inline]
    fn release(&mut self, tables: &[Tables], hash: u64, after: &[Option<State>]) -> Option<()> {
        if after.iter().any(Option::is_none) {
            return None;
        }
        let len = std::mem::take(&mut self.len);
        for i in 0..len {
            if let (Some(cell), Some(after)) = (self.cells[i], after[i]) {
                cell.release(&tables[i], hash, after);
            }
        }
        Some(())
    }
}

impl Drop for HeldCells<'_> {
    fn drop(&mut self) {
        for i in 0..self.len {
            if let (Some(cell), Some(before)) = (self.cells[i], self.before[i]) {
                cell.restore(before);
            }
        }
    }
}

/// A strategy whose state is one variant of [`State`].
impl<A: StateVariant> Entries for Table<A> {
    fn shards(&self) -> usize {
        self.shard_count()
    }

    fn write_shard(&self, shard: usize, out: &mut Vec<u8>) -> u64 {
        let mut count = 0;
        self.for_each_entry_in(shard, |key, state| {
            write_entry(out, key, &A::wrap(state));
            count += 1;
        });
        count
    }
}

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

/// The in-memory state of one policy: a table per limit.
pub struct MemoryBinding {
    /// One table per limit, in the policy's order.
    tables: Box<[Tables]>,
    /// The limits in nanosecond ticks, in the same order.
    limits: Box<[LimitRate]>,
    /// What the binding keeps per key besides the limits' state, kept
    /// across a policy's replacement.
    keyed: Arc<Keyed>,
}

/// The blocked keys and the unsettled holds of a binding.
struct Keyed {
    blocks: Blocks,
    holds: Holds,
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
    pub(crate) fn check(&self, key: &[u8], cost: u64) -> Decision {
        if self.keyed.blocks.any() {
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
                // Out of line, as a compound policy's decision.
                Tables::Permits(_) => return self.check_all(key, cost),
            };
            return Decision::from_outcome(outcome, rate.limit, Tick::Nanos);
        }
        self.check_all(key, cost)
    }

    /// [`Self::check`] for a compound policy, every limit's state held
    /// together, and for a concurrency limit, a peek at its permits. Out
    /// of line, so that the single-limit path's code stays short.
    #[inline(never)]
    fn check_all(&self, key: &[u8], cost: u64) -> Decision {
        if let [Tables::Permits(table)] = self.tables() {
            return Self::permitted(table, table.apply(key, PermitOp::Peek { cost })).decision;
        }
        self.decide_with(key, cost, strategy::decide_all)
    }

    /// Decides one request synchronously and charges it whether admitted
    /// or not ([`Call::Charge`]); the in-memory backend cannot fail.
    /// Out of line: a report is rarer than a decision, and the drivers'
    /// decision path stays as short as it was.
    #[inline(never)]
    pub(crate) fn check_charged(&self, key: &[u8], cost: u64) -> Decision {
        if self.keyed.blocks.any() {
            if let Some(decision) = self.check_blocked(key) {
                return decision;
            }
        }
        self.decide_with(key, cost, strategy::charge_all)
    }

    /// Decides `cost` units for `key` on every limit's state, all held
    /// together, with `decide` ([`strategy::decide_all`] or
    /// [`strategy::charge_all`]).
    fn decide_with(&self, key: &[u8], cost: u64, decide: strategy::DecideAll) -> Decision {
        let limits = &self.limits;
        self.update(key, |before, after, now| {
            Decision::from_compound(decide(limits, before, after, now, cost), limits, Tick::Nanos)
        })
    }

    /// The decision for a blocked key: denied until the block ends, the
    /// state untouched.
    #[cold]
    fn check_blocked(&self, key: &[u8]) -> Option<Decision> {
        let now = self.tables()[0].now();
        let until = self.keyed.blocks.until(key, now)?;
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

    /// Runs `f` on the key's state of every limit, all held together: `f`
    /// gets the states before and fills the states after. `f` must be a
    /// pure function of its arguments: it may run twice, when the lock-free
    /// attempt gives way to the locked one.
    fn update<R>(
        &self,
        key: &[u8],
        mut f: impl FnMut(&[Option<State>], &mut [Option<State>], u64) -> R,
    ) -> R {
        let tables = self.tables();
        let now = tables[0].now();
        let hash = tables[0].hash(key);
        if let Some(result) = self.update_in_place(key, hash, now, &mut f) {
            return result;
        }
        self.update_locked(key, hash, now, f)
    }

    /// [`Self::update`] on a key every table holds, without a lock: holds
    /// the key's cell in each table in the policy's order. `None` (nothing
    /// changed) when a table holds no state for the key, a cell stays busy,
    /// or a state becomes absent (a deletion changes the table).
    #[inline]
    fn update_in_place<R>(
        &self,
        key: &[u8],
        hash: u64,
        now: u64,
        f: &mut impl FnMut(&[Option<State>], &mut [Option<State>], u64) -> R,
    ) -> Option<R> {
        let tables = self.tables();
        let n = tables.len();
        let section = reclaim::pin()?;
        let mut held = HeldCells::new();
        for table in tables {
            // An early return drops (and so lets go of) the cells held so far.
            held.push(table.try_hold(&section, hash, key)?);
        }
        let mut after = [None; MAX_LIMITS];
        let result = f(held.before(), &mut after[..n], now);
        held.release(tables, hash, &after[..n])?;
        Some(result)
    }

    /// [`Self::update`] under the shard lock of every table, taken in the
    /// order the limits are listed. Every binding locks its own tables in
    /// that same order and nothing else holds two shard locks, so this
    /// cannot deadlock.
    fn update_locked<R>(
        &self,
        key: &[u8],
        hash: u64,
        now: u64,
        mut f: impl FnMut(&[Option<State>], &mut [Option<State>], u64) -> R,
    ) -> R {
        let tables = self.tables();
        let n = tables.len();
        let mut locked: [Option<Locked<'_>>; MAX_LIMITS] = [const { None }; MAX_LIMITS];
        let mut before = [None; MAX_LIMITS];
        for (i, table) in tables.iter().enumerate() {
            let mut shard = table.lock_shard_of(hash);
            before[i] = shard.get(key);
            locked[i] = Some(shard);
        }
        let mut after = [None; MAX_LIMITS];
        let result = f(&before[..n], &mut after[..n], now);
        for (shard, after) in locked[..n].iter_mut().zip(after) {
            if let Some(shard) = shard {
                shard.set(key, after, now);
            }
        }
        result
    }

    /// Applies a per-key operation synchronously; the in-memory backend
    /// cannot fail. The caller validates the argument
    /// ([`Operation::validate`]). A limiter's [`Call::Operate`]
    /// on this binding comes here.
    pub(crate) fn operate_now(&self, key: &[u8], op: Operation) {
        let limits = &self.limits;
        match op {
            Operation::Block(duration) => {
                let now = self.tables()[0].now();
                let until = now.saturating_add(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
                self.keyed.blocks.set(key, Some(until), now);
            }
            Operation::Reset => {
                self.update(key, |_, after, _| after.fill(None));
                self.keyed.holds.clear(key);
                let now = self.tables()[0].now();
                self.keyed.blocks.set(key, None, now);
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

    /// Reserves synchronously ([`Call::Reserve`]): `cost` units of
    /// `key`, waiting at most `max_delay`.
    pub(crate) fn reserve_now(&self, key: &[u8], cost: u64, max_delay: Duration) -> Reserved {
        if self.keyed.blocks.any() {
            if let Some(decision) = self.check_blocked(key) {
                return Reserved::new(decision, Duration::ZERO, None);
            }
        }
        let limits = &self.limits;
        let max_delay = u64::try_from(max_delay.as_nanos()).unwrap_or(u64::MAX);
        self.update(key, |before, after, now| {
            let reserved = strategy::reserve_all(limits, before, after, now, cost, max_delay);
            let decision = Decision::from_compound(reserved.compound, limits, Tick::Nanos);
            if reserved.beyond_max_delay {
                return Reserved::beyond_max_delay(decision);
            }
            let receipt = (decision.allowed && cost > 0)
                .then(|| Receipt::new(cost, now.saturating_add(reserved.delay), after));
            Reserved::new(decision, Duration::from_nanos(reserved.delay), receipt)
        })
    }

    /// Gives a reservation back synchronously ([`Call::Cancel`]).
    pub(crate) fn cancel_now(&self, key: &[u8], receipt: &Receipt) -> bool {
        let limits = &self.limits;
        self.update(key, |before, after, now| {
            let given = strategy::cancel_all(
                limits,
                before,
                after,
                now,
                receipt.cost(),
                receipt.states(),
                receipt.proceed(),
            );
            if !given {
                after.copy_from_slice(before);
            }
            given
        })
    }

    /// The number of keys that hold state, summed over the policy's limits.
    pub(crate) fn len(&self) -> usize {
        self.tables().iter().map(Tables::len).sum()
    }

    /// Removes all expired state now (the janitor does this on its own).
    pub(crate) fn sweep(&self) {
        self.tables().iter().for_each(Tables::sweep);
    }
}

impl Binding for MemoryBinding {
    #[inline]
    fn call(
        &self,
        call: Call<'_, Self>,
    ) -> impl std::future::Future<Output = Result<Answer, BackendError>> + Send {
        std::future::ready(self.answer(call))
    }

    #[inline]
    fn call_now(&self, call: Call<'_, Self>) -> Option<Result<Answer, BackendError>> {
        // A decision, the call a protected limiter's machine makes on
        // every request, answered inline: through `answer`, which holds
        // every call, it costs about 70 instructions more per decision
        // (`.ci/instruction-budget`, "protected").
        if let Call::Decide { key, cost } = call {
            return Some(Ok(Answer::Decided(self.check(key, cost))));
        }
        Some(self.answer(call))
    }
}

impl MemoryBinding {
    /// The answer to `call`, at once: the in-memory state answers every
    /// call but a lease (a process's own memory has nothing to lease,
    /// refused as unsupported) and one step of several parts (answered
    /// [`Answer::Apart`]: decided part by part), and cannot fail.
    fn answer(&self, call: Call<'_, Self>) -> Result<Answer, BackendError> {
        if let [Tables::Permits(table)] = self.tables() {
            return self.answer_permits(table, call);
        }
        Ok(match call {
            Call::Decide { key, cost } => Answer::Decided(self.check(key, cost)),
            Call::Charge { key, cost } => Answer::Decided(self.check_charged(key, cost)),
            Call::Reserve { key, cost, max_delay } => {
                Answer::Reserved(Box::new(self.reserve_now(key, cost, max_delay)))
            }
            Call::Cancel { key, receipt } => Answer::Cancelled(self.cancel_now(key, receipt)),
            Call::Operate { key, op } => {
                self.operate_now(key, op);
                Answer::Done
            }
            Call::Together(_) => Answer::Apart,
            Call::Reconnect => Answer::Done,
            Call::Hold { key, id, estimate } => Answer::Decided(self.hold_now(key, id, estimate)),
            Call::Settle { key, id, used } => Answer::Settled(self.settle_now(key, id, used)),
            Call::Lease { .. } | Call::Permit { .. } => return Err(call.unsupported()),
        })
    }

    /// Decides `estimate` units for `key` and, admitted with at least one
    /// unit, records the hold `id` with the decision's time
    /// ([`Call::Hold`]).
    fn hold_now(&self, key: &[u8], id: HoldId, estimate: u64) -> Decision {
        if self.keyed.blocks.any() {
            if let Some(decision) = self.check_blocked(key) {
                return decision;
            }
        }
        let limits = &self.limits;
        let (decision, now) = self.update(key, |before, after, now| {
            let compound = strategy::decide_all(limits, before, after, now, estimate);
            (Decision::from_compound(compound, limits, Tick::Nanos), now)
        });
        if decision.allowed && estimate > 0 {
            let hold = HoldRecord::taken(id, estimate, now, limits);
            self.keyed.holds.record(key, hold, || self.tables()[0].clock());
        }
        decision
    }

    /// Settles the hold `id` of `key` with `used` units, once
    /// ([`Call::Settle`]).
    fn settle_now(&self, key: &[u8], id: HoldId, used: u64) -> Settled {
        let Some(hold) = self.keyed.holds.take(key, id) else {
            return Settled::new(false, self.check(key, 0));
        };
        let limits = &self.limits;
        let decision = self.update(key, |before, after, now| {
            let compound = holds::settle_all(limits, before, after, now, &hold, used);
            Decision::from_compound(compound, limits, Tick::Nanos)
        });
        Settled::new(true, decision)
    }

    /// The answer to `call` on a concurrency limit's permits: a decision
    /// (a report's or a reservation's too) is whether a permit would be
    /// granted now, holding nothing; a reset frees the key's permits, a
    /// block denies its acquisitions until it ends, and a refund or a
    /// penalty changes nothing (nothing is charged to give back).
    fn answer_permits(&self, table: &PermitTable, call: Call<'_, Self>) -> Result<Answer, BackendError> {
        let peek = |key, cost| {
            self.permit_unblocked(table, key, PermitOp::Peek { cost })
                .decision
        };
        Ok(match call {
            Call::Permit { key, op } => Answer::Permitted(self.permit_unblocked(table, key, op)),
            Call::Decide { key, cost } | Call::Charge { key, cost } => Answer::Decided(peek(key, cost)),
            Call::Reserve { key, cost, .. } => {
                Answer::Reserved(Box::new(Reserved::new(peek(key, cost), Duration::ZERO, None)))
            }
            Call::Cancel { .. } => Answer::Cancelled(false),
            Call::Operate { key, op } => {
                match op {
                    Operation::Reset => table.clear(key),
                    Operation::Block(_) => self.operate_now(key, op),
                    Operation::Refund(_) | Operation::Penalty(_) => {}
                }
                Answer::Done
            }
            Call::Together(_) => Answer::Apart,
            Call::Reconnect => Answer::Done,
            Call::Lease { .. } | Call::Hold { .. } | Call::Settle { .. } => return Err(call.unsupported()),
        })
    }

    /// `op` on `key`'s permits, an acquisition of a blocked key denied
    /// until the block ends.
    fn permit_unblocked(&self, table: &PermitTable, key: &[u8], op: PermitOp) -> Permitted {
        self.permit_keeping(table, key, op, false).0
    }

    /// `op` on `key`'s permits as [`Call::Permit`] asks it, and when it
    /// made a permit, the key's entry, where the permit is released and
    /// extended without another lookup of the key; `None` when the policy
    /// is not a concurrency limit.
    pub(crate) fn acquire_keeping(
        &self,
        key: &[u8],
        op: PermitOp,
    ) -> Option<(Permitted, Option<Arc<PermitEntry>>)> {
        match self.tables() {
            [Tables::Permits(table)] => Some(self.permit_keeping(table, key, op, true)),
            _ => None,
        }
    }

    /// [`Self::permit_unblocked`], with the key's entry when `keep` asks for
    /// it and `op` made a permit.
    fn permit_keeping(
        &self,
        table: &PermitTable,
        key: &[u8],
        op: PermitOp,
        keep: bool,
    ) -> (Permitted, Option<Arc<PermitEntry>>) {
        let acquires = matches!(op, PermitOp::Acquire { .. } | PermitOp::Peek { .. });
        if acquires && self.keyed.blocks.any() {
            let now = table.now();
            if let Some(until) = self.keyed.blocks.until(key, now) {
                let peek = Self::permitted(table, table.apply(key, PermitOp::Peek { cost: 0 }));
                let reset = peek.decision.reset.as_nanos() as u64;
                let limit = peek.decision.limit;
                return (
                    peek.with_decision(Decision::blocked(until - now, reset, limit, Tick::Nanos)),
                    None,
                );
            }
        }
        if keep {
            let (outcome, entry) = table.apply_keeping(key, op);
            return (Self::permitted(table, outcome), entry);
        }
        (Self::permitted(table, table.apply(key, op)), None)
    }

    /// The answer `outcome` gives in `table`.
    fn permitted(table: &PermitTable, outcome: PermitOutcome) -> Permitted {
        Permitted::from_outcome(outcome, table.limit(), Tick::Nanos)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;

    /// Two threads decide the same few keys of a compound policy on one
    /// shard: new keys are inserted under the locks (growing the slot
    /// array), known ones decided without them, and a reset deletes state
    /// beside them. Every key gets exactly its tightest limit. Small enough
    /// to run under Miri.
    #[test]
    fn compound_decisions_with_and_without_locks_admit_exactly_the_tightest_limit() {
        let keys: u64 = if cfg!(miri) { 12 } else { 500 };
        let clock = ManualClock::new(Duration::from_secs(1_000));
        let backend = MemoryBackend::new().clock(clock).shards(1).reclaim(false);
        let policy = Policy::compound([
            Limit::new(Strategy::FixedWindow, 2, Duration::from_secs(60)).unwrap(),
            Limit::new(Strategy::TokenBucket, 3, Duration::from_secs(60)).unwrap(),
        ])
        .unwrap();
        let binding = backend
            .bind(&Scope {
                prefix: "t",
                resource: "",
                policy: &policy,
            })
            .unwrap();
        let admitted = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..2 {
                let (binding, admitted) = (&binding, &admitted);
                s.spawn(move || {
                    for i in 0..keys * 3 {
                        let key = format!("k{}", (i + t * keys / 2) % keys);
                        if binding.check(key.as_bytes(), 1).allowed {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                        let other = format!("r{t}-{}", i % 5);
                        binding.check(other.as_bytes(), 1);
                        binding.operate_now(other.as_bytes(), Operation::Reset);
                    }
                });
            }
        });
        assert_eq!(admitted.load(Ordering::Relaxed), keys * 2);
        for k in 0..keys {
            let peek = binding.check(format!("k{k}").as_bytes(), 0);
            assert_eq!((peek.remaining, peek.bound_by), (0, 0));
        }
    }
}
