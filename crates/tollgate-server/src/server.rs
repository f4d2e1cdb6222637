//! Starting and stopping the service: loading the configuration, binding
//! the listeners, serving until shut down, then draining.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tollgate::clock::Clock;
use tollgate::clock::SharedClock;
use tollgate::clock::SystemClock;
use tollgate::MemoryBackend;
use tollgate_http::HeaderMode;

use crate::connection::Timeouts;
use crate::envoy::service::EnvoyService;
use crate::error::ServerError;
use crate::http::admin::ROUTES;
use crate::listener::{self, Budget, Limits};
use crate::permit_token::PermitKey;
use crate::reload::Reloader;
use crate::shared::AdminAccess;
use crate::shared::Shared;
use crate::state_file::{StateFile, DEFAULT_STATE_INTERVAL};
use crate::threads::ConnectionThreads;

/// The HTTP listener's address unless configured: loopback, port 8080.
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080);

/// Configures a [`Server`]; [`ServerBuilder::bind`] loads the
/// configuration and binds the listeners.
#[derive(Clone)]
pub struct ServerBuilder {
    configs: Vec<PathBuf>,
    listen: SocketAddr,
    grpc_listen: Option<SocketAddr>,
    auth_deny_status: u16,
    admin_token_file: Option<PathBuf>,
    permit_key_file: Option<PathBuf>,
    admin_off: bool,
    clock: Option<SharedClock>,
    watch_files: bool,
    reload_on_sighup: bool,
    limits: Limits,
    grpc_threads: Option<usize>,
    max_limit_override: u64,
    envoy_headers: HeaderMode,
    /// `--state-file`, `--state-interval` and `--discard-invalid-state`.
    state_file: Option<PathBuf>,
    state_interval: Duration,
    discard_invalid_state: bool,
}

/// The largest limit a request may name by default
/// ([`ServerBuilder::max_limit_override`]).
pub const DEFAULT_MAX_LIMIT_OVERRIDE: u64 = 1_000_000_000;

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("configs", &self.configs)
            .field("listen", &self.listen)
            .field("grpc_listen", &self.grpc_listen)
            .field("auth_deny_status", &self.auth_deny_status)
            .field("admin_token_file", &self.admin_token_file)
            .field("permit_key_file", &self.permit_key_file)
            .field("admin_off", &self.admin_off)
            .field("watch_files", &self.watch_files)
            .field("reload_on_sighup", &self.reload_on_sighup)
            .field("limits", &self.limits)
            .field("grpc_threads", &self.grpc_threads)
            .field("max_limit_override", &self.max_limit_override)
            .field("envoy_headers", &self.envoy_headers)
            .field("state_file", &self.state_file)
            .finish_non_exhaustive()
    }
}

/// A bound decision service, ready to [`run`](Server::run).
pub struct Server {
    pub(crate) shared: Arc<Shared>,
    http: TcpListener,
    http_addr: SocketAddr,
    grpc: Option<(TcpListener, SocketAddr)>,
    reloader: Reloader,
    /// Watches the files and `SIGHUP`; stops when the server is dropped.
    _watcher: tollgate_config::PolicySetWatcher,
    limits: Limits,
    /// The threads serving the gRPC listener's connections.
    grpc_threads: Arc<ConnectionThreads>,
    /// The state file and the backend whose state it keeps.
    state: Option<(StateFile, MemoryBackend)>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("http", &self.http_addr)
            .field("grpc", &self.grpc.as_ref().map(|(_, a)| a))
            .finish_non_exhaustive()
    }
}

