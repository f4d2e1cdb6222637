//! What can stop the service from loading its configuration or starting.

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// A configuration file is wrong or cannot be served.
    #[error(transparent)]
    Config(#[from] tollgate_config::ReloadError),
    /// The admin token file cannot be used.
    #[error("--admin-token-file {file}: {message}")]
    AdminToken {
        /// The file given.
        file: String,
        /// What is wrong with it.
        message: String,
    },
    /// The permit key file cannot be used.
    #[error("--permit-key-file {file}: {message}")]
    PermitKey {
        /// The file given.
        file: String,
        /// What is wrong with it.
        message: String,
    },
    /// Admin routes would be open to the network.
    #[error(
        "refusing to serve the admin routes ({routes}) on {addr}, which is not a loopback address, \
         without a token: give --admin-token-file FILE (clients then send `Authorization: Bearer \
         <token>`), turn them off with --no-admin, or listen on a loopback address such as 127.0.0.1"
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
    /// The threads serving the gRPC listener's connections could not be
    /// started ([`ServerBuilder::grpc_threads`](crate::ServerBuilder::grpc_threads)).
    #[error("cannot start {count} gRPC connection threads: {source}")]
    Threads {
        /// How many were asked for.
        count: usize,
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
    /// The `--state-file` could not be restored (the message says why and
    /// what to do).
    #[error("--state-file {0}")]
    State(String),
}
