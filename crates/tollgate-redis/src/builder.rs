//! [`RedisBackendBuilder`]: the options of a [`RedisBackend`] and the ways
//! of connecting one, with their defaults.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::TlsCertificates;
use tollgate::clock::Clock;
use tollgate::clock::SharedClock;

use crate::backend::RedisBackend;
use crate::binding::Options;
use crate::connection::{Connection, Endpoint};
use crate::error::{ConnectError, ConnectErrorKind};
use crate::sentinel::PrimaryAuth;
use crate::tcp::TcpOptions;

/// How long a decision may take before it fails with
/// [`BackendErrorKind::Timeout`](tollgate::backend::BackendErrorKind::Timeout), unless configured otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(200);

/// How long connecting and the first `PING` may take, unless configured
/// otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a state key outlives its state unless configured otherwise
/// (see [`RedisBackendBuilder::expiry_grace`]): one second, the clock-step
/// tolerance of the in-memory backend's sweeps.
pub const DEFAULT_EXPIRY_GRACE: Duration = Duration::from_secs(1);
/// The ways to a [`RedisBackend`]: its builder, and connecting with the
/// default options (here, beside the builder they use, so that the backend
/// does not depend on its builder).
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
}

/// Configures and connects a [`RedisBackend`].
///
/// ```no_run
/// # async fn demo() -> Result<(), tollgate::Error> {
/// use std::time::Duration;
/// use tollgate::{Limiter, Strategy};
/// use tollgate_redis::RedisBackend;
///
/// let backend = RedisBackend::builder()
///     .timeout(Duration::from_millis(50))
///     .connect("redis://127.0.0.1:6379/0")
///     .await?;
/// let limiter = Limiter::builder()
///     .backend(backend)
///     .strategy(Strategy::TokenBucket)
///     .limit(100)
///     .window(Duration::from_secs(60))
///     .build()?;
/// let decision = limiter.allow("user-123").await?;
/// # let _ = decision;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisBackendBuilder {
    timeout: Duration,
    connect_timeout: Duration,
    clock: Option<SharedClock>,
    expiry_grace: Duration,
    tls: Option<TlsCertificates>,
    tcp: TcpOptions,
    sentinel_primary: PrimaryAuth,
    batch: bool,
}

impl Default for RedisBackendBuilder {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            clock: None,
            expiry_grace: DEFAULT_EXPIRY_GRACE,
            tls: None,
            tcp: TcpOptions::default(),
            sentinel_primary: PrimaryAuth::default(),
            batch: true,
        }
    }
}

impl std::fmt::Debug for RedisBackendBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackendBuilder")
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("caller_clock", &self.clock.is_some())
            .field("expiry_grace", &self.expiry_grace)
            .field("tls_certificates", &self.tls.is_some())
            .field("tcp_keepalive", &self.tcp.keepalive)
            .field("tcp_keepalive_interval", &self.tcp.keepalive_interval)
            .field("tcp_keepalive_retries", &self.tcp.keepalive_retries)
            .field("tcp_user_timeout", &self.tcp.user_timeout)
            .field("sentinel_primary", &self.sentinel_primary)
            .field("batch_calls", &self.batch)
            .finish()
    }
}

impl RedisBackendBuilder {
    /// The longest a decision may take, round trip included (default
    /// [`DEFAULT_TIMEOUT`]). A decision that takes longer fails with
    /// [`BackendErrorKind::Timeout`](tollgate::backend::BackendErrorKind::Timeout) and the limiter's fail policy decides.
    ///
    /// A timed-out script may still run on the server, so the request may
    /// have been charged even though the caller saw an error: timeouts can
    /// only make a limit stricter, never admit more.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether decisions that find calls in flight go out together
    /// (default: on). A decision that finds fewer than two calls in flight
    /// to its Redis node (in a Cluster, to its hash slot) goes out at once,
    /// alone; the ones that arrive while two are in flight wait for one of
    /// them to return and then go out as one call, up to 64 at a time,
    /// each decided on its own exactly as in a call of its own (the
    /// [batched calls](crate::_documentation::operations#batched-calls)).
    /// There is no timer: a lone decision is never held. Under load this
    /// spends less Redis and client CPU per decision; off, every decision
    /// is a call of its own, pipelined on the connection.
    ///
    /// Plain decisions and a concurrency limit's operations on permits
    /// (acquire, release, extend) are batched, through the same lanes;
    /// leases, reservations, per-key operations and the parts of one Envoy
    /// request go out as before.
    pub fn batch_calls(mut self, on: bool) -> Self {
        self.batch = on;
        self
    }

