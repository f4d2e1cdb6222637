//! # tollgate-config
//!
//! Rate limits for [`tollgate`] from a policy file, in YAML, TOML or JSON
//! (chosen by the file's extension: `.yaml`/`.yml`, `.toml`, `.json`):
//!
//! ```yaml
//! tollgate:
//!   strategy: sliding_window        # default for every resource
//!   redis_url: ${REDIS_URL}         # optional; absent = in-memory
//!   fail_open: false
//!   key_prefix: tollgate
//!   default:  { limit: 100, window: 1m }
//!   resources:
//!     login:  { limit: 5,  window: 1m }
//!     search: { limit: 50, window: 1s, strategy: token_bucket }
//! ```
//!
//! One call reads the file and builds a limiter with a policy per resource:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = tollgate_config::load_limiters("policies.yaml").await?;
//! let decision = limiter.limiter("login").allow("203.0.113.7").await?;
//! # let _ = decision;
//! # Ok(())
//! # }
//! ```
//!
//! ## The schema
//!
//! Everything lives under `tollgate`:
//!
//! | field | meaning |
//! | --- | --- |
//! | `default` | required: the policy of every resource without its own |
//! | `resources` | a map from resource names (non-empty, without control characters) to policies (one limit, or `limits`: see below) |
//! | `strategy` | the strategy of policies that name none: `fixed_window`, `sliding_window` (the default), `token_bucket` or `leaky_bucket` |
//! | `redis_url` | one Redis server (`redis://`, `rediss://`, `redis+unix://`); absent or empty: state in memory |
//! | `redis_cluster` | a Redis Cluster: a list of seed URLs, or one string of comma-separated URLs; exclusive with `redis_url` and `redis_sentinel` |
//! | `redis_sentinel` | the primary Redis Sentinel names, followed through failovers: `{ master: NAME, urls: [sentinel URLs] }` (`urls` also one comma-separated string; both empty: state in memory), and optionally the primary's `password` (typically `${REDIS_PASSWORD}`; never shown), ACL `username` (with `password`) and database number `db` (default 0); a sentinel's own password goes in its URL; exclusive with `redis_url` and `redis_cluster` |
//! | `postgres_url` | a PostgreSQL database (feature `postgres`, on by default): a libpq URL, `postgres://user:password@host:5432/database` (or a key-value string, `host=db dbname=app`), passed to the backend as written; TLS in its parameters as libpq users write them, `?sslmode=require`, or `?sslmode=verify-full&sslrootcert=/path/ca.pem` to check the server's certificate against a CA file (see the repository's [docs/postgres.md](https://github.com/tollgate-rs/tollgate/blob/main/docs/postgres.md)); keep the password in the environment (`${DATABASE_URL}`); absent or empty: state in memory; exclusive with the three Redis fields |
//! | `postgres` | the PostgreSQL connections' settings, each optional, only beside `postgres_url` (ignored when it is empty): `schema` (of the backend's table and functions, default `tollgate`; a lowercase letter or `_`, then up to 62 lowercase letters, digits or `_`), `pool_size` (connections per process, 1 to 10,000, default 16), `timeout` (of a decision, waiting for a connection included, 1 ms to 1 h, default 1 s), `connect_timeout` (of opening a connection, default 5 s), `unlogged` (`true`: an `UNLOGGED` state table, emptied by a crash of the database; default `false`) and `synchronous_commit` (`true`: a decision waits for its commit to reach the disk; default `false`) |
//! | `fail_open` | `true` admits requests when the store (Redis or PostgreSQL) fails (counted), and lets the limiter start while it is down (it connects in the background); `false`, the default, denies them with the error, and the store must answer when the limiter is built (PostgreSQL must take the login and have its schema installed); `true` and `fallback` are mutually exclusive |
//! | `key_prefix` | the prefix of every state key, default `tollgate` |
//! | `exempt`, `deny`, `shadow`, `deny_cache`, `top_keys`, `lease`, `charge`, `fallback` | settings beside the policies, file-wide here and per resource (see below) |
//!
//! A policy is `{ limit, window, strategy }`: `limit` a whole number of at
//! least 1, `window` a duration with a unit (`250ms`, `1s`, `1m`, `1h`,
//! `1d`; any form [`humantime`] reads, such as `1h 30m`), `strategy`
//! optional. The limits a policy accepts are those of
//! [`tollgate::Limit::new`].
//!
//! ## Quotas by the calendar
//!
//! In place of `window`, `calendar` counts in the periods of a calendar
//! ([`tollgate::calendar`]): "10,000 a month", reset at a boundary a
//! customer recognises.
//!
//! ```yaml
//! tollgate:
//!   resources:
//!     api_calls:
//!       limit: 10000
//!       calendar: { period: month, time_zone: Europe/Berlin, anchor: "2026-01-15T09:00:00" }
//! ```
//!
//! `period` is `day`, `week`, `month`, `quarter` or `year`; `time_zone` an
//! IANA name, `UTC` by default; `anchor` the local date and time the
//! periods repeat from (quoted in YAML and JSON; TOML also takes its
//! unquoted local date-time), by default the period's natural start
//! (midnight, Monday, the 1st, 1 January). A calendar window is a fixed
//! window: without `strategy` it is one whatever `tollgate.strategy` says,
//! and any other strategy is refused. The repository's SEMANTICS.md
//! ("Calendar windows") says what happens on days the month lacks and when
//! the clocks change. On Redis and PostgreSQL, the server's clock decides in which
//! period a request falls.
//!
//! ## Several limits on one resource
//!
//! A resource (or the default) may instead give `limits`, a list of such
//! limits, decided together as one compound policy
//! ([`tollgate::Policy::compound`]): a request is admitted only when every
//! limit admits it, and then every limit is charged.
//!
//! ```yaml
//! tollgate:
//!   resources:
//!     api:
//!       limits:
//!         - { limit: 10, window: 1s, strategy: token_bucket }   # bursts
//!         - { limit: 1000, window: 1h, strategy: sliding_window } # sustained
//! ```
//!
//! In TOML, `limits = [{ limit = 10, window = "1s" }, …]` or one
//! `[[tollgate.resources.api.limits]]` table per limit; in JSON,
//! `"limits": [{"limit": 10, "window": "1s"}, …]`. A limit without
//! `strategy` takes `tollgate.strategy`, as a single-limit policy does. The
//! list holds 1 to 8 limits ([`tollgate::Policy::MAX_LIMITS`]), no two with the
//! same strategy and window (the larger could never deny), and a policy
//! gives either `limits` or `limit`/`window`/`strategy`, not both. Mistakes
//! name the element, such as `tollgate.resources.api.limits[1].window`.
//!
//! A resource's `limits` may also hold one concurrency limit (`strategy:
//! concurrency`, `limit`, `ttl`) beside its rates: a request needs both,
//! its permit held by [`tollgate::Limiters::in_flight`] and its rates
//! decided by the resource's limiter ([`PolicyFile::in_flight`]; the
//! repository's docs/policy-files.md says in which order).
//!
//! ## Exemptions, deny lists, shadow mode and store protection
//!
//! Beside its limits, a resource may give these settings; under
//! `tollgate` they are file-wide, and apply to the default policy and to
//! every resource (`tollgate.default` gives none of its own):
//!
//! ```yaml
//! tollgate:
//!   redis_url: ${REDIS_URL}
//!   exempt: [10.0.0.0/8, health-checker]   # keys or CIDR blocks, never limited
//!   deny: ["192.0.2.66"]                   # always denied
//!   deny_cache: true
//!   fallback: { limit: 25, window: 1m }    # while Redis fails, per process
//!   default: { limit: 100, window: 1m }
//!   resources:
//!     login:  { limit: 5, window: 1m, deny: ["198.51.100.0/24"] }
//!     export: { limit: 10, window: 1h, shadow: true }
//!     search: { limit: 50, window: 1s, deny_cache: { capacity: 50000, max_key_len: 128 } }
//! ```
//!
//! | field | meaning |
//! | --- | --- |
//! | `exempt` | keys always allowed, neither charged nor stored: a list of exact keys and CIDR blocks (`10.0.0.0/8`, `2001:db8::/32`; an IP address alone is its own block; an IPv4 block also matches IPv4-mapped IPv6 keys). A resource's entries are added to the file-wide ones. Rules of [`tollgate::KeyList`] |
//! | `deny` | keys always denied (no `retry_after`), winning over `exempt`; written and combined like `exempt` |
//! | `shadow` | `true`: every request is allowed, and those enforcement would deny are marked [`shadow_denied`](tollgate::Decision::shadow_denied), with state kept as if enforced (deny-listed keys too); to try a policy on live traffic. A resource's `shadow` replaces the file-wide one |
//! | `deny_cache` | `true`: a local cache of denied keys answers them until their `retry_after` without asking the store ([`tollgate::protection::DenyCache::new`], 10,000 keys of up to 256 bytes); `false`: none; or a map `{ capacity, max_key_len }` (each optional, at least 1) for another size. On by default when state lives in Redis (`redis_url`, `redis_cluster`, `redis_sentinel`) or PostgreSQL (`postgres_url`): it changes no decision and spares the store the requests of over-limit keys; `false` turns it off. A resource's replaces the file-wide one, so `deny_cache: false` turns it off for one resource |
//! | `top_keys` | `true`, the default: the limiter keeps the keys with the most denied requests, admitted units and shadow-denied requests over the last minute, [`tollgate::top::TopKeys::new`]'s 1,000 keys per metric (what `tollgate serve` answers at `GET /v1/top`); `false`: none; or a map `{ capacity }` (1 to 1,000,000) for another size. It changes no decision; memory is bounded by the capacity whatever the number of keys. A resource's replaces the file-wide one |
//! | `lease` | `{ max_units: 64, max_age: 100ms }` (each optional; `true` for those values): each process takes up to `max_units` units of a hot key from the store (Redis or PostgreSQL) in one call and spends them locally for at most `max_age`, within the exact bounds of [leased quotas](tollgate::_documentation::semantics#leased-quotas) (fixed and sliding windows never admit beyond the limit; buckets at most `floor(max_age / T)` units more in any interval); `false`, the default: none. It applies when state lives in Redis or PostgreSQL; in memory decisions are local already, and it is ignored. A resource's replaces the file-wide one; an Envoy domain's limits take the file-wide one. See [`tollgate::protection::Lease`] |
//! | `charge` | `admitted`, the default: a denied request is charged nothing; or `always`: every request of cost 1 or more is charged its cost whether admitted or not, for [usage reported after the fact](tollgate::_documentation::semantics#usage-reported-after-the-fact-charge-always) (an AI gateway's tokens: a check of cost 0 before the request, a report of what it used after). A report reaches the store past the deny cache and the leases. A resource's replaces the file-wide one |
//! | `fallback` | the policy (`{ limit, window, strategy }`, or `{ limits: [...] }`) an in-memory limiter of each process enforces while the store fails or its circuit breaker is open; it gives the file the fail policy [`FailPolicy::Fallback`](tollgate::FailPolicy::Fallback) (which brings the default circuit breaker), and, like `fail_open: true`, lets the limiter start while the store (Redis or PostgreSQL) is down. A resource's replaces the file-wide one, which it requires: the fail policy is the whole file's |
//!
//! `fail_open: true` beside a `fallback` is an error naming both (a
//! fallback decides the requests that failing open would admit);
//! `fail_open: false` beside one changes nothing. On in-memory state,
//! `deny_cache` and `fallback` change no decision: the memory backend
//! never fails, and a deny cache only saves round trips. See
//! [protecting the store](tollgate::_documentation::protecting_the_store)
//! and the [semantics](tollgate::_documentation::semantics) of shadow mode
//! and the lists. [`PolicyFile::settings`] returns what applies to the
//! default policy or to a resource.
//!
//! ## Watching the file
//!
//! With the `watch` feature (on by default), [`PolicyWatcher`] keeps a
//! running [`tollgate::Limiters`] up to date with its file: it watches
//! the file's directory (with the [`notify`](notify_debouncer_mini::notify)
//! crate, so replacing the file by renaming another over it, or swapping a
//! symbolic link, is seen too), waits until the directory has been quiet
//! for [`DEFAULT_DEBOUNCE`] (200 ms), and applies the file when its bytes
//! changed; [`PolicyWatcher::reload_blocking`] applies it on demand (for `SIGHUP`).
//! A valid file replaces the policies atomically, keeping each key's state
//! where the policy allows it (a resource whose strategy and window stay
//! keeps what each key spent when only its limit changes). An invalid file
//! changes nothing and is reported, with its line and field, to the
//! `on_error` callback. A change of storage (memory to Redis or PostgreSQL, another
//! server, other `postgres` settings)
//! cannot be applied to a running limiter: it is refused the same
//! way ([`ReloadError::StorageChanged`]) until a restart.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let watcher = tollgate_config::PolicyWatcher::builder("policies.yaml", |err| {
//!     eprintln!("policies.yaml not applied: {err}");
//! })
//! .start()
//! .await?;
//! let decision = watcher.limiters().limiter("login").allow("203.0.113.7").await?;
//! # let _ = decision;
//! # Ok(())
//! # }
//! ```
//!
//! ## Sets of files, and Envoy's
//!
//! [`PolicySet`] loads a tollgate policy file together with any number of
//! Envoy rate-limit files ([`envoy`]), each limit with its own limiter on
//! the policy file's storage, as `tollgate serve` runs them;
//! [`PolicySetWatcher`] keeps one up to date (the watcher behind
//! [`PolicyWatcher`] too), with `SIGHUP` on request.
//!
//! ## Environment variables
//!
//! In every string value, `${VAR}` is replaced by the variable's value and
//! `${VAR:-default}` by its value or, when it is unset or empty, by
//! `default`; `$$` is a literal `$`. Expansion happens before the value is
//! parsed, so `limit: ${LOGIN_LIMIT:-5}` works too, in YAML also unquoted
//! inside flow maps and lists (`default: { limit: ${LIMIT}, window: 1m }`).
//! TOML and JSON need the reference in quotes (`limit = "${LIMIT}"`), as
//! any text. An unset variable
//! without a default is an error naming the variable and the field. Keep
//! secrets such as Redis and PostgreSQL passwords in the environment, not in the file;
//! `redis_url: ${REDIS_URL:-}` falls back to in-memory state when the
//! variable is unset.
//!
//! ## Errors
//!
//! Every mistake is a [`ConfigFileError`] naming the file, the line (and
//! column) and the field path, such as
//!
//! ```text
//! policies.yaml:7: tollgate.resources.login.window: "1 mnute" is not a duration (unknown time unit "mnute", …)
//! ```
//!
//! Unknown fields are errors that list the expected ones. A file may hold
//! at most 16 MiB (no more of a larger one is read, so even an endless file
//! fails at once) and must be UTF-8 (a leading byte-order mark is skipped); a byte that is not is
//! reported with its line, column and offset. YAML files may nest at most
//! 80 levels and hold at most 250,000 nodes. YAML is read with
//! [`serde_saphyr`], TOML with [`toml`], JSON with [`serde_json`].

