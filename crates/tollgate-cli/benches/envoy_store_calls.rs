//! What a fleet's Envoy traffic costs Redis: two `tollgate serve` on one
//! Redis, and the rate-limit calls each decision makes there.
//!
//! ```text
//! cargo bench -p tollgate-cli --bench envoy_store_calls
//! ```
//!
//! Needs `redis-server` on the `PATH` (a server of the bench's own). Each
//! round starts both services fresh on a flushed Redis with its counters
//! reset, keeps `IN_FLIGHT` (64) `ShouldRateLimit` requests in flight, half
//! on each service over `CONNECTIONS` (2) HTTP/2 connections each (as
//! Envoy opens them). After `WARM_UP_MS` (500) it counts for `SECONDS` (3):
//! decisions and admissions per second, Redis rate-limit calls per
//! decision and per admission (`INFO commandstats`), the CPU µs per
//! decision of both services, of Redis and of the client (this process, on
//! the same cores), and the share of decisions made from a lease
//! (`tollgate_lease_decisions_total` on the services' `/metrics`).
//!
//! Two comparisons, `ROUNDS` (3) each, alternating their two sides, medians
//! printed with the median of each round's ratio:
//!
//! - **lease**: every request for the descriptor `hot=key`, limited to 10⁹
//!   a minute (never denied), without and with the policy file's
//!   file-wide `lease` (`LEASE`, default `{ max_units: 64, max_age: 100ms }`);
//! - **flood**: every request for `flood=key`, limited to 10 a second
//!   (nearly every request denied; the deny cache is on, as it is by
//!   default on Redis), alone and followed by a second descriptor
//!   `user=…` that never denies.

mod support;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use support::{metrics_text, start_tollgate, Server};
use tollgate_test_support::bench::{env_number, median};
use tollgate_test_support::process_cpu::cpu_seconds;
use tollgate_test_support::redis::RedisServer;

/// One round's figures.
struct Round {
    per_second: f64,
    /// Requests admitted per second.
    admitted: f64,
    /// Redis rate-limit calls per decision.
    calls: f64,
    /// Redis rate-limit calls per admitted request.
    calls_per_admission: f64,
    /// Both services' CPU µs per decision.
    cpu_us: f64,
    /// Redis's CPU µs per decision.
    redis_us: f64,
    /// The client's (this process's) CPU µs per decision.
    client_us: f64,
    /// The share of decisions made from a lease.
    leased: f64,
}

/// The policy file: Envoy's state on `redis`, with `lease` file-wide.
fn policy_file(dir: &Path, redis: &str, lease: Option<&str>) -> PathBuf {
    let path = dir.join(if lease.is_some() {
        "lease.yaml"
    } else {
        "plain.yaml"
    });
    let lease = lease.map_or(String::new(), |l| format!("  lease: {l}\n"));
    std::fs::write(
        &path,
        format!("tollgate:\n  redis_url: {redis}\n{lease}  default: {{ limit: 1000, window: 1m }}\n"),
    )
    .unwrap();
    path
}

