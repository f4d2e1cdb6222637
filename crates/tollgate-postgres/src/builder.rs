//! [`PostgresBackendBuilder`]: the URL, the schema, the pool and the
//! timeouts of a [`PostgresBackend`], and connecting it.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime, Timeouts};
use tollgate::backend::Batcher;
use tollgate::clock::{Clock, SharedClock};

use crate::backend::PostgresBackend;
use crate::binding::Options;
use crate::error::PostgresError;
use crate::install::Installer;
use crate::schema;
use crate::tls;

/// How many calls of one policy may be in flight before its decisions wait
/// to go out together. Two: fewer calls carrying more decisions each cost
/// the server less per decision; over 64 connections on a 2-core server 2
/// gave 1.2x the decisions per second of 4 and 1.5x those of 8, at 0.8x
/// and 0.6x the server's CPU per decision (Intel Xeon, `benches/versus_flexible`,
/// docs/performance.md).
const MAX_IN_FLIGHT: usize = 2;

/// The most decisions one batched call carries: each takes a lock, and a
/// transaction's locks share the server's lock table.
const MAX_BATCH: usize = 32;

/// The schema the backend installs into unless told otherwise.
pub const DEFAULT_SCHEMA: &str = "tollgate";

/// Settings of a [`PostgresBackend`]; [`PostgresBackend::builder`] makes
/// one from the server's URL.
#[derive(Clone)]
pub struct PostgresBackendBuilder {
    url: String,
    schema: String,
    pool_size: usize,
    connect_timeout: Duration,
    timeout: Duration,
    unlogged: bool,
    synchronous_commit: bool,
    expiry_grace: Duration,
    sweep_interval: Option<Duration>,
    clock: Option<SharedClock>,
    batch: bool,
}

impl PostgresBackend {
    /// Settings for the server at `url` (see [`PostgresBackendBuilder::new`]
    /// for the defaults); [`connect`](PostgresBackendBuilder::connect)
    /// makes the backend.
    pub fn builder(url: impl Into<String>) -> PostgresBackendBuilder {
        PostgresBackendBuilder::new(url)
    }
}

/// The settings, the URL's password hidden.
impl std::fmt::Debug for PostgresBackendBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBackendBuilder")
            .field("url", &crate::redact_url(&self.url))
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("timeout", &self.timeout)
            .field("unlogged", &self.unlogged)
            .field("synchronous_commit", &self.synchronous_commit)
            .field("expiry_grace", &self.expiry_grace)
            .field("sweep_interval", &self.sweep_interval)
            .field("caller_clock", &self.clock.is_some())
            .field("batch_calls", &self.batch)
            .finish()
    }
}

