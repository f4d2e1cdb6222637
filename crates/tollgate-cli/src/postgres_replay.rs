//! `simulate --backend postgres`: the same replay, decided by the
//! PostgreSQL backend's SQL functions on a real database, with the trace's
//! time passed to them as the caller's clock.
//!
//! Each run installs the backend into a schema of its own,
//! `tollgate_simulate_<run>`, where `<run>` is the process id and the start
//! time, so runs never see each other's state (nor an application's), and
//! drops that schema when it ends, whether the replay succeeded, failed or
//! was interrupted with Ctrl-C. The role needs `CREATE` on the database.

use std::time::{SystemTime, UNIX_EPOCH};

use tokio::runtime::Runtime;
use tollgate::clock::ManualClock;
use tollgate::{Decision, Limiter};
use tollgate_postgres::PostgresBackend;

use crate::error::CliError;
use crate::redis_replay::{CONNECT_TIMEOUT, DECISION_TIMEOUT, EXPIRY_GRACE, KEY_PREFIX};
use crate::replay;
use crate::targets::Targets;

/// A connection to the database a replay runs on, with the manual clock the
/// SQL functions read.
pub struct PostgresReplay {
    runtime: Runtime,
    backend: PostgresBackend,
    clock: ManualClock,
    schema: String,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl PostgresReplay {
    /// Connects to the database at `url` and installs the backend into a
    /// schema of this run's own. From here on, Ctrl-C stops the replay at
    /// the next decision and the schema is still dropped.
    ///
    /// # Errors
    ///
    /// [`CliError::PostgresConnect`] naming the URL's problem (unparseable,
    /// refused, wrong password, no answer in time) or the missing rights.
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
        let schema = format!(
            "{}_{}_{started}",
            KEY_PREFIX.replace('-', "_"),
            std::process::id()
        );
        let backend = runtime
            .block_on(
                PostgresBackend::builder(url)
                    .schema(schema.as_str())
                    .caller_clock(clock.clone())
                    .expiry_grace(EXPIRY_GRACE)
                    .timeout(DECISION_TIMEOUT)
                    .connect_timeout(CONNECT_TIMEOUT)
                    .sweep_interval(None)
                    .connect(),
            )
            .map_err(|source| CliError::PostgresConnect { source })?;
        #[cfg(unix)]
        let interrupt = {
            let _guard = runtime.enter();
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .map_err(CliError::Runtime)?
        };
        Ok(Self {
            runtime,
            backend,
            clock,
            schema,
            #[cfg(unix)]
            interrupt,
        })
    }

    /// A limiter on the database for each target of `targets`
    /// ([`replay::limiters`]; the schema is the run's own, so the key
    /// prefix is the library's).
    ///
    /// # Errors
    ///
    /// The index of the target whose policy the backend rejects, with the
    /// library's error.
    pub fn limiters(
        &self,
        targets: &Targets,
    ) -> Result<Vec<Limiter<PostgresBackend>>, (usize, tollgate::Error)> {
        replay::limiters(targets, &self.backend, KEY_PREFIX)
    }

    /// Replays one request on the database: sets the functions' clock to
    /// `nanos`, the request's time on the trace's clock, and returns
    /// `limiter`'s decision for `cost` units of `key`.
    ///
    /// # Errors
    ///
    /// [`CliError::PostgresDecision`] when the database fails, and
    /// [`CliError::Interrupted`] after Ctrl-C.
    pub fn replay_request(
        &mut self,
        limiter: &Limiter<PostgresBackend>,
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
            result.map_err(|source| CliError::PostgresDecision { line, source })
        })
    }

    /// Drops this run's schema, its table and functions with it.
    ///
    /// # Errors
    ///
    /// [`CliError::PostgresCleanup`] naming the schema left behind.
    pub fn cleanup(&mut self) -> Result<(), CliError> {
        let result = self.runtime.block_on(self.backend.drop_schema());
        result.map_err(|err| CliError::PostgresCleanup {
            schema: self.schema.clone(),
            reason: err.to_string(),
        })
    }
}
