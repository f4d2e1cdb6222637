//! The load Envoy puts on `tollgate serve`: many requests in flight over
//! very few HTTP/2 connections, and the latency each one sees, tail
//! included.
//!
//! ```text
//! cargo bench -p tollgate-cli --bench envoy_tail
//! ```
//!
//! Every measurement starts `tollgate serve` (this package's binary) as a
//! process of its own, fresh, on Envoy's rate-limit gRPC API, and stops it
//! afterwards. `IN_FLIGHT` tasks (64) each keep one `ShouldRateLimit` in
//! flight, task *i* on connection *i* mod *C*, for *C* in `CONNECTIONS`
//! (`1,2,64`); a request carries one descriptor with one entry. After a
//! warm-up of `WARM_UP_MS` (500) the requests of `SECONDS` (3) are
//! measured; each cell is measured `ROUNDS` times (5) and the medians are
//! printed: throughput, p50, p99, p99.9, how evenly the callers were
//! served (the fewest and the most requests a caller had answered, against
//! the median caller) and the server's CPU time per
//! request (user and system, read from `/proc` for the server's process
//! alone; the client runs in this process, on the same cores).
//!
//! Two workloads: `admit` spreads requests over 10,000 keys of descriptor
//! `user`, never denied; `hot` sends every request for `hot=abuser`, over
//! its limit of 10 an hour after the first ten. State is in memory, and on
//! Redis too when `redis-server` is on the `PATH` (a server of the bench's
//! own, flushed before each measurement).
//!
//! With `PEER=ADDRESS` and `PEER_COMMAND='…'`, each cell is also measured,
//! in alternation with the service, against another implementation of the
//! API: the command (run with `sh -c`, fresh for each measurement, killed
//! after it) must serve it at `ADDRESS` with the same limits (domain
//! `bench`; `user` admitted whatever its value; `hot=abuser` 10 an hour).
//! `PEER_REDIS_COMMAND` does the same for the Redis rows, with `{redis}`
//! replaced by the Redis server's URL. The ratios printed are the medians
//! of each round's service / peer. `docs/performance.md` shows the
//! commands for limitador.
//!
//! The same cells are measured on the HTTP API too: `POST /v1/decide`
//! (resources `user` and `hot` of a policy file with the same limits) over
//! HTTP/1.1 keep-alive connections, each carrying one request at a time as
//! an application's client or a proxy's upstream pool does, so that *C*
//! connections are *C* requests in flight. `PEER_HTTP=ADDRESS` is where the
//! peer serves its HTTP API (limitador's `POST /check_and_report`,
//! namespace `bench`, the entry as `values`; `PEER_API=tollgate` when
//! the peer is another `tollgate serve`, asked `/v1/decide`); without it
//! the peer is measured on gRPC only.
//!
//! `ONLY=memory` (or `redis`), `WORKLOADS=admit` (or `hot`) and
//! `APIS=grpc` (or `http`) narrow the cells; `POLICY_FILE=path` serves the memory rows with that tollgate
//! policy file beside the Envoy file (to measure settings of its own, such
//! as `top_keys: false`), and `SERVE_ARGS='--grpc-threads 0'` adds
//! arguments to every `tollgate serve`. `SERVER_CPUS=1` starts every
//! `tollgate serve` on processor 1 alone (`taskset`); run the bench under
//! `taskset --cpu-list 0` and give the peer's command its own `taskset`
//! to keep the client and the servers on separate cores.

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use support::{metrics_text, start_tollgate, Server};
use tokio::net::TcpStream;
use tollgate_test_support::bench::{env_number, median};
use tollgate_test_support::process_cpu::cpu_seconds;
use tollgate_test_support::redis::RedisServer;
use tonic::transport::Channel;

/// Keys of the `admit` workload.
const KEYS: usize = 10_000;

/// What the bench was asked to measure.
struct Settings {
    rounds: usize,
    seconds: u64,
    warm_up: Duration,
    in_flight: usize,
    connections: Vec<usize>,
    workloads: Vec<Workload>,
    apis: Vec<Api>,
    peer: Option<Peer>,
}

/// Another service of the same API, started by a command.
struct Peer {
    addr: SocketAddr,
    memory: String,
    redis: Option<String>,
    /// Where it serves its HTTP API.
    http: Option<SocketAddr>,
}

