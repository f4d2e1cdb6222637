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
//! let limiter = tollgate_config::load_limiter("policies.yaml").await?;
//! let decision = limiter.allow("login", "203.0.113.7").await?;
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
//! | `fail_open` | `true` admits requests when Redis fails (counted), and lets the limiter start while Redis is down (it connects in the background); `false`, the default, denies them with the error, and Redis must answer when the limiter is built |
//! | `key_prefix` | the prefix of every state key, default `tollgate` |
//!
//! A policy is `{ limit, window, strategy }`: `limit` a whole number of at
//! least 1, `window` a duration with a unit (`250ms`, `1s`, `1m`, `1h`,
//! `1d`; any form [`humantime`] reads, such as `1h 30m`), `strategy`
//! optional. The limits a policy accepts are those of
//! [`tollgate::Limit::new`].
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
//! list holds 1 to 8 limits ([`tollgate::MAX_LIMITS`]), no two with the
//! same strategy and window (the larger could never deny), and a policy
//! gives either `limits` or `limit`/`window`/`strategy`, not both. Mistakes
//! name the element, such as `tollgate.resources.api.limits[1].window`.
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
//! secrets such as Redis passwords in the environment, not in the file;
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

mod any_backend;
mod env;
mod error;
mod fields;
mod format;
mod limiter;
mod load;
mod policy_entry;
mod policy_file;
mod schema;
mod values;

use std::path::Path;

/// Helpers the other tollgate crates share with this one. Not public API:
/// anything here may change or go away in any release.
#[doc(hidden)]
pub mod __private {
    pub use crate::load::field_path;
}

pub use any_backend::{AnyBackend, AnyBinding};
pub use error::{ConfigFileError, ErrorKind, LoadError};
pub use format::{Format, UnknownFormat};
pub use policy_file::{PolicyFile, Storage, Target, DEFAULT_STRATEGY};

/// Loads the policy file at `path` and builds its limiter: the same as
/// [`PolicyFile::load`] followed by [`PolicyFile::build`].
///
/// # Errors
///
/// [`LoadError::File`] for a mistake in the file, [`LoadError::Build`] when
/// the limiter cannot be built (for example an unreachable Redis).
pub async fn load_limiter(
    path: impl AsRef<Path>,
) -> Result<tollgate::ResourceLimiter<AnyBackend>, LoadError> {
    let file = PolicyFile::load(path)?;
    Ok(file.build().await?)
}