/// The decisions `server` made from a lease so far.
fn leased_decisions(server: &Server) -> f64 {
    let text = metrics_text(server.metrics.expect("tollgate serves /metrics"));
    text.lines()
        .filter(|line| line.starts_with("tollgate_lease_decisions_total"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The Envoy configuration: `hot` and `user` never denied, `flood` 10 a
/// second.
fn envoy_file(dir: &Path) -> PathBuf {
    let path = dir.join("bench-envoy.yaml");
    std::fs::write(
        &path,
        "domain: bench\ndescriptors:\n  - key: hot\n    rate_limit: { unit: minute, requests_per_unit: 1000000000 }\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 1000000000 }\n  - key: flood\n    rate_limit: { unit: second, requests_per_unit: 10 }\n",
    )
    .unwrap();
    path
}

/// What every request asks about.
#[derive(Clone, Copy, Debug)]
enum Workload {
    /// `hot=key`.
    Hot,
    /// `flood=key`, then `user=…` when `true`.
    Flood(bool),
}

/// The descriptors of request `i` of `workload`.
fn descriptors(workload: Workload, i: usize) -> Vec<RateLimitDescriptor> {
    let one = |key: &str, value: String| RateLimitDescriptor {
        entries: vec![Entry {
            key: key.to_owned(),
            value,
        }],
        ..Default::default()
    };
    match workload {
        Workload::Hot => vec![one("hot", "key".to_owned())],
        Workload::Flood(false) => vec![one("flood", "key".to_owned())],
        Workload::Flood(true) => vec![
            one("flood", "key".to_owned()),
            one("user", format!("user-{}", i % 1000)),
        ],
    }
}

/// One round of `workload` on two fresh services with `configs`.
async fn measure(
    redis: &RedisServer,
    configs: &[PathBuf],
    workload: Workload,
    (in_flight, connections): (usize, usize),
) -> Round {
    redis.cli(&["FLUSHALL"]);
    redis.cli(&["CONFIG", "RESETSTAT"]);
    let servers = [start_tollgate(configs), start_tollgate(configs)];
    let mut channels = Vec::new();
    for server in &servers {
        channels.extend(server.channels(connections).await);
    }
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let decided = Arc::new(AtomicU64::new(0));
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(in_flight);
    for t in 0..in_flight {
        let mut client = RateLimitServiceClient::new(channels[t % channels.len()].clone());
        let (measuring, stop) = (measuring.clone(), stop.clone());
        let (decided, admitted) = (decided.clone(), admitted.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = t * 7919;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let request = RateLimitRequest {
                    domain: "bench".to_owned(),
                    descriptors: descriptors(workload, i),
                    hits_addend: 1,
                };
                let response = client
                    .should_rate_limit(request)
                    .await
                    .expect("a ShouldRateLimit answer")
                    .into_inner();
                let ok = response.overall_code == Code::Ok as i32;
                assert!(
                    ok || matches!(workload, Workload::Flood(_)),
                    "the hot key is never denied"
                );
                if measuring.load(Ordering::Relaxed) {
                    decided.fetch_add(1, Ordering::Relaxed);
                    admitted.fetch_add(u64::from(ok), Ordering::Relaxed);
                }
            }
        }));
    }
    let warm_up = Duration::from_millis(env_number("WARM_UP_MS", 500));
    let seconds = env_number("SECONDS", 3u64);
    tokio::time::sleep(warm_up).await;
    let calls_before = redis.script_calls();
    let cpu_before: f64 = servers.iter().map(Server::cpu_seconds).sum();
    let redis_before = redis_cpu(redis);
    let client_before = cpu_seconds("self").expect("this process's CPU time");
    let leased_before: f64 = servers.iter().map(leased_decisions).sum();
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    let calls = (redis.script_calls() - calls_before) as f64;
    let cpu: f64 = servers.iter().map(Server::cpu_seconds).sum::<f64>() - cpu_before;
    let redis_used = redis_cpu(redis) - redis_before;
    let client = cpu_seconds("self").expect("this process's CPU time") - client_before;
    let leased: f64 = servers.iter().map(leased_decisions).sum::<f64>() - leased_before;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("a client task");
    }
    let decided = decided.load(Ordering::Relaxed) as f64;
    let admitted = admitted.load(Ordering::Relaxed) as f64;
    assert!(decided > 0.0, "no request was answered while measuring");
    Round {
        per_second: decided / elapsed,
        admitted: admitted / elapsed,
        calls: calls / decided,
        calls_per_admission: calls / admitted,
        cpu_us: cpu * 1e6 / decided,
        redis_us: redis_used * 1e6 / decided,
        client_us: client * 1e6 / decided,
        leased: leased / decided,
    }
}

