//! # tollgate-redis
//!
//! A Redis backend for [`tollgate`]: rate limits shared by every process and
//! host that uses the same Redis server or Redis Cluster, with exactly the
//! decisions of tollgate's pure strategy functions.
//!
//! ```no_run
//! # async fn demo() -> Result<(), tollgate::Error> {
//! use std::time::Duration;
//! use tollgate::{Limiter, Strategy};
//! use tollgate_redis::RedisBackend;
//!
//! let backend = RedisBackend::connect("redis://127.0.0.1:6379").await?;
//! let limiter = Limiter::builder()
//!     .backend(backend)
//!     .strategy(Strategy::SlidingWindow)
//!     .limit(100)
//!     .window(Duration::from_secs(60))
//!     .build()?;
//! if limiter.allow("user-123").await?.allowed {
//!     // serve the request
//! }
//! # Ok(())
//! # }
//! ```
//!
//! It is built on [`redis`] (redis-rs), the most widely used Redis client
//! for Rust: its `ConnectionManager` multiplexes concurrent decisions over
//! one connection and reconnects by itself, and its async cluster client
//! routes each decision to the primary that owns the key. `tollgate_redis::redis`
//! re-exports it, for configuring connections by hand.
//!
//! ## One script, one round trip, one key
//!
//! Every decision is one Lua script (`scripts/*.lua` in this crate: a shared
//! prelude and one file per strategy, the token and leaky buckets sharing
//! `gcra.lua`), sent as `EVALSHA` and repeated once as `EVAL` after
//! `NOSCRIPT`. Redis runs a script atomically, so concurrent decisions on
//! the same key, from any number of hosts, never interleave. The scripts are
//! line-by-line ports of `tollgate::strategy` and are tested against it on
//! random traces.
//!
//! Each rate-limit key's whole state is a single Redis string, so a decision
//! never spans hash slots. Its name follows tollgate's key layout,
//! `{prefix}:{resource}:{strategy}:{key}` (see
//! [`tollgate::backend::namespace`]); a Redis Cluster hash tag (`{…}`) can
//! only come from the caller's key. The value is decimal integers in
//! microseconds separated by `:` — `start:count` (fixed window, the start of its bucket),
//! `start:curr:prev` (sliding window) or `tat` (token and leaky bucket) —
//! and the key expires when its state does (rounded up to whole
//! milliseconds), plus a grace of one second by default
//! ([`RedisBackendBuilder::expiry_grace`]). The scripts treat expired state exactly as absent state,
//! so whether Redis has already removed a key never changes a decision. A
//! state that becomes equivalent to absent is deleted at once.
//!
//! ## Time
//!
//! Time is counted in whole microseconds (`Tick::Micros`); a window is
//! truncated to whole microseconds. By default the script reads the Redis
//! server's clock (`TIME`), so hosts with skewed clocks still share one
//! timeline. [`RedisBackendBuilder::caller_clock`] passes the caller's
//! clock instead, for tests, replays and single hosts: with it, hosts whose
//! clocks are `s` apart can be admitted up to what `s` of elapsed time
//! grants beyond the limit (its documentation gives the exact bound per
//! strategy).
//!
//! ## Exact arithmetic
//!
//! Lua numbers are doubles, exact for integers up to 2^53. Binding a policy
//! (building a limiter) fails with a [`tollgate::ConfigError`] when its
//! arithmetic could leave that range: a limit or a window (in microseconds)
//! above 2^51 ([`MAX_EXACT_OPERAND`]), or a sliding window whose
//! `limit × window` exceeds 2^52 ([`MAX_SLIDING_PRODUCT`]; for example a
//! million requests per day). Clock readings must be below 2^52 µs (until the
//! year 2112). Within these bounds every admission test is exact integer
//! arithmetic, and divisions are corrected with exact remainders.
//!
//! ## Failures
//!
//! Errors become [`tollgate::BackendError`]s: `Unavailable` (connection lost
//! or refused, cluster down, server loading), `Timeout` (no answer within
//! [`RedisBackendBuilder::timeout`], default 200 ms), `Protocol` (a reply or
//! stored value that is not what the scripts produce) or `Other`. The
//! limiter's fail policy then decides: fail closed returns the error, fail
//! open admits and counts the event. A lost connection fails the decisions
//! in flight; the next decision starts a reconnection, so decisions succeed
//! again as soon as the server is back. A timed-out decision may still have
//! been applied on the server, which can only make the limit stricter.
//!
//! [`RedisBackend::connect`] fails when the server cannot be reached, which
//! reports a wrong address or password at start-up.
//! [`RedisBackendBuilder::connect_in_background`] (and
//! [`connect_cluster_in_background`](RedisBackendBuilder::connect_cluster_in_background))
//! returns at once and keeps trying in the background: until it connects,
//! decisions fail with a "not connected yet" error
//! ([`ConnectErrorKind::NotConnected`], naming the URL without its
//! password), so a service that fails open can start while Redis is down
//! and uses Redis as soon as it answers.
//!
//! ## In production
//!
//! - **Eviction.** Every state key has an expiry, so under memory pressure a
//!   `volatile-*` or `allkeys-*` eviction policy may delete live state, and
//!   the evicted keys start fresh (admitting more than the limit). Give rate
//!   limits a server or memory budget where `maxmemory-policy noeviction`
//!   holds, or enough memory that eviction never runs. A key takes about 100
//!   bytes plus its name (`MEMORY USAGE` on Redis 7), and only active keys
//!   exist.
//! - **Failover and restarts.** Redis replicates asynchronously: a failover
//!   can lose the last decisions before it, and a restart without
//!   persistence loses all state. Either way affected keys start fresh once.
//!   Scripts are cached again on the new server by the `EVAL` fallback.
//! - **Cluster.** Each state key lives in the slot of its name. Put a hash
//!   tag in the caller's key (`{tenant-7}:alice`) only when keys must share
//!   a primary; otherwise keys spread over every primary.
//! - **Connections.** A [`RedisBackend`] holds one multiplexed connection
//!   (one per primary in a cluster); its clones and every limiter bound to it
//!   share it, pipelining concurrent decisions. On loopback a sequential
//!   decision takes one round trip (25–65 µs on a small VM) and one
//!   connection carries 125,000–150,000 decisions per second from 64
//!   concurrent callers (the README's "Redis performance" has the
//!   measurements); over a network, expect one round trip per decision.
//! - **Versions.** The scripts use only `GET`, `SET`, `DEL`, `PEXPIRE`,
//!   `PEXPIREAT` and `TIME` (scripts reading `TIME` need Redis 5 or later,
//!   which replicates script effects rather than script calls); tests run
//!   against Redis 7.

mod backend;
mod connection;
mod error;
mod scripts;

pub use backend::{
    RedisBackend, RedisBackendBuilder, RedisBinding, DEFAULT_CONNECT_TIMEOUT, DEFAULT_EXPIRY_GRACE,
    DEFAULT_TIMEOUT, MAX_EXACT_OPERAND, MAX_SLIDING_PRODUCT,
};
pub use error::{ConnectError, ConnectErrorKind};
pub use redis;
