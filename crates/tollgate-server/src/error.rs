//! What can stop the service from loading its configuration or starting.

use std::fmt;

use tollgate_config::__private::write_located;

/// A mistake in a configuration file, or a configuration that cannot be
/// served: located by file, line and field where they are known.
///
/// Displays as `FILE:LINE: FIELD: MESSAGE`, like
/// [`tollgate_config::ConfigFileError`], whose errors it carries for policy
/// files; the line and the field are left out when unknown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    file: String,
    line: Option<usize>,
    field: String,
    message: String,
}

impl ConfigError {
    pub(crate) fn new(
        file: &str,
        line: Option<usize>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            file: file.to_owned(),
            line,
            field: field.into(),
            message: message.into(),
        }
    }

    /// A limiter that could not be built for the file `file`: a
    /// configuration error names its field under `within`.
    pub(crate) fn build(file: &str, within: &str, err: tollgate::Error) -> Self {
        match err {
            tollgate::Error::Config(err) => {
                let err = err.within(within);
                Self::new(file, None, err.field(), err.reason())
            }
            other => Self::new(file, None, "", format!("cannot build the limiters: {other}")),
        }
    }

    /// The file, as given on the command line.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The line (1-based), when known.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// The path of the offending field (`descriptors[1].rate_limit.unit`,
    /// `tollgate.resources.login.window`), empty when the problem is not
    /// about one field.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// What is wrong, without the location.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<tollgate_config::ConfigFileError> for ConfigError {
    fn from(err: tollgate_config::ConfigFileError) -> Self {
        Self::new(err.file(), err.line(), err.field(), err.message())
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_located(f, &self.file, self.line, &self.field, &self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// A configuration file is wrong or cannot be served.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The admin token file cannot be used.
    #[error("--admin-token-file {file}: {message}")]
    AdminToken {
        /// The file given.
        file: String,
        /// What is wrong with it.
        message: String,
    },
    /// Admin routes would be open to the network.
    #[error(
        "refusing to serve the admin routes ({routes}) on {addr}, which is not a loopback address, \
         without a token: give --admin-token-file FILE (clients then send `Authorization: Bearer \
         <token>`), or listen on a loopback address such as 127.0.0.1"
    )]
    AdminExposed {
        /// The HTTP listener's address.
        addr: std::net::SocketAddr,
        /// The admin routes.
        routes: String,
    },
    /// `--auth-deny-status` is not a status a proxy can use as a denial.
    #[error("--auth-deny-status {0}: must be a client error status from 400 to 499 (429, or 403 for nginx)")]
    DenyStatus(u16),
    /// A listener could not be bound or served.
    #[error("{what} {addr}: {source}")]
    Io {
        /// Which listener.
        what: &'static str,
        /// Its address.
        addr: std::net::SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// A connection limit or timeout is out of range.
    #[error("{setting}: {message}")]
    Limit {
        /// The setting, as the command's flag.
        setting: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// No `--config` file was given.
    #[error("no configuration file: give at least one --config FILE")]
    NoConfig,
}
