//! A primary found through Redis Sentinel, and found again after a
//! failover.
//!
//! The sentinels are asked for the primary's address (redis-rs checks with
//! `ROLE` that the server named is a primary), and decisions go through a
//! `ConnectionManager` to that address. A decision that finds the primary
//! gone (a lost or refused connection) or demoted (`READONLY`) starts one
//! lookup in the background, which asks the sentinels again until they name
//! a primary that answers, pausing between attempts as a background
//! connection does; when the address has changed, later decisions use a
//! connection to the new primary. So does a decision that timed out before
//! its reply came (the primary may be cut off by a partition that leaves
//! the connection open). Decisions sent meanwhile fail (the
//! limiter's fail policy decides), so the lookup never delays one.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::io::tcp::TcpSettings;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{
    Client, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, FromRedisValue, IntoConnectionInfo,
    RedisConnectionInfo, RedisError, RedisResult,
};
use redis::{ServerErrorKind, TlsMode};
use tollgate::__private::redact_url;

use crate::error::{ConnectError, ConnectErrorKind};
use crate::handshake::{invalid_url, manager_config, timed_out, Backoff};

/// How the backend logs in to the primary the sentinels name: an ACL user,
/// a password and a database number. Empty by default (no `AUTH`,
/// database 0). Its `Debug` output hides the password.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct PrimaryAuth {
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: i64,
}

impl std::fmt::Debug for PrimaryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrimaryAuth")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("db", &self.db)
            .finish()
    }
}

impl PrimaryAuth {
    fn connection_info(&self) -> RedisConnectionInfo {
        let mut info = RedisConnectionInfo::default().set_db(self.db);
        if let Some(username) = &self.username {
            info = info.set_username(username);
        }
        if let Some(password) = &self.password {
            info = info.set_password(password);
        }
        info
    }
}

/// The sentinels of one primary, by name.
pub(crate) struct Sentinels {
    client: tokio::sync::Mutex<SentinelClient>,
    master: String,
    /// `primary "NAME" through sentinels ADDR, …`, for errors.
    pub(crate) target: String,
    /// The sentinels, to ask which of them or the primary refused a login.
    infos: Vec<ConnectionInfo>,
}