    /// The longest connecting and verifying the server with `PING` may take
    /// (default [`DEFAULT_CONNECT_TIMEOUT`]); also bounds each reconnection
    /// attempt.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Reads the current time from `clock` on the calling host and passes it
    /// to the script, instead of reading the Redis server's clock.
    ///
    /// By default the script reads the server's clock (`TIME`), so every host
    /// shares one timeline however far apart their own clocks are: use the
    /// server clock whenever several hosts share limits. A caller clock makes
    /// decisions follow the host's clock: needed to drive time by hand (a
    /// [`tollgate::clock::ManualClock`] in tests or replays), and fine for a single
    /// host, but hosts with skewed clocks then disagree about time.
    ///
    /// **Skew admits more than the limit**, and nothing short of a shared
    /// clock can prevent it: a host whose clock is ahead of the host that
    /// wrote a key's state cannot tell the difference between the clocks
    /// from time that has passed, so it grants what that time would grant.
    /// (A host whose clock is behind the writer's sees stricter decisions.)
    /// The skew counts as elapsed time. With `T = W / L`: over a span `d` of
    /// real time, hosts whose clocks are at most `s` apart are admitted at
    /// most `L + floor((d + s) / T)` units by a token or leaky bucket
    /// (`L + floor(d / T)` on one clock), and by a fixed window at most `L`
    /// per window that the span, lengthened by `s`, touches. At one instant,
    /// two hosts `s` apart, the one behind deciding first, are admitted
    /// together `L` plus:
    ///
    /// - token and leaky bucket: `floor(s / T)` units, at most `L` (a skew of
    ///   one window re-grants the whole limit);
    /// - fixed window: `L` when their clocks fall into different windows
    ///   (any skew does, near a window boundary), else nothing;
    /// - sliding window: nothing while `s < W`, then `ceil(L × (s − W) / W)`
    ///   units, `L` from `s ≥ 2W` on.
    ///
    /// The bound holds while the skew is at most the
    /// [expiry grace](Self::expiry_grace): a key written by a host ahead
    /// expires on that host's timeline, and a host further behind than the
    /// grace can find it gone and start fresh.
    ///
    /// Key expiry always runs on the server's clock. With a caller clock the
    /// expiry is set relative to the script's `now` (`SET … PX`) and
    /// lengthened by the [expiry grace](Self::expiry_grace), so a host
    /// slightly behind the server does not lose state that is still live on
    /// its timeline. With the server clock it is absolute (`SET … PXAT`, or
    /// `PEXPIREAT` where the server has no functions).
    pub fn caller_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Extra time each state key is kept after its state has expired
    /// (default [`DEFAULT_EXPIRY_GRACE`], rounded up to whole milliseconds).
    ///
    /// Keeping expired state longer never changes a decision: the scripts
    /// read expired state as absent. Deleting state early would, when the
    /// clock steps back to a time at which it was still live, or when a
    /// caller clock is behind the server's. The grace absorbs such steps and
    /// skew; zero makes keys disappear at the exact millisecond their state
    /// expires. A [`tollgate::clock::ManualClock`] that runs slower than real time
    /// needs a grace longer than the run.
    pub fn expiry_grace(mut self, grace: Duration) -> Self {
        self.expiry_grace = grace;
        self
    }

    /// Certificates for `rediss://` connections: a root certificate (PEM)
    /// to trust instead of the system's trust store, for servers with a
    /// private certificate authority, and optionally a client certificate and
    /// key for servers that require mutual TLS.
    ///
    /// Without this, `rediss://` verifies the server against the system's
    /// trust store.
    pub fn tls_certificates(mut self, certificates: TlsCertificates) -> Self {
        self.tls = Some(certificates);
        self
    }

    /// How long a connection may stay idle before the kernel starts
    /// sending keepalive probes (`TCP_KEEPIDLE`; default
    /// [`DEFAULT_TCP_KEEPALIVE`](crate::DEFAULT_TCP_KEEPALIVE), rounded up
    /// to whole seconds, at most 32767 s). `Duration::ZERO` turns keepalive
    /// off.
    ///
    /// Applies to every connection the backend opens: to the server, to
    /// each cluster node, to the sentinels and to the primary they name. An
    /// idle connection whose peer has vanished (a host that lost power, a
    /// firewall that dropped the connection's state) is closed after the
    /// idle time plus [`tcp_keepalive_retries`](Self::tcp_keepalive_retries)
    /// unanswered probes [`tcp_keepalive_interval`](Self::tcp_keepalive_interval)
    /// apart (25 s by default), and the next decision connects again. A
    /// connection that carries decisions is covered by the
    /// [user timeout](Self::tcp_user_timeout) instead.
    pub fn tcp_keepalive(mut self, idle: Duration) -> Self {
        self.tcp.keepalive = idle;
        self
    }