/// The API a cell is measured on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Api {
    /// Envoy's `ShouldRateLimit`, many requests in flight per HTTP/2
    /// connection.
    Grpc,
    /// `POST /v1/decide` (a peer's own API), one request in flight per
    /// HTTP/1.1 keep-alive connection.
    Http,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Workload {
    /// 10,000 keys, never denied.
    Admit,
    /// One key over its limit.
    Hot,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Admit => "admit",
            Workload::Hot => "hot",
        }
    }
}

impl Settings {
    fn from_env() -> Self {
        let connections = std::env::var("CONNECTIONS")
            .unwrap_or_else(|_| "1,2,64".to_owned())
            .split(',')
            .map(|c| {
                c.trim()
                    .parse()
                    .ok()
                    .filter(|&c: &usize| c > 0)
                    .unwrap_or_else(|| panic!("CONNECTIONS lists whole numbers above 0, not {c:?}"))
            })
            .collect();
        let workloads = match std::env::var("WORKLOADS").as_deref() {
            Err(_) => vec![Workload::Admit, Workload::Hot],
            Ok("admit") => vec![Workload::Admit],
            Ok("hot") => vec![Workload::Hot],
            Ok(other) => panic!("WORKLOADS is admit or hot, not {other:?}"),
        };
        let apis = match std::env::var("APIS").as_deref() {
            Err(_) => vec![Api::Grpc, Api::Http],
            Ok("grpc") => vec![Api::Grpc],
            Ok("http") => vec![Api::Http],
            Ok(other) => panic!("APIS is grpc or http, not {other:?}"),
        };
        let address = |name: &str, addr: String| -> SocketAddr {
            addr.parse()
                .unwrap_or_else(|_| panic!("{name} is an address such as 127.0.0.1:8081, not {addr:?}"))
        };
        let peer = std::env::var("PEER").ok().map(|addr| Peer {
            addr: address("PEER", addr),
            memory: std::env::var("PEER_COMMAND")
                .expect("PEER needs PEER_COMMAND, the command that starts the peer"),
            redis: std::env::var("PEER_REDIS_COMMAND").ok(),
            http: std::env::var("PEER_HTTP").ok().map(|a| address("PEER_HTTP", a)),
        });
        Self {
            rounds: env_number("ROUNDS", 5).max(1) as usize,
            seconds: env_number("SECONDS", 3).max(1),
            warm_up: Duration::from_millis(env_number("WARM_UP_MS", 500)),
            in_flight: env_number("IN_FLIGHT", 64).max(1) as usize,
            connections,
            workloads,
            apis,
            peer,
        }
    }
}

/// One measurement.
#[derive(Clone, Copy, Debug)]
struct Round {
    per_second: f64,
    /// The requests each task (each caller; over 64 connections, each
    /// connection) had answered, the fewest and the most, as shares of the
    /// median task's: how evenly the server served its callers.
    task_spread: (f64, f64),
    p50: Duration,
    p99: Duration,
    p999: Duration,
    /// The server's CPU µs per request.
    cpu_us: f64,
    /// The client's (this process's) CPU µs per request.
    client_cpu_us: f64,
    /// The server's own time per request (from its handler's start to its
    /// end), as the bucket bounds of its histogram holding the median and
    /// the 99th percentile, when it exports one.
    handler: Option<(f64, f64)>,
}

/// The Envoy configuration the service is measured with.
fn envoy_file(dir: &Path) -> PathBuf {
    let path = dir.join("bench-envoy.yaml");
    std::fs::write(
        &path,
        "domain: bench\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 1000000000 }\n  - key: hot\n    rate_limit: { unit: hour, requests_per_unit: 10 }\n",
    )
    .unwrap();
    path
}

/// The policy file of the HTTP API's resources, with the Envoy file's
/// limits (fixed windows, as Envoy's), on `redis` when given (which holds
/// the Envoy limits' state too).
fn policy_file(dir: &Path, redis: Option<&str>) -> PathBuf {
    let path = dir.join(if redis.is_some() {
        "bench-redis.yaml"
    } else {
        "bench-policy.yaml"
    });
    let store = redis
        .map(|url| format!("  redis_url: {url}\n"))
        .unwrap_or_default();
    std::fs::write(
        &path,
        format!(
            "tollgate:\n{store}  strategy: fixed_window\n  default: {{ limit: 1000, window: 1m }}\n  \
             resources:\n    user: {{ limit: 1000000000, window: 1h }}\n    hot: {{ limit: 10, window: 1h }}\n"
        ),
    )
    .unwrap();
    path
}

