//! [`PostgresError`]: why a backend could not be made, naming the setting
//! to change; and how a failed call reads as a [`BackendError`].

use std::time::Duration;

use tollgate::backend::{BackendError, BackendErrorKind};

/// A PostgreSQL backend that could not be made: a bad URL, a server that
/// cannot be reached or refuses the login, a role without the rights to
/// install the schema, or a schema of a newer version. It names the
/// setting to change ([`PostgresError::setting`]) and says what to do.
#[derive(Debug, thiserror::Error)]
#[error("{setting}: {message}")]
pub struct PostgresError {
    setting: &'static str,
    message: String,
    #[source]
    source: Option<tokio_postgres::Error>,
}

impl PostgresError {
    /// An error about `setting` (`postgres_url`, `schema`, …).
    pub(crate) fn new(setting: &'static str, message: impl Into<String>) -> Self {
        Self {
            setting,
            message: message.into(),
            source: None,
        }
    }

    /// An error about `setting` caused by the client's `err`, its message
    /// followed by the server's own words.
    pub(crate) fn caused(
        setting: &'static str,
        message: impl Into<String>,
        err: tokio_postgres::Error,
    ) -> Self {
        let detail = server_words(&err);
        Self {
            setting,
            message: format!("{}: {detail}", message.into()),
            source: Some(err),
        }
    }

    /// The setting to change: `postgres_url` (the URL, the server, the
    /// login), `schema` (its name, its version, the rights to create it).
    pub fn setting(&self) -> &str {
        self.setting
    }

    /// What went wrong and what to do, without the setting's name.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The SQLSTATE code of the server's error behind this one, if any
    /// (`42501` for missing rights, `28P01` for a refused password).
    pub fn code(&self) -> Option<&str> {
        self.source.as_ref()?.as_db_error().map(|db| db.code().code())
    }
}

/// The server's message for `err` when it sent one, the client's otherwise.
pub(crate) fn server_words(err: &tokio_postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => {
            let mut text = err.to_string();
            let mut source = std::error::Error::source(err);
            while let Some(cause) = source {
                text = format!("{text}: {cause}");
                source = cause.source();
            }
            text
        }
    }
}

/// A failed call as the limiter sees it: a lost or refused connection is
/// [`Unavailable`](BackendErrorKind::Unavailable) (the fail policy
/// decides), an error raised by the backend's functions a
/// [`Protocol`](BackendErrorKind::Protocol) error, anything else
/// [`Other`](BackendErrorKind::Other).
pub(crate) fn backend_error(err: tokio_postgres::Error) -> BackendError {
    let kind = match err.as_db_error() {
        None => BackendErrorKind::Unavailable,
        Some(db) if db.code().code().starts_with("TG") => BackendErrorKind::Protocol,
        // Class 08: connection exceptions; 57P0x: the server shutting down
        // or in recovery; 53: out of resources.
        Some(db) if is_unavailable(db.code().code()) => BackendErrorKind::Unavailable,
        Some(_) => BackendErrorKind::Other,
    };
    BackendError::new(kind, format!("PostgreSQL: {}", server_words(&err))).with_source(err)
}

/// Whether a SQLSTATE says that the server is, for now, out of reach.
fn is_unavailable(code: &str) -> bool {
    code.starts_with("08") || code.starts_with("57P") || code.starts_with("53")
}

/// A connection the pool could not give within the timeout, or could not
/// make.
pub(crate) fn pool_error(err: deadpool_postgres::PoolError, timeout: Duration) -> BackendError {
    match err {
        deadpool_postgres::PoolError::Timeout(_) => BackendError::timeout(timeout),
        deadpool_postgres::PoolError::Backend(err) => backend_error(err),
        other => BackendError::new(
            BackendErrorKind::Unavailable,
            format!("PostgreSQL: no connection: {other}"),
        ),
    }
}