/// Redis's CPU time (user and system) so far, in seconds.
fn redis_cpu(redis: &RedisServer) -> f64 {
    cpu_seconds(&redis.pid().to_string()).expect("Redis's CPU time, from /proc")
}

fn print_row(name: &str, rounds: &[Round]) {
    println!(
        "{name:<22} {:>11.0} {:>10.1} {:>9.4} {:>9.3} {:>11.1} {:>8.1} {:>9.1} {:>7.3}",
        median(rounds.iter().map(|r| r.per_second)),
        median(rounds.iter().map(|r| r.admitted)),
        median(rounds.iter().map(|r| r.calls)),
        median(rounds.iter().map(|r| r.calls_per_admission)),
        median(rounds.iter().map(|r| r.cpu_us)),
        median(rounds.iter().map(|r| r.redis_us)),
        median(rounds.iter().map(|r| r.client_us)),
        median(rounds.iter().map(|r| r.leased)),
    );
}

/// One side of a comparison: its name, the files its services load, and
/// its requests.
type Side<'a> = (&'a str, &'a [PathBuf], Workload);

/// Measures `a` and `b` in alternation, prints both, and the median of each
/// round's ratio of `figure`, `b` over `a`.
fn compare(
    runtime: &tokio::runtime::Runtime,
    redis: &RedisServer,
    [a, b]: [Side<'_>; 2],
    figure: (&str, fn(&Round) -> f64),
) {
    let rounds = env_number("ROUNDS", 3usize);
    let shape = (
        env_number("IN_FLIGHT", 64usize),
        env_number("CONNECTIONS", 2usize),
    );
    let (mut first, mut second) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        first.push(runtime.block_on(measure(redis, a.1, a.2, shape)));
        second.push(runtime.block_on(measure(redis, b.1, b.2, shape)));
    }
    print_row(a.0, &first);
    print_row(b.0, &second);
    let ratios: Vec<f64> = second
        .iter()
        .zip(&first)
        .map(|(s, f)| (figure.1)(s) / (figure.1)(f))
        .collect();
    println!(
        "  {}, {} / {}: {:.2}x (rounds {})",
        figure.0,
        b.0,
        a.0,
        median(ratios.iter().copied()),
        ratios
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

fn main() {
    let lease = std::env::var("LEASE").unwrap_or_else(|_| "{ max_units: 64, max_age: 100ms }".to_owned());
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let envoy = envoy_file(dir.path());
    let plain = vec![policy_file(dir.path(), &redis.url(), None), envoy.clone()];
    let leasing = vec![policy_file(dir.path(), &redis.url(), Some(&lease)), envoy];
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "two services, one Redis: {} requests in flight over {} connections per service, medians of {} rounds",
        env_number("IN_FLIGHT", 64usize),
        env_number("CONNECTIONS", 2usize),
        env_number("ROUNDS", 3usize)
    );
    println!(
        "calls: Redis rate-limit calls per decision and per admission; µs: CPU per decision of both \
         services, Redis and the client; leased: the share of decisions made from a lease"
    );
    println!(
        "{:<22} {:>11} {:>10} {:>9} {:>9} {:>11} {:>8} {:>9} {:>7}",
        "workload",
        "decisions/s",
        "admitted/s",
        "calls/dec",
        "calls/adm",
        "services µs",
        "Redis µs",
        "client µs",
        "leased"
    );
    compare(
        &runtime,
        &redis,
        [
            ("hot, without lease", &plain, Workload::Hot),
            ("hot, with lease", &leasing, Workload::Hot),
        ],
        ("throughput", |r| r.per_second),
    );
    println!("  lease: {lease}");
    compare(
        &runtime,
        &redis,
        [
            ("flood, one descriptor", &plain, Workload::Flood(false)),
            ("flood, two descriptors", &plain, Workload::Flood(true)),
        ],
        ("calls per admission", |r| r.calls_per_admission),
    );
}