impl Server {
    /// A builder with the defaults: HTTP on [`DEFAULT_LISTEN`], no gRPC
    /// listener, denials of `/v1/auth` answered 429, no admin token, the
    /// system clock, reloads on `SIGHUP` and on file changes, and the
    /// limits [`DEFAULT_HEADER_READ_TIMEOUT`], [`DEFAULT_IDLE_TIMEOUT`],
    /// [`DEFAULT_MAX_CONNECTIONS`] and [`DEFAULT_DRAIN_TIMEOUT`].
    pub fn builder() -> ServerBuilder {
        ServerBuilder {
            configs: Vec::new(),
            listen: DEFAULT_LISTEN,
            grpc_listen: None,
            auth_deny_status: 429,
            admin_token_file: None,
            permit_key_file: None,
            admin_off: false,
            clock: None,
            watch_files: true,
            reload_on_sighup: true,
            limits: Limits {
                max_connections: DEFAULT_MAX_CONNECTIONS,
                timeouts: Timeouts {
                    header_read: DEFAULT_HEADER_READ_TIMEOUT,
                    idle: DEFAULT_IDLE_TIMEOUT,
                },
                drain: DEFAULT_DRAIN_TIMEOUT,
                drain_delay: Duration::ZERO,
            },
            grpc_threads: None,
            max_limit_override: DEFAULT_MAX_LIMIT_OVERRIDE,
            envoy_headers: HeaderMode::RateLimit,
            state_file: None,
            state_interval: DEFAULT_STATE_INTERVAL,
            discard_invalid_state: false,
        }
    }

    /// The HTTP listener's address (with the port chosen when 0 was given).
    pub fn local_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// The gRPC listener's address, when there is one.
    pub fn grpc_local_addr(&self) -> Option<SocketAddr> {
        self.grpc.as_ref().map(|(_, addr)| *addr)
    }

    /// A handle that reloads the configuration on demand.
    pub fn reloader(&self) -> Reloader {
        self.reloader.clone()
    }

    /// Turns true once `shutdown` has completed and the drain delay has
    /// passed; `/readyz` answers 503 from the moment `shutdown` completes.
    fn stop_after(&self, shutdown: impl Future<Output = ()> + Send + 'static) -> watch::Receiver<bool> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let (shared, delay) = (self.shared.clone(), self.limits.drain_delay);
        tokio::spawn(async move {
            shutdown.await;
            shared.draining.store(true, std::sync::atomic::Ordering::SeqCst);
            if !delay.is_zero() {
                tracing::info!("stopping: not ready from now on, serving {delay:?} more before draining");
                tokio::time::sleep(delay).await;
            }
            let _ = stop_tx.send(true);
        });
        stop_rx
    }

    /// Serves until `shutdown` completes, then drains: `/readyz` answers
    /// 503 at once, the service goes on serving for the
    /// [drain delay](ServerBuilder::drain_delay), then stops accepting
    /// connections, answers every request already received (HTTP/1.1
    /// responses then carry `Connection: close`; HTTP/2 clients get
    /// GOAWAY), closes idle connections, and returns once all are closed or
    /// the drain timeout has passed (closing those still open).
    ///
    /// # Errors
    ///
    /// [`ServerError::Io`] when the gRPC server fails.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), ServerError> {
        let stop_rx = self.stop_after(shutdown);
        let stopped = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|stop| *stop).await;
        };
        let saver = self
            .state
            .clone()
            .map(|(file, backend)| tokio::spawn(file.save_every_interval(backend, stop_rx.clone())));
        let budget = Budget::new(self.limits.max_connections);
        let grpc = self.grpc.map(|(listener, addr)| {
            let service = RateLimitServiceServer::new(EnvoyService {
                shared: self.shared.clone(),
            });
            // Served by the same connection loop as HTTP: the same
            // timeouts, cap and draining.
            let routes = tonic::service::Routes::new(service).prepare().into_axum_router();
            tracing::info!("serving Envoy's rate-limit gRPC API on {addr}");
            tokio::spawn(listener::serve_http(
                listener,
                "gRPC",
                routes,
                self.limits,
                budget.clone(),
                Some(self.grpc_threads.clone()),
                stopped(stop_rx.clone()),
            ))
        });
        tracing::info!("serving HTTP on http://{}", self.http_addr);
        let app = crate::http::router(self.shared.clone());
        listener::serve_http(
            self.http,
            "HTTP",
            app,
            self.limits,
            budget,
            None,
            stopped(stop_rx),
        )
        .await;
        if let Some(grpc) = grpc {
            match grpc.await {
                Ok(()) => {}
                Err(join) => {
                    return Err(ServerError::Io {
                        what: "gRPC listener",
                        addr: self.http_addr,
                        source: std::io::Error::other(join),
                    })
                }
            }
        }
        drop(self._watcher);
        // Leased units go back to the store for the rest of the fleet.
        match self.shared.config.current().end_leases().await {
            Ok(0) => {}
            Ok(units) => tracing::info!("gave {units} leased units back to the store"),
            Err(err) => tracing::warn!("could not give every leased unit back to the store: {err}"),
        }
        // Every request answered: the state as the last one left it.
        if let Some((file, backend)) = &self.state {
            if let Some(saver) = saver {
                let _ = saver.await;
            }
            // Nothing is decided any more: at full speed.
            file.save(backend, None).await;
            tracing::info!("state saved to {}", file.path.display());
        }
        tracing::info!("stopped");
        Ok(())
    }
}

