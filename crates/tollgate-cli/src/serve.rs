//! `tollgate serve`: the decision service, until SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::error::CliError;

/// The long help of `serve`.
pub const SERVE_ABOUT: &str = "\
Run the rate-limit decision service.

Every --config file is a tollgate policy file (YAML, TOML or JSON, see `tollgate check --help`;
at most one) or an Envoy rate-limit configuration (YAML with a top-level `domain` and nested
`descriptors`, in the format of Envoy's reference rate-limit service; one file per domain).
State lives in memory, or in the Redis server, Cluster or Sentinel the policy file names, so
that several instances share their limits.

--listen (default 127.0.0.1:8080) serves HTTP/1.1 and h2c:
  POST /v1/decide  {\"resource\": \"login\", \"key\": \"user-1\", \"cost\": 1} -> 200 with the decision
                   as JSON; 400 {\"error\", \"field\"} for a malformed request, 413 over 64 KiB
  GET  /v1/auth    for nginx auth_request, Traefik forwardAuth, Envoy ext_authz: headers
                   X-Tollgate-Key (required), X-Tollgate-Resource, X-Tollgate-Cost; 204 with
                   RateLimit-* headers when allowed, --auth-deny-status (429; 403 for nginx) with
                   Retry-After when denied
  GET  /healthz, /readyz (the store answers), /metrics (Prometheus)
  GET  /v1/policies (admin): the effective policies
  GET  /v1/top?resource=login&by=denied&n=20 (admin): the keys with the most denied requests
                   (or admitted units, shadow-denied requests) in the last minute, with what is left
  GET  /ui: a page for operators (decisions per second, most denied keys, policies, the store)

Admin routes are open on a loopback address; with --admin-token-file they need
`Authorization: Bearer <token>`, with --no-admin they are off (404), and with neither the
service refuses to listen elsewhere.
Admin routes and /v1/decide read only `Content-Type: application/json` bodies (415), refuse
requests from other origins (403) and, on a token-less loopback listener, a Host that is not
localhost or a loopback address (421): web pages in a browser on the host cannot drive them.

--grpc-listen serves envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit.

--state-file keeps in-memory counts across restarts: restored at start (a missing file starts
empty; a damaged, cut short or foreign one stops the start unless --discard-invalid-state),
written atomically every --state-interval and once more after draining, so a restart after
SIGTERM loses nothing and a kill at most one interval. Windows that ended meanwhile are over,
buckets refill by the time that passed. State on Redis needs no file.

SIGHUP, or a change to a --config file, reloads the configuration: a valid one replaces the
old atomically (limits whose policy is unchanged keep their state), an invalid one is logged
with its file, line and field while the old one keeps serving. SIGTERM or Ctrl-C drains:
/readyz answers 503 at once, the service serves on for --drain-delay (0 s; give a load
balancer or Kubernetes that long to stop sending), then the listeners close, every request
already received is answered (HTTP/1.1 with
`Connection: close`), idle connections are closed, and the service exits with 0 once all
are closed or --drain-timeout has passed; a second SIGTERM or Ctrl-C exits at once with 1.
The log goes to standard error, one line per event: text by default, or with --log-format json
one JSON object per line ({\"timestamp\", \"level\", \"target\", \"message\" and the event's fields}),
for log shippers. RUST_LOG sets the level and filters (default info).";

/// Arguments of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// A tollgate policy file or an Envoy rate-limit configuration (repeatable).
    #[arg(long = "config", value_name = "FILE", required = true)]
    pub config: Vec<PathBuf>,
    /// The HTTP listener's address.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Serve Envoy's rate-limit gRPC API on this address.
    #[arg(long, value_name = "ADDR")]
    pub grpc_listen: Option<SocketAddr>,
    /// The status of a denial on /v1/auth, from 400 to 499 (nginx's auth_request needs 403).
    #[arg(long, value_name = "CODE", default_value_t = 429)]
    pub auth_deny_status: u16,
    /// The rate-limit headers the gRPC answers ask Envoy to add to the response.
    #[arg(long, value_name = "NAMES", value_enum, default_value_t = EnvoyHeaders::Ratelimit)]
    pub envoy_headers: EnvoyHeaders,
    /// The largest limit a request may name for itself (POST /v1/decide's "limit"); 0 refuses them all.
    #[arg(long, value_name = "N", default_value_t = tollgate_server::DEFAULT_MAX_LIMIT_OVERRIDE)]
    pub max_limit_override: u64,
    /// A file holding the bearer token the admin routes require.
    #[arg(long, value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// Turn the admin routes off (they answer 404): the service may then listen on any address
    /// without a token. Decisions, health, metrics and /ui stay.
    #[arg(long, conflicts_with = "admin_token_file")]
    pub no_admin: bool,
    /// A file holding the secret (at least 16 bytes) that signs the permits POST /v1/acquire hands
    /// out; replicas sharing a store must share it. Without one, each process signs with a random key.
    #[arg(long, value_name = "FILE")]
    pub permit_key_file: Option<PathBuf>,
    /// How long an HTTP/1.1 request head may take from its first byte; slower clients are disconnected.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub header_read_timeout: Duration,
    /// How long a connection with no request in flight stays open.
    #[arg(long, value_name = "DURATION", default_value = "75s", value_parser = humantime::parse_duration)]
    pub idle_timeout: Duration,
    /// The most connections open at once, HTTP and gRPC together; at the cap new ones wait.
    #[arg(long, value_name = "N", default_value_t = tollgate_server::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// How long draining may take after SIGTERM before open connections are closed.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
    /// How long to go on serving after SIGTERM, with /readyz answering 503, before draining: the
    /// time a load balancer or Kubernetes takes to stop sending new connections.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = humantime::parse_duration)]
    pub drain_delay: Duration,
    /// Keep in-memory counts in this file across restarts: read at start, written atomically every --state-interval and after draining.
    #[arg(long, value_name = "FILE")]
    pub state_file: Option<PathBuf>,
    /// How often --state-file is written: a kill without draining loses at most this much of the decisions.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub state_interval: Duration,
    /// Start empty when --state-file cannot be restored (damaged, cut short, not a state file), moving it to FILE.invalid.
    #[arg(long, requires = "state_file")]
    pub discard_invalid_state: bool,
    /// Threads serving the gRPC listener's connections, each connection wholly on one (default: one per core; 0: the shared workers).
    #[arg(long, value_name = "N")]
    pub grpc_threads: Option<usize>,
    /// How log lines on standard error are written.
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// The rate-limit headers Envoy's answers ask the proxy to add
/// (`response_headers_to_add`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum EnvoyHeaders {
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`
    /// (envoyproxy/ratelimit's default names).
    #[default]
    Ratelimit,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`
    /// (envoyproxy/ratelimit with LIMIT_*_HEADER set to them).
    XRatelimit,
    /// The IETF draft's `RateLimit-Policy` and `RateLimit`.
    IetfDraft,
    /// None (`Retry-After` still comes with a denial).
    Off,
}

/// How `serve` writes its log lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Lines for people: time, level, target and message.
    #[default]
    Text,
    /// One JSON object per line, the event's fields at the top level.
    Json,
}

/// Runs the service until SIGTERM or Ctrl-C.
pub fn serve(args: &ServeArgs) -> Result<(), CliError> {
    init_log(args.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CliError::Runtime)?;
    runtime.block_on(async {
        let stop = stop_signal();
        let mut builder = tollgate_server::Server::builder()
            .listen(args.listen)
            .auth_deny_status(args.auth_deny_status)
            .envoy_headers(match args.envoy_headers {
                EnvoyHeaders::Ratelimit => tollgate_server::HeaderMode::RateLimit,
                EnvoyHeaders::XRatelimit => tollgate_server::HeaderMode::Legacy,
                EnvoyHeaders::IetfDraft => tollgate_server::HeaderMode::IetfDraft,
                EnvoyHeaders::Off => tollgate_server::HeaderMode::Off,
            })
            .max_limit_override(args.max_limit_override)
            .header_read_timeout(args.header_read_timeout)
            .idle_timeout(args.idle_timeout)
            .max_connections(args.max_connections)
            .drain_timeout(args.drain_timeout)
            .drain_delay(args.drain_delay);
        if let Some(threads) = args.grpc_threads {
            builder = builder.grpc_threads(threads);
        }
        for file in &args.config {
            builder = builder.config(file);
        }
        if let Some(addr) = args.grpc_listen {
            builder = builder.grpc_listen(addr);
        }
        if let Some(file) = &args.admin_token_file {
            builder = builder.admin_token_file(file);
        }
        if args.no_admin {
            builder = builder.no_admin();
        }
        if let Some(file) = &args.permit_key_file {
            builder = builder.permit_key_file(file);
        }
        if let Some(file) = &args.state_file {
            builder = builder
                .state_file(file)
                .state_interval(args.state_interval)
                .discard_invalid_state(args.discard_invalid_state);
        }
        let server = builder.bind().await?;
        server.run(stop).await?;
        Ok(())
    })
}

/// Installs the log on standard error in `format`, filtered by `RUST_LOG`
/// (`info` when unset or invalid).
fn init_log(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let log = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    // A subscriber installed before (only in tests) is kept.
    let _ = match format {
        LogFormat::Text => log.try_init(),
        LogFormat::Json => log
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
}

/// Completes on SIGTERM or Ctrl-C; a second one while the service drains
/// exits the process at once, with status 1. The handlers are installed
/// when this is called, not when the future is first polled: from then on
/// a signal drains the service instead of killing the process, even one
/// sent the moment the service says it serves. Must be called on the
/// runtime.
fn stop_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let streams =
            signal(SignalKind::terminate()).and_then(|term| Ok((term, signal(SignalKind::interrupt())?)));
        async move {
            let Ok((mut term, mut interrupt)) = streams else {
                let _ = tokio::signal::ctrl_c().await;
                return;
            };
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM: draining (a second SIGTERM or Ctrl-C exits at once)"),
                _ = interrupt.recv() => tracing::info!("interrupted: draining (a second Ctrl-C or SIGTERM exits at once)"),
            }
            tokio::spawn(async move {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = interrupt.recv() => {}
                }
                tracing::warn!("second signal: exiting without draining");
                std::process::exit(1);
            });
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("interrupted: draining (a second Ctrl-C exits at once)");
            tokio::spawn(async {
                let _ = tokio::signal::ctrl_c().await;
                tracing::warn!("second signal: exiting without draining");
                std::process::exit(1);
            });
        }
    }
}
