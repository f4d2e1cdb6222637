//! Decisions per second and latency of the decision service under 64
//! concurrent connections on loopback, for the JSON API and Envoy's gRPC
//! API, each against a minimal server of the same framework (axum, tonic)
//! that answers a constant: the cost of the service over the framework.
//!
//! ```text
//! cargo bench -p tollgate-server --bench decision_service
//! ```
//!
//! Each of the four servers is measured `ROUNDS` times (3 by default), the
//! service and its baseline in turn; each round runs `SECONDS` seconds (3)
//! after a warm-up of one second. The medians are printed. State is in
//! memory; every request is a decision on one of 10,000 keys under a limit
//! high enough that all are admitted (each is still counted).
//!
//! Then one over-limit key (every request on `hot=abuser`, limited to 10 an
//! hour) is measured against the admitted traffic on 10,000 keys, through
//! Envoy's API, in memory and (below) on Redis, where the store's calls per
//! decision on the hot key are counted from `INFO commandstats`.
//!
//! Then pairs of `POST /v1/acquire` and `POST /v1/release` (a permit of a
//! concurrency resource and its release, two requests) against `POST
//! /v1/decide` requests, both over the same 64 connections
//! (`PERMITS_ONLY=1` measures only these).
//!
//! Envoy's own load, few HTTP/2 connections with many requests in flight
//! on each, against a fresh server process and against another service,
//! is measured by tollgate-cli's `envoy_tail` bench.
//!
//! When `redis-server` is on the `PATH`, the bench then starts one and
//! measures the JSON API with state on it against the raw round trip: 64
//! tasks calling the same fixed-window script through `tollgate-redis`
//! directly, on one multiplexed connection as the service holds. Both
//! compete for the same cores with the clients and with `redis-server`, so
//! each round also reports the CPU time per decision of this process
//! (clients and server together) and of `redis-server`, read from
//! `/proc`: where a decision's time goes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tollgate_test_support::bench::env_number;
use tollgate_test_support::process_cpu::cpu_seconds;
use tollgate_test_support::redis::script_calls;

const CONNECTIONS: usize = 64;
const KEYS: usize = 10_000;

/// Sends request number `i` and waits for its answer.
type Sender = Box<dyn FnMut(usize) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send>;

/// One round's figures.
#[derive(Clone, Copy, Debug)]
struct Round {
    per_second: f64,
    p50: Duration,
    p99: Duration,
    /// CPU µs per decision of this process (clients and server).
    cpu_self: f64,
    /// CPU µs per decision of the watched `redis-server`, if any.
    cpu_redis: Option<f64>,
}

/// The CPU seconds of this process and of the watched `redis-server`.
fn cpu_now(redis: Option<u32>) -> (Option<f64>, Option<f64>) {
    (
        cpu_seconds("self"),
        redis.and_then(|pid| cpu_seconds(&pid.to_string())),
    )
}

