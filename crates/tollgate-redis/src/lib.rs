//! # tollgate-redis
//!
//! A Redis backend for [`tollgate`]: rate limits shared by every process and
//! host that uses the same Redis server, Redis Cluster, or primary found
//! through Redis Sentinel, with exactly the decisions of tollgate's pure
//! strategy functions.
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
//! ## One Lua call, one round trip, one slot
//!
//! Every decision is one Lua call (`scripts/*.lua` in this crate: a shared
//! prelude, one decision function per strategy, the token and leaky buckets
//! sharing `gcra.lua`, and an entry point for one limit, for several, and
//! for per-key operations); decisions that arrive while two calls are in
//! flight share one call, each decided alone and in order
//! ([batched calls](_documentation::operations#batched-calls)). On Redis 7
//! and later it is an `FCALL` of the backend's function library, which the
//! backend loads with `FUNCTION LOAD REPLACE` on each server the first time
//! a decision finds it missing (after a restart, failover or `FUNCTION
//! FLUSH` too), so its helpers are created once rather than on every call. Where the server has
//! no functions, or its ACL refuses them, the same code runs as a script:
//! `EVALSHA`, repeated once as `EVAL` after `NOSCRIPT`
//! ([`RedisBackend::uses_functions`] tells which; the
//! [function library](_documentation::operations#scripts-and-the-function-library)
//! section describes both). Redis runs a script or function atomically, so
//! concurrent decisions on the same key, from any number of hosts, never
//! interleave. The strategy functions are
//! line-by-line ports of `tollgate::strategy` and are tested against it on
//! random traces.
//!
//! Each rate-limit key's whole state is a single Redis string per limit. A
//! policy of several limits ([`tollgate::Policy::compound`]) is decided by
//! one script call over all of its keys, which share a Redis Cluster hash
//! slot, so a decision never spans slots; names, values and expiry are
//! described under [key layout](_documentation::operations#key-layout) and
//! [compound policies](_documentation::operations#compound-policies).

//! ## Time, exact arithmetic and failures
//!
//! - Time is counted in whole microseconds (`Tick::Micros`). By default the
//!   script reads the Redis server's clock (`TIME`);
//!   [`RedisBackendBuilder::caller_clock`] passes the caller's clock
//!   instead, for tests, replays and single hosts. [Time: the server's clock
//!   or the caller's](_documentation::operations#time-the-servers-clock-or-the-callers)
//!   gives the bound on what clock skew admits.
//! - Lua numbers are doubles, so binding a policy fails with a
//!   [`tollgate::ConfigError`] when its arithmetic could leave the exact
//!   integers ([`MAX_EXACT_OPERAND`], [`MAX_SLIDING_PRODUCT`]; see
//!   [the 2^53 bound](_documentation::operations#microsecond-ticks-and-the-253-bound)).
//! - Errors become [`tollgate::backend::BackendError`]s of kind `Unavailable`,
//!   `Timeout` (no answer within [`RedisBackendBuilder::timeout`]),
//!   `Protocol` or `Other`, and the limiter's fail policy decides. A lost
//!   connection is re-established by the next decision; TCP keepalive and
//!   `TCP_USER_TIMEOUT` ([`RedisBackendBuilder::tcp_user_timeout`]) close a
//!   connection whose packets the network silently drops within seconds.
//! - [`RedisBackend::connect_sentinel`] asks Redis Sentinel for the primary
//!   and, when a decision finds it gone or demoted, asks again, so
//!   decisions follow a failover to the promoted replica
//!   ([failover and restarts](_documentation::operations#failover-and-restarts));
//!   [`RedisBackendBuilder::sentinel_primary_auth`] and
//!   [`sentinel_primary_db`](RedisBackendBuilder::sentinel_primary_db) give
//!   the primary's password, ACL user and database.
//!   [`RedisBackend::connect`] fails when the server cannot be reached;
//!   [`RedisBackendBuilder::connect_in_background`] returns at once, and
//!   until it connects decisions fail with
//!   [`ConnectErrorKind::NotConnected`]. [Timeouts and the fail
//!   policy](_documentation::operations#timeouts-and-the-fail-policy) has
//!   the details.
//!
//! ## Operations
//!
//! [`_documentation::leases`] shows how a hot key shared by a fleet is
//! decided at local speed, within exact bounds.
//! [`_documentation::operations`] is the guide to running it: key layout
//! and eviction, Redis Cluster and hot keys, failover (Sentinel included)
//! and restarts, the clock, timeouts, dead connections, the numeric bounds, the expiry grace and the Redis
//! versions it needs. Measured latency and throughput are in
//! [`tollgate::_documentation::performance`].

// `pub` means reachable from outside the crate: an item that is not says
// `pub(crate)`.
#![warn(unreachable_pub)]

/// Long-form documentation: the guide to operating limits on Redis, and
/// leases.
pub mod _documentation {
    pub mod operations {
        // Link targets in rustdoc for the labels that `docs/redis.md` defines
        // with repository paths (Markdown uses a label's first definition).
        #![doc = "[semantics]: tollgate::_documentation::semantics\n\
                  [key-layout]: tollgate::_documentation::semantics_notes#key-layout\n\
                  [expired-is-absent]: tollgate::_documentation::semantics_notes#expired-state-is-absent-state\n\
                  [redis-performance]: tollgate::_documentation::performance#redis\n\
                  [leases]: crate::_documentation::leases\n\n"]
        #![doc = include_str!("../docs/redis.md")]
    }

    pub mod leases {
        // Link targets in rustdoc for the labels `docs/leases.md` defines
        // with repository paths.
        #![doc = "[semantics-leases]: tollgate::_documentation::semantics#leased-quotas\n\
                  [performance-leases]: tollgate::_documentation::performance#leases\n\
                  [protecting]: tollgate::_documentation::protecting_the_store\n\n"]
        #![doc = include_str!("../docs/leases.md")]
    }
}

/// A reply read from its bytes to a decision, for the fuzz targets. Not
/// public API: anything here may change or go away in any release.
#[doc(hidden)]
#[path = "resp_reading.rs"]
pub mod __resp;
mod backend;
mod binding;
mod builder;
mod connection;
mod error;
mod exact;
mod handshake;
mod redirects;
mod reply;
mod scripts;
mod sentinel;
mod tcp;

/// The crate's README (its page on crates.io): its code blocks, compiled
/// and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeDoctests;

pub use backend::RedisBackend;
pub use binding::RedisBinding;
pub use builder::{RedisBackendBuilder, DEFAULT_CONNECT_TIMEOUT, DEFAULT_EXPIRY_GRACE, DEFAULT_TIMEOUT};
pub use error::{ConnectError, ConnectErrorKind};
pub use exact::{MAX_EXACT_OPERAND, MAX_SLIDING_PRODUCT};
pub use redis;
pub use tcp::{
    DEFAULT_TCP_KEEPALIVE, DEFAULT_TCP_KEEPALIVE_INTERVAL, DEFAULT_TCP_KEEPALIVE_RETRIES,
    DEFAULT_TCP_USER_TIMEOUT,
};
