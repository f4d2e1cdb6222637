//! Batched calls against one call per decision: 64 callers deciding
//! admitted requests over 10,000 keys on one Redis, with
//! [`batch_calls`](tollgate_redis::RedisBackendBuilder::batch_calls) on (the
//! default) and off, and batched with leases (`Lease::new(64, 100ms)`).
//!
//! ```sh
//! cargo bench -p tollgate-redis --bench batching
//! ```
//!
//! The benchmark starts its own `redis-server`. One limiter (one process,
//! one multiplexed connection) and 64 tasks on a two-thread runtime decide
//! unit requests on keys taken in turn from 10,000, under a limit that
//! admits them all, for `SECONDS` seconds (default 3) after a warm-up of
//! 0.5 s. Each strategy is measured `ROUNDS` times (default 3), the three
//! settings in turn; medians are printed, with each batched setting's Redis
//! CPU per decision against batching off (the median of the per-round
//! ratios). Per decision: decisions per second, calls (`INFO
//! commandstats`: `cmdstat_fcall`), the CPU of `redis-server` and of this
//! process (clients and the library together), both from
//! `/proc`, and each decision's latency (p50, p99).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate::protection::Lease;
use tollgate::{Limiter, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::bench::{env_number, median};
use tollgate_test_support::process_cpu::cpu_seconds;
use tollgate_test_support::redis::RedisServer;

const CALLERS: usize = 64;
const KEYS: usize = 10_000;

/// One measurement.
#[derive(Clone, Copy, Debug, Default)]
struct Run {
    decisions_per_second: f64,
    calls_per_decision: f64,
    redis_us: f64,
    client_us: f64,
    p50_us: f64,
    p99_us: f64,
}

fn measure(
    rt: &tokio::runtime::Runtime,
    server: &RedisServer,
    strategy: Strategy,
    (batch, lease): (bool, bool),
    seconds: f64,
) -> Run {
    let backend = rt
        .block_on(RedisBackend::builder().batch_calls(batch).connect(&server.url()))
        .unwrap();
    let policy = Policy::new(strategy, 1 << 30, Duration::from_secs(1)).unwrap();
    let mut builder = Limiter::builder().backend(backend).policy(policy);
    if lease {
        builder = builder.lease(Lease::new(64, Duration::from_millis(100)));
    }
    let limiter = Arc::new(builder.build().unwrap());
    let keys: Arc<Vec<String>> = Arc::new((0..KEYS).map(|i| format!("user-{i}")).collect());
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let decided = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..CALLERS)
        .map(|c| {
            let (limiter, keys, measuring, stop, decided, latencies) = (
                limiter.clone(),
                keys.clone(),
                measuring.clone(),
                stop.clone(),
                decided.clone(),
                latencies.clone(),
            );
            rt.spawn(async move {
                let mut mine = Vec::new();
                let mut i = c;
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let decision = limiter.allow(&keys[i % KEYS]).await.unwrap();
                    assert!(decision.allowed);
                    i += CALLERS;
                    if measuring.load(Ordering::Relaxed) {
                        decided.fetch_add(1, Ordering::Relaxed);
                        mine.push(started.elapsed());
                    }
                }
                latencies.lock().unwrap().extend(mine);
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let pid = server.pid().to_string();
    let (calls0, redis0, self0) = (
        server.script_calls(),
        cpu_seconds(&pid).unwrap(),
        cpu_seconds("self").unwrap(),
    );
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    let (calls1, redis1, self1) = (
        server.script_calls(),
        cpu_seconds(&pid).unwrap(),
        cpu_seconds("self").unwrap(),
    );
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        rt.block_on(task).unwrap();
    }
    let n = decided.load(Ordering::Relaxed) as f64;
    let mut latencies = std::mem::take(&mut *latencies.lock().unwrap());
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q) as usize].as_secs_f64() * 1e6;
    Run {
        decisions_per_second: n / elapsed,
        // Calls made while measuring, a few of them by decisions that
        // ended after: within a call per round of 64.
        calls_per_decision: (calls1 - calls0) as f64 / n,
        redis_us: (redis1 - redis0) * 1e6 / n,
        client_us: (self1 - self0) * 1e6 / n,
        p50_us: at(0.5),
        p99_us: at(0.99),
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let seconds = env_number("SECONDS", 3.0);
    let rounds = env_number("ROUNDS", 3.0) as usize;
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "{CALLERS} callers, {KEYS} keys, all admitted, one connection; {seconds} s x {rounds} rounds, medians"
    );
    println!("| strategy | calls | decisions/s | calls per decision | Redis CPU µs/decision | client CPU µs/decision | p50 µs | p99 µs | Redis CPU vs off |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let settings = [
        ("batched + lease", (true, true)),
        ("batched", (true, false)),
        ("one per decision", (false, false)),
    ];
    for strategy in [
        Strategy::FixedWindow,
        Strategy::SlidingWindow,
        Strategy::TokenBucket,
    ] {
        let mut runs: Vec<Vec<Run>> = vec![Vec::new(); settings.len()];
        for _ in 0..rounds {
            for (runs, &(_, setting)) in runs.iter_mut().zip(&settings) {
                runs.push(measure(&rt, &server, strategy, setting, seconds));
            }
        }
        let off = &runs[settings.len() - 1];
        for (runs, &(name, (batch, _))) in runs.iter().zip(&settings) {
            let m = |f: fn(&Run) -> f64| median(runs.iter().map(f));
            let ratio = median(runs.iter().zip(off).map(|(a, b)| a.redis_us / b.redis_us));
            println!(
                "| {strategy} | {name} | {:.0} | {:.3} | {:.2} | {:.2} | {:.0} | {:.0} | {} |",
                m(|r| r.decisions_per_second),
                m(|r| r.calls_per_decision),
                m(|r| r.redis_us),
                m(|r| r.client_us),
                m(|r| r.p50_us),
                m(|r| r.p99_us),
                if batch {
                    format!("{ratio:.2}x")
                } else {
                    "1".to_owned()
                },
            );
        }
    }
}
