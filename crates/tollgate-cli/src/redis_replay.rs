//! `simulate --backend redis`: the replay ([`crate::store_replay`]) decided
//! by the Redis backend's Lua scripts on a real server.
//!
//! Each run writes its state under its own key prefix,
//! `tollgate-simulate/<run>`, and deletes every key under that prefix
//! (`SCAN` and `DEL`) when it ends. Under it, keys follow the library's
//! layout for a resource-scoped limiter: the flags' policy and a policy
//! file's default under the empty resource, the file's resources under
//! their names, compound policies in the layout of several limits.

use std::time::Duration;

use tollgate::__private::redact_url;
use tollgate::clock::ManualClock;
use tollgate_redis::redis;
use tollgate_redis::{ConnectError, RedisBackend};

use crate::error::CliError;
use crate::store_replay::{Store, CONNECT_TIMEOUT, DECISION_TIMEOUT, EXPIRY_GRACE, KEY_PREFIX};

/// How long deleting the run's keys may take.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(60);

/// The Redis server a replay runs on.
pub struct RedisStore {
    backend: RedisBackend,
    /// A plain connection for deleting the run's keys.
    admin: redis::aio::MultiplexedConnection,
    /// The run's key prefix, `tollgate-simulate/<run>`: neither `/` nor the
    /// run's digits and `-` are escaped in keys, so every key of the run
    /// starts with it and a `:`.
    prefix: String,
}

impl RedisStore {
    /// The `SCAN` pattern that matches every key of this run.
    fn pattern(&self) -> String {
        format!("{}:*", self.prefix)
    }

    /// Deletes every key of this run (`SCAN MATCH` on its prefix, then
    /// `DEL`).
    async fn delete_keys(&mut self, pattern: &str) -> Result<(), redis::RedisError> {
        let conn = &mut self.admin;
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1_000)
                .query_async(conn)
                .await?;
            if !keys.is_empty() {
                let _: u64 = redis::cmd("DEL").arg(&keys).query_async(conn).await?;
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }
}

impl Store for RedisStore {
    type Backend = RedisBackend;

    /// Connects the backend and a second, plain connection for deleting
    /// the run's keys.
    ///
    /// # Errors
    ///
    /// [`CliError::RedisConnect`] naming the URL's problem (unparseable,
    /// refused, wrong password, not a Redis server, no answer in time), or
    /// [`CliError::RedisAdmin`] for the second connection.
    async fn connect(url: &str, run: &str, clock: ManualClock) -> Result<Self, CliError> {
        let backend = RedisBackend::builder()
            .caller_clock(clock)
            .expiry_grace(EXPIRY_GRACE)
            .timeout(DECISION_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .connect(url)
            .await
            .map_err(|source: ConnectError| CliError::RedisConnect {
                url: redact_url(url),
                source,
            })?;
        let admin = async {
            let client = redis::Client::open(url)?;
            tokio::time::timeout(CONNECT_TIMEOUT, client.get_multiplexed_async_connection())
                .await
                .map_err(|_| redis::RedisError::from((redis::ErrorKind::Io, "connecting timed out")))?
        }
        .await
        .map_err(|source| CliError::RedisAdmin {
            url: redact_url(url),
            source,
        })?;
        Ok(Self {
            backend,
            admin,
            prefix: format!("{KEY_PREFIX}/{run}"),
        })
    }

    fn backend(&self) -> &RedisBackend {
        &self.backend
    }

    fn key_prefix(&self) -> String {
        self.prefix.clone()
    }

    /// [`CliError::RedisDecision`].
    fn decision_error(line: u64, source: tollgate::Error) -> CliError {
        CliError::RedisDecision { line, source }
    }

    /// Deletes every key of this run (`SCAN MATCH` on its prefix, then
    /// `DEL`).
    ///
    /// # Errors
    ///
    /// [`CliError::RedisCleanup`] naming the pattern left behind.
    async fn cleanup(&mut self) -> Result<(), CliError> {
        let pattern = self.pattern();
        let result = tokio::time::timeout(CLEANUP_TIMEOUT, self.delete_keys(&pattern))
            .await
            .unwrap_or_else(|_| Err(redis::RedisError::from((redis::ErrorKind::Io, "timed out"))));
        result.map_err(|source| CliError::RedisCleanup { pattern, source })
    }
}
