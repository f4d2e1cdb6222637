//! [`RedisBackend`], its builder and its per-policy binding.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::Slot;
use redis::TlsCertificates;
use tollgate::backend::{namespace, Backend, Binding, BindingPart, CompoundKeys, Scope, Tick};
use tollgate::strategy::{self, LimitRate, Outcome, Rate};
use tollgate::{
    BackendError, BackendErrorKind, Clock, ConfigError, Decision, Error, Operation, SharedClock, Strategy,
    MAX_LIMITS,
};

use crate::connection::{Connection, Endpoint};
use crate::error::{backend_error, ConnectError, ConnectErrorKind};
use crate::scripts::{self, Functions, LuaScript};
use crate::sentinel::PrimaryAuth;
use crate::tcp::TcpOptions;

/// How long a decision may take before it fails with
/// [`BackendErrorKind::Timeout`], unless configured otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(200);

/// How long connecting and the first `PING` may take, unless configured
/// otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a state key outlives its state unless configured otherwise
/// (see [`RedisBackendBuilder::expiry_grace`]): one second, the clock-step
/// tolerance of the in-memory backend's sweeps.
pub const DEFAULT_EXPIRY_GRACE: Duration = Duration::from_secs(1);

/// The largest limit and the largest window (in microseconds) the scripts
/// accept: 2^51, so that every time and product they compute stays an exact
/// integer in Lua's doubles. Tighter than the core's bounds
/// ([`tollgate::MAX_LIMIT`], 2^62, and [`tollgate::MAX_WINDOW`], 100 years),
/// which every backend also applies.
pub const MAX_EXACT_OPERAND: u64 = 1 << 51;

/// The largest `limit × window` (window in microseconds) a sliding-window
/// policy may have: 2^52. Its weighted estimate reaches `2 × limit × window`,
/// which must stay exact below 2^53.
pub const MAX_SLIDING_PRODUCT: u64 = 1 << 52;

#[derive(Clone)]
struct Options {
    timeout: Duration,
    connect_timeout: Duration,
    clock: Option<SharedClock>,
    expiry_grace: Duration,
}

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
    /// [`DEFAULT_CONNECT_TIMEOUT`].
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
            .finish()
    }
}

impl RedisBackendBuilder {
    /// The longest a decision may take, round trip included (default
    /// [`DEFAULT_TIMEOUT`]). A decision that takes longer fails with
    /// [`BackendErrorKind::Timeout`] and the limiter's fail policy decides.
    ///
    /// A timed-out script may still run on the server, so the request may
    /// have been charged even though the caller saw an error: timeouts can
    /// only make a limit stricter, never admit more.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
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
    /// [`tollgate::ManualClock`] in tests or replays), and fine for a single
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

    /// The former name of [`caller_clock`](Self::caller_clock), kept for
    /// one release.
    #[deprecated(since = "0.2.0", note = "renamed to `caller_clock`")]
    pub fn with_caller_clock(self, clock: impl Clock) -> Self {
        self.caller_clock(clock)
    }