impl ServerBuilder {
    /// Adds a configuration file: a tollgate policy file (YAML, TOML or
    /// JSON; at most one) or an Envoy rate-limit configuration (YAML with a
    /// top-level `domain`; one per domain).
    pub fn config(mut self, path: impl Into<PathBuf>) -> Self {
        self.configs.push(path.into());
        self
    }

    /// The HTTP listener's address (default [`DEFAULT_LISTEN`]; port 0
    /// picks a free port).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Serves Envoy's rate-limit gRPC API on `addr`.
    pub fn grpc_listen(mut self, addr: SocketAddr) -> Self {
        self.grpc_listen = Some(addr);
        self
    }

    /// The largest limit a request may name for itself (`POST /v1/decide`'s
    /// `"limit"`); a larger one is refused with `400` naming the field.
    /// Default [`DEFAULT_MAX_LIMIT_OVERRIDE`]; 0 refuses every limit a
    /// request names.
    pub fn max_limit_override(mut self, max: u64) -> Self {
        self.max_limit_override = max;
        self
    }

    /// The rate-limit headers the gRPC answers ask Envoy to add to the
    /// response (`response_headers_to_add`): `RateLimit-*` by default, as
    /// envoyproxy/ratelimit names them; [`HeaderMode::Legacy`] for
    /// `X-RateLimit-*`, [`HeaderMode::Off`] for none (a denial still
    /// carries `Retry-After`).
    pub fn envoy_headers(mut self, mode: HeaderMode) -> Self {
        self.envoy_headers = mode;
        self
    }

    /// The status of a denial on `/v1/auth` (default 429; nginx's
    /// `auth_request` treats only 401 and 403 as denials).
    pub fn auth_deny_status(mut self, status: u16) -> Self {
        self.auth_deny_status = status;
        self
    }

