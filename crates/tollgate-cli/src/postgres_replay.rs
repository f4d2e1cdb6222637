//! `simulate --backend postgres`: the replay ([`crate::store_replay`])
//! decided by the PostgreSQL backend's SQL functions on a real database.
//!
//! Each run installs the backend into a schema of its own,
//! `tollgate_simulate_<run>`, and drops that schema when it ends. The role
//! needs `CREATE` on the database.

use tollgate::clock::ManualClock;
use tollgate_postgres::PostgresBackend;

use crate::error::CliError;
use crate::store_replay::{Store, CONNECT_TIMEOUT, DECISION_TIMEOUT, EXPIRY_GRACE, KEY_PREFIX};

/// The database a replay runs on.
pub struct PostgresStore {
    backend: PostgresBackend,
    /// The run's schema, `tollgate_simulate_<run>` with `-` as `_`.
    schema: String,
}

impl Store for PostgresStore {
    type Backend = PostgresBackend;

    /// Connects to the database and installs the backend into a schema
    /// of this run's own.
    ///
    /// # Errors
    ///
    /// [`CliError::PostgresConnect`] naming the URL's problem (unparseable,
    /// refused, wrong password, no answer in time) or the missing rights.
    async fn connect(url: &str, run: &str, clock: ManualClock) -> Result<Self, CliError> {
        let schema = format!("{KEY_PREFIX}_{run}").replace('-', "_");
        let backend = PostgresBackend::builder(url)
            .schema(schema.as_str())
            .caller_clock(clock)
            .expiry_grace(EXPIRY_GRACE)
            .timeout(DECISION_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .sweep_interval(None)
            .connect()
            .await
            .map_err(|source| CliError::PostgresConnect { source })?;
        Ok(Self { backend, schema })
    }

    fn backend(&self) -> &PostgresBackend {
        &self.backend
    }

    /// `tollgate-simulate` for every run: the schema is the run's own.
    fn key_prefix(&self) -> String {
        KEY_PREFIX.to_owned()
    }

    /// [`CliError::PostgresDecision`].
    fn decision_error(line: u64, source: tollgate::Error) -> CliError {
        CliError::PostgresDecision { line, source }
    }

    /// Drops this run's schema, its table and functions with it.
    ///
    /// # Errors
    ///
    /// [`CliError::PostgresCleanup`] naming the schema left behind.
    async fn cleanup(&mut self) -> Result<(), CliError> {
        self.backend
            .drop_schema()
            .await
            .map_err(|err| CliError::PostgresCleanup {
                schema: self.schema.clone(),
                reason: err.to_string(),
            })
    }
}
