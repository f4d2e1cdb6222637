//! Custom stores: implement [`Store`] for your own storage and use it through
//! [`StoreBackend`].
//!
//! The adapter runs each decision as get → decide → set (or delete) while
//! holding one of a fixed number of key-sharded async locks, so decisions on
//! the same key made **through one `StoreBackend`** never interleave, and
//! memory does not grow with the number of keys. Atomicity across processes
//! sharing the same storage is a property of the store, not of this adapter:
//! two processes each running a `StoreBackend` over a plain key-value store
//! can race between their get and set. Use a backend with server-side atomic
//! decisions (such as the Redis backend) for shared limits.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::codec::{decode_state, encode_state};
use super::keys::namespace;
use super::{Backend, Binding, Scope};
use crate::clock::{Clock, SharedClock, SystemClock};
use crate::decision::{Decision, Tick};
use crate::error::{BackendError, ConfigError, Error};
use crate::strategy::Strategy;
use crate::strategy::{self, Rate};

/// The number of key-sharded locks per adapter unless configured otherwise.
pub const DEFAULT_LOCKS: usize = 1024;

/// A key-value store with expiry, the minimal shape the adapter needs.
///
/// Keys are the byte strings of the [key
/// layout](crate::_documentation::semantics_notes#key-layout); values are
/// opaque bytes (see [`crate::backend::encode_state`]).
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

/// What every binding of one adapter shares.
struct Shared<S> {
    store: Arc<S>,
    locks: Arc<[tokio::sync::Mutex<()>]>,
    hasher: ahash::RandomState,
    clock: SharedClock,
    tick: Tick,
}

impl<S> Clone for Shared<S> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            locks: self.locks.clone(),
            hasher: self.hasher.clone(),
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

fn locks(count: usize) -> Arc<[tokio::sync::Mutex<()>]> {
    (0..count).map(|_| tokio::sync::Mutex::new(())).collect()
}

impl<S: Store> StoreBackend<S> {
    /// An adapter over `store` on the system clock with [`DEFAULT_LOCKS`]
    /// locks and nanosecond ticks.
    pub fn new(store: S) -> Self {
        Self {
            shared: Shared {
                store: Arc::new(store),
                locks: locks(DEFAULT_LOCKS),
                hasher: ahash::RandomState::new(),
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
        self.shared.locks = locks(count.clamp(1, 1 << 20).next_power_of_two());
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

    fn bind(&self, scope: &Scope<'_>) -> Result<StoreBinding<S>, Error> {
        let rate = match self.shared.tick {
            Tick::Nanos => scope.policy.rate_nanos(),
            Tick::Micros => scope.policy.rate_micros(),
        };
        if rate.window == 0 {
            return Err(ConfigError::new("window", "is shorter than one tick of the store's clock").into());
        }
        Ok(StoreBinding {
            shared: self.shared.clone(),
            namespace: namespace(scope.prefix, scope.resource, scope.policy.strategy()),
            strategy: scope.policy.strategy(),
            rate,
        })
    }
}

/// One policy served by a [`StoreBackend`].
pub struct StoreBinding<S> {
    shared: Shared<S>,
    namespace: Vec<u8>,
    strategy: Strategy,
    rate: Rate,
}

impl<S: Store> StoreBinding<S> {
    /// The store this binding reads and writes.
    pub fn store(&self) -> &S {
        &self.shared.store
    }

    async fn run(&self, key: &[u8], cost: u64) -> Result<Decision, BackendError> {
        let shared = &self.shared;
        let mut full = Vec::with_capacity(self.namespace.len() + key.len());
        full.extend_from_slice(&self.namespace);
        full.extend_from_slice(key);
        let lock = &shared.locks[shared.hasher.hash_one(&full) as usize & (shared.locks.len() - 1)];
        let _guard = lock.lock().await;
        let before = match shared.store.get(&full).await? {
            Some(bytes) => Some(decode_state(&bytes)?),
            None => None,
        };
        // Clamped as the strategies clamp it, so the expiry below measures
        // from the time the decision used.
        let now = strategy::clamp_time(shared.tick.from_nanos(shared.clock.now_nanos()));
        let (outcome, after) = strategy::decide(self.strategy, &self.rate, before, now, cost);
        match after {
            Some(state) if Some(state) != before => {
                let ttl = strategy::expires_at(&self.rate, &state)
                    .saturating_sub(now)
                    .max(1);
                shared
                    .store
                    .set(&full, encode_state(&state), shared.tick.duration(ttl))
                    .await?;
            }
            Some(_) => {}
            None if before.is_some() => shared.store.delete(&full).await?,
            None => {}
        }
        Ok(Decision::from_outcome(outcome, self.rate.limit, shared.tick))
    }
}

impl<S: Store> Binding for StoreBinding<S> {
    fn apply(&self, key: &[u8], cost: u64) -> impl Future<Output = Result<Decision, BackendError>> + Send {
        self.run(key, cost)
    }
}
