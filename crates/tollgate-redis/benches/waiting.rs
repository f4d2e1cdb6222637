//! A fleet waiting its turn on one key: five limiters standing for five
//! processes (each its own connection and its own queue), ten workers each,
//! call `acquire` on one key limited to 100 per second, for `SECONDS`
//! seconds (default 10), per strategy.
//!
//! ```sh
//! cargo bench -p tollgate-redis --bench waiting
//! ```
//!
//! Printed per strategy: admissions per second against the limit (target
//! ≥ 98%), the most admissions in any one second (the bound: 100 for the
//! windows' own seconds, `L + floor(d / T)` = 200 for the buckets over any
//! second, their burst included), the longest any worker waited, and Redis
//! function calls per admission (`INFO commandstats`; target ≤ 2, no
//! polling). Admission times are read by the workers when `acquire`
//! returns, on the machine's clock.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate::{Limiter, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::bench::env_number;
use tollgate_test_support::redis::RedisServer;

const PROCESSES: usize = 5;
const WORKERS: usize = 10;
const LIMIT: u64 = 100;

fn main() {
    let seconds: f64 = env_number("SECONDS", 10.0);
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!("{PROCESSES} processes x {WORKERS} workers, one key, limit {LIMIT}/s, {seconds} s");
    println!("| strategy | admitted/s | % of the limit | most in any second | longest wait | Redis calls per admission |");
    println!("|---|---|---|---|---|---|");
    for (i, strategy) in [
        Strategy::TokenBucket,
        Strategy::FixedWindow,
        Strategy::SlidingWindow,
    ]
    .into_iter()
    .enumerate()
    {
        let policy = Policy::new(strategy, LIMIT, Duration::from_secs(1)).unwrap();
        let limiters: Vec<Arc<Limiter<RedisBackend>>> = (0..PROCESSES)
            .map(|_| {
                let backend = rt.block_on(RedisBackend::connect(&server.url())).unwrap();
                Arc::new(
                    Limiter::builder()
                        .backend(backend)
                        .policy(policy)
                        .key_prefix(format!("wait{i}"))
                        .build()
                        .unwrap(),
                )
            })
            .collect();
        let calls = server.script_calls();
        let started = Instant::now();
        let stop = started + Duration::from_secs_f64(seconds);
        let admitted: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let longest: Arc<Mutex<Duration>> = Arc::default();
        let tasks: Vec<_> = (0..PROCESSES * WORKERS)
            .map(|w| {
                let (limiter, admitted, longest) =
                    (limiters[w % PROCESSES].clone(), admitted.clone(), longest.clone());
                rt.spawn(async move {
                    while Instant::now() < stop {
                        let asked = Instant::now();
                        let decision = limiter.acquire("partner").await.unwrap();
                        assert!(decision.allowed);
                        let now = Instant::now();
                        admitted.lock().unwrap().push(now);
                        let mut l = longest.lock().unwrap();
                        *l = (*l).max(now - asked);
                    }
                })
            })
            .collect();
        for task in tasks {
            rt.block_on(task).unwrap();
        }
        let elapsed = started.elapsed().as_secs_f64();
        let calls = server.script_calls() - calls;
        let mut times = admitted.lock().unwrap().clone();
        times.sort();
        let mut most = 0;
        let mut first = 0;
        for last in 0..times.len() {
            while times[last] - times[first] >= Duration::from_secs(1) {
                first += 1;
            }
            most = most.max(last - first + 1);
        }
        let rate = times.len() as f64 / elapsed;
        println!(
            "| {} | {rate:.1} | {:.1}% | {most} | {:.0} ms | {:.2} |",
            strategy.name(),
            100.0 * rate / LIMIT as f64,
            longest.lock().unwrap().as_secs_f64() * 1e3,
            calls as f64 / times.len().max(1) as f64,
        );
    }
}