/// Starts the peer with `command` (`{redis}` replaced by `redis`).
fn start_peer(addr: SocketAddr, http: Option<SocketAddr>, command: &str, redis: Option<&str>) -> Server {
    let command = match redis {
        Some(url) => command.replace("{redis}", url),
        None => command.to_owned(),
    };
    let child = Command::new("sh")
        .arg("-c")
        .arg(format!("exec {command}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting the peer");
    Server {
        child,
        addr,
        metrics: None,
        http,
    }
    .wait_ready("the peer")
}

/// A client of one API over one connection (gRPC clients share theirs).
enum Client {
    Grpc(RateLimitServiceClient<Channel>),
    Http {
        send: SendRequest<Full<Bytes>>,
        host: String,
        /// Asks a peer's API (`/check_and_report`) rather than tollgate's.
        peer: bool,
    },
}

impl Client {
    /// A new HTTP/1.1 keep-alive connection to `addr`.
    async fn http(addr: SocketAddr, peer: bool) -> Self {
        let stream = TcpStream::connect(addr)
            .await
            .expect("connecting to the HTTP API");
        stream.set_nodelay(true).expect("TCP_NODELAY");
        let (send, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("an HTTP/1.1 connection");
        tokio::spawn(connection);
        Client::Http {
            send,
            host: addr.to_string(),
            peer,
        }
    }

    /// Asks for one decision on entry `i` of `workload`; whether it was
    /// over the limit.
    async fn over_limit(&mut self, workload: Workload, i: usize) -> bool {
        let (key, value) = match workload {
            Workload::Admit => ("user", format!("user-{i}")),
            Workload::Hot => ("hot", "abuser".to_owned()),
        };
        match self {
            Client::Grpc(client) => {
                let request = RateLimitRequest {
                    domain: "bench".to_owned(),
                    descriptors: vec![RateLimitDescriptor {
                        entries: vec![Entry {
                            key: key.to_owned(),
                            value,
                        }],
                        ..Default::default()
                    }],
                    hits_addend: 1,
                };
                let code = client
                    .should_rate_limit(request)
                    .await
                    .expect("a ShouldRateLimit answer")
                    .into_inner()
                    .overall_code;
                code == Code::OverLimit as i32
            }
            Client::Http { send, host, peer } => {
                let (path, body) = if *peer {
                    (
                        "/check_and_report",
                        format!(r#"{{"namespace":"bench","values":{{"{key}":"{value}"}},"delta":1}}"#),
                    )
                } else {
                    ("/v1/decide", format!(r#"{{"resource":"{key}","key":"{value}"}}"#))
                };
                let request = hyper::Request::post(path)
                    .header("host", host.as_str())
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(body)))
                    .unwrap();
                send.ready().await.expect("the connection stays open");
                let response = send.send_request(request).await.expect("an HTTP answer");
                let status = response.status();
                let body = response
                    .into_body()
                    .collect()
                    .await
                    .expect("the answer's body")
                    .to_bytes();
                match (status.as_u16(), *peer) {
                    (429, true) => true,
                    (200, true) => false,
                    (200, false) => {
                        let denied = br#""allowed":false"#;
                        body.windows(denied.len()).any(|w| w == denied)
                    }
                    _ => panic!("{path} answered {status}: {}", String::from_utf8_lossy(&body)),
                }
            }
        }
    }
}

/// Measures `server` on `api` under `workload` over `connections`
/// connections: `in_flight` tasks sharing them on gRPC, one task per
/// connection on HTTP.
async fn measure(
    server: &Server,
    api: Api,
    workload: Workload,
    connections: usize,
    settings: &Settings,
) -> Round {
    let mut clients = Vec::new();
    match api {
        Api::Grpc => {
            let channels = server.channels(connections).await;
            for t in 0..settings.in_flight {
                clients.push(Client::Grpc(RateLimitServiceClient::new(
                    channels[t % connections].clone(),
                )));
            }
        }
        Api::Http => {
            let addr = server.http.expect("the server's HTTP API");
            let limitador =
                server.metrics.is_none() && std::env::var("PEER_API").as_deref() != Ok("tollgate");
            for _ in 0..connections {
                clients.push(Client::http(addr, limitador).await);
            }
        }
    }
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::with_capacity(clients.len());
    for (t, mut client) in clients.into_iter().enumerate() {
        let (measuring, stop) = (measuring.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(200_000);
            let mut i = t * 7919;
            while !stop.load(Ordering::Relaxed) {
                i = (i + 1) % KEYS;
                let started = Instant::now();
                let over = client.over_limit(workload, i).await;
                let took = started.elapsed();
                if measuring.load(Ordering::Relaxed) {
                    assert_eq!(
                        over,
                        workload == Workload::Hot,
                        "{workload:?} on {api:?}: an unexpected answer"
                    );
                    latencies.push(took);
                }
            }
            latencies
        }));
    }
    tokio::time::sleep(settings.warm_up).await;
    let endpoint = match api {
        Api::Grpc => "ShouldRateLimit",
        Api::Http => "/v1/decide",
    };
    let buckets_before = server.metrics.map(|m| handler_buckets(m, endpoint));
    let cpu_before = server.cpu_seconds();
    let client_before = cpu_seconds("self").unwrap_or(f64::NAN);
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(settings.seconds)).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed();
    let cpu_after = server.cpu_seconds();
    let client_after = cpu_seconds("self").unwrap_or(f64::NAN);
    let buckets_after = server.metrics.map(|m| handler_buckets(m, endpoint));
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    let mut answered = Vec::with_capacity(tasks.len());
    for task in tasks {
        let latencies = task.await.expect("a client task");
        answered.push(latencies.len() as f64);
        all.extend(latencies);
    }
    let typical = median(answered.iter().copied()).max(1.0);
    let fewest = answered.iter().copied().fold(f64::INFINITY, f64::min);
    let most = answered.iter().copied().fold(0.0, f64::max);
    assert!(!all.is_empty(), "no request was answered while measuring");
    all.sort_unstable();
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    Round {
        per_second: all.len() as f64 / elapsed.as_secs_f64(),
        task_spread: (fewest / typical, most / typical),
        p50: at(0.50),
        p99: at(0.99),
        p999: at(0.999),
        cpu_us: (cpu_after - cpu_before) * 1e6 / all.len() as f64,
        client_cpu_us: (client_after - client_before) * 1e6 / all.len() as f64,
        handler: buckets_before.zip(buckets_after).and_then(|(before, after)| {
            Some((
                quantile_bound(&before, &after, 0.5)?,
                quantile_bound(&before, &after, 0.99)?,
            ))
        }),
    }
}