impl PostgresBackendBuilder {
    /// Settings for the server at `url`, a libpq connection URL
    /// (`postgres://user:password@host:5432/database`) or key-value string
    /// (`host=db user=app dbname=app`), whose `sslmode` and `sslrootcert`
    /// ask for TLS as libpq's do (see [TLS](crate#tls)), with the defaults: schema `tollgate`, a pool of 16
    /// connections, a 5 s connect timeout, a 1 s timeout per decision, a
    /// logged table, `synchronous_commit` off for the backend's own
    /// connections, no grace, and a sweep of expired rows every minute.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            schema: DEFAULT_SCHEMA.to_owned(),
            pool_size: 16,
            connect_timeout: Duration::from_secs(5),
            timeout: Duration::from_secs(1),
            unlogged: false,
            synchronous_commit: false,
            expiry_grace: Duration::ZERO,
            sweep_interval: Some(Duration::from_secs(60)),
            clock: None,
            batch: true,
        }
    }

    /// The schema that holds the backend's table and functions, created
    /// when missing (see [the schema](crate#the-schema)).
    pub fn schema(mut self, name: impl Into<String>) -> Self {
        self.schema = name.into();
        self
    }

    /// The most connections the backend opens (at least 1): as many
    /// decisions run on the server at once.
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// How long opening a connection may take.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long a decision may take, waiting for a connection included,
    /// before it fails as timed out (and the fail policy decides).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Keeps the state (and the lessees of leases) in `UNLOGGED` tables: no
    /// write-ahead log, so faster, and emptied when the database crashes
    /// (not on a clean restart). An existing table is changed to match on
    /// start.
    pub fn unlogged(mut self, unlogged: bool) -> Self {
        self.unlogged = unlogged;
        self
    }

    /// Whether a decision waits for its write to reach the disk before it
    /// answers (`synchronous_commit` on the backend's connections). Off by
    /// default: a crash of the database then forgets at most the last
    /// fraction of a second of decisions, which a rate limiter can afford;
    /// on doubles the cost of a decision on most disks.
    pub fn synchronous_commit(mut self, on: bool) -> Self {
        self.synchronous_commit = on;
        self
    }

    /// Time added to every row's expiry, for callers whose clocks run
    /// behind the database's ([`caller_clock`](Self::caller_clock)).
    pub fn expiry_grace(mut self, grace: Duration) -> Self {
        self.expiry_grace = grace;
        self
    }

    /// How often the backend deletes rows whose state has expired, in
    /// batches of 1,000 (`None`: never; other instances or the decisions
    /// themselves then clean up).
    pub fn sweep_interval(mut self, every: Option<Duration>) -> Self {
        self.sweep_interval = every;
        self
    }

    /// Whether decisions of one policy that arrive while two of its calls
    /// are in flight wait to go out together in one call, up to 32 (on by
    /// default): each is decided exactly as alone, in
    /// order, and the database does one transaction for many. Off, every
    /// decision is a call of its own.
    pub fn batch_calls(mut self, on: bool) -> Self {
        self.batch = on;
        self
    }

    /// Decides on `clock` instead of the database's clock: for tests that
    /// step time by hand, and for callers that must share one clock.
    pub fn caller_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Connects, installs or upgrades the schema, and starts the sweep.
    ///
    /// # Errors
    ///
    /// A [`PostgresError`] naming the setting: a URL that does not parse, a
    /// server that cannot be reached or refuses the login, a role without
    /// the rights to create the schema, a schema of a newer version.
    pub async fn connect(self) -> Result<PostgresBackend, PostgresError> {
        schema::check_name(&self.schema)?;
        let pool = self.pool()?;
        let mut client = pool.get().await.map_err(|e| connect_error(e, &self.url))?;
        schema::install(&mut client, &self.schema, self.unlogged).await?;
        drop(client);
        Ok(self.backend(pool, true))
    }

    /// Returns at once and connects when decisions come: the first one
    /// that reaches the database installs the schema. Until then each
    /// decision fails as [`Unavailable`](tollgate::backend::BackendErrorKind::Unavailable)
    /// (the limiter's fail policy decides), so a service can start before
    /// its database. A role without rights or a schema of a newer version
    /// is then reported by the decisions.
    ///
    /// # Errors
    ///
    /// A [`PostgresError`] naming `postgres_url` when the URL does not
    /// parse, or `schema` for a name the backend does not take.
    ///
    /// # Panics
    ///
    /// When called outside a Tokio runtime, which the sweep needs.
    pub fn connect_in_background(self) -> Result<PostgresBackend, PostgresError> {
        schema::check_name(&self.schema)?;
        let pool = self.pool()?;
        Ok(self.backend(pool, false))
    }

    /// The backend on `pool`, its schema `installed` already or not.
    fn backend(self, pool: Pool, installed: bool) -> PostgresBackend {
        let options = Options {
            schema: Arc::from(self.schema.as_str()),
            timeout: self.timeout,
            clock: self.clock,
            grace_micros: u64::try_from(self.expiry_grace.as_micros()).unwrap_or(u64::MAX),
            installer: Arc::new(Installer::new(&self.schema, self.unlogged, installed)),
            batcher: self
                .batch
                .then(|| Arc::new(Batcher::new(MAX_IN_FLIGHT, MAX_BATCH))),
        };
        PostgresBackend::new(pool, options, self.sweep_interval)
    }

    /// The pool of connections to the URL's server.
    fn pool(&self) -> Result<Pool, PostgresError> {
        let (url, tls) = tls::split(&self.url)?;
        let mut config = tokio_postgres::Config::from_str(&url).map_err(|e| {
            PostgresError::caused(
                "postgres_url",
                "is not a PostgreSQL connection URL (postgres://user:password@host:5432/database)",
                e,
            )
        })?;
        config.ssl_mode(tls.ssl_mode());
        config.connect_timeout(self.connect_timeout);
        config.application_name("tollgate");
        if !self.synchronous_commit {
            config.options("-c synchronous_commit=off");
        }
        let manager = Manager::from_config(
            config,
            tls.connector()?,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        Pool::builder(manager)
            .max_size(self.pool_size)
            .runtime(Runtime::Tokio1)
            .timeouts(Timeouts {
                wait: Some(self.timeout),
                create: Some(self.connect_timeout),
                recycle: Some(self.connect_timeout),
            })
            .build()
            .map_err(|e| PostgresError::new("postgres_url", format!("could not make a pool: {e}")))
    }
}

/// Why the first connection failed, and what to do about it.
fn connect_error(err: deadpool_postgres::PoolError, url: &str) -> PostgresError {
    let shown = crate::redact_url(url);
    match err {
        deadpool_postgres::PoolError::Backend(e) => {
            let hint = match e.as_db_error().map(|db| db.code().code()) {
                Some("28P01" | "28000") => "the server refused the login: check the user and password",
                Some("3D000") => "the database does not exist: create it or name another",
                _ if e.to_string().contains("TLS") => {
                    "the TLS handshake failed: check sslmode and sslrootcert against the server's certificate"
                }
                _ => "could not connect: check the host, the port and that the server is running",
            };
            PostgresError::caused("postgres_url", format!("{shown}: {hint}"), e)
        }
        deadpool_postgres::PoolError::Timeout(_) => PostgresError::new(
            "postgres_url",
            format!("{shown}: no connection within the connect timeout: check the host and the port"),
        ),
        other => PostgresError::new("postgres_url", format!("{shown}: could not connect: {other}")),
    }
}
