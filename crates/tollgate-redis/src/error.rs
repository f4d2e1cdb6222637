//! Errors: failures to connect, and the mapping of Redis errors onto
//! [`tollgate::backend::BackendError`] kinds.

use std::fmt;

use redis::{ErrorKind, RedisError, ServerErrorKind};
use tollgate::backend::BackendError;
use tollgate::backend::BackendErrorKind;
use tollgate::ConfigError;

/// What went wrong while connecting to Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectErrorKind {
    /// The URL could not be parsed or uses an unsupported scheme.
    InvalidUrl,
    /// Nothing accepted the connection (refused, unknown host, missing socket).
    Unreachable,
    /// The server rejected the credentials (wrong password or user).
    Authentication,
    /// Something answered, but not as a Redis server does (wrong port,
    /// TLS mismatch, another protocol).
    NotRedis,
    /// The TLS handshake failed (an untrusted or mismatched certificate, or
    /// a server that does not speak TLS on that port).
    Tls,
    /// The server did not answer within the connect timeout.
    Timeout,
    /// The server answered with an error (for example an invalid database
    /// number, or a cluster that is not ready).
    Server,
    /// A connection being established in the background (see
    /// [`RedisBackendBuilder::connect_in_background`](crate::RedisBackendBuilder::connect_in_background))
    /// has not succeeded yet. The message gives the last attempt's error.
    NotConnected,
    /// A builder setting is outside what the kernel or Redis accepts; the
    /// [target](ConnectError::target) names the setter (for example
    /// `tcp_keepalive`).
    InvalidSetting,
    /// The sentinels answered, but none knows a healthy primary by the
    /// configured name (a wrong name, or a failover under way).
    NoPrimary,
}

impl fmt::Display for ConnectErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConnectErrorKind::InvalidUrl => "invalid URL",
            ConnectErrorKind::Unreachable => "unreachable",
            ConnectErrorKind::Authentication => "authentication failed",
            ConnectErrorKind::NotRedis => "not a Redis server",
            ConnectErrorKind::Tls => "TLS handshake failed",
            ConnectErrorKind::Timeout => "timed out",
            ConnectErrorKind::Server => "server error",
            ConnectErrorKind::NotConnected => "not connected yet",
            ConnectErrorKind::InvalidSetting => "invalid setting",
            ConnectErrorKind::NoPrimary => "no primary",
        })
    }
}

/// A failure to connect to Redis or to verify that the server answers.
///
/// The message names the address (never the password) and the problem.
/// Converts into [`tollgate::Error`]: an invalid URL becomes a configuration
/// error for the field `url`, an invalid setting one for the setter's name,
/// everything else a backend error.
#[derive(Debug)]
pub struct ConnectError {
    kind: ConnectErrorKind,
    target: String,
    message: String,
    source: Option<RedisError>,
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ConnectErrorKind::InvalidSetting => {
                write!(f, "invalid Redis setting `{}`: {}", self.target, self.message)
            }
            _ => write!(f, "cannot use Redis at {}: {}", self.target, self.message),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|err| err as &(dyn std::error::Error + 'static))
    }
}

impl ConnectError {
    pub(crate) fn new(kind: ConnectErrorKind, target: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind,
            target: target.into(),
            message: message.into(),
            source: None,
        }
    }

    /// Appends a hint to the message.
    pub(crate) fn hint(mut self, hint: &str) -> Self {
        self.message.push_str("; ");
        self.message.push_str(hint);
        self
    }

    pub(crate) fn with_source(mut self, source: RedisError) -> Self {
        self.source = Some(source);
        self
    }

    /// Classifies a Redis error raised while connecting to `target`.
    pub(crate) fn from_redis(target: &str, err: RedisError) -> Self {
        let (kind, message) = classify_connect(&err);
        Self::new(kind, target, format!("{message} ({err})")).with_source(err)
    }

    /// What went wrong.
    pub fn kind(&self) -> ConnectErrorKind {
        self.kind
    }

    /// The address (or redacted URL) the error is about; for an
    /// [`InvalidSetting`](ConnectErrorKind::InvalidSetting), the setter.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// What went wrong, without the address.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<ConnectError> for tollgate::Error {
    fn from(err: ConnectError) -> Self {
        match err.kind {
            ConnectErrorKind::InvalidUrl => ConfigError::new("url", err.to_string()).into(),
            ConnectErrorKind::InvalidSetting => ConfigError::new(err.target.clone(), err.message).into(),
            ConnectErrorKind::Timeout => BackendError::new(BackendErrorKind::Timeout, err.to_string())
                .with_source(err)
                .into(),
            _ => BackendError::new(BackendErrorKind::Unavailable, err.to_string())
                .with_source(err)
                .into(),
        }
    }
}