    /// A file holding the bearer token of the admin routes (read once,
    /// surrounding whitespace trimmed).
    pub fn admin_token_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.admin_token_file = Some(path.into());
        self.admin_off = false;
        self
    }

    /// A file holding the secret that signs the permits `POST /v1/acquire`
    /// hands out (read once, surrounding whitespace trimmed, at least 16
    /// bytes). Replicas that share a store must share it, so that a permit
    /// one issued can be released or extended through another; without
    /// one, each process signs with a random key of its own and refuses
    /// the others' permits.
    pub fn permit_key_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.permit_key_file = Some(path.into());
        self
    }

    /// Turns the admin routes off (`/v1/policies`, `/v1/top`, the per-key
    /// operations, ...): they answer 404 and nobody can call them, so the
    /// service may listen on any address without a token. Decisions,
    /// health, metrics and the operators' page stay. Of this and
    /// [`admin_token_file`](Self::admin_token_file), the last one called
    /// holds.
    pub fn no_admin(mut self) -> Self {
        self.admin_off = true;
        self.admin_token_file = None;
        self
    }

    /// The clock of in-memory state (default: the system clock), such as a
    /// [`tollgate::clock::ManualClock`] in tests.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Whether configuration files are watched and reloaded when they
    /// change (default: yes).
    pub fn watch_files(mut self, watch: bool) -> Self {
        self.watch_files = watch;
        self
    }

    /// Whether `SIGHUP` reloads the configuration (default: yes).
    pub fn reload_on_sighup(mut self, reload: bool) -> Self {
        self.reload_on_sighup = reload;
        self
    }

    /// How long an HTTP/1.1 request head may take to arrive, from its first
    /// byte (from the connection's start for the first request; default
    /// [`DEFAULT_HEADER_READ_TIMEOUT`]). A client that is slower is
    /// disconnected.
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.limits.timeouts.header_read = timeout;
        self
    }

    /// How long a connection may stay open with no request in flight and
    /// nothing received (default [`DEFAULT_IDLE_TIMEOUT`]); it is then
    /// closed gracefully.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.limits.timeouts.idle = timeout;
        self
    }

    /// The most connections open at once, HTTP and gRPC listeners together
    /// (default [`DEFAULT_MAX_CONNECTIONS`]). At the cap the listeners
    /// accept no more until one closes, and the log says so.
    pub fn max_connections(mut self, max: usize) -> Self {
        self.limits.max_connections = max;
        self
    }

    /// Keeps the in-memory state in `path` across restarts: restored when
    /// the server is bound (a missing file is an empty state; a damaged or
    /// foreign one stops the start, see
    /// [`discard_invalid_state`](Self::discard_invalid_state)), written
    /// every [`state_interval`](Self::state_interval) and once more after
    /// draining, atomically. A reload that names another storage is then
    /// refused until a restart. Files that keep their state on a store
    /// (Redis) do not use it.
    pub fn state_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.state_file = Some(path.into());
        self
    }

    /// How often the state file is written (default
    /// [`DEFAULT_STATE_INTERVAL`], from 1 s to a day): what a kill without
    /// draining loses at most.
    pub fn state_interval(mut self, every: Duration) -> Self {
        self.state_interval = every;
        self
    }

    /// Whether a state file that cannot be restored (damaged, cut short,
    /// not a state file, a newer format) is moved aside to `PATH.invalid`
    /// and the service starts empty (default: it does not start).
    pub fn discard_invalid_state(mut self, discard: bool) -> Self {
        self.discard_invalid_state = discard;
        self
    }

    /// How long draining may take once [`Server::run`]'s shutdown future
    /// completes (default [`DEFAULT_DRAIN_TIMEOUT`]); connections still open
    /// then are closed.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.limits.drain = timeout;
        self
    }

    /// How long the service goes on serving once [`Server::run`]'s
    /// shutdown future completes, before it stops accepting connections
    /// and drains (default 0, at most a day). `/readyz` answers 503 from
    /// the start of the delay: the time a load balancer takes to stop
    /// sending new connections after it sees the service not ready, or
    /// after Kubernetes removes a stopping pod from its Service (the
    /// kubelet's SIGTERM and that removal happen at the same time, so
    /// connections keep arriving for a few seconds).
    pub fn drain_delay(mut self, delay: Duration) -> Self {
        self.limits.drain_delay = delay;
        self
    }

    /// How many threads serve the gRPC listener's connections (default:
    /// one per core the process may run on). Each runs a single-threaded
    /// runtime and serves every request of the connections it is given,
    /// each connection on the thread serving the fewest when it is
    /// accepted, so that a connection's requests are answered in turn and
    /// never wait for another thread: Envoy sends its calls over a few
    /// HTTP/2 connections, and on the work-stealing runtime their tail was
    /// ten times their median (`docs/performance.md`). 0 serves them on
    /// the runtime that runs [`Server::run`], as the HTTP listener's
    /// connections are.
    pub fn grpc_threads(mut self, threads: usize) -> Self {
        self.grpc_threads = Some(threads);
        self
    }

    /// Loads the configuration, connects its store and binds the
    /// listeners.
    ///
    /// # Errors
    ///
    /// [`ServerError::NoConfig`] without a configuration file,
    /// [`ServerError::Config`] for a mistake in one (file, line, field) or
    /// an unreachable store, [`ServerError::DenyStatus`] for a deny status
    /// outside 400–499, [`ServerError::AdminToken`] for an unreadable or
    /// empty token file, [`ServerError::PermitKey`] for an unreadable or
    /// short permit key file, [`ServerError::AdminExposed`] when the admin routes
    /// would be open on a non-loopback address, [`ServerError::Io`] when a
    /// listener cannot be bound.
    pub async fn bind(self) -> Result<Server, ServerError> {
        if self.configs.is_empty() {
            return Err(ServerError::NoConfig);
        }
        self.check_limits()?;
        // Before any limiter exists: limiters register their metrics with
        // the recorder installed when they are built.
        let metrics = crate::metrics::prometheus();
        let deny = StatusCode::from_u16(self.auth_deny_status)
            .ok()
            .filter(StatusCode::is_client_error)
            .ok_or(ServerError::DenyStatus(self.auth_deny_status))?;
        let admin = self.admin_access()?;
        let permit_key = self.permit_key()?;
        let clock: SharedClock = self.clock.unwrap_or_else(|| Arc::new(SystemClock));
        let state_file = self.state_file.map(|path| StateFile {
            path,
            interval: self.state_interval,
            discard_invalid: self.discard_invalid_state,
        });
        let memory = match &state_file {
            Some(file) => Some(restore_state(file, &clock).await?),
            None => None,
        };
        let watcher = crate::reload::start(
            self.configs,
            clock.clone(),
            (self.watch_files, self.reload_on_sighup),
            memory.clone(),
        )
        .await?;
        let state = kept_state(state_file, memory, &watcher);
        let (http, http_addr) = bind_listener("HTTP listener", self.listen).await?;
        let grpc = match self.grpc_listen {
            Some(addr) => Some(bind_listener("gRPC listener", addr).await?),
            None => None,
        };
        let count = match grpc {
            Some(_) => self.grpc_threads.unwrap_or_else(default_grpc_threads),
            None => 0,
        };
        let grpc_threads =
            ConnectionThreads::start(count).map_err(|source| ServerError::Threads { count, source })?;
        let shared = Arc::new(Shared {
            config: watcher.handle(),
            auth_deny_status: deny,
            max_limit_override: self.max_limit_override,
            envoy_headers: self.envoy_headers,
            admin,
            metrics,
            permit_key,
            reservations: Default::default(),
            request_calendars: Default::default(),
            in_flight: crate::in_flight::InFlight::new(clock.clone()),
            holders: crate::holders::Holders::new(clock),
            draining: Default::default(),
        });
        Ok(Server {
            shared,
            http,
            http_addr,
            grpc,
            reloader: Reloader::new(watcher.handle()),
            _watcher: watcher,
            limits: self.limits,
            grpc_threads: Arc::new(grpc_threads),
            state,
        })
    }

    /// Who may use the admin routes: holders of the token in the admin
    /// token file, or without one, clients on the loopback address the
    /// service listens on; an error when the routes would be open on
    /// another address.
    fn admin_access(&self) -> Result<AdminAccess, ServerError> {
        Ok(match &self.admin_token_file {
            None if self.admin_off => AdminAccess::Off,
            Some(path) => AdminAccess::Token(read_token(path)?),
            None if self.listen.ip().is_loopback() => AdminAccess::Loopback,
            None => {
                return Err(ServerError::AdminExposed {
                    addr: self.listen,
                    routes: ROUTES.join(", "),
                })
            }
        })
    }

    /// The key permits are signed with: the permit key file's, or a
    /// random one of this process.
    fn permit_key(&self) -> Result<PermitKey, ServerError> {
        let Some(path) = &self.permit_key_file else {
            return PermitKey::random().map_err(|err| ServerError::PermitKey {
                file: "(none)".to_owned(),
                message: format!("the operating system gave no random key: {err}"),
            });
        };
        let fail = |message: String| ServerError::PermitKey {
            file: path.display().to_string(),
            message,
        };
        let text = std::fs::read(path).map_err(|err| fail(format!("cannot read the file: {err}")))?;
        let secret = text.trim_ascii();
        if secret.len() < 16 {
            return Err(fail(format!(
                "holds {} bytes; a permit key must be at least 16 (such as the output of `openssl rand -hex 32`)",
                secret.len()
            )));
        }
        Ok(PermitKey::from_secret(secret))
    }

    /// Refuses limits that would make the service unusable.
    fn check_limits(&self) -> Result<(), ServerError> {
        let limits = &self.limits;
        let refuse = |setting: &'static str, message: &str| {
            Err(ServerError::Limit {
                setting,
                message: message.to_owned(),
            })
        };
        if limits.max_connections == 0 {
            return refuse("--max-connections", "must be at least 1");
        }
        if limits.max_connections > MAX_CONNECTIONS_CAP {
            return refuse(
                "--max-connections",
                &format!("must be at most {MAX_CONNECTIONS_CAP}"),
            );
        }
        for (setting, timeout) in [
            ("--header-read-timeout", limits.timeouts.header_read),
            ("--idle-timeout", limits.timeouts.idle),
        ] {
            if timeout.is_zero() {
                return refuse(setting, "must be longer than 0");
            }
            if timeout > MAX_TIMEOUT {
                return refuse(setting, "must be at most 1 day");
            }
        }
        if limits.drain > MAX_TIMEOUT {
            return refuse("--drain-timeout", "must be at most 1 day");
        }
        if limits.drain_delay > MAX_TIMEOUT {
            return refuse("--drain-delay", "must be at most 1 day");
        }
        Ok(())
    }
}

