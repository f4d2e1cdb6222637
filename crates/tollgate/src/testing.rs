//! Stores and a clock for tests and examples: a reference [`MapStore`], a
//! [`FlakyStore`] that fails on demand, for exercising fail policies, and
//! a [`TokioClock`] that follows tokio's (pausable) time, for waiting.

use std::collections::HashMap;
use std::future::{ready, Future};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::backend::store::Store;
use crate::clock::{Clock, ManualClock, SharedClock, SystemClock};
use crate::error::{BackendError, BackendErrorKind};

/// Stored values with their expiry in nanoseconds since the epoch.
type Entries = HashMap<Vec<u8>, (Vec<u8>, u64)>;

/// A reference [`Store`]: a mutex-guarded hash map with expiry on its own
/// clock. It shows the shape a real store implementation takes; it is not
/// meant for production (it never evicts keys that are not read again).
pub struct MapStore {
    entries: Mutex<Entries>,
    clock: SharedClock,
}

impl Default for MapStore {
    fn default() -> Self {
        Self::new(SystemClock)
    }
}

impl MapStore {
    /// An empty store whose expiry follows `clock`.
    pub fn new(clock: impl Clock) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            clock: Arc::new(clock),
        }
    }

    /// An empty store on a manual clock.
    pub fn with_manual_clock(clock: &ManualClock) -> Self {
        Self::new(clock.clone())
    }

    /// The number of stored, unexpired keys.
    pub fn len(&self) -> usize {
        let now = self.clock.now_nanos();
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.values().filter(|(_, expiry)| *expiry > now).count()
    }

    /// Whether the store holds no unexpired key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Store for MapStore {
    fn get(&self, key: &[u8]) -> impl Future<Output = Result<Option<Vec<u8>>, BackendError>> + Send {
        let now = self.clock.now_nanos();
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let value = entries
            .get(key)
            .filter(|(_, expiry)| *expiry > now)
            .map(|(v, _)| v.clone());
        ready(Ok(value))
    }

    fn set(
        &self,
        key: &[u8],
        value: Vec<u8>,
        ttl: Duration,
    ) -> impl Future<Output = Result<(), BackendError>> + Send {
        let expiry = self
            .clock
            .now_nanos()
            .saturating_add(u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX));
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.insert(key.to_vec(), (value, expiry));
        ready(Ok(()))
    }

    fn delete(&self, key: &[u8]) -> impl Future<Output = Result<(), BackendError>> + Send {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.remove(key);
        ready(Ok(()))
    }
}

/// Wraps a store and fails every operation while switched to failing.
///
/// A clone is a handle on the same store, switch and counters: keep one
/// beside the backend the other was given to, to switch it while a limiter
/// uses it.
pub struct FlakyStore<S> {
    shared: Arc<Flaky<S>>,
}

/// What the clones of a [`FlakyStore`] share.
struct Flaky<S> {
    inner: S,
    failing: AtomicBool,
    failures: AtomicU64,
    operations: AtomicU64,
}

impl<S> Clone for FlakyStore<S> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: Store> FlakyStore<S> {
    /// Wraps `inner`, initially healthy.
    pub fn new(inner: S) -> Self {
        Self {
            shared: Arc::new(Flaky {
                inner,
                failing: AtomicBool::new(false),
                failures: AtomicU64::new(0),
                operations: AtomicU64::new(0),
            }),
        }
    }

    /// Makes every following operation fail (`true`) or succeed (`false`),
    /// through this handle and every clone of it.
    pub fn set_failing(&self, failing: bool) {
        self.shared.failing.store(failing, Ordering::SeqCst);
    }

    /// How many operations have failed so far.
    pub fn failures(&self) -> u64 {
        self.shared.failures.load(Ordering::SeqCst)
    }

    /// How many operations (get, set, delete) were asked of the store,
    /// failed or not.
    pub fn operations(&self) -> u64 {
        self.shared.operations.load(Ordering::SeqCst)
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.shared.inner
    }

    fn check(&self) -> Result<(), BackendError> {
        let shared = &*self.shared;
        shared.operations.fetch_add(1, Ordering::SeqCst);
        if shared.failing.load(Ordering::SeqCst) {
            shared.failures.fetch_add(1, Ordering::SeqCst);
            Err(BackendError::new(
                BackendErrorKind::Unavailable,
                "the store is switched to failing",
            ))
        } else {
            Ok(())
        }
    }
}

impl<S: Store> Store for FlakyStore<S> {
    async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, BackendError> {
        self.check()?;
        self.shared.inner.get(key).await
    }

    async fn set(&self, key: &[u8], value: Vec<u8>, ttl: Duration) -> Result<(), BackendError> {
        self.check()?;
        self.shared.inner.set(key, value, ttl).await
    }

    async fn delete(&self, key: &[u8]) -> Result<(), BackendError> {
        self.check()?;
        self.shared.inner.delete(key).await
    }
}

/// A clock that follows tokio's time ([`tokio::time::Instant`]) from a
/// given instant since the epoch: under tokio's paused time
/// (`#[tokio::test(start_paused = true)]`), a limiter on it and the timers
/// of [`Limiter::acquire`](crate::Limiter::acquire) advance together, so
/// tests of waiting run at once and exactly.
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    start: tokio::time::Instant,
    epoch_nanos: u64,
}

impl TokioClock {
    /// A clock reading `since_epoch` now, and advancing with tokio's time.
    /// Call it inside the runtime whose time it follows.
    pub fn new(since_epoch: Duration) -> Self {
        Self {
            start: tokio::time::Instant::now(),
            epoch_nanos: u64::try_from(since_epoch.as_nanos()).unwrap_or(u64::MAX),
        }
    }
}

impl Clock for TokioClock {
    fn now_nanos(&self) -> u64 {
        let elapsed = u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.epoch_nanos.saturating_add(elapsed)
    }
}