    /// The time between two unanswered keepalive probes (`TCP_KEEPINTVL`;
    /// default [`DEFAULT_TCP_KEEPALIVE_INTERVAL`](crate::DEFAULT_TCP_KEEPALIVE_INTERVAL),
    /// rounded up to whole seconds, from 1 to 32767 s).
    pub fn tcp_keepalive_interval(mut self, interval: Duration) -> Self {
        self.tcp.keepalive_interval = interval;
        self
    }

    /// How many unanswered keepalive probes close a connection
    /// (`TCP_KEEPCNT`; default
    /// [`DEFAULT_TCP_KEEPALIVE_RETRIES`](crate::DEFAULT_TCP_KEEPALIVE_RETRIES),
    /// from 1 to 127).
    pub fn tcp_keepalive_retries(mut self, retries: u32) -> Self {
        self.tcp.keepalive_retries = retries;
        self
    }

    /// How long sent data may stay unacknowledged before the kernel closes
    /// the connection (`TCP_USER_TIMEOUT`, Linux only; default
    /// [`DEFAULT_TCP_USER_TIMEOUT`](crate::DEFAULT_TCP_USER_TIMEOUT), at
    /// most `i32::MAX` milliseconds). `Duration::ZERO` leaves the system's
    /// behaviour: retransmitting for about fifteen minutes.
    ///
    /// When the network silently drops a connection's packets (a failed
    /// link, a partition, a firewall losing state), each decision fails
    /// with [`BackendErrorKind::Timeout`](tollgate::backend::BackendErrorKind::Timeout) after the decision
    /// [timeout](Self::timeout), but without a user timeout the connection
    /// stays open, and is never replaced, until the kernel gives up. With
    /// it, the connection is closed this long after the first unanswered
    /// decision, and the next decision connects again (through Sentinel,
    /// to whichever primary it names). Shorter detects a dead peer sooner;
    /// too short closes healthy connections on a congested network, each
    /// closure failing the decisions in flight.
    pub fn tcp_user_timeout(mut self, timeout: Duration) -> Self {
        self.tcp.user_timeout = timeout;
        self
    }

    /// The credentials for the primary that Redis Sentinel names (see
    /// [`connect_sentinel`](Self::connect_sentinel)): `password`, and the
    /// ACL user `username` (`None` for the `default` user, as with
    /// `requirepass`). The backend sends `AUTH [username] password` on every
    /// connection to the primary, including to the one promoted by a
    /// failover, so every server that can become primary needs the same
    /// credentials.
    ///
    /// A sentinel's own password goes in its URL
    /// (`redis://:password@host:26379`); this one is the primary's, which
    /// the sentinels' URLs cannot carry. The password is never shown: not
    /// in errors, nor in this builder's `Debug` output. Ignored by
    /// [`connect`](Self::connect) and
    /// [`connect_cluster`](Self::connect_cluster), whose URLs carry their
    /// credentials.
    pub fn sentinel_primary_auth(mut self, username: Option<&str>, password: &str) -> Self {
        self.sentinel_primary.username = username.map(str::to_owned);
        self.sentinel_primary.password = Some(password.to_owned());
        self
    }

    /// The database number to select on the primary that Redis Sentinel
    /// names (default 0), as `/db` does in a server's URL. Negative numbers
    /// are refused when connecting (kind
    /// [`InvalidSetting`](crate::ConnectErrorKind::InvalidSetting)); a
    /// number beyond the server's `databases` is refused by the primary
    /// (kind [`Server`](crate::ConnectErrorKind::Server)). Ignored by
    /// [`connect`](Self::connect) and
    /// [`connect_cluster`](Self::connect_cluster).
    pub fn sentinel_primary_db(mut self, db: i64) -> Self {
        self.sentinel_primary.db = db;
        self
    }

    fn options(&self) -> Options {
        Options {
            timeout: self.timeout,
            clock: self.clock.clone(),
            expiry_grace: self.expiry_grace,
            batch: self.batch,
        }
    }

    fn backend(&self, conn: Connection) -> RedisBackend {
        RedisBackend::new(conn, self.options())
    }

    fn standalone(&self, url: &str) -> Result<Endpoint, ConnectError> {
        Endpoint::standalone(url, self.tls.as_ref(), &self.tcp.settings()?)
    }