    /// Extra time each state key is kept after its state has expired
    /// (default [`DEFAULT_EXPIRY_GRACE`], rounded up to whole milliseconds).
    ///
    /// Keeping expired state longer never changes a decision: the scripts
    /// read expired state as absent. Deleting state early would, when the
    /// clock steps back to a time at which it was still live, or when a
    /// caller clock is behind the server's. The grace absorbs such steps and
    /// skew; zero makes keys disappear at the exact millisecond their state
    /// expires. A [`tollgate::ManualClock`] that runs slower than real time
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
    /// with [`BackendErrorKind::Timeout`] after the decision
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
            connect_timeout: self.connect_timeout,
            clock: self.clock.clone(),
            expiry_grace: self.expiry_grace,
        }
    }

    fn backend(&self, conn: Connection) -> RedisBackend {
        RedisBackend {
            conn,
            options: self.options(),
            functions: Arc::new(Functions::new()),
        }
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
    /// with a [`BackendErrorKind::Unavailable`] error whose source is a
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

impl Backend for RedisBackend {
    type Binding = RedisBinding;

    fn bind(&self, scope: &Scope<'_>) -> Result<RedisBinding, Error> {
        let policy = scope.policy;
        let mut limits = Vec::with_capacity(policy.limits().len());
        for (i, limit) in policy.limits().iter().enumerate() {
            let rate = limit.rate_micros();
            check_exact(limit.strategy(), &rate).map_err(|err| {
                if policy.is_compound() {
                    err.within(format!("limits[{i}]"))
                } else {
                    err
                }
            })?;
            limits.push(LimitRate {
                strategy: limit.strategy(),
                rate,
            });
        }
        let (script, layout, limit_args) = match policy.single() {
            Some(limit) => {
                let rate = limits[0].rate;
                (
                    scripts::single(limit.strategy()),
                    Layout::Single(namespace(scope.prefix, scope.resource, limit.strategy())),
                    vec![
                        rate.limit.to_string(),
                        rate.window.to_string(),
                        rate.interval.to_string(),
                    ],
                )
            }
            None => (
                scripts::compound(),
                Layout::Compound(CompoundKeys::new(scope.prefix, scope.resource, policy.limits())),
                Vec::new(),
            ),
        };
        let operation_args: Vec<String> = limits
            .iter()
            .flat_map(|l| {
                [
                    scripts::function_name(l.strategy).to_owned(),
                    l.rate.limit.to_string(),
                    l.rate.window.to_string(),
                    l.rate.interval.to_string(),
                ]
            })
            .collect();
        let grace_ms = self.options.expiry_grace.as_nanos().div_ceil(1_000_000);
        // A compound policy's decision arguments are the operations' ones.
        let limit_args = if limit_args.is_empty() {
            operation_args.clone()
        } else {
            limit_args
        };
        Ok(RedisBinding {
            shared: Arc::new(BindingShared {
                conn: self.conn.clone(),
                functions: Arc::clone(&self.functions),
                timeout: self.options.timeout,
                connect_timeout: self.options.connect_timeout,
                clock: self.options.clock.clone(),
                script,
                layout,
                max_limit: limits.iter().map(|l| l.rate.limit).max().unwrap_or(1),
                limits: limits.into_boxed_slice(),
                grace_ms: grace_ms.to_string(),
                limit_args,
                operations: scripts::operations(),
                operation_args,
            }),
        })
    }
}

/// Rejects policies whose script arithmetic could leave the integers that a
/// double represents exactly. The messages follow the core's
/// ([`tollgate::Policy::new`]): the value, the bound, and why.
fn check_exact(strategy: Strategy, rate: &Rate) -> Result<(), ConfigError> {
    if rate.limit > MAX_EXACT_OPERAND {
        return Err(ConfigError::new(
            "limit",
            format!(
                "{} exceeds 2^51 = {MAX_EXACT_OPERAND}, the maximum limit on the Redis backend, \
                 within which every time and product its scripts compute is exact (Lua numbers \
                 are doubles)",
                rate.limit
            ),
        ));
    }
    if rate.window > MAX_EXACT_OPERAND {
        return Err(ConfigError::new(
            "window",
            format!(
                "{}µs exceeds 2^51µs = {MAX_EXACT_OPERAND}µs (about 71 years), the maximum window \
                 on the Redis backend, within which every time and product its scripts compute is \
                 exact (Lua numbers are doubles)",
                rate.window
            ),
        ));
    }
    if strategy == Strategy::SlidingWindow
        && u128::from(rate.limit) * u128::from(rate.window) > u128::from(MAX_SLIDING_PRODUCT)
    {
        return Err(ConfigError::new(
            "limit",
            format!(
                "limit × window = {} × {}µs exceeds 2^52 = {MAX_SLIDING_PRODUCT}, the maximum for a \
                 sliding window on the Redis backend, within which its weighted estimate is exact \
                 (Lua numbers are doubles); lower the limit or shorten the window, or use another \
                 strategy",
                rate.limit, rate.window
            ),
        ));
    }
    Ok(())
}

/// Where a binding's state keys live.
enum Layout {
    /// One limit: its namespace followed by the caller's key.
    Single(Vec<u8>),
    /// Several limits: one key each, all in one hash slot.
    Compound(CompoundKeys),
}

struct BindingShared {
    conn: Connection,
    functions: Arc<Functions>,
    timeout: Duration,
    /// How long a reconnection may take, before a probe gives up on it.
    connect_timeout: Duration,
    clock: Option<SharedClock>,
    script: &'static LuaScript,
    layout: Layout,
    limits: Box<[LimitRate]>,
    /// The largest `L` of the limits: every cost above it decides alike.
    max_limit: u64,
    /// The expiry grace in milliseconds, as sent.
    grace_ms: String,
    /// The limits' arguments, as sent after now, the cost and the grace:
    /// `L`, `W` and `T` for one limit; the strategy function, `L`, `W` and
    /// `T` of each limit for several.
    limit_args: Vec<String>,
    /// The script of per-key operations.
    operations: &'static LuaScript,
    /// Each limit's strategy function, `L`, `W` and `T`, as the operations
    /// script takes them.
    operation_args: Vec<String>,
}

/// One policy served by a [`RedisBackend`]. Cheap to clone.
#[derive(Clone)]
pub struct RedisBinding {
    shared: Arc<BindingShared>,
}

impl std::fmt::Debug for RedisBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The keys' pattern, `*` standing for the caller's key.
        let keys: Vec<String> = self
            .state_keys(b"*")
            .iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect();
        f.debug_struct("RedisBinding")
            .field("state_keys", &keys)
            .field("limits", &self.shared.limits)
            .finish_non_exhaustive()
    }
}

