//! [`Installer`]: whether the backend's schema is installed yet, and
//! installing it on the first decision of a backend that started before
//! its database answered.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadpool_postgres::Pool;
use tollgate::backend::{BackendError, BackendErrorKind};

use crate::error::{pool_error, PostgresError};
use crate::schema;

/// The schema a backend installs, and whether it has.
#[derive(Debug)]
pub(crate) struct Installer {
    schema: String,
    unlogged: bool,
    installed: AtomicBool,
    /// One installation at a time from this backend.
    turn: tokio::sync::Mutex<()>,
}

impl Installer {
    /// An installer of `schema`, installed already when `installed`.
    pub(crate) fn new(schema: &str, unlogged: bool, installed: bool) -> Self {
        Self {
            schema: schema.to_owned(),
            unlogged,
            installed: AtomicBool::new(installed),
            turn: tokio::sync::Mutex::new(()),
        }
    }

    /// Whether the schema is known to be installed.
    pub(crate) fn is_installed(&self) -> bool {
        self.installed.load(Ordering::Acquire)
    }

    /// Installs the schema through `pool` unless it is already: the first
    /// decision of a backend that connects in the background does. A
    /// database that does not answer is
    /// [`Unavailable`](BackendErrorKind::Unavailable) (the fail policy
    /// decides, and the next decision tries again); a schema the role may
    /// not create, or of a newer version, is [`Other`](BackendErrorKind::Other)
    /// and says what to do.
    pub(crate) async fn ensure(&self, pool: &Pool, timeout: Duration) -> Result<(), BackendError> {
        if self.is_installed() {
            return Ok(());
        }
        let _turn = self.turn.lock().await;
        if self.is_installed() {
            return Ok(());
        }
        let mut client = pool.get().await.map_err(|e| pool_error(e, timeout))?;
        schema::install(&mut client, &self.schema, self.unlogged)
            .await
            .map_err(|err| install_error(&err))?;
        self.installed.store(true, Ordering::Release);
        Ok(())
    }
}

/// An installation that failed, as a decision reports it.
fn install_error(err: &PostgresError) -> BackendError {
    let kind = match err.code() {
        Some(code) if code.starts_with("08") || code.starts_with("57P") => BackendErrorKind::Unavailable,
        None => BackendErrorKind::Unavailable,
        Some(_) => BackendErrorKind::Other,
    };
    let kind = if err.message().contains("newer") {
        BackendErrorKind::Other
    } else {
        kind
    };
    BackendError::new(kind, format!("PostgreSQL schema not installed: {err}"))
}