/// Runs `CONNECTIONS` clients, each sending one request at a time, for
/// `seconds`, after a one-second warm-up; `redis` is the process id of a
/// `redis-server` whose CPU time is measured too.
async fn load<F, Fut>(seconds: u64, redis: Option<u32>, make: F) -> Round
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Sender> + Send,
{
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in 0..CONNECTIONS {
        let make = make.clone();
        let (measuring, stop) = (measuring.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut send = make(c).await;
            let mut latencies = Vec::with_capacity(100_000);
            let mut i = c * 7919;
            while !stop.load(Ordering::Relaxed) {
                i = (i + 1) % KEYS;
                let started = Instant::now();
                send(i).await;
                if measuring.load(Ordering::Relaxed) {
                    latencies.push(started.elapsed());
                }
            }
            latencies
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    let cpu_before = cpu_now(redis);
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed();
    let cpu_after = cpu_now(redis);
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all.sort_unstable();
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    let us_per_decision =
        |before: Option<f64>, after: Option<f64>| Some((after? - before?) * 1e6 / all.len() as f64);
    Round {
        per_second: all.len() as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
        cpu_self: us_per_decision(cpu_before.0, cpu_after.0).unwrap_or(f64::NAN),
        cpu_redis: us_per_decision(cpu_before.1, cpu_after.1),
    }
}

async fn http_round(addr: SocketAddr, seconds: u64, redis: Option<u32>) -> Round {
    load(seconds, redis, move |_| async move {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .build()
            .unwrap();
        let url = format!("http://{addr}/v1/decide");
        Box::new(move |i: usize| {
            let request = client
                .post(&url)
                .header("content-type", "application/json")
                .body(format!(r#"{{"resource": "api", "key": "user-{i}"}}"#));
            Box::pin(async move {
                let response = request.send().await.unwrap();
                assert_eq!(response.status(), 200);
                let _ = response.bytes().await.unwrap();
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        }) as Sender
    })
    .await
}

/// Pairs of `POST /v1/acquire` and `POST /v1/release` of its permit on a
/// concurrency resource with room for every one: each "decision" of the
/// round is a pair, two requests.
async fn permits_round(addr: SocketAddr, seconds: u64) -> Round {
    load(seconds, None, move |_| async move {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .build()
            .unwrap();
        let (acquire, release) = (
            format!("http://{addr}/v1/acquire"),
            format!("http://{addr}/v1/release"),
        );
        Box::new(move |i: usize| {
            let (client, acquire, release) = (client.clone(), acquire.clone(), release.clone());
            Box::pin(async move {
                let held = client
                    .post(&acquire)
                    .header("content-type", "application/json")
                    .body(format!(r#"{{"resource": "streams", "key": "user-{i}"}}"#))
                    .send()
                    .await
                    .unwrap()
                    .bytes()
                    .await
                    .unwrap();
                let held: serde_json::Value = serde_json::from_slice(&held).unwrap();
                let body = serde_json::json!({ "permit": held["permit"] }).to_string();
                let released = client
                    .post(&release)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .unwrap()
                    .bytes()
                    .await
                    .unwrap();
                let released: serde_json::Value = serde_json::from_slice(&released).unwrap();
                assert_eq!(released["released"], true, "{held} {released}");
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        }) as Sender
    })
    .await
}

async fn grpc_round(addr: SocketAddr, seconds: u64) -> Round {
    grpc_load(addr, seconds, None, false).await
}

/// Envoy's API on `addr`: admitted requests on 10,000 keys, or (`hot`) every
/// request on the one over-limit key `hot=abuser`; each task on a
/// connection of its own.
async fn grpc_load(addr: SocketAddr, seconds: u64, redis: Option<u32>, hot: bool) -> Round {
    let connect = move || async move {
        RateLimitServiceClient::connect(format!("http://{addr}"))
            .await
            .unwrap()
    };
    load(seconds, redis, move |_| async move {
        let client = connect().await;
        Box::new(move |i: usize| {
            let mut client = client.clone();
            let request = RateLimitRequest {
                domain: "bench".to_owned(),
                descriptors: vec![RateLimitDescriptor {
                    entries: vec![if hot {
                        Entry {
                            key: "hot".to_owned(),
                            value: "abuser".to_owned(),
                        }
                    } else {
                        Entry {
                            key: "user".to_owned(),
                            value: format!("user-{i}"),
                        }
                    }],
                    ..Default::default()
                }],
                hits_addend: 1,
            };
            Box::pin(async move {
                let response = client.should_rate_limit(request).await.unwrap().into_inner();
                if !hot {
                    assert_eq!(response.overall_code, Code::Ok as i32);
                }
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        }) as Sender
    })
    .await
}

/// The constant gRPC service.
struct Constant;

#[tonic::async_trait]
impl RateLimitService for Constant {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let descriptors = request.into_inner().descriptors.len();
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: vec![Default::default(); descriptors],
            ..Default::default()
        }))
    }
}

/// The constant JSON server.
async fn constant_http() -> SocketAddr {
    use axum::routing::post;
    let app = axum::Router::new().route(
        "/v1/decide",
        post(|body: axum::body::Bytes| async move {
            let _ = body;
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                r#"{"allowed":true,"limit":1000000000,"remaining":999999999,"reset_ms":3600000,"retry_after_ms":null,"policy":"api","bound_by":0,"strategy":"fixed_window","window_ms":3600000,"fail_open":false,"fallback":false}"#,
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

async fn constant_grpc() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(RateLimitServiceServer::new(Constant))
            .serve_with_incoming(incoming)
            .await
            .unwrap()
    });
    addr
}

/// A throwaway `redis-server` on a free loopback port, stopped on drop.
struct Redis {
    child: std::process::Child,
    url: String,
}

impl Redis {
    /// Starts one, or `None` when `redis-server` cannot be run.
    fn start() -> Option<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Self {
            child,
            url: format!("redis://127.0.0.1:{port}"),
        })
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One over-limit key against admitted traffic on 10,000 keys, through
/// Envoy's API in the same run, `rounds` times each; on Redis also the
/// store's calls per decision on the hot key.
async fn hot_key_rounds(
    name: &str,
    grpc: SocketAddr,
    redis: Option<(u32, u16)>,
    rounds: usize,
    seconds: u64,
) {
    let (mut admitted, mut hot, mut calls) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        admitted.push(grpc_load(grpc, seconds, redis.map(|r| r.0), false).await);
        let before = redis.map(|r| script_calls(r.1));
        let round = grpc_load(grpc, seconds, redis.map(|r| r.0), true).await;
        if let (Some(before), Some((_, port))) = (before, redis) {
            // The warm-up second's requests are not counted in the round's.
            let decisions = round.per_second * (seconds as f64 + 1.0);
            calls.push((script_calls(port) - before) as f64 / decisions);
        }
        hot.push(round);
    }
    println!("{name}: one over-limit key against admitted requests on {KEYS} keys, Envoy's API:");
    report_against("hot", "admitted", &hot, &admitted);
    if !calls.is_empty() {
        calls.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "hot   store calls per decision on the hot key: {:.4} (rounds: {})",
            calls[calls.len() / 2],
            calls
                .iter()
                .map(|c| format!("{c:.4}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

/// The raw round trip: `CONNECTIONS` tasks deciding through the library
/// on one backend (one multiplexed connection, as the service holds).
async fn library_round(url: &str, seconds: u64, redis: Option<u32>) -> Round {
    let backend = tollgate_redis::RedisBackend::connect(url).await.unwrap();
    let limiter = Arc::new(
        tollgate::Limiter::builder()
            .strategy(tollgate::Strategy::FixedWindow)
            .limit(1_000_000_000)
            .window(Duration::from_secs(3_600))
            .backend(backend)
            .build()
            .unwrap(),
    );
    load(seconds, redis, move |_| {
        let limiter = limiter.clone();
        async move {
            Box::new(move |i: usize| {
                let limiter = limiter.clone();
                Box::pin(async move {
                    assert!(limiter.allow(format!("user-{i}")).await.unwrap().allowed);
                }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
            }) as Sender
        }
    })
    .await
}

/// The JSON API on Redis against the raw round trip.
async fn redis_rounds(dir: &std::path::Path, rounds: usize, seconds: u64) {
    let Some(redis) = Redis::start() else {
        println!("redis-server not found: the Redis figures are skipped");
        return;
    };
    let policies = dir.join("redis.yaml");
    std::fs::write(
        &policies,
        format!(
            "tollgate:\n  redis_url: {}\n  default: {{ limit: 1000, window: 1m }}\n  resources:\n    api: {{ limit: 1000000000, window: 1h, strategy: fixed_window }}\n",
            redis.url
        ),
    )
    .unwrap();
    let server = tollgate_server::Server::builder()
        .config(&policies)
        .config(envoy_file(dir))
        .listen("127.0.0.1:0".parse().unwrap())
        .grpc_listen("127.0.0.1:0".parse().unwrap())
        .watch_files(false)
        .reload_on_sighup(false)
        .bind()
        .await
        .unwrap();
    let (http, grpc) = (server.local_addr(), server.grpc_local_addr().unwrap());
    tokio::spawn(server.run(std::future::pending()));
    let (mut service, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let pid = Some(redis.child.id());
        service.push(http_round(http, seconds, pid).await);
        raw.push(library_round(&redis.url, seconds, pid).await);
    }
    println!("on Redis, against {CONNECTIONS} tasks calling the script through tollgate-redis:");
    report_against("JSON", "library", &service, &raw);
    let port = redis.url.rsplit(':').next().unwrap().parse().unwrap();
    hot_key_rounds("on Redis", grpc, Some((redis.child.id(), port)), rounds, seconds).await;
}

/// The Envoy file of the bench, written into `dir`: `user` admits every
/// request, `hot` allows 10 an hour.
/// Permits (an acquire and its release) against decisions, both over the
/// JSON API, in turn.
async fn permits_rounds(http: SocketAddr, rounds: usize, seconds: u64) {
    let (mut pairs, mut decisions) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        pairs.push(permits_round(http, seconds).await);
        decisions.push(http_round(http, seconds, None).await);
    }
    report_against("pairs", "decide", &pairs, &decisions);
}

fn envoy_file(dir: &std::path::Path) -> std::path::PathBuf {
    let envoy = dir.join("e.yaml");
    std::fs::write(
        &envoy,
        "domain: bench\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 1000000000 }\n  - key: hot\n    rate_limit: { unit: hour, requests_per_unit: 10 }\n",
    )
    .unwrap();
    envoy
}

fn median(rounds: &[Round], f: impl Fn(&Round) -> f64) -> f64 {
    let mut v: Vec<f64> = rounds.iter().map(f).collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn report(name: &str, service: &[Round], baseline: &[Round]) {
    report_against(name, "constant", service, baseline);
}

fn report_against(name: &str, baseline_name: &str, service: &[Round], baseline: &[Round]) {
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    for (label, rounds) in [("service", service), (baseline_name, baseline)] {
        let redis = match rounds.iter().all(|r| r.cpu_redis.is_some()) {
            true => format!(
                " + redis-server {:>5.1}",
                median(rounds, |r| r.cpu_redis.unwrap_or(f64::NAN))
            ),
            false => String::new(),
        };
        println!(
            "{name:5} {label:8}  {:>9.0} decisions/s  p50 {:>6.0} µs  p99 {:>6.0} µs  CPU µs/decision: this process {:>5.1}{redis}   (rounds: {})",
            median(rounds, |r| r.per_second),
            median(rounds, |r| us(r.p50)),
            median(rounds, |r| us(r.p99)),
            median(rounds, |r| r.cpu_self),
            rounds
                .iter()
                .map(|r| format!("{:.0}", r.per_second))
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    println!(
        "{name:5} ratio     {:.2}× the {baseline_name} throughput",
        median(service, |r| r.per_second) / median(baseline, |r| r.per_second)
    );
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        println!("decision_service: bench");
        return;
    }
    let seconds = env_number("SECONDS", 3);
    let rounds = env_number("ROUNDS", 3) as usize;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let policies = dir.path().join("p.yaml");
        std::fs::write(
            &policies,
            "tollgate:\n  default: { limit: 1000, window: 1m }\n  resources:\n    api: { limit: 1000000000, window: 1h, strategy: fixed_window }\n    streams: { strategy: concurrency, limit: 1000000 }\n",
        )
        .unwrap();
        let envoy = envoy_file(dir.path());
        let server = tollgate_server::Server::builder()
            .config(&policies)
            .config(&envoy)
            .listen("127.0.0.1:0".parse().unwrap())
            .grpc_listen("127.0.0.1:0".parse().unwrap())
            .watch_files(false)
            .reload_on_sighup(false)
            .bind()
            .await
            .unwrap();
        let (http, grpc) = (server.local_addr(), server.grpc_local_addr().unwrap());
        tokio::spawn(server.run(std::future::pending()));
        if std::env::var_os("PERMITS_ONLY").is_some() {
            return permits_rounds(http, rounds, seconds).await;
        }
        let (constant_http, constant_grpc) = (constant_http().await, constant_grpc().await);
        let (mut hs, mut hc, mut gs, mut gc) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            hs.push(http_round(http, seconds, None).await);
            hc.push(http_round(constant_http, seconds, None).await);
            gs.push(grpc_round(grpc, seconds).await);
            gc.push(grpc_round(constant_grpc, seconds).await);
        }
        println!("{CONNECTIONS} connections, {rounds} rounds of {seconds} s each, medians:");
        report("JSON", &hs, &hc);
        report("gRPC", &gs, &gc);
        permits_rounds(http, rounds, seconds).await;
        hot_key_rounds("in memory", grpc, None, rounds, seconds).await;
        redis_rounds(dir.path(), rounds, seconds).await;
    });
}