fn classify_connect(err: &RedisError) -> (ConnectErrorKind, &'static str) {
    if let Some(tls) = tls_error(err) {
        return match tls {
            rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented => (
                ConnectErrorKind::Tls,
                "the server's TLS certificate is not trusted for this address; give its CA with \
                 RedisBackendBuilder::tls_certificates, or check the host name",
            ),
            _ => (
                ConnectErrorKind::Tls,
                "the TLS handshake failed; does this port serve TLS (rediss://) or plain Redis (redis://)?",
            ),
        };
    }
    match err.kind() {
        ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::NoPerm) => (
            ConnectErrorKind::Authentication,
            "the server rejected the credentials; check the user and password in the URL",
        ),
        ErrorKind::Extension if err.code() == Some("NOAUTH") => (
            ConnectErrorKind::Authentication,
            "the server requires a password; give it in the URL (redis://:password@host or redis://user:password@host)",
        ),
        ErrorKind::InvalidClientConfig => (ConnectErrorKind::InvalidUrl, "invalid connection settings"),
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => (
            ConnectErrorKind::NotRedis,
            "the server does not speak the Redis protocol; is this the Redis port, and does it need TLS (rediss://)?",
        ),
        _ if err.is_connection_refusal() => (
            ConnectErrorKind::Unreachable,
            "nothing accepts connections there (refused, or no such socket); is redis-server running at that address?",
        ),
        _ if err.is_timeout() => (
            ConnectErrorKind::Timeout,
            "no answer within the connect timeout; is this a Redis server, and is it reachable?",
        ),
        _ if err.is_connection_dropped() => (
            ConnectErrorKind::NotRedis,
            "the server closed the connection without answering; is this the Redis port, and does it need TLS (rediss://)?",
        ),
        ErrorKind::Io => (ConnectErrorKind::Unreachable, "cannot connect"),
        ErrorKind::Server(_) | ErrorKind::Extension => {
            (ConnectErrorKind::Server, "the server answered with an error")
        }
        _ => (ConnectErrorKind::Server, "connecting failed"),
    }
}

/// The rustls error somewhere in the chain of `err`'s sources, if any.
fn tls_error(err: &RedisError) -> Option<&rustls::Error> {
    std::error::Error::source(err).and_then(find_rustls)
}

type SharedError = std::sync::Arc<dyn std::error::Error + Send + Sync>;

fn find_rustls<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    if let Some(tls) = err.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    // redis-rs keeps I/O errors behind an `Arc`, and an I/O error's `source`
    // skips the error it wraps: look through both.
    if let Some(shared) = err.downcast_ref::<SharedError>() {
        let inner: &(dyn std::error::Error + 'static) = &**shared;
        return find_rustls(inner);
    }
    if let Some(wrapped) = err
        .downcast_ref::<std::io::Error>()
        .and_then(std::io::Error::get_ref)
    {
        let wrapped: &(dyn std::error::Error + 'static) = wrapped;
        return find_rustls(wrapped);
    }
    err.source().and_then(find_rustls)
}

/// Maps a Redis error raised during a decision onto a backend error kind,
/// keeping the Redis error as the source.
pub(crate) fn backend_error(err: RedisError) -> BackendError {
    let kind = match err.kind() {
        ErrorKind::Io | ErrorKind::ClusterConnectionNotFound | ErrorKind::AuthenticationFailed => {
            if err.is_timeout() {
                BackendErrorKind::Timeout
            } else {
                BackendErrorKind::Unavailable
            }
        }
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ReadOnly
            | ServerErrorKind::Moved
            | ServerErrorKind::Ask,
        ) => BackendErrorKind::Unavailable,
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => BackendErrorKind::Protocol,
        // Errors raised by the scripts themselves (malformed state, clock out
        // of range) and values of another type under a state key.
        ErrorKind::Extension if matches!(err.code(), Some("TOLLGATE" | "WRONGTYPE")) => {
            BackendErrorKind::Protocol
        }
        _ => BackendErrorKind::Other,
    };
    BackendError::new(kind, format!("Redis: {err}")).with_source(err)
}