impl RedisBinding {
    /// The Redis keys that hold the state of `key`, one per limit of the
    /// policy, in its order: `{prefix}:{resource}:{strategy}:{key}` for a
    /// policy of one limit, `{prefix}:{{resource}:{key}}:{strategy}:{window}`
    /// for each limit of a compound policy (all in one Redis Cluster hash
    /// slot). The [key layout](tollgate::_documentation::semantics_notes#key-layout)
    /// describes both.
    pub fn state_keys(&self, key: &[u8]) -> Vec<Vec<u8>> {
        match &self.shared.layout {
            Layout::Single(namespace) => vec![[namespace.as_slice(), key].concat()],
            Layout::Compound(keys) => (0..keys.len()).map(|i| keys.key(i, key)).collect(),
        }
    }

    /// The policy's limits with their rates in microsecond ticks, as the
    /// scripts see them.
    pub fn limits(&self) -> &[LimitRate] {
        &self.shared.limits
    }

    /// The SHA-1 of the script that decides for this policy where the
    /// server has no functions, as `EVALSHA` names it (for `SCRIPT EXISTS`,
    /// or to run it by hand).
    pub fn script_sha(&self) -> &str {
        self.shared.script.sha()
    }

    /// The name of the library function that decides for this policy, as
    /// `FCALL` names it (`tollgate_<digest>_<entry point>`; `FUNCTION LIST`
    /// shows its library). See the
    /// [function library](crate::_documentation::operations#scripts-and-the-function-library).
    pub fn function_name(&self) -> &str {
        self.shared.script.function()
    }