// `pub` means reachable from outside the crate: an item that is not says
// `pub(crate)`.
#![warn(unreachable_pub)]

mod any_backend;
mod env;
pub mod envoy;
mod error;
mod fallback_policy;
mod fields;
mod format;
mod limiter;
mod load;
mod policy_entry;
mod policy_file;
mod policy_set;
mod postgres_storage;
mod postgres_values;
mod raw_policy;
mod reload_error;
mod schema;
mod set_files;
#[cfg(feature = "watch")]
mod set_watcher;
mod setting_field;
mod setting_values;
mod settings;
mod values;
#[cfg(feature = "watch")]
mod watch;
#[cfg(feature = "watch")]
mod watch_error;

use std::path::Path;

#[cfg(any(feature = "redis", feature = "postgres"))]
pub use any_backend::SharedBinding;
pub use any_backend::{AnyBackend, AnyBinding};
pub use error::{ConfigFileError, ErrorKind, LoadError};
pub use format::{Format, UnknownFormat};
pub use policy_file::{PolicyFile, Storage, Target, DEFAULT_STRATEGY};
pub use policy_set::PolicySet;
pub use postgres_storage::PostgresStorage;
pub use reload_error::ReloadError;
pub use set_files::{ConfigFile, READ_TIMEOUT};
#[cfg(feature = "watch")]
pub use set_watcher::{PolicySetHandle, PolicySetWatcher, PolicySetWatcherBuilder, DEFAULT_DEBOUNCE};
pub use settings::Settings;
#[cfg(feature = "watch")]
pub use watch::{PolicyWatcher, PolicyWatcherBuilder};
#[cfg(feature = "watch")]
pub use watch_error::WatchError;