impl Sentinels {
    /// Parses the sentinels' URLs. The connections to the sentinels and to
    /// the primary they name get `tcp`; the primary is reached over TLS when
    /// the sentinels are (`rediss://`), and logged in to with `auth`.
    pub(crate) fn new(
        master: &str,
        urls: &[&str],
        tcp: &TcpSettings,
        auth: &PrimaryAuth,
    ) -> Result<Self, ConnectError> {
        if master.trim().is_empty() {
            return Err(ConnectError::new(
                ConnectErrorKind::InvalidUrl,
                "sentinel",
                "no primary name given; give the name the sentinels monitor (`sentinel monitor NAME …`)",
            ));
        }
        let mut infos = Vec::with_capacity(urls.len());
        for url in urls {
            let info = url.into_connection_info().map_err(|err| invalid_url(url, err))?;
            infos.push(info.set_tcp_settings(tcp.clone()));
        }
        let target = match infos.as_slice() {
            [] => {
                return Err(ConnectError::new(
                    ConnectErrorKind::InvalidUrl,
                    format!("primary {master:?} through sentinels"),
                    "no sentinel URL given",
                ))
            }
            [one] => format!("primary {master:?} through sentinel {}", one.addr()),
            many => format!(
                "primary {master:?} through sentinels {}",
                many.iter()
                    .map(|i| i.addr().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let tls = infos
            .iter()
            .any(|info| matches!(info.addr(), ConnectionAddr::TcpTls { .. }));
        let mut node = SentinelNodeConnectionInfo::default()
            .set_tcp_settings(tcp.clone())
            .set_redis_connection_info(auth.connection_info());
        if tls {
            node = node.set_tls_mode(TlsMode::Secure);
        }
        let client = SentinelClient::build(infos.clone(), master, Some(node), SentinelServerType::Master)
            .map_err(|err| {
                ConnectError::new(
                    ConnectErrorKind::InvalidUrl,
                    urls.iter().map(|u| redact_url(u)).collect::<Vec<_>>().join(", "),
                    format!("not valid sentinel URLs ({err})"),
                )
                .with_source(err)
            })?;
        Ok(Self {
            client: tokio::sync::Mutex::new(client),
            master: master.to_owned(),
            target,
            infos,
        })
    }

    /// Asks the sentinels for the primary, within `timeout`: a client for
    /// it and its address.
    pub(crate) async fn primary(&self, timeout: Duration) -> Result<(Client, String), ConnectError> {
        let lookup = async { self.client.lock().await.async_get_client().await };
        let client = match tokio::time::timeout(timeout, lookup).await {
            Err(_) => return Err(timed_out(&self.target, timeout)),
            Ok(Ok(client)) => client,
            Ok(Err(err)) if is_auth_error(&err) => return Err(self.login_error(err, timeout).await),
            Ok(Err(err)) => return Err(self.lookup_error(err)),
        };
        let addr = client.get_connection_info().addr().to_string();
        Ok((client, addr))
    }

    /// The error for a refused login: the primary's when a sentinel still
    /// names it (asked without the lookup's role check), else the
    /// sentinels'.
    async fn login_error(&self, err: RedisError, timeout: Duration) -> ConnectError {
        let ask = async {
            for info in &self.infos {
                let Ok(client) = Client::open(info.clone()) else {
                    continue;
                };
                let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
                    continue;
                };
                let named: RedisResult<Option<(String, u16)>> = redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(&self.master)
                    .query_async(&mut conn)
                    .await;
                if let Ok(Some((host, port))) = named {
                    return Some(format!("{host}:{port}"));
                }
            }
            None
        };
        match tokio::time::timeout(timeout, ask).await.ok().flatten() {
            Some(primary) => ConnectError::new(
                ConnectErrorKind::Authentication,
                format!("{} (at {primary})", self.target),
                format!(
                    "the primary rejected the credentials or requires a password ({err}); set \
                     its password, and ACL user if any, with \
                     RedisBackendBuilder::sentinel_primary_auth (in a policy file, `password` \
                     and `username` under `redis_sentinel`)"
                ),
            ),
            None => ConnectError::new(
                ConnectErrorKind::Authentication,
                &self.target,
                format!(
                    "the sentinels rejected the credentials or require a password ({err}); give \
                     a sentinel's password in its URL (redis://:password@host:26379); the \
                     primary's is set apart, with RedisBackendBuilder::sentinel_primary_auth"
                ),
            ),
        }
        .with_source(err)
    }

    fn lookup_error(&self, err: RedisError) -> ConnectError {
        match err.kind() {
            ErrorKind::MasterNameNotFoundBySentinel => ConnectError::new(
                ConnectErrorKind::NoPrimary,
                &self.target,
                format!(
                    "no sentinel knows a healthy primary named {:?}; check the name (`SENTINEL \
                     MASTERS` on a sentinel lists those it monitors), or wait for the failover \
                     under way",
                    self.master
                ),
            )
            .with_source(err),
            ErrorKind::InvalidClientConfig => ConnectError::new(
                ConnectErrorKind::NotRedis,
                &self.target,
                format!(
                    "a URL does not point to a sentinel ({err}); give the sentinels' URLs, not the servers'"
                ),
            )
            .with_source(err),
            _ => ConnectError::from_redis(&self.target, err).hint("no sentinel answered"),
        }
    }
}

/// The connection to the primary the sentinels name. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SentinelConnection {
    shared: Arc<Shared>,
}

struct Shared {
    sentinels: Arc<Sentinels>,
    connect_timeout: Duration,
    primary: Mutex<Primary>,
    /// Whether a lookup is under way.
    looking: AtomicBool,
}

/// One primary: counted, so that a failed decision starts a lookup only
/// when it failed on the current one.
#[derive(Clone)]
struct Primary {
    generation: u64,
    addr: String,
    manager: ConnectionManager,
}

impl SentinelConnection {
    /// Connects to the primary the sentinels name.
    pub(crate) async fn connect(
        sentinels: Arc<Sentinels>,
        connect_timeout: Duration,
    ) -> Result<Self, ConnectError> {
        let (client, addr) = sentinels.primary(connect_timeout).await?;
        let manager = manager(client, &addr, connect_timeout).await?;
        Ok(Self {
            shared: Arc::new(Shared {
                sentinels,
                connect_timeout,
                primary: Mutex::new(Primary {
                    generation: 0,
                    addr,
                    manager,
                }),
                looking: AtomicBool::new(false),
            }),
        })
    }

