//! [`PostgresBackend`]: the pool that a policy's bindings share, and the
//! [`Backend`] implementation that binds policies to it.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use tollgate::backend::{Backend, BackendError, Capabilities, Scope};
use tollgate::Error;

use crate::binding::{Options, PostgresBinding};
use crate::error::{backend_error, pool_error};
use crate::sweep;

/// Rate-limit state in PostgreSQL, shared by every process and host that
/// uses the same database and schema.
///
/// Each decision is one call of a SQL function in one round trip, one
/// transaction that locks the key's rows and decides on the database's
/// clock; each rate-limit key's state is one row per limit of its policy.
/// Cloning is cheap and clones share the pool. See the [crate
/// documentation](crate) for the schema, the clock and the rights it needs.
#[derive(Clone)]
pub struct PostgresBackend {
    pool: Pool,
    /// Behind one pointer: a service keeps a backend in each of its many
    /// limiters.
    options: Arc<Options>,
}

impl std::fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = self.pool.status();
        f.debug_struct("PostgresBackend")
            .field("schema", &self.options.schema)
            .field("pool_size", &status.max_size)
            .field("connections", &status.size)
            .field("timeout", &self.options.timeout)
            .field("caller_clock", &self.options.clock.is_some())
            .finish()
    }
}

impl PostgresBackend {
    /// The schema that holds the backend's table and functions.
    pub fn schema(&self) -> &str {
        &self.options.schema
    }

    /// Whether the schema is installed: always for a backend from
    /// [`connect`](crate::PostgresBackendBuilder::connect); for one
    /// [connecting in the background](crate::PostgresBackendBuilder::connect_in_background),
    /// once a decision has reached the database.
    pub fn is_installed(&self) -> bool {
        self.options.installer.is_installed()
    }

    /// Drops the backend's schema with everything in it, the state
    /// included, on one of the pool's connections: for a run that
    /// installed a schema of its own (a replay, a test) and must leave
    /// nothing behind. Decisions after it fail until a new backend
    /// installs the schema again.
    ///
    /// # Errors
    ///
    /// The server's error, or a timeout after ten times the decision
    /// timeout.
    pub async fn drop_schema(&self) -> Result<(), BackendError> {
        let timeout = self.options.timeout * 10;
        let statement = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.options.schema);
        let work = async {
            let client = self.pool.get().await.map_err(|e| pool_error(e, timeout))?;
            client.batch_execute(&statement).await.map_err(backend_error)
        };
        tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| BackendError::timeout(timeout))?
    }

    /// The time a decision may take before it fails as timed out.
    pub fn timeout(&self) -> Duration {
        self.options.timeout
    }

    /// A backend on `pool`, sweeping expired rows every `sweep_every`.
    pub(crate) fn new(pool: Pool, options: Options, sweep_every: Option<Duration>) -> Self {
        if let Some(every) = sweep_every {
            sweep::start(&pool, &options.schema, every);
        }
        Self {
            pool,
            options: Arc::new(options),
        }
    }
}

impl Backend for PostgresBackend {
    type Binding = PostgresBinding;

    fn bind(&self, scope: &Scope<'_>) -> Result<PostgresBinding, Error> {
        PostgresBinding::new(&self.pool, &self.options, scope)
    }

    /// Decisions, reports (charges), per-key operations, reservations,
    /// leases and the parts of a request as one step, awaited.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            charges: true,
            operates: true,
            reserves: true,
            leases: true,
            together: true,
            ..Capabilities::default()
        }
    }
}