/// The cumulative buckets of the service's duration histogram of
/// `endpoint`, `(upper bound in seconds, count)`, read from its `/metrics`.
fn handler_buckets(addr: SocketAddr, endpoint: &str) -> Vec<(f64, f64)> {
    let endpoint = format!(r#"endpoint="{endpoint}""#);
    metrics_text(addr)
        .lines()
        .filter(|line| {
            line.starts_with("tollgate_server_request_duration_seconds_bucket{") && line.contains(&endpoint)
        })
        .filter_map(|line| {
            let le = line.split(r#"le=""#).nth(1)?.split('"').next()?;
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((bound, line.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// The upper bound, in µs, of the bucket holding quantile `q` of the
/// requests counted between two readings of the buckets.
fn quantile_bound(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> Option<f64> {
    let count = |buckets: &[(f64, f64)], bound: f64| {
        buckets.iter().find(|(b, _)| *b == bound).map_or(0.0, |(_, c)| *c)
    };
    let total = after.last()?.1 - count(before, f64::INFINITY);
    after
        .iter()
        .find(|(bound, c)| c - count(before, *bound) >= q * total)
        .map(|(bound, _)| bound * 1e6)
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn print_row(name: &str, rounds: &[Round]) {
    println!(
        "  {name:<9} {:>9.0}/s  p50 {:>7.0} µs  p99 {:>7.0} µs  p99.9 {:>7.0} µs  p99/p50 {:>5.1}  CPU {:>5.1} µs/request (client {:.1})",
        median(rounds.iter().map(|r| r.per_second)),
        median(rounds.iter().map(|r| us(r.p50))),
        median(rounds.iter().map(|r| us(r.p99))),
        median(rounds.iter().map(|r| us(r.p999))),
        median(rounds.iter().map(|r| us(r.p99) / us(r.p50))),
        median(rounds.iter().map(|r| r.cpu_us)),
        median(rounds.iter().map(|r| r.client_cpu_us)),
    );
    println!(
        "  {:<9} answered per caller: the fewest {:.2}×, the most {:.2}× the median caller's",
        "",
        median(rounds.iter().map(|r| r.task_spread.0)),
        median(rounds.iter().map(|r| r.task_spread.1)),
    );
    let handler: Vec<(f64, f64)> = rounds.iter().filter_map(|r| r.handler).collect();
    if !handler.is_empty() {
        println!(
            "  {:<9} in its handler: p50 ≤ {:.0} µs, p99 ≤ {:.0} µs (its histogram's buckets)",
            "",
            median(handler.iter().map(|h| h.0)),
            median(handler.iter().map(|h| h.1)),
        );
    }
}

fn print_ratios(service: &[Round], peer: &[Round]) {
    let ratio = |f: fn(&Round) -> f64| median(service.iter().zip(peer).map(|(s, p)| f(s) / f(p)));
    println!(
        "  tollgate / peer: throughput {:.2}×, p50 {:.2}×, p99 {:.2}×, p99.9 {:.2}×, CPU per request {:.2}×",
        ratio(|r| r.per_second),
        ratio(|r| us(r.p50)),
        ratio(|r| us(r.p99)),
        ratio(|r| us(r.p999)),
        ratio(|r| r.cpu_us),
    );
}

/// Measures every cell of one storage.
async fn storage_rows(settings: &Settings, storage: &str, configs: &[PathBuf], redis: Option<&RedisServer>) {
    let peer_command = settings.peer.as_ref().and_then(|peer| match redis {
        None => Some((peer, peer.memory.clone())),
        Some(_) => peer.redis.clone().map(|command| (peer, command)),
    });
    for &api in &settings.apis {
        for &workload in &settings.workloads {
            for &connections in &settings.connections {
                let (mut service, mut peer) = (Vec::new(), Vec::new());
                for _ in 0..settings.rounds {
                    if let Some(redis) = redis {
                        redis.cli(&["FLUSHALL"]);
                    }
                    let server = start_tollgate(configs);
                    service.push(measure(&server, api, workload, connections, settings).await);
                    drop(server);
                    let Some((to, command)) = &peer_command else {
                        continue;
                    };
                    if api == Api::Http && to.http.is_none() {
                        continue;
                    }
                    if let Some(redis) = redis {
                        redis.cli(&["FLUSHALL"]);
                    }
                    let url = redis.map(RedisServer::url);
                    let server = start_peer(to.addr, to.http, command, url.as_deref());
                    peer.push(measure(&server, api, workload, connections, settings).await);
                }
                let in_flight = match api {
                    Api::Grpc => format!("{} in flight", settings.in_flight),
                    Api::Http => "one in flight each".to_owned(),
                };
                println!(
                    "{storage}, {}, {}, {in_flight} over {connections} connection{}:",
                    match api {
                        Api::Grpc => "gRPC",
                        Api::Http => "HTTP",
                    },
                    workload.name(),
                    if connections == 1 { "" } else { "s" }
                );
                print_row("tollgate", &service);
                if !peer.is_empty() {
                    print_row("peer", &peer);
                    print_ratios(&service, &peer);
                }
            }
        }
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter is not used here.
    let settings = Settings::from_env();
    let only = std::env::var("ONLY").ok();
    let dir = tempfile::tempdir().expect("a directory for the configuration files");
    let envoy = envoy_file(dir.path());
    println!(
        "{} rounds of {} s after {} ms of warm-up, medians; a fresh server process per measurement",
        settings.rounds,
        settings.seconds,
        settings.warm_up.as_millis()
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        if only.as_deref().is_none_or(|o| o == "memory") {
            let policy =
                std::env::var_os("POLICY_FILE").map_or_else(|| policy_file(dir.path(), None), PathBuf::from);
            let configs = vec![policy, envoy.clone()];
            storage_rows(&settings, "memory", &configs, None).await;
        }
        if only.as_deref().is_none_or(|o| o == "redis") {
            if Command::new("redis-server").arg("--version").output().is_ok() {
                let redis = RedisServer::start();
                let configs = [policy_file(dir.path(), Some(&redis.url())), envoy.clone()];
                storage_rows(&settings, "Redis", &configs, Some(&redis)).await;
            } else {
                println!("redis-server not found: the Redis rows are skipped");
            }
        }
    });
}
