//! Errors.

use std::borrow::Cow;
use std::time::Duration;

/// Everything a limiter call or a builder can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is invalid; the message names the field.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The backend failed and the limiter fails closed: the request must be
    /// treated as denied.
    #[error(transparent)]
    Backend(#[from] BackendError),
}

/// An invalid configuration value, naming the field that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {reason}")]
pub struct ConfigError {
    field: Cow<'static, str>,
    reason: String,
}

impl ConfigError {
    /// Creates an error for `field` with a reason a user can act on.
    pub fn new(field: impl Into<Cow<'static, str>>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The path of the offending field, e.g. `limit` or `resources.login.window`.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// Why the value was rejected.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// Prefixes the field path, e.g. `window` becomes `resources.login.window`.
    pub fn within(self, parent: impl AsRef<str>) -> Self {
        Self {
            field: format!("{}.{}", parent.as_ref(), self.field).into(),
            reason: self.reason,
        }
    }
}

/// Why a backend could not make a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendErrorKind {
    /// The store could not be reached or the connection was lost.
    Unavailable,
    /// The store did not answer within the configured timeout.
    Timeout,
    /// The store answered something that is not a valid state or reply.
    Protocol,
    /// The backend does not support what was asked of it (for example a
    /// per-key operation on a custom backend that does not implement
    /// [`Call::Operate`](crate::backend::Call::Operate)).
    Unsupported,
    /// Any other failure reported by the store.
    Other,
}

/// A backend failure. Never a silent allow: under fail-closed the limiter
/// returns it, under fail-open it admits and counts the event.
#[derive(Debug, thiserror::Error)]
#[error("rate-limit backend {kind}: {message}")]
pub struct BackendError {
    kind: BackendErrorKind,
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl std::fmt::Display for BackendErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BackendErrorKind::Unavailable => "unavailable",
            BackendErrorKind::Timeout => "timed out",
            BackendErrorKind::Protocol => "protocol error",
            BackendErrorKind::Unsupported => "does not support it",
            BackendErrorKind::Other => "error",
        })
    }
}

impl BackendError {
    /// Creates an error of `kind` with a message.
    pub fn new(kind: BackendErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// Attaches the underlying error.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// A timeout after `after`.
    pub fn timeout(after: Duration) -> Self {
        Self::new(BackendErrorKind::Timeout, format!("no answer within {after:?}"))
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> BackendErrorKind {
        self.kind
    }
}
