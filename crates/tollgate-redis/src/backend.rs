//! [`RedisBackend`]: the connection that a policy's bindings share, and
//! the [`Backend`] implementation that binds policies to it.

use std::sync::Arc;
use std::time::Duration;

use tollgate::backend::Scope;
use tollgate::{Backend, Error};

use crate::binding::{Options, RedisBinding};
use crate::builder::RedisBackendBuilder;
use crate::connection::Connection;
use crate::error::ConnectError;
use crate::scripts::Functions;

/// Rate-limit state in Redis, shared by every process and host that uses the
/// same server or cluster.
///
/// Each decision is one atomic Lua script in one round trip; each rate-limit
/// key's whole state is one Redis key with an expiry per limit of the
/// policy (one, or several all in one hash slot). Cloning is cheap and
/// clones share the connection. See the [crate documentation](crate) for the
/// time source, key layout, limits and failure behaviour.
#[derive(Clone)]
pub struct RedisBackend {
    conn: Connection,
    options: Options,
    /// Whether decisions call the function library (see
    /// [`RedisBackend::uses_functions`]).
    functions: Arc<Functions>,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field(
                "mode",
                &if self.conn.is_cluster() {
                    "cluster"
                } else if self.conn.is_sentinel() {
                    "sentinel"
                } else {
                    "standalone"
                },
            )
            .field("connected", &self.conn.is_connected())
            .field("timeout", &self.options.timeout)
            .field("caller_clock", &self.options.clock.is_some())
            .field("expiry_grace", &self.options.expiry_grace)
            .field("functions", &self.functions.enabled())
            .finish()
    }
}

impl RedisBackend {
    /// Options for connecting: timeouts and the time source.
    pub fn builder() -> RedisBackendBuilder {
        RedisBackendBuilder::default()
    }

    /// Connects to one Redis server with the default options.
    ///
    /// `url` is `redis://[user:password@]host[:port][/db]`, `rediss://…` for
    /// TLS, or `redis+unix:///path/to/socket[?db=N&user=U&pass=P]` (also
    /// `unix://`). The server must answer `PING` within
    /// [`DEFAULT_CONNECT_TIMEOUT`](crate::DEFAULT_CONNECT_TIMEOUT).
    ///
    /// # Errors
    ///
    /// A [`ConnectError`] naming the problem: unparseable URL, refused
    /// connection, rejected credentials, a port that does not speak Redis,
    /// or no answer in time.
    pub async fn connect(url: &str) -> Result<Self, ConnectError> {
        Self::builder().connect(url).await
    }

    /// Connects to a Redis Cluster through one or more seed nodes with the
    /// default options.
    ///
    /// # Errors
    ///
    /// As for [`RedisBackend::connect`]; a cluster that is not ready (no
    /// slots served) is reported as a server error.
    pub async fn connect_cluster<S: AsRef<str>>(seeds: &[S]) -> Result<Self, ConnectError> {
        Self::builder().connect_cluster(seeds).await
    }

    /// Connects to the primary that Redis Sentinel names `master`, asking
    /// the sentinels at `sentinels` (`redis://host:port` URLs of sentinels,
    /// not of servers), with the default options; after a failover,
    /// decisions go to the new primary (see
    /// [`RedisBackendBuilder::connect_sentinel`]).
    ///
    /// # Errors
    ///
    /// As for [`RedisBackend::connect`]; a [`ConnectError`] of kind
    /// [`NoPrimary`](crate::ConnectErrorKind::NoPrimary) when no sentinel
    /// knows a healthy primary by that name, and of kind
    /// [`Unreachable`](crate::ConnectErrorKind::Unreachable) naming the
    /// sentinels when none answers.
    pub async fn connect_sentinel<S: AsRef<str>>(
        master: &str,
        sentinels: &[S],
    ) -> Result<Self, ConnectError> {
        Self::builder().connect_sentinel(master, sentinels).await
    }

    /// Returns at once and connects to one Redis server in the background,
    /// with the default options (see
    /// [`RedisBackendBuilder::connect_in_background`]).
    ///
    /// # Errors
    ///
    /// A [`ConnectError`] of kind
    /// [`InvalidUrl`](crate::ConnectErrorKind::InvalidUrl) when `url` does
    /// not parse; nothing else fails here.
    ///
    /// # Panics
    ///
    /// When called outside a Tokio runtime, which the background task needs.
    pub fn connect_in_background(url: &str) -> Result<Self, ConnectError> {
        Self::builder().connect_in_background(url)
    }

    /// Whether decisions can be sent: always for a backend from
    /// [`connect`](Self::connect), [`connect_cluster`](Self::connect_cluster)
    /// or [`connect_sentinel`](Self::connect_sentinel);
    /// for one [connecting in the background](RedisBackendBuilder::connect_in_background),
    /// once an attempt has succeeded. A connection, once made, may still be
    /// lost and is then re-established by the next decision.
    pub fn is_connected(&self) -> bool {
        self.conn.is_connected()
    }

    /// The time a decision may take before it fails as timed out.
    pub fn timeout(&self) -> Duration {
        self.options.timeout
    }

    /// Whether the backend is (or, connecting in the background, will be)
    /// connected to a cluster.
    pub fn is_cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    /// Whether the backend is (or, connecting in the background, will be)
    /// connected to the primary that Redis Sentinel names.
    pub fn is_sentinel(&self) -> bool {
        self.conn.is_sentinel()
    }

    /// Whether decisions call the function library that the backend loads
    /// on Redis 7 and later (`FCALL`): true until a decision finds that the
    /// server has no functions, or that its ACL refuses `FCALL` or
    /// `FUNCTION LOAD` to this user; from then on, for good, decisions run
    /// as scripts (`EVALSHA`), which decide alike at a higher cost on the
    /// server. See the
    /// [function library](crate::_documentation::operations#scripts-and-the-function-library).
    pub fn uses_functions(&self) -> bool {
        self.functions.enabled()
    }

    /// A backend on `conn` with `options`, which has not yet found out
    /// whether the server has functions.
    pub(crate) fn new(conn: Connection, options: Options) -> Self {
        Self {
            conn,
            options,
            functions: Arc::new(Functions::new()),
        }
    }
}

impl Backend for RedisBackend {
    type Binding = RedisBinding;

    fn bind(&self, scope: &Scope<'_>) -> Result<RedisBinding, Error> {
        RedisBinding::new(&self.conn, &self.functions, &self.options, scope)
    }
}