    /// Sends one command to the current primary; a reply that shows it
    /// gone or demoted starts a lookup of the new one.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> RedisResult<T> {
        let primary = self.current();
        let mut unanswered = Unanswered {
            connection: self,
            generation: primary.generation,
            armed: true,
        };
        let result = cmd.query_async(&mut primary.manager.clone()).await;
        unanswered.armed = false;
        if let Err(err) = &result {
            if lost_primary(err) {
                self.look_up_primary(primary.generation);
            }
        }
        result
    }

    fn current(&self) -> Primary {
        self.shared
            .primary
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Starts a lookup in the background unless one is under way or the
    /// primary has changed since `generation`.
    fn look_up_primary(&self, generation: u64) {
        // Outside a runtime (one shutting down) there is nothing to look
        // for: no decision will follow.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.shared.looking.swap(true, Ordering::AcqRel) {
            return;
        }
        runtime.spawn(keep_looking(Arc::downgrade(&self.shared), generation));
    }
}

/// A command sent to the primary and not yet answered. Dropped so (the
/// decision's timeout passed first), it starts a lookup as a lost
/// connection does: a primary cut off by a partition that keeps its
/// connection open never answers nor breaks it, and without the lookup the
/// backend would wait for the partition to end although the sentinels
/// have promoted another.
struct Unanswered<'a> {
    connection: &'a SentinelConnection,
    generation: u64,
    armed: bool,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.connection.look_up_primary(self.generation);
        }
    }
}

/// Asks the sentinels until they name a primary that answers, pausing
/// between attempts; ends when the primary changes, when the same primary
/// answers again (its connection manager reconnects by itself), or when
/// every handle to the connection is gone.
async fn keep_looking(shared: Weak<Shared>, generation: u64) {
    let mut backoff = Backoff::new();
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let current = lock(&strong.primary).clone();
        if current.generation != generation {
            break;
        }
        let timeout = strong.connect_timeout;
        let found = async {
            let (client, addr) = strong.sentinels.primary(timeout).await?;
            if addr == current.addr {
                return Ok(None);
            }
            let manager = manager(client, &addr, timeout).await?;
            Ok::<_, ConnectError>(Some((addr, manager)))
        };
        match found.await {
            Ok(Some((addr, manager))) => {
                *lock(&strong.primary) = Primary {
                    generation: generation + 1,
                    addr,
                    manager,
                };
                break;
            }
            Ok(None) => break,
            Err(_) => {}
        }
        drop(strong);
        backoff.wait().await;
    }
    if let Some(shared) = shared.upgrade() {
        shared.looking.store(false, Ordering::Release);
    }
}

fn lock(primary: &Mutex<Primary>) -> std::sync::MutexGuard<'_, Primary> {
    primary.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A connection manager for the primary at `addr`, configured as for one
/// server, once it has answered `PING`.
async fn manager(client: Client, addr: &str, timeout: Duration) -> Result<ConnectionManager, ConnectError> {
    let connect = async {
        let mut manager = ConnectionManager::new_with_config(client, manager_config(timeout)).await?;
        let pong: String = redis::cmd("PING").query_async(&mut manager).await?;
        Ok::<_, RedisError>((manager, pong))
    };
    let (manager, pong) = tokio::time::timeout(timeout, connect)
        .await
        .map_err(|_| timed_out(addr, timeout))?
        .map_err(|err| ConnectError::from_redis(addr, err))?;
    crate::handshake::check_pong(addr, &pong)?;
    Ok(manager)
}

/// Whether `err` is a rejected login or a command refused for want of one.
fn is_auth_error(err: &RedisError) -> bool {
    matches!(
        err.kind(),
        ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::NoPerm)
    ) || matches!(err.code(), Some("NOAUTH" | "WRONGPASS"))
}

/// Whether `err` shows that the primary is gone (a lost, refused or timed
/// out connection) or no longer a primary (`READONLY`, `MASTERDOWN`).
fn lost_primary(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
        || matches!(
            err.kind(),
            ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
        )
}