    async fn run(&self, key: &[u8], cost: u64) -> Result<Decision, BackendError> {
        let shared = &*self.shared;
        // Every cost above a limit decides alike for it (denied, nothing
        // charged, no retry), so clamping above the largest keeps the
        // argument exact.
        let cost = cost.min(shared.max_limit + 1).to_string();
        let reply = self
            .invoke(shared.script, key, &cost, &shared.limit_args, None)
            .await?;
        if let Some(blocked) = parse_blocked(&reply, shared.limits[0].rate.limit)? {
            return Ok(blocked);
        }
        let mut outcomes = [NO_OUTCOME; MAX_LIMITS];
        let outcomes = parse_reply(&reply, &mut outcomes[..shared.limits.len()])?;
        Ok(Decision::from_compound(
            strategy::combine(outcomes),
            &shared.limits,
            Tick::Micros,
        ))
    }

    /// See [`Binding::apply_together`]: one call of the `together` entry
    /// point when every part is served by one backend and, in a cluster,
    /// every state key lives in one hash slot.
    async fn together(
        parts: &[BindingPart<'_, RedisBinding>],
    ) -> Option<Result<Vec<Decision>, BackendError>> {
        let first = &*parts.first()?.binding.shared;
        // The bindings of one backend share its record of functions.
        if !parts
            .iter()
            .all(|p| Arc::ptr_eq(&p.binding.shared.functions, &first.functions))
        {
            return None;
        }
        let state_keys: Vec<Vec<u8>> = parts.iter().flat_map(|p| p.binding.state_keys(p.key)).collect();
        if first.conn.is_cluster() {
            let slot = Slot::for_key(&state_keys[0]);
            if !state_keys.iter().all(|k| Slot::for_key(k) == slot) {
                return None;
            }
        }
        Some(Self::call_together(first, parts, &state_keys).await)
    }

    async fn call_together(
        first: &BindingShared,
        parts: &[BindingPart<'_, RedisBinding>],
        state_keys: &[Vec<u8>],
    ) -> Result<Vec<Decision>, BackendError> {
        let now = first.now_arg();
        // Each part's cost and limit count, as sent.
        let numbers: Vec<(String, String)> = parts
            .iter()
            .map(|p| {
                let shared = &p.binding.shared;
                (
                    p.cost.min(shared.max_limit + 1).to_string(),
                    shared.limits.len().to_string(),
                )
            })
            .collect();
        let count = parts.len().to_string();
        let mut args: Vec<&[u8]> = vec![now.as_bytes(), first.grace_ms.as_bytes(), count.as_bytes()];
        for (part, (cost, limits)) in parts.iter().zip(&numbers) {
            args.extend([
                cost.as_bytes(),
                if part.decisive { b"1" } else { b"0" },
                limits.as_bytes(),
            ]);
            args.extend(part.binding.shared.operation_args.iter().map(String::as_bytes));
        }
        let keys: Vec<&[u8]> = state_keys.iter().map(Vec::as_slice).collect();
        let reply = first.call(scripts::together(), &keys, &args).await?;
        parse_together(&reply, parts)
    }

    /// See [`Binding::reconnect`].
    async fn ping_twice(&self) -> Result<(), BackendError> {
        let shared = &self.shared;
        let ping = |within: Duration| async move {
            tokio::time::timeout(within, shared.conn.query::<String>(&redis::cmd("PING")))
                .await
                .map_err(|_| BackendError::timeout(within))?
                .map_err(backend_error)
        };
        if ping(shared.timeout).await.is_ok() {
            return Ok(());
        }
        ping(shared.timeout.max(shared.connect_timeout)).await.map(drop)
    }

    /// Applies `op` to every state key of `key` in one script call.
    async fn operate_keys(&self, key: &[u8], op: Operation) -> Result<(), BackendError> {
        let shared = &*self.shared;
        let (name, amount) = operation_amount(op)?;
        let amount = amount.to_string();
        let reply = self
            .invoke(
                shared.operations,
                key,
                &amount,
                &shared.operation_args,
                Some(name),
            )
            .await?;
        if reply != [0] {
            return Err(BackendError::new(
                BackendErrorKind::Protocol,
                format!("unexpected reply from the operations script: {reply:?}"),
            ));
        }
        Ok(())
    }

    /// Runs `script` on the state keys of `key` with now, `amount`, the
    /// grace, `limit_args` and `last` as arguments, within the timeout.
    async fn invoke(
        &self,
        script: &LuaScript,
        key: &[u8],
        amount: &str,
        limit_args: &[String],
        last: Option<&str>,
    ) -> Result<Vec<i64>, BackendError> {
        let shared = &*self.shared;
        let state_keys = self.state_keys(key);
        let keys: Vec<&[u8]> = state_keys.iter().map(Vec::as_slice).collect();
        let now = shared.now_arg();
        let mut args: Vec<&[u8]> = Vec::with_capacity(4 + limit_args.len());
        args.extend([now.as_bytes(), amount.as_bytes(), shared.grace_ms.as_bytes()]);
        args.extend(limit_args.iter().map(String::as_bytes));
        args.extend(last.map(str::as_bytes));
        shared.call(script, &keys, &args).await
    }
}

impl BindingShared {
    /// The scripts' first argument: now in microseconds on the caller's
    /// clock, or empty for the server's.
    fn now_arg(&self) -> String {
        match &self.clock {
            Some(clock) => Tick::Micros.from_nanos(clock.now_nanos()).to_string(),
            None => String::new(),
        }
    }

    /// Runs `script` on `keys` with `args` once the connection is ready,
    /// all within the timeout.
    async fn call(
        &self,
        script: &LuaScript,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Result<Vec<i64>, BackendError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let conn = self.conn.ready(deadline).await.map_err(|err| {
            BackendError::new(BackendErrorKind::Unavailable, err.to_string()).with_source(err)
        })?;
        tokio::time::timeout_at(deadline, script.run(conn, &self.functions, keys, args))
            .await
            .map_err(|_| BackendError::timeout(self.timeout))?
            .map_err(backend_error)
    }
}

/// The operations script's name of `op` and its amount: the cost of a
/// refund or penalty, the length of a block in microseconds (rounded down,
/// as the store adapter's ticks are), 0 for a reset.
///
/// # Errors
///
/// A cost above [`MAX_EXACT_OPERAND`], beyond which the script's arithmetic
/// would not be exact, as [`BackendErrorKind::Unsupported`]. (The limiter
/// has already refused costs and blocks beyond the core's bounds; a block of
/// at most 100 years stays exact.)
fn operation_amount(op: Operation) -> Result<(&'static str, u64), BackendError> {
    match op {
        Operation::Reset => Ok(("reset", 0)),
        Operation::Block(d) => Ok((
            "block",
            Tick::Micros.from_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )),
        Operation::Refund(cost) | Operation::Penalty(cost) if cost > MAX_EXACT_OPERAND => {
            Err(BackendError::new(
                BackendErrorKind::Unsupported,
                format!(
                    "{} cost {cost} exceeds 2^51 = {MAX_EXACT_OPERAND}, the largest cost of a \
                     per-key operation on the Redis backend, within which its scripts compute \
                     exactly (Lua numbers are doubles)",
                    op.name()
                ),
            ))
        }
        Operation::Refund(cost) => Ok(("refund", cost)),
        Operation::Penalty(cost) => Ok(("penalty", cost)),
        _ => Err(BackendError::new(
            BackendErrorKind::Unsupported,
            format!("the Redis backend does not know the operation {}", op.name()),
        )),
    }
}

/// The decision of a blocked key when `reply` is `{-1, left_us, reset_us}`
/// (`limit`: the policy's first limit's); `None` for any other reply.
fn parse_blocked(reply: &[i64], limit: u64) -> Result<Option<Decision>, BackendError> {
    match *reply {
        [-1, left, reset] => match (u64::try_from(left), u64::try_from(reset)) {
            (Ok(left), Ok(reset)) if left > 0 => {
                Ok(Some(Decision::blocked(left, reset, limit, Tick::Micros)))
            }
            _ => Err(BackendError::new(
                BackendErrorKind::Protocol,
                format!("unexpected reply from the rate-limit script: {reply:?}"),
            )),
        },
        _ => Ok(None),
    }
}

impl Binding for RedisBinding {
    fn apply(&self, key: &[u8], cost: u64) -> impl Future<Output = Result<Decision, BackendError>> + Send {
        self.run(key, cost)
    }

    /// One atomic script call for every limit of the policy (see
    /// [per-key operations](crate::_documentation::operations#per-key-operations)).
    fn operate(&self, key: &[u8], op: Operation) -> impl Future<Output = Result<(), BackendError>> + Send {
        self.operate_keys(key, op)
    }

    /// A `PING`, and when it fails a second one: the first command on a
    /// connection that an outage broke fails and starts the reconnection,
    /// and the second waits for that attempt (within the connect timeout).
    /// So the probe's decision that follows goes out on a live connection
    /// as soon as the server accepts again.
    fn reconnect(&self) -> impl Future<Output = Result<(), BackendError>> + Send {
        self.ping_twice()
    }

    /// One function call (or script) for the whole request, on a
    /// standalone server, through Sentinel, or in a cluster when every
    /// state key lives in one hash slot; `None` otherwise, and for parts of
    /// different backends.
    fn apply_together(
        parts: &[BindingPart<'_, Self>],
    ) -> impl Future<Output = Option<Result<Vec<Decision>, BackendError>>> + Send {
        Self::together(parts)
    }
}

/// The decisions of the parts of one request from the `together` entry
/// point's reply: for each part the microseconds left of a block (0 for
/// none), then four numbers per limit.
fn parse_together(
    reply: &[i64],
    parts: &[BindingPart<'_, RedisBinding>],
) -> Result<Vec<Decision>, BackendError> {
    let bad = || {
        BackendError::new(
            BackendErrorKind::Protocol,
            format!("unexpected reply from the rate-limit script: {reply:?}"),
        )
    };
    let mut decisions = Vec::with_capacity(parts.len());
    let mut rest = reply;
    for part in parts {
        let limits = &part.binding.shared.limits;
        let len = 1 + 4 * limits.len();
        if rest.len() < len {
            return Err(bad());
        }
        let (fields, tail) = rest.split_at(len);
        rest = tail;
        let mut outcomes = [NO_OUTCOME; MAX_LIMITS];
        let outcomes = parse_reply(&fields[1..], &mut outcomes[..limits.len()])?;
        let blocked_for = u64::try_from(fields[0]).map_err(|_| bad())?;
        decisions.push(if blocked_for > 0 {
            let reset = outcomes.iter().map(|o| o.reset).max().unwrap_or(0);
            Decision::blocked(blocked_for, reset, limits[0].rate.limit, Tick::Micros)
        } else {
            Decision::from_compound(strategy::combine(outcomes), limits, Tick::Micros)
        });
    }
    if !rest.is_empty() {
        return Err(bad());
    }
    Ok(decisions)
}

/// A placeholder for the outcomes a reply fills in.
const NO_OUTCOME: Outcome = Outcome {
    allowed: false,
    remaining: 0,
    reset: 0,
    retry_after: None,
};

/// Reads `{allowed, remaining, reset_us, retry_after_us or -1}` for each
/// limit into `outcomes`, which must hold one per limit.
fn parse_reply<'a>(reply: &[i64], outcomes: &'a mut [Outcome]) -> Result<&'a [Outcome], BackendError> {
    let bad = || {
        BackendError::new(
            BackendErrorKind::Protocol,
            format!("unexpected reply from the rate-limit script: {reply:?}"),
        )
    };
    if reply.len() != 4 * outcomes.len() {
        return Err(bad());
    }
    for (outcome, fields) in outcomes.iter_mut().zip(reply.chunks_exact(4)) {
        let &[allowed, remaining, reset, retry_after] = fields else {
            return Err(bad());
        };
        *outcome = Outcome {
            allowed: match allowed {
                0 => false,
                1 => true,
                _ => return Err(bad()),
            },
            remaining: u64::try_from(remaining).map_err(|_| bad())?,
            reset: u64::try_from(reset).map_err(|_| bad())?,
            retry_after: match retry_after {
                -1 => None,
                d => Some(u64::try_from(d).map_err(|_| bad())?),
            },
        };
    }
    Ok(outcomes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_or_fail_as_protocol_errors() {
        let mut one = [NO_OUTCOME; 1];
        let o = parse_reply(&[1, 4, 1_000, -1], &mut one).unwrap()[0];
        assert!(o.allowed);
        assert_eq!((o.remaining, o.reset, o.retry_after), (4, 1_000, None));
        let o = parse_reply(&[0, 0, 7, 3], &mut one).unwrap()[0];
        assert_eq!(o.retry_after, Some(3));
        let mut two = [NO_OUTCOME; 2];
        let both = parse_reply(&[1, 4, 1_000, -1, 0, 0, 7, 3], &mut two).unwrap();
        assert_eq!((both[0].remaining, both[1].retry_after), (4, Some(3)));
        for bad in [
            &[1, 2, 3][..],
            &[2, 0, 0, -1],
            &[1, -1, 0, -1],
            &[0, 0, 0, -2],
            &[1, 4, 1_000, -1, 0],
        ] {
            assert_eq!(
                parse_reply(bad, &mut one).unwrap_err().kind(),
                BackendErrorKind::Protocol
            );
        }
        let short = parse_reply(&[1, 4, 1_000, -1], &mut two).unwrap_err();
        assert_eq!(short.kind(), BackendErrorKind::Protocol);
    }

    #[test]
    fn blocked_replies_become_blocked_decisions_and_others_pass_through() {
        let d = parse_blocked(&[-1, 5_000, 9_000], 7).unwrap().unwrap();
        assert_eq!(d, Decision::blocked(5_000, 9_000, 7, Tick::Micros));
        assert_eq!(d.retry_after, Some(Duration::from_millis(5)));
        assert!(parse_blocked(&[0, 0, 7, 3], 7).unwrap().is_none());
        for bad in [&[-1, 0, 9][..], &[-1, -5, 9], &[-1, 5, -9]] {
            let err = parse_blocked(bad, 7).unwrap_err();
            assert_eq!(err.kind(), BackendErrorKind::Protocol);
        }
        let err = operation_amount(Operation::Refund(MAX_EXACT_OPERAND + 1)).unwrap_err();
        assert_eq!(err.kind(), BackendErrorKind::Unsupported);
        assert_eq!(
            operation_amount(Operation::Block(Duration::from_nanos(2_999))).unwrap(),
            ("block", 2)
        );
    }

    #[test]
    fn policies_beyond_exact_double_arithmetic_are_rejected() {
        let day = 86_400_000_000;
        assert!(check_exact(Strategy::SlidingWindow, &Rate::new(1_000, day)).is_ok());
        let err = check_exact(Strategy::SlidingWindow, &Rate::new(1_000_000, day)).unwrap_err();
        assert_eq!(err.field(), "limit");
        assert!(err.reason().contains("window"));
        assert!(check_exact(Strategy::TokenBucket, &Rate::new(1_000_000, day)).is_ok());
        let err = check_exact(Strategy::FixedWindow, &Rate::new(1, MAX_EXACT_OPERAND + 1)).unwrap_err();
        assert_eq!(err.field(), "window");
        let err = check_exact(Strategy::TokenBucket, &Rate::new(MAX_EXACT_OPERAND + 1, day)).unwrap_err();
        assert_eq!(err.field(), "limit");
        assert_eq!(
            err.to_string(),
            "invalid limit: 2251799813685249 exceeds 2^51 = 2251799813685248, the maximum limit on the \
             Redis backend, within which every time and product its scripts compute is exact (Lua \
             numbers are doubles)"
        );
    }
}