/// An HTTP/1.1 request head must arrive within 10 s of its first byte.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A connection with nothing in flight is closed after 75 s: longer than
/// the idle timeouts of proxies' and clients' connection pools (nginx's
/// upstream keep-alive is 60 s), so that the client, not the service,
/// closes an idle connection and no request meets a connection being
/// closed.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(75);

/// At most 10,000 connections open at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// Draining may take 30 s.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest connection cap accepted: more than any process can open.
const MAX_CONNECTIONS_CAP: usize = 1 << 24;

/// The longest timeout accepted.
const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);

/// The admin token: the file's content without surrounding whitespace.
fn read_token(path: &std::path::Path) -> Result<Vec<u8>, ServerError> {
    let fail = |message: String| ServerError::AdminToken {
        file: path.display().to_string(),
        message,
    };
    let text = std::fs::read(path).map_err(|err| fail(format!("cannot read the file: {err}")))?;
    let token = text.trim_ascii();
    if token.is_empty() {
        return Err(fail("the file is empty; it must hold the token".to_owned()));
    }
    Ok(token.to_vec())
}

/// The in-memory backend of the service, on `clock`, with the state
/// restored from the state file `file` (after its settings are checked).
async fn restore_state(file: &StateFile, clock: &SharedClock) -> Result<MemoryBackend, ServerError> {
    file.check()?;
    let backend = MemoryBackend::new().shared_clock(clock.clone()).snapshots();
    file.restore(backend).await
}

/// The state file to write and the in-memory state it keeps, if the
/// service has a state file and the configuration `watcher` loaded keeps
/// its state in memory.
fn kept_state(
    state_file: Option<StateFile>,
    memory: Option<MemoryBackend>,
    watcher: &tollgate_config::PolicySetWatcher,
) -> Option<(StateFile, MemoryBackend)> {
    // State on a store outlives the process by itself: the file is not
    // written then.
    match (state_file, memory) {
        (Some(file), Some(memory)) => {
            if watcher.handle().current().storage() == &tollgate_config::Storage::Memory {
                Some((file, memory))
            } else {
                tracing::info!(
                    "the policy file keeps its state on a store: --state-file {} is not written",
                    file.path.display()
                );
                None
            }
        }
        _ => None,
    }
}

/// Binds the listener `what` (as errors name it) to `addr`; returns it
/// with the address it is bound to (the port chosen for port 0).
async fn bind_listener(
    what: &'static str,
    addr: SocketAddr,
) -> Result<(TcpListener, SocketAddr), ServerError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Io { what, addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| ServerError::Io { what, addr, source })?;
    Ok((listener, local))
}

/// One gRPC connection thread per core the process may run on.
fn default_grpc_threads() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}
