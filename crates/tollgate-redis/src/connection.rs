//! Connections: a standalone server through redis-rs's `ConnectionManager`,
//! a cluster through its async cluster client, or the primary that Redis
//! Sentinel names (see [`crate::sentinel`]). All reconnect by themselves;
//! all are cheap to clone and multiplex every decision over shared
//! connections. Any can also be established in the background, by a task
//! that retries until the server answers.

use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::io::tcp::TcpSettings;
use redis::{Client, Cmd, ConnectionAddr, FromRedisValue, IntoConnectionInfo, RedisResult, TlsCertificates};

use tokio::sync::watch;
use tokio::time::Instant;
use tollgate::__private::redact_url;

use crate::error::{ConnectError, ConnectErrorKind};
use crate::handshake::{check_pong, invalid_url, manager_config, timed_out, Backoff};
use crate::redirects::cluster_query;
use crate::sentinel::{PrimaryAuth, SentinelConnection, Sentinels};

/// A connection to a standalone server, a cluster or the primary that
/// Sentinel names: live, or being established in the background.
#[derive(Clone)]
pub(crate) enum Connection {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(SentinelConnection),
    Background(Arc<Background>),
}

impl Connection {
    /// Sends one command and reads its reply; on a background connection,
    /// once it is established.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> RedisResult<T> {
        let live = match self {
            Connection::Background(background) => background.connected.get(),
            live => Some(live),
        };
        match live {
            Some(Connection::Standalone(conn)) => cmd.query_async(&mut conn.clone()).await,
            Some(Connection::Cluster(conn)) => cluster_query(conn, cmd, None).await,
            Some(Connection::Sentinel(conn)) => conn.query(cmd).await,
            // An established background connection is never itself one.
            Some(Connection::Background(_)) | None => Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "not connected yet",
            ))),
        }
    }

    /// Sends one command to the server that owns `key` (in a cluster, the
    /// primary of its slot; elsewhere the one server) and reads its reply.
    /// For commands without keys that a cluster would otherwise send to
    /// every primary, such as `FUNCTION LOAD`.
    pub(crate) async fn query_at<T: FromRedisValue>(&self, cmd: &Cmd, key: &[u8]) -> RedisResult<T> {
        let live = match self {
            Connection::Background(background) => background.connected.get(),
            live => Some(live),
        };
        match live {
            Some(Connection::Cluster(conn)) => {
                let route = Route::with_key(key, SlotAddr::Master);
                cluster_query(conn, cmd, Some(SingleNodeRoutingInfo::SpecificNode(route))).await
            }
            _ => self.query(cmd).await,
        }
    }

    /// The live connection to send a decision on. A background connection
    /// waits for its first attempt to end; until one attempt has
    /// succeeded it fails with a [`ConnectErrorKind::NotConnected`] error.
    ///
    /// Waiting ends at `deadline` (the decision's timeout).
    pub(crate) async fn ready(&self, deadline: Instant) -> Result<&Connection, ConnectError> {
        match self {
            Connection::Background(background) => background.ready(deadline).await,
            live => Ok(live),
        }
    }

    /// Whether decisions can be sent (a background connection has been
    /// established; the connection may still be lost later, like any).
    pub(crate) fn is_connected(&self) -> bool {
        match self {
            Connection::Background(background) => background.connected.get().is_some(),
            _ => true,
        }
    }

    /// Whether this is (or will be) a cluster connection.
    pub(crate) fn is_cluster(&self) -> bool {
        match self {
            Connection::Standalone(_) | Connection::Sentinel(_) => false,
            Connection::Cluster(_) => true,
            Connection::Background(background) => background.endpoint.is_cluster(),
        }
    }

    /// Whether this is (or will be) a connection to the primary that
    /// Sentinel names.
    pub(crate) fn is_sentinel(&self) -> bool {
        match self {
            Connection::Standalone(_) | Connection::Cluster(_) => false,
            Connection::Sentinel(_) => true,
            Connection::Background(background) => background.endpoint.is_sentinel(),
        }
    }

    /// Starts connecting to `endpoint` in the background, on the current
    /// Tokio runtime, retrying until an attempt succeeds.
    pub(crate) fn background(endpoint: Endpoint, connect_timeout: Duration) -> Self {
        let background = Arc::new(Background {
            endpoint,
            connected: OnceLock::new(),
            progress: watch::channel(Progress::FirstAttempt).0,
        });
        tokio::spawn(keep_connecting(Arc::downgrade(&background), connect_timeout));
        Connection::Background(background)
    }
}

