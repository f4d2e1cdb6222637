//! `simulate --backend redis`: the same replay, decided by the Redis
//! backend's Lua scripts on a real server, with the trace's time passed to
//! the scripts as the caller's clock.
//!
//! Each run writes its state under its own key prefix,
//! `tollgate-simulate/<run>`, where `<run>` is the process id and the start
//! time, so runs never see each other's state (nor an application's), and
//! deletes every key under that prefix (`SCAN` and `DEL`) when it ends,
//! whether the replay succeeded, failed or was interrupted with Ctrl-C.
//! Under it, keys follow the library's layout for a resource-scoped
//! limiter: the flags' policy and a policy file's default under the empty
//! resource, the file's resources under their names, compound policies in
//! the layout of several limits.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::runtime::Runtime;
use tollgate::__private::redact_url;
use tollgate::clock::ManualClock;
use tollgate::{Decision, Limiter};
use tollgate_redis::redis;
use tollgate_redis::{ConnectError, RedisBackend};

use crate::error::CliError;
use crate::replay;
use crate::targets::Targets;

/// The start of every state key a replay writes; the run's identifier
/// follows, making the run's key prefix `tollgate-simulate/<run>` (keys such
/// as `tollgate-simulate/<run>::<strategy>:<key>`).
pub const KEY_PREFIX: &str = "tollgate-simulate";

/// How long state keys outlive their state on the server's clock.
///
/// Key expiry runs on the server's clock while the scripts decide on the
/// trace's clock, which can run faster or slower than real time and even
/// step back (unsorted traces). A grace far longer than any replay keeps
/// every key until the run deletes it, so expiry never changes a decision;
/// the scripts treat expired state as absent anyway. If a run is killed
/// before it can clean up, its keys disappear by themselves after this long
/// (plus the state's own lifetime on the trace's clock).
pub const EXPIRY_GRACE: Duration = Duration::from_secs(24 * 3600);

/// How long one decision may take before the replay fails.
pub const DECISION_TIMEOUT: Duration = Duration::from_secs(5);

/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to the Redis server a replay runs on, with the manual clock
/// the scripts read.
pub struct RedisReplay {
    runtime: Runtime,
    backend: RedisBackend,
    /// A plain connection for deleting the run's keys.
    admin: redis::aio::MultiplexedConnection,
    clock: ManualClock,
    run: String,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl RedisReplay {
    /// Connects to the server at `url` and starts a run with a fresh key
    /// prefix. From here on, Ctrl-C stops the replay at the next decision
    /// and the run's keys are still deleted.
    ///
    /// # Errors
    ///
    /// [`CliError::RedisConnect`] naming the URL's problem (unparseable,
    /// refused, wrong password, not a Redis server, no answer in time).
    pub fn connect(url: &str) -> Result<Self, CliError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(CliError::Runtime)?;
        let clock = ManualClock::default();
        let connect_error = |source: ConnectError| CliError::RedisConnect {
            url: redact_url(url),
            source,
        };
        let backend = runtime
            .block_on(
                RedisBackend::builder()
                    .caller_clock(clock.clone())
                    .expiry_grace(EXPIRY_GRACE)
                    .timeout(DECISION_TIMEOUT)
                    .connect_timeout(CONNECT_TIMEOUT)
                    .connect(url),
            )
            .map_err(connect_error)?;
        let admin = runtime
            .block_on(async {
                let client = redis::Client::open(url)?;
                tokio::time::timeout(CONNECT_TIMEOUT, client.get_multiplexed_async_connection())
                    .await
                    .map_err(|_| redis::RedisError::from((redis::ErrorKind::Io, "connecting timed out")))?
            })
            .map_err(|source| CliError::RedisAdmin {
                url: redact_url(url),
                source,
            })?;
        #[cfg(unix)]
        let interrupt = {
            let _guard = runtime.enter();
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .map_err(CliError::Runtime)?
        };
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        Ok(Self {
            runtime,
            backend,
            admin,
            clock,
            run: format!("{}-{started}", std::process::id()),
            #[cfg(unix)]
            interrupt,
        })
    }

    /// This run's key prefix, `tollgate-simulate/<run>`: neither `/` nor the
    /// run's digits and `-` are escaped in keys, so every key of the run
    /// starts with it and a `:`.
    pub fn prefix(&self) -> String {
        format!("{KEY_PREFIX}/{}", self.run)
    }

    /// The `SCAN` pattern that matches every key of this run.
    pub fn pattern(&self) -> String {
        format!("{}:*", self.prefix())
    }

    /// A limiter on the server for each target of `targets`, keyed under
    /// this run's prefix ([`replay::limiters`]).
    ///
    /// # Errors
    ///
    /// The index of the target whose policy the Redis backend rejects (its
    /// arithmetic would not be exact in Lua's doubles, or a policy it cannot
    /// decide), with the library's error.
    pub fn limiters(
        &self,
        targets: &Targets,
    ) -> Result<Vec<Limiter<RedisBackend>>, (usize, tollgate::Error)> {
        replay::limiters(targets, &self.backend, &self.prefix())
    }

    /// Replays one request on the server: sets the scripts' clock to
    /// `nanos`, the request's time on the trace's clock, and returns
    /// `limiter`'s decision for `cost` units of `key`.
    ///
    /// # Errors
    ///
    /// [`CliError::RedisDecision`] when the server fails, and
    /// [`CliError::Interrupted`] after Ctrl-C.
    pub fn replay_request(
        &mut self,
        limiter: &Limiter<RedisBackend>,
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
            result.map_err(|source| CliError::RedisDecision { line, source })
        })
    }

    /// Deletes every key of this run (`SCAN MATCH` on its prefix, then `DEL`)
    /// and returns how many there were.
    ///
    /// # Errors
    ///
    /// [`CliError::RedisCleanup`] naming the pattern left behind.
    pub fn cleanup(&mut self) -> Result<u64, CliError> {
        let pattern = self.pattern();
        let conn = &mut self.admin;
        let work = async {
            let mut cursor: u64 = 0;
            let mut deleted = 0;
            loop {
                let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1_000)
                    .query_async(conn)
                    .await?;
                if !keys.is_empty() {
                    let n: u64 = redis::cmd("DEL").arg(&keys).query_async(conn).await?;
                    deleted += n;
                }
                if next == 0 {
                    return Ok(deleted);
                }
                cursor = next;
            }
        };
        let result = self.runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(60), work)
                .await
                .unwrap_or_else(|_| Err(redis::RedisError::from((redis::ErrorKind::Io, "timed out"))))
        });
        result.map_err(|source| CliError::RedisCleanup { pattern, source })
    }
}