    fn cluster<S: AsRef<str>>(&self, seeds: &[S]) -> Result<Endpoint, ConnectError> {
        let seeds: Vec<&str> = seeds.iter().map(AsRef::as_ref).collect();
        Endpoint::cluster(
            &seeds,
            self.connect_timeout,
            self.tls.as_ref(),
            &self.tcp.settings()?,
        )
    }

    fn sentinel<S: AsRef<str>>(&self, master: &str, sentinels: &[S]) -> Result<Endpoint, ConnectError> {
        if self.tls.is_some() {
            return Err(ConnectError::new(
                ConnectErrorKind::InvalidSetting,
                "tls_certificates",
                "is not supported with Sentinel: rediss:// sentinel URLs verify the sentinels and \
                 the primary against the system's trust store",
            ));
        }
        if self.sentinel_primary.db < 0 {
            return Err(ConnectError::new(
                ConnectErrorKind::InvalidSetting,
                "sentinel_primary_db",
                format!("is {}; a database number is 0 or more", self.sentinel_primary.db),
            ));
        }
        let sentinels: Vec<&str> = sentinels.iter().map(AsRef::as_ref).collect();
        Endpoint::sentinel(master, &sentinels, &self.tcp.settings()?, &self.sentinel_primary)
    }

    /// Connects to one Redis server (see [`RedisBackend::connect`]).
    ///
    /// # Errors
    ///
    /// As for [`RedisBackend::connect`]; a [`ConnectError`] of kind
    /// [`InvalidSetting`](crate::ConnectErrorKind::InvalidSetting) naming
    /// the setter when a TCP setting is out of range.
    pub async fn connect(self, url: &str) -> Result<RedisBackend, ConnectError> {
        let conn = self.standalone(url)?.connect(self.connect_timeout).await?;
        Ok(self.backend(conn))
    }

    /// Connects to a Redis Cluster (see [`RedisBackend::connect_cluster`]).
    ///
    /// # Errors
    ///
    /// As for [`RedisBackend::connect_cluster`] and
    /// [`connect`](Self::connect).
    pub async fn connect_cluster<S: AsRef<str>>(self, seeds: &[S]) -> Result<RedisBackend, ConnectError> {
        let conn = self.cluster(seeds)?.connect(self.connect_timeout).await?;
        Ok(self.backend(conn))
    }

    /// Connects to the primary that Redis Sentinel names `master`, asking
    /// the sentinels at `sentinels` (their own URLs, `redis://host:26379`;
    /// a user and password in a URL are the sentinel's).
    ///
    /// The first sentinel that answers names the primary; the primary must
    /// confirm its role (`ROLE`) and answer `PING` within the
    /// [connect timeout](Self::connect_timeout). Decisions then go to it as
    /// to one server, with the same timeout, keys and scripts. When a
    /// decision finds the primary gone (a lost or refused connection) or
    /// demoted (`READONLY`), the backend asks the sentinels again in the
    /// background, pausing 50 ms after a failed attempt and doubling the
    /// pause up to one second, until they name a primary that answers;
    /// later decisions go to that primary. Decisions fail meanwhile and the
    /// limiter's fail policy decides: after a failover, for about the
    /// sentinels' `down-after-milliseconds` plus the election. State
    /// written to the old primary and not yet replicated is lost with it,
    /// so a failover can re-grant part of a limit, as a restart without
    /// persistence does.
    ///
    /// The primary is reached with the credentials and database given by
    /// [`sentinel_primary_auth`](Self::sentinel_primary_auth) and
    /// [`sentinel_primary_db`](Self::sentinel_primary_db) (by default none,
    /// and database 0), and over TLS when the sentinel URLs are
    /// `rediss://`. A user and password in a sentinel URL log in to that
    /// sentinel only.
    ///
    /// # Errors
    ///
    /// As for [`RedisBackend::connect_sentinel`] and
    /// [`connect`](Self::connect); [`tls_certificates`](Self::tls_certificates)
    /// and a negative [`sentinel_primary_db`](Self::sentinel_primary_db)
    /// are refused (kind [`InvalidSetting`](crate::ConnectErrorKind::InvalidSetting)).
    /// A wrong or missing password, for the primary or a sentinel, is kind
    /// [`Authentication`](crate::ConnectErrorKind::Authentication), naming
    /// the primary and the sentinels but never the password.
    pub async fn connect_sentinel<S: AsRef<str>>(
        self,
        master: &str,
        sentinels: &[S],
    ) -> Result<RedisBackend, ConnectError> {
        let conn = self
            .sentinel(master, sentinels)?
            .connect(self.connect_timeout)
            .await?;
        Ok(self.backend(conn))
    }

