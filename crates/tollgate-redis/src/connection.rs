//! Connections: a standalone server through redis-rs's `ConnectionManager`,
//! or a cluster through its async cluster client. Both reconnect by
//! themselves; both are cheap to clone and multiplex every decision over
//! shared connections.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, ConnectionAddr, FromRedisValue, IntoConnectionInfo, RedisResult, TlsCertificates};

use tollgate::backend::redact_url;

use crate::error::{ConnectError, ConnectErrorKind};

/// A live connection to a standalone server or a cluster.
#[derive(Clone)]
pub(crate) enum Connection {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Connection {
    /// Sends one command and reads its reply.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> RedisResult<T> {
        match self {
            Connection::Standalone(conn) => cmd.query_async(&mut conn.clone()).await,
            Connection::Cluster(conn) => cmd.query_async(&mut conn.clone()).await,
        }
    }

    /// Connects to one server and checks that it answers PING.
    ///
    /// The manager is configured to fail fast: a reconnection is a single
    /// attempt, started by the first command after a connection is lost and
    /// shared by every command waiting for it, so decisions fail promptly
    /// while the server is down (the limiter's fail policy then decides) and
    /// succeed again as soon as it is back.
    pub(crate) async fn standalone(
        url: &str,
        connect_timeout: Duration,
        tls: Option<&TlsCertificates>,
    ) -> Result<Self, ConnectError> {
        let info = url.into_connection_info().map_err(|err| invalid_url(url, err))?;
        let target = info.addr().to_string();
        let uses_tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        let client = match tls {
            Some(certs) => Client::build_with_tls(info, certs.clone()),
            None => Client::open(info),
        }
        .map_err(|err| invalid_url(url, err))?;
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(0)
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(None);
        let connect = async {
            let manager = ConnectionManager::new_with_config(client, config).await?;
            let conn = Connection::Standalone(manager);
            let pong: String = conn.query(&redis::cmd("PING")).await?;
            Ok::<_, redis::RedisError>((conn, pong))
        };
        let (conn, pong) = tokio::time::timeout(connect_timeout, connect)
            .await
            .map_err(|_| timed_out(&target, connect_timeout))
            .and_then(|result| result.map_err(|err| ConnectError::from_redis(&target, err)))
            .map_err(|err| match err.kind() {
                // A plain Redis port never answers a TLS handshake.
                ConnectErrorKind::Timeout if uses_tls => {
                    err.hint("with rediss://, does this port serve TLS (or plain Redis, redis://)?")
                }
                _ => err,
            })?;
        check_pong(&target, &pong)?;
        Ok(conn)
    }

    /// Connects to a cluster through `seeds` and checks that it answers.
    pub(crate) async fn cluster(
        seeds: &[&str],
        connect_timeout: Duration,
        tls: Option<&TlsCertificates>,
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
        let mut builder = ClusterClientBuilder::new(infos)
            .connection_timeout(connect_timeout)
            .retries(2)
            .min_retry_wait(5)
            .max_retry_wait(100);
        if let Some(certs) = tls {
            builder = builder.certs(certs.clone());
        }
        let client = builder
            .build()
            .map_err(|err| ConnectError::from_redis(&target, err))?;
        let connect = async {
            let conn = Connection::Cluster(client.get_async_connection().await?);
            let pong: String = conn.query(&redis::cmd("PING")).await?;
            Ok::<_, redis::RedisError>((conn, pong))
        };
        let (conn, pong) = tokio::time::timeout(connect_timeout, connect)
            .await
            .map_err(|_| timed_out(&target, connect_timeout))?
            .map_err(|err| ConnectError::from_redis(&target, err))?;
        check_pong(&target, &pong)?;
        Ok(conn)
    }
}

fn invalid_url(url: &str, err: redis::RedisError) -> ConnectError {
    ConnectError::new(
        ConnectErrorKind::InvalidUrl,
        redact_url(url),
        format!(
            "not a valid Redis URL ({err}); expected redis://[user:password@]host[:port][/db], \
             rediss://… for TLS, or redis+unix:///path/to/socket[?db=N]"
        ),
    )
    .with_source(err)
}

fn timed_out(target: &str, after: Duration) -> ConnectError {
    ConnectError::new(
        ConnectErrorKind::Timeout,
        target,
        format!("no answer within {after:?}; is this a Redis server, and is it reachable?"),
    )
}

fn check_pong(target: &str, pong: &str) -> Result<(), ConnectError> {
    if pong == "PONG" {
        Ok(())
    } else {
        Err(ConnectError::new(
            ConnectErrorKind::NotRedis,
            target,
            format!("PING was answered with {pong:?} instead of PONG"),
        ))
    }
}