/// How far a background connection has come.
enum Progress {
    /// The first attempt is under way.
    FirstAttempt,
    /// The last attempt failed with this error; another follows.
    Failed(Arc<ConnectError>),
    /// An attempt succeeded (the connection is in `connected`).
    Connected,
}

/// A connection established in the background.
pub(crate) struct Background {
    endpoint: Endpoint,
    connected: OnceLock<Connection>,
    progress: watch::Sender<Progress>,
}

impl Background {
    async fn ready(&self, deadline: Instant) -> Result<&Connection, ConnectError> {
        if let Some(conn) = self.connected.get() {
            return Ok(conn);
        }
        let mut progress = self.progress.subscribe();
        let first_attempt_ended = progress.wait_for(|p| !matches!(p, Progress::FirstAttempt));
        // The sender lives as long as `self`, so waiting fails only by the
        // deadline.
        let last_error = match tokio::time::timeout_at(deadline, first_attempt_ended).await {
            Ok(Ok(progress)) => match &*progress {
                Progress::Failed(err) => Some(Arc::clone(err)),
                _ => None,
            },
            _ => None,
        };
        match self.connected.get() {
            Some(conn) => Ok(conn),
            None => Err(self.not_connected(last_error.as_deref())),
        }
    }

    /// The error of a decision made before any attempt succeeded.
    pub(crate) fn not_connected(&self, last: Option<&ConnectError>) -> ConnectError {
        let message = match last {
            Some(last) => format!(
                "not connected yet (connecting in the background; the last attempt failed: {}: {})",
                last.kind(),
                last.message()
            ),
            None => "not connected yet (the first attempt, in the background, has not ended)".to_owned(),
        };
        ConnectError::new(
            ConnectErrorKind::NotConnected,
            self.endpoint.name.clone(),
            message,
        )
    }
}

/// Connects to the endpoint until an attempt succeeds, with a doubling
/// pause between attempts; stops when every handle to the connection is
/// gone.
async fn keep_connecting(background: Weak<Background>, connect_timeout: Duration) {
    let mut backoff = Backoff::new();
    loop {
        let endpoint = match background.upgrade() {
            Some(background) => background.endpoint.clone(),
            None => return,
        };
        let result = endpoint.connect(connect_timeout).await;
        let Some(background) = background.upgrade() else {
            return;
        };
        match result {
            Ok(conn) => {
                let _ = background.connected.set(conn);
                background.progress.send_replace(Progress::Connected);
                return;
            }
            Err(err) => {
                background.progress.send_replace(Progress::Failed(Arc::new(err)));
            }
        }
        drop(background);
        backoff.wait().await;
    }
}

/// Where to connect: a parsed URL or cluster seeds, ready for attempts.
#[derive(Clone)]
pub(crate) struct Endpoint {
    client: EndpointClient,
    /// The address, for errors of an attempt (`127.0.0.1:6379`, `cluster
    /// seed …`).
    target: String,
    /// The URL without credentials, for errors before any connection.
    name: String,
}

/// One per backend, so the size of either client does not matter.
#[derive(Clone)]
#[allow(clippy::large_enum_variant)]
enum EndpointClient {
    Standalone { client: Client, tls: bool },
    Cluster(ClusterClient),
    Sentinel(Arc<Sentinels>),
}

impl Endpoint {
    /// Parses one server's URL; connections get the `tcp` settings.
    pub(crate) fn standalone(
        url: &str,
        tls: Option<&TlsCertificates>,
        tcp: &TcpSettings,
    ) -> Result<Self, ConnectError> {
        let info = url
            .into_connection_info()
            .map_err(|err| invalid_url(url, err))?
            .set_tcp_settings(tcp.clone());
        let target = info.addr().to_string();
        let uses_tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        let client = match tls {
            Some(certs) => Client::build_with_tls(info, certs.clone()),
            None => Client::open(info),
        }
        .map_err(|err| invalid_url(url, err))?;
        Ok(Self {
            client: EndpointClient::Standalone {
                client,
                tls: uses_tls,
            },
            target,
            name: redact_url(url),
        })
    }