/// The text of the configuration file at `path`, read as every file of
/// this crate is: a regular file (after following links; a FIFO, device,
/// socket or directory is refused without waiting on it), at most 16 MiB
/// (no more is read), UTF-8.
///
/// This is blocking file I/O: call it from a thread that may block (such
/// as tokio's `spawn_blocking`), not on an async runtime's worker.
///
/// # Errors
///
/// A [`ConfigFileError`] naming the file: unreadable, not a regular file,
/// too large, or not UTF-8 (with the line and column of the first bad
/// byte).
pub fn read_config_file(path: impl AsRef<Path>) -> Result<String, ConfigFileError> {
    let path = path.as_ref();
    let origin = path.display().to_string();
    let bytes = load::read(path, &origin)?;
    load::decode(&bytes, &origin).map(str::to_owned)
}

/// Loads the policy file at `path` and builds its limiter: the same as
/// [`PolicyFile::load`] followed by [`PolicyFile::build`].
///
/// # Errors
///
/// [`LoadError::File`] for a mistake in the file, [`LoadError::Build`] when
/// the limiter cannot be built (for example an unreachable Redis).
pub async fn load_limiters(path: impl AsRef<Path>) -> Result<tollgate::Limiters<AnyBackend>, LoadError> {
    let file = PolicyFile::load(path)?;
    Ok(file.build().await?)
}
