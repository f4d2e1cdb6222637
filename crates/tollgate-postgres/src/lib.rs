//! PostgreSQL backend for [tollgate]: rate limits shared by every
//! process that uses the same database, for teams that run PostgreSQL and
//! no Redis.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use tollgate::{Limiter, Policy, Strategy};
//! use tollgate_postgres::PostgresBackend;
//!
//! let backend = PostgresBackend::builder("postgres://tollgate@db.internal/app")
//!     .pool_size(16)
//!     .connect()
//!     .await?;
//! let limiter = Limiter::builder()
//!     .backend(backend)
//!     .policy(Policy::new(Strategy::FixedWindow, 100, Duration::from_secs(60))?)
//!     .build()?;
//! let decision = limiter.allow("tenant-7").await?;
//! println!("allowed: {}", decision.allowed);
//! # Ok(())
//! # }
//! ```
//!
//! # How it decides
//!
//! Each decision is one call of the schema's `decide` function: one round
//! trip and one transaction that locks the rows of the key (one per limit
//! of the policy), reads the database's clock, decides by the strategy's
//! SQL function (`fixed_window`, `sliding_window`, or `gcra` for the token
//! and leaky buckets: ports of the core's pure functions, exactly) and
//! writes the state back. The locks are transaction-scoped advisory locks
//! on the keys' 64-bit hashes, taken in one statement in one order, so two
//! calls never deadlock; a decision that changes nothing writes nothing.
//!
//! Reservations, their cancels and leases are one call each too, of the
//! schema's `reserve`, `cancel` and `lease` functions (ports of the core's
//! `reserve_all`, `cancel_all`, `give_back` and `lease_all`), with the
//! key's rows locked the same way. A lease counts the processes leasing a
//! key in the schema's `lessees` table, one row per process for the
//! lease's age.
//!
//! # The schema
//!
//! [`connect`](PostgresBackendBuilder::connect) installs the tables and the
//! functions in their own schema (`tollgate` by default) and records its
//! version ([`SCHEMA_VERSION`]): instances starting at once install it one
//! after the other, an older version is upgraded, a newer one refused.
//! The role needs `CREATE` on the database the first time (or an owner
//! creates the schema for it), then `USAGE` and `CREATE` on the schema.
//!
//! # TLS
//!
//! The URL's `sslmode` and `sslrootcert` ask for TLS as they do of libpq:
//! `disable`; `prefer` (the default: TLS when the server offers it);
//! `require` (TLS or no connection); `verify-ca` (the server's certificate
//! signed by an authority of `sslrootcert`, a PEM file, or `system` for
//! the system's roots); `verify-full` (and naming the host). As in libpq,
//! `prefer` and `require` without `sslrootcert` encrypt without checking
//! who answers: use `verify-full` across networks you do not control.
//!
//! # Expired rows
//!
//! A row whose state has expired reads as none and is reused or deleted by
//! the next decision on its key; a sweep deletes the others (and the rows
//! of lessees whose time is up) in batches of 1,000 every minute
//! ([`PostgresBackendBuilder::sweep_interval`]), without locking the
//! tables.

mod backend;
mod binding;
mod builder;
mod error;
mod install;
mod limits;
mod schema;
mod sweep;
mod tls;

pub use backend::PostgresBackend;
pub use binding::PostgresBinding;
pub use builder::{PostgresBackendBuilder, DEFAULT_SCHEMA};
pub use error::PostgresError;
pub use limits::MAX_OPERAND;
pub use schema::SCHEMA_VERSION;

/// `url` with its password replaced by `***`, for messages and logs.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((credentials, host)) = rest.rsplit_once('@') else {
        return url.to_owned();
    };
    match credentials.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}
