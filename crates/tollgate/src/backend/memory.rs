//! The in-memory backend: the embedded default.

use std::sync::Arc;
use std::time::Duration;

use super::janitor::{self, Sweep};
use super::table::Table;
use super::{Backend, Binding, Scope};
use crate::clock::{Clock, ClockHandle, SharedClock};
use crate::decision::{Decision, Tick};
use crate::error::{BackendError, ConfigError, Error};
use crate::strategy::Strategy;
use crate::strategy::{Algorithm, FixedWindow, SlidingWindow, TokenBucket};

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

    fn table<A: Algorithm + 'static>(&self, scope: &Scope<'_>) -> Arc<Table<A>>
    where
        Table<A>: Sweep,
    {
        let rate = scope.policy.rate_nanos();
        let table = Arc::new(Table::<A>::new(
            rate,
            self.clock.clone(),
            self.shards,
            self.reclaim,
        ));
        if self.reclaim {
            let weak = Arc::downgrade(&table);
            janitor::register(weak, self.sweep_interval);
        }
        table
    }
}

impl<A: Algorithm> Sweep for Table<A> {
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
        let tables = match scope.policy.strategy() {
            Strategy::FixedWindow => Tables::Fixed(self.table(scope)),
            Strategy::SlidingWindow => Tables::Sliding(self.table(scope)),
            // The leaky-bucket meter runs the same GCRA as the token bucket.
            Strategy::TokenBucket | Strategy::LeakyBucket => Tables::Gcra(self.table(scope)),
        };
        Ok(MemoryBinding { tables })
    }
}

enum Tables {
    Fixed(Arc<Table<FixedWindow>>),
    Sliding(Arc<Table<SlidingWindow>>),
    Gcra(Arc<Table<TokenBucket>>),
}

/// The in-memory state of one policy.
pub struct MemoryBinding {
    tables: Tables,
}

impl std::fmt::Debug for MemoryBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let strategy = match &self.tables {
            Tables::Fixed(_) => "fixed_window",
            Tables::Sliding(_) => "sliding_window",
            Tables::Gcra(_) => "gcra",
        };
        f.debug_struct("MemoryBinding")
            .field("table", &strategy)
            .field("keys", &self.len())
            .finish()
    }
}

impl MemoryBinding {
    /// Decides one request synchronously; the in-memory backend cannot fail.
    #[inline]
    pub fn check(&self, key: &[u8], cost: u64) -> Decision {
        let (outcome, rate) = match &self.tables {
            Tables::Fixed(t) => (t.apply(key, cost), t.rate()),
            Tables::Sliding(t) => (t.apply(key, cost), t.rate()),
            Tables::Gcra(t) => (t.apply(key, cost), t.rate()),
        };
        Decision::from_outcome(outcome, rate.limit, Tick::Nanos)
    }

    /// The number of keys that currently hold state.
    pub fn len(&self) -> usize {
        match &self.tables {
            Tables::Fixed(t) => t.len(),
            Tables::Sliding(t) => t.len(),
            Tables::Gcra(t) => t.len(),
        }
    }

    /// Whether no key holds state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes all expired state now (the janitor does this on its own).
    pub fn sweep(&self) {
        match &self.tables {
            Tables::Fixed(t) => t.sweep(),
            Tables::Sliding(t) => t.sweep(),
            Tables::Gcra(t) => t.sweep(),
        };
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
