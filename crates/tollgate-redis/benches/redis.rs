//! The Redis backend against `redis-benchmark` calling the same library
//! function with `FCALL` on the same server, in the same run.
//!
//! ```sh
//! cargo bench -p tollgate-redis --bench redis
//! ```
//!
//! The benchmark starts its own `redis-server` on a free port (no
//! persistence), then for each script (fixed window, sliding window, the
//! bucket script shared by the token and leaky buckets, and the compound
//! script deciding a token bucket of 1 s and a sliding window of 1 h on one
//! key in one call):
//!
//! 1. one caller, sequential: criterion times `limiter.allow(key)` on a
//!    current-thread runtime; `redis-benchmark -c 1` sends
//!    `FCALL <function> <numkeys> <keys> <args>` with the arguments the
//!    backend sends;
//! 2. 64 concurrent callers in one process sharing the backend's single
//!    multiplexed connection: criterion times batches of decisions spread
//!    over 64 tasks (decisions per second), a second pass records every
//!    decision's latency for p50 and p99; `redis-benchmark -c 64` gives
//!    its requests per second and latency percentiles, and
//!    `redis-benchmark -c 1 -P 64` (one connection, 64 requests pipelined,
//!    the way the backend's connection carries them) the server's ceiling.
//!
//! It prints the `redis-benchmark` commands it runs and a table at the end.
//! Criterion's arguments work as usual (e.g. a filter: `-- sequential`), but
//! the table needs both groups.

