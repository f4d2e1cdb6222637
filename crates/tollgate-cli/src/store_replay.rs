//! `simulate --backend redis` and `simulate --backend postgres`: the same
//! replay as in memory, decided by a real store (the Redis backend's Lua
//! scripts on a server, the PostgreSQL backend's SQL functions on a
//! database), with the trace's time passed to it as the caller's clock.
//!
//! Each run keeps its state apart under a name of its own made of
//! `<run>`, the process id and the start time, so runs never see each
//! other's state (nor an application's), and removes that state when it
//! ends, whether the replay succeeded, failed or was interrupted with
//! Ctrl-C. How a store connects, names the run's state and removes it is
//! its [`Store`] (`redis_replay`, `postgres_replay`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::runtime::Runtime;
use tollgate::backend::Backend;
use tollgate::clock::ManualClock;
use tollgate::{Decision, Limiter};

use crate::error::CliError;
use crate::policies::Policies;
use crate::replay::{self, Stats};
use crate::targets::Targets;
use crate::trace::{Request, Trace};

/// The start of the name of every run's state: the Redis key prefix
/// `tollgate-simulate/<run>`, the PostgreSQL schema
/// `tollgate_simulate_<run>`.
pub const KEY_PREFIX: &str = "tollgate-simulate";

/// How long state outlives its expiry on the store's clock.
///
/// Expiry runs on the store's clock while the backend decides on the
/// trace's clock, which can run faster or slower than real time and even
/// step back (unsorted traces). A grace far longer than any replay keeps
/// all state until the run removes it, so expiry never changes a decision;
/// the backends treat expired state as absent anyway. If a run is killed
/// before it can clean up, its state disappears by itself after this long
/// (plus the state's own lifetime on the trace's clock) where the store
/// expires state on its own (Redis keys).
pub const EXPIRY_GRACE: Duration = Duration::from_secs(24 * 3600);

/// How long one decision may take before the replay fails.
pub const DECISION_TIMEOUT: Duration = Duration::from_secs(5);

/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What differs between the stores a replay runs on: connecting, the
/// run's own place for its state, the error of a failed decision, and
/// removing the run's state.
pub trait Store: Sized {
    /// The library's backend on this store.
    type Backend: Backend + Clone;

    /// Connects to the store at `url` for the run `run` (`<pid>-<start>`),
    /// with a backend deciding on `clock`'s time, keeping state
    /// [`EXPIRY_GRACE`] past its expiry and giving up after
    /// [`DECISION_TIMEOUT`] (connecting: [`CONNECT_TIMEOUT`]).
    async fn connect(url: &str, run: &str, clock: ManualClock) -> Result<Self, CliError>;

    /// The backend the run's limiters decide on.
    fn backend(&self) -> &Self::Backend;

    /// The key prefix of the run's limiters.
    fn key_prefix(&self) -> String;

    /// The error of a decision that failed on the store, for the request
    /// on trace line `line`.
    fn decision_error(line: u64, source: tollgate::Error) -> CliError;

    /// Removes all the run's state from the store.
    async fn cleanup(&mut self) -> Result<(), CliError>;
}

/// Where a request's decision goes once it is made.
pub type Sink<'a> = dyn FnMut(&Request, usize, &Decision) -> Result<(), CliError> + 'a;

/// A replay's run on a store, whichever the store.
pub trait StoreRun {
    /// Replays `trace` under `targets` on the store, handing each decision
    /// to `sink`.
    ///
    /// # Errors
    ///
    /// A target whose policy the backend rejects
    /// ([`Policies::limiter_error`]), a decision that failed on the store,
    /// [`CliError::Interrupted`] after Ctrl-C, or `sink`'s error.
    fn replay(
        &mut self,
        policies: &Policies,
        trace: &Trace,
        targets: &Targets,
        sink: &mut Sink<'_>,
    ) -> Result<Vec<Stats>, CliError>;

    /// Removes the run's state from the store.
    ///
    /// # Errors
    ///
    /// The store's cleanup error, naming what was left behind and how to
    /// remove it.
    fn cleanup(&mut self) -> Result<(), CliError>;
}

/// A connection to the store a replay runs on, with the manual clock the
/// backend reads.
pub struct StoreReplay<S> {
    runtime: Runtime,
    store: S,
    clock: ManualClock,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl<S: Store> StoreReplay<S> {
    /// Connects to the store at `url` and starts a run of its own. From
    /// here on, Ctrl-C stops the replay at the next decision and the run's
    /// state is still removed.
    ///
    /// # Errors
    ///
    /// The store's connection error naming the URL's problem, or
    /// [`CliError::Runtime`].
    pub fn connect(url: &str) -> Result<Self, CliError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(CliError::Runtime)?;
        let clock = ManualClock::default();
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let run = format!("{}-{started}", std::process::id());
        let store = runtime.block_on(S::connect(url, &run, clock.clone()))?;
        #[cfg(unix)]
        let interrupt = {
            let _guard = runtime.enter();
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .map_err(CliError::Runtime)?
        };
        Ok(Self {
            runtime,
            store,
            clock,
            #[cfg(unix)]
            interrupt,
        })
    }

    /// Replays one request on the store: sets the backend's clock to
    /// `nanos`, the request's time on the trace's clock, and returns
    /// `limiter`'s decision for `cost` units of `key`.
    ///
    /// # Errors
    ///
    /// The store's decision error, and [`CliError::Interrupted`] after
    /// Ctrl-C.
    fn replay_request(
        &mut self,
        limiter: &Limiter<S::Backend>,
        line: u64,
        nanos: u64,
        key: &str,
        cost: u64,
    ) -> Result<Decision, CliError> {
        self.clock.set_nanos(nanos);
        let decision = limiter.allow_n(key, cost);
        #[cfg(unix)]
        let interrupt = &mut self.interrupt;
        self.runtime.block_on(async {
            #[cfg(unix)]
            let result = tokio::select! {
                biased;
                _ = interrupt.recv() => return Err(CliError::Interrupted),
                result = decision => result,
            };
            #[cfg(not(unix))]
            let result = decision.await;
            result.map_err(|source| S::decision_error(line, source))
        })
    }
}

impl<S: Store> StoreRun for StoreReplay<S> {
    fn replay(
        &mut self,
        policies: &Policies,
        trace: &Trace,
        targets: &Targets,
        sink: &mut Sink<'_>,
    ) -> Result<Vec<Stats>, CliError> {
        let limiters = replay::limiters(targets, self.store.backend(), &self.store.key_prefix())
            .map_err(|(target, err)| policies.limiter_error(targets, target, err))?;
        replay::replay_through(
            trace,
            targets,
            |request, target, key| {
                self.replay_request(&limiters[target], request.line, request.nanos, key, request.cost)
            },
            sink,
        )
    }

    fn cleanup(&mut self) -> Result<(), CliError> {
        self.runtime.block_on(self.store.cleanup())
    }
}