    /// Parses cluster seed URLs; connections to every node get the `tcp`
    /// settings.
    pub(crate) fn cluster(
        seeds: &[&str],
        connect_timeout: Duration,
        tls: Option<&TlsCertificates>,
        tcp: &TcpSettings,
    ) -> Result<Self, ConnectError> {
        let mut infos = Vec::with_capacity(seeds.len());
        for seed in seeds {
            infos.push(
                seed.into_connection_info()
                    .map_err(|err| invalid_url(seed, err))?,
            );
        }
        let target = match infos.first() {
            Some(info) if infos.len() == 1 => format!("cluster seed {}", info.addr()),
            Some(info) => format!("cluster seeds {} and {} more", info.addr(), infos.len() - 1),
            None => {
                return Err(ConnectError::new(
                    ConnectErrorKind::InvalidUrl,
                    "cluster",
                    "no seed URL given",
                ))
            }
        };
        let name = match seeds {
            [seed] => format!("cluster seed {}", redact_url(seed)),
            _ => format!(
                "cluster seeds {}",
                seeds.iter().map(|s| redact_url(s)).collect::<Vec<_>>().join(", ")
            ),
        };
        let mut builder = ClusterClientBuilder::new(infos)
            .connection_timeout(connect_timeout)
            // No retries: they would resend a command after a lost
            // connection, when it may have run (crate::redirects follows
            // the answers that say it did not).
            .retries(0)
            .tcp_settings(tcp.clone());
        if let Some(certs) = tls {
            builder = builder.certs(certs.clone());
        }
        let client = builder
            .build()
            .map_err(|err| ConnectError::from_redis(&target, err))?;
        Ok(Self {
            client: EndpointClient::Cluster(client),
            target,
            name,
        })
    }

    /// The primary named `master` by the sentinels at `urls`; connections
    /// to the sentinels and the primary get the `tcp` settings, and the
    /// primary is logged in to with `auth`.
    pub(crate) fn sentinel(
        master: &str,
        urls: &[&str],
        tcp: &TcpSettings,
        auth: &PrimaryAuth,
    ) -> Result<Self, ConnectError> {
        let sentinels = Sentinels::new(master, urls, tcp, auth)?;
        let name = format!(
            "primary {master:?} through {} {}",
            if urls.len() == 1 { "sentinel" } else { "sentinels" },
            urls.iter().map(|u| redact_url(u)).collect::<Vec<_>>().join(", ")
        );
        Ok(Self {
            target: sentinels.target.clone(),
            client: EndpointClient::Sentinel(Arc::new(sentinels)),
            name,
        })
    }

    fn is_cluster(&self) -> bool {
        matches!(self.client, EndpointClient::Cluster(_))
    }

    fn is_sentinel(&self) -> bool {
        matches!(self.client, EndpointClient::Sentinel(_))
    }

    /// One attempt: connects and checks that the server answers PING.
    ///
    /// A standalone connection manager is configured to fail fast: a
    /// reconnection is a single attempt, started by the first command after
    /// a connection is lost and shared by every command waiting for it, so
    /// decisions fail promptly while the server is down (the limiter's fail
    /// policy then decides) and succeed again as soon as it is back.
    pub(crate) async fn connect(&self, connect_timeout: Duration) -> Result<Connection, ConnectError> {
        let target = self.target.as_str();
        match &self.client {
            EndpointClient::Standalone { client, tls } => {
                let config = manager_config(connect_timeout);
                let connect = async {
                    let manager = ConnectionManager::new_with_config(client.clone(), config).await?;
                    let conn = Connection::Standalone(manager);
                    let pong: String = conn.query(&redis::cmd("PING")).await?;
                    Ok::<_, redis::RedisError>((conn, pong))
                };
                let (conn, pong) = tokio::time::timeout(connect_timeout, connect)
                    .await
                    .map_err(|_| timed_out(target, connect_timeout))
                    .and_then(|result| result.map_err(|err| ConnectError::from_redis(target, err)))
                    .map_err(|err| match err.kind() {
                        // A plain Redis port never answers a TLS handshake.
                        ConnectErrorKind::Timeout if *tls => {
                            err.hint("with rediss://, does this port serve TLS (or plain Redis, redis://)?")
                        }
                        _ => err,
                    })?;
                check_pong(target, &pong)?;
                Ok(conn)
            }
            EndpointClient::Cluster(client) => {
                let connect = async {
                    let conn = Connection::Cluster(client.get_async_connection().await?);
                    let pong: String = conn.query(&redis::cmd("PING")).await?;
                    Ok::<_, redis::RedisError>((conn, pong))
                };
                let (conn, pong) = tokio::time::timeout(connect_timeout, connect)
                    .await
                    .map_err(|_| timed_out(target, connect_timeout))?
                    .map_err(|err| ConnectError::from_redis(target, err))?;
                check_pong(target, &pong)?;
                Ok(conn)
            }
            EndpointClient::Sentinel(sentinels) => {
                SentinelConnection::connect(Arc::clone(sentinels), connect_timeout)
                    .await
                    .map(Connection::Sentinel)
            }
        }
    }
}