    /// Returns at once and connects to one Redis server in the background,
    /// for services that must start while Redis is down.
    ///
    /// A task on the current Tokio runtime tries to connect (each attempt
    /// bounded by the [connect timeout](Self::connect_timeout)) until the
    /// server answers `PING`, pausing 50 ms after the first failure and
    /// doubling the pause up to one second, so a server that comes up is
    /// used within about a second. A decision made while the first attempt
    /// is under way waits for it, within the decision
    /// [timeout](Self::timeout). Until an attempt succeeds, decisions fail
    /// with a [`BackendErrorKind::Unavailable`](tollgate::backend::BackendErrorKind::Unavailable) error whose source is a
    /// [`ConnectError`] of kind
    /// [`NotConnected`](crate::ConnectErrorKind::NotConnected), naming the
    /// URL (without its password) and the last attempt's error; the
    /// limiter's fail policy then decides, so a limiter that fails open
    /// admits (and counts) those requests. Once connected, the backend
    /// behaves like one from [`connect`](Self::connect), reconnecting by
    /// itself after a lost connection. [`RedisBackend::is_connected`] tells
    /// whether an attempt has succeeded.
    ///
    /// [`connect`](Self::connect) is the choice for failing fast: it
    /// reports a wrong address, password or port at start-up.
    ///
    /// # Errors
    ///
    /// A [`ConnectError`] of kind
    /// [`InvalidUrl`](crate::ConnectErrorKind::InvalidUrl) when `url` does
    /// not parse. Everything else (refused connections, rejected
    /// passwords) is reported by the decisions.
    ///
    /// # Panics
    ///
    /// When called outside a Tokio runtime, which the background task needs.
    pub fn connect_in_background(self, url: &str) -> Result<RedisBackend, ConnectError> {
        let endpoint = self.standalone(url)?;
        Ok(self.backend(Connection::background(endpoint, self.connect_timeout)))
    }

    /// Returns at once and connects to a Redis Cluster in the background,
    /// as [`connect_in_background`](Self::connect_in_background) does for
    /// one server.
    ///
    /// # Errors
    ///
    /// A [`ConnectError`] of kind
    /// [`InvalidUrl`](crate::ConnectErrorKind::InvalidUrl) when a seed does
    /// not parse or none is given.
    ///
    /// # Panics
    ///
    /// When called outside a Tokio runtime, which the background task needs.
    pub fn connect_cluster_in_background<S: AsRef<str>>(
        self,
        seeds: &[S],
    ) -> Result<RedisBackend, ConnectError> {
        let endpoint = self.cluster(seeds)?;
        Ok(self.backend(Connection::background(endpoint, self.connect_timeout)))
    }

    /// Returns at once and connects to the primary that Redis Sentinel
    /// names in the background, as
    /// [`connect_in_background`](Self::connect_in_background) does for one
    /// server; once connected, it behaves as with
    /// [`connect_sentinel`](Self::connect_sentinel).
    ///
    /// # Errors
    ///
    /// A [`ConnectError`] of kind
    /// [`InvalidUrl`](crate::ConnectErrorKind::InvalidUrl) when a sentinel
    /// URL does not parse, none is given, or `master` is empty, and of kind
    /// [`InvalidSetting`](crate::ConnectErrorKind::InvalidSetting) for an
    /// out-of-range setting.
    ///
    /// # Panics
    ///
    /// When called outside a Tokio runtime, which the background task needs.
    pub fn connect_sentinel_in_background<S: AsRef<str>>(
        self,
        master: &str,
        sentinels: &[S],
    ) -> Result<RedisBackend, ConnectError> {
        let endpoint = self.sentinel(master, sentinels)?;
        Ok(self.backend(Connection::background(endpoint, self.connect_timeout)))
    }

    /// Uses a connection manager configured elsewhere (for example for
    /// RESP3 or other reconnection settings), without verifying the server.
    /// The builder's timeout, clock and expiry grace still apply; its TCP
    /// settings do not (they belong to the manager's client). A manager
    /// keeps its address, so it does not follow a Sentinel failover:
    /// [`connect_sentinel`](Self::connect_sentinel) does.
    pub fn from_connection_manager(self, manager: ConnectionManager) -> RedisBackend {
        self.backend(Connection::Standalone(manager))
    }

    /// Uses a cluster connection configured elsewhere, without verifying it.
    /// The builder's timeout, clock and expiry grace still apply.
    pub fn from_cluster_connection(self, conn: ClusterConnection) -> RedisBackend {
        self.backend(Connection::Cluster(conn))
    }
}