use std::hint::black_box;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::Criterion;
use tokio::runtime::Runtime;
use tollgate::backend::{Backend, Scope};
use tollgate::{Limit, Limiter, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::redis::RedisServer;

/// Concurrent callers in the second group.
const CALLERS: usize = 64;
/// A limit every decision passes, so both sides run the admitting path
/// (read, compute, write and set the expiry): a million per window.
const LIMIT: u64 = 1_000_000;
const WINDOW: Duration = Duration::from_secs(1);

/// The policies benchmarked, by name: one per single-limit script, then a
/// compound one of a token bucket (a million a second) and a sliding
/// window (a million an hour, near the largest that the scripts compute
/// exactly, and more than a run decides).
fn policies() -> Vec<(String, Policy)> {
    let single = [
        Strategy::FixedWindow,
        Strategy::SlidingWindow,
        Strategy::TokenBucket,
    ]
    .map(|s| {
        (
            s.to_string(),
            Policy::new(s, LIMIT, WINDOW).expect("valid policy"),
        )
    });
    let compound = Policy::compound([
        Limit::new(Strategy::TokenBucket, LIMIT, WINDOW).expect("valid limit"),
        Limit::new(Strategy::SlidingWindow, LIMIT, Duration::from_secs(3_600)).expect("valid limit"),
    ])
    .expect("valid policy");
    let mut policies = single.to_vec();
    policies.push(("token_bucket 1s + sliding_window 1h".to_owned(), compound));
    policies
}

/// The `FCALL` arguments after the keys that the backend sends for
/// `policy` (see `scripts/single.lua` and `scripts/compound.lua`): now
/// (empty: the server's clock), cost, grace in ms, then L, W and T in
/// microseconds, each preceded by its strategy's function for a compound
/// policy.
fn script_args(policy: &Policy) -> Vec<String> {
    let grace = tollgate_redis::DEFAULT_EXPIRY_GRACE.as_millis();
    let mut args = vec![String::new(), "1".to_owned(), grace.to_string()];
    for limit in policy.limits() {
        if policy.is_compound() {
            args.push(
                match limit.strategy() {
                    Strategy::FixedWindow => "fixed_window",
                    Strategy::SlidingWindow => "sliding_window",
                    Strategy::TokenBucket | Strategy::LeakyBucket => "gcra",
                    Strategy::Concurrency => unreachable!("the benches' policies are rates"),
                }
                .to_owned(),
            );
        }
        let rate = limit.rate_micros();
        args.extend([rate.limit, rate.window, rate.interval].map(|x| x.to_string()));
    }
    args
}

/// Per-iteration times of criterion's samples, in the order taken.
#[derive(Clone, Default)]
struct Samples(Arc<Mutex<Vec<f64>>>);

impl Samples {
    fn record(&self, iters: u64, elapsed: Duration) -> Duration {
        self.0
            .lock()
            .unwrap()
            .push(elapsed.as_nanos() as f64 / iters as f64);
        elapsed
    }

    /// The median of the last `n` samples (criterion's measurement phase
    /// follows its warm-up), in nanoseconds per iteration.
    fn median_of_last(&self, n: usize) -> f64 {
        let all = self.0.lock().unwrap();
        let mut last: Vec<f64> = all[all.len().saturating_sub(n)..].to_vec();
        last.sort_by(f64::total_cmp);
        // NaN when criterion's filter skipped the benchmark.
        last.get(last.len() / 2).copied().unwrap_or(f64::NAN)
    }
}

/// What `redis-benchmark --csv` reported for one test.
#[derive(Clone, Debug, Default)]
struct RedisBenchmark {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
}

/// The function call `redis-benchmark` repeats: its name, keys and
/// arguments.
struct Call {
    function: String,
    keys: Vec<String>,
    args: Vec<String>,
}

/// Runs `redis-benchmark` with `clients` connections, each pipelining
/// `pipeline` requests, and `requests` requests of `FCALL function numkeys
/// keys... args...` against the server; prints the command.
fn redis_benchmark(
    server: &RedisServer,
    clients: usize,
    pipeline: usize,
    requests: usize,
    call: &Call,
) -> RedisBenchmark {
    let port = server.port().to_string();
    let (clients, pipeline, requests) = (clients.to_string(), pipeline.to_string(), requests.to_string());
    let mut args: Vec<String> = [
        "-h",
        "127.0.0.1",
        "-p",
        &port,
        "-c",
        &clients,
        "-P",
        &pipeline,
        "-n",
        &requests,
        "--csv",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend([
        "FCALL".to_owned(),
        call.function.clone(),
        call.keys.len().to_string(),
    ]);
    args.extend(call.keys.iter().cloned());
    args.extend(call.args.iter().cloned());
    let shown: Vec<String> = args
        .iter()
        .map(|a| if a.is_empty() { "''".to_owned() } else { a.clone() })
        .collect();
    println!("$ redis-benchmark {}", shown.join(" "));
    let out = Command::new("redis-benchmark")
        .args(&args)
        .output()
        .expect("redis-benchmark must be installed (apt-get install redis-tools)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "redis-benchmark failed: {text}");
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",
    // "p95_latency_ms","p99_latency_ms","max_latency_ms"
    let row = text.lines().last().expect("a CSV row");
    let fields: Vec<f64> = row
        .split(',')
        .skip(1)
        .map(|f| f.trim_matches('"').parse().expect("a number"))
        .collect();
    assert!(fields.len() >= 7, "unexpected redis-benchmark output: {text}");
    RedisBenchmark {
        rps: fields[0],
        p50_ms: fields[3],
        p99_ms: fields[5],
    }
}

fn limiter(backend: &RedisBackend, policy: Policy) -> Arc<Limiter<RedisBackend>> {
    Arc::new(
        Limiter::builder()
            .backend(backend.clone())
            .policy(policy)
            .resource("bench")
            .build()
            .expect("valid policy"),
    )
}

/// Runs `iters` decisions spread over `CALLERS` tasks; returns the time taken.
async fn concurrent(limiter: &Arc<Limiter<RedisBackend>>, iters: u64) -> Duration {
    let start = Instant::now();
    let tasks: Vec<_> = (0..CALLERS as u64)
        .map(|i| {
            let limiter = limiter.clone();
            let n = iters / CALLERS as u64 + u64::from(i < iters % CALLERS as u64);
            tokio::spawn(async move {
                for _ in 0..n {
                    black_box(limiter.allow("hot-64").await.expect("decision"));
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    start.elapsed()
}

/// Each of the `CALLERS` tasks makes `per_task` decisions, timing each;
/// returns p50 and p99 in microseconds.
async fn latencies(limiter: &Arc<Limiter<RedisBackend>>, per_task: usize) -> (f64, f64) {
    let tasks: Vec<_> = (0..CALLERS)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut own = Vec::with_capacity(per_task);
                for _ in 0..per_task {
                    let start = Instant::now();
                    black_box(limiter.allow("hot-64").await.expect("decision"));
                    own.push(start.elapsed().as_nanos() as u64);
                }
                own
            })
        })
        .collect();
    let mut all = Vec::with_capacity(CALLERS * per_task);
    for task in tasks {
        all.extend(task.await.expect("task"));
    }
    all.sort_unstable();
    let at = |q: f64| all[((all.len() as f64 * q).ceil() as usize).min(all.len()) - 1] as f64 / 1_000.0;
    (at(0.50), at(0.99))
}

struct Row {
    name: String,
    sequential_ns: f64,
    sequential_rb: RedisBenchmark,
    concurrent_ns: f64,
    p50_us: f64,
    p99_us: f64,
    concurrent_rb: RedisBenchmark,
    pipelined_rb: RedisBenchmark,
}

fn main() {
    let server = RedisServer::start();
    let version = server.cli(&["INFO", "server"]);
    let version = version
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned();
    let sample_size = 30;
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .sample_size(sample_size)
        .configure_from_args();

    // One thread drives both the caller and the connection, as
    // redis-benchmark's single event loop does.
    let sequential_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The concurrent callers share one thread as well: on a 2-vCPU machine
    // the other core belongs to redis-server.
    let concurrent_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let connect = |rt: &Runtime| {
        rt.block_on(
            RedisBackend::builder()
                .timeout(Duration::from_secs(5))
                .connect(&server.url()),
        )
        .expect("connect to the benchmark server")
    };
    let sequential_backend = connect(&sequential_rt);
    let concurrent_backend = connect(&concurrent_rt);

    let mut rows = Vec::new();
    for (name, policy) in policies() {
        let seq_limiter = limiter(&sequential_backend, policy);
        // The binding the limiter decides through, bound again for the
        // names it gives the server.
        let binding = sequential_backend
            .bind(&Scope {
                prefix: Limiter::DEFAULT_KEY_PREFIX,
                resource: "bench",
                policy: &policy,
            })
            .expect("valid policy");
        let function = binding.function_name().to_owned();
        // The first decision loads the function library on the server;
        // redis-benchmark then calls that very function.
        sequential_rt.block_on(seq_limiter.allow("hot")).unwrap();
        assert!(
            sequential_backend.uses_functions(),
            "the backend calls {function}"
        );
        assert!(
            server.cli(&["FUNCTION", "LIST"]).contains(&function),
            "the library holds {function}"
        );

        let seq = Samples::default();
        let label = if policy.is_compound() { "compound" } else { &name };
        c.bench_function(&format!("redis_sequential/{label}"), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(sequential_rt.block_on(seq_limiter.allow("hot")).unwrap());
                }
                seq.record(iters, start.elapsed())
            })
        });
        let rb_key = format!("redis-benchmark:{label}");
        let call = Call {
            function,
            keys: binding
                .state_keys(rb_key.as_bytes())
                .into_iter()
                .map(|k| String::from_utf8(k).expect("a text key"))
                .collect(),
            args: script_args(&policy),
        };
        let sequential_rb = redis_benchmark(&server, 1, 1, 50_000, &call);

        // The concurrent callers decide on a key of their own, so no limit
        // runs out over the whole run.
        let con_limiter = limiter(&concurrent_backend, policy);
        let con = Samples::default();
        c.bench_function(&format!("redis_concurrent_64/{label}"), |b| {
            b.iter_custom(|iters| con.record(iters, concurrent_rt.block_on(concurrent(&con_limiter, iters))))
        });
        let (p50_us, p99_us) = concurrent_rt.block_on(latencies(&con_limiter, 2_000));
        let concurrent_rb = redis_benchmark(&server, CALLERS, 1, 200_000, &call);
        // The server's ceiling on one connection: 64 requests in flight,
        // pipelined, as the backend's multiplexed connection carries them.
        let pipelined_rb = redis_benchmark(&server, 1, CALLERS, 200_000, &call);
        // Every decision was admitted (the admitting path was measured).
        for (limiter, rt, key) in [
            (&seq_limiter, &sequential_rt, "hot"),
            (&con_limiter, &concurrent_rt, "hot-64"),
            (&seq_limiter, &sequential_rt, rb_key.as_str()),
        ] {
            let peek = rt.block_on(limiter.allow_n(key, 0)).unwrap();
            assert!(peek.allowed, "{name}: the limit ran out on {key}: {peek:?}");
        }

        rows.push(Row {
            name,
            sequential_ns: seq.median_of_last(sample_size),
            sequential_rb,
            concurrent_ns: con.median_of_last(sample_size),
            p50_us,
            p99_us,
            concurrent_rb,
            pipelined_rb,
        });
    }
    c.final_summary();

    println!();
    println!("redis-server {version} on 127.0.0.1; tollgate: one multiplexed connection, redis-benchmark: one connection per client");
    println!();
    println!("| one caller, sequential | tollgate µs/decision | redis-benchmark -c 1 µs/call | ratio (target ≤ 1.15×) |");
    println!("| --- | --- | --- | --- |");
    for r in &rows {
        let rb_us = 1e6 / r.sequential_rb.rps;
        let us = r.sequential_ns / 1e3;
        println!("| {} | {us:.1} | {rb_us:.1} | {:.2}× |", r.name, us / rb_us);
    }
    println!();
    println!(
        "| {CALLERS} concurrent callers | tollgate decisions/s | redis-benchmark -c {CALLERS} calls/s | ratio (target ≥ 1×) | tollgate p50 / p99 µs | redis-benchmark p50 / p99 µs | redis-benchmark -c 1 -P {CALLERS} calls/s |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for r in &rows {
        let per_s = 1e9 / r.concurrent_ns;
        let rb = &r.concurrent_rb;
        println!(
            "| {} | {per_s:.0} | {:.0} | {:.2}× | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} |",
            r.name,
            rb.rps,
            per_s / rb.rps,
            r.p50_us,
            r.p99_us,
            rb.p50_ms * 1e3,
            rb.p99_ms * 1e3,
            r.pipelined_rb.rps
        );
    }
}
