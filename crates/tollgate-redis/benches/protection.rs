//! What the deny cache and the circuit breaker save, in one run against a
//! `redis-server` this benchmark starts on a free port:
//!
//! 1. a denied decision on an over-limit key, with the deny cache (answered
//!    in memory) and without it (one script call);
//! 2. decisions per second while the server is frozen (`SIGSTOP`), with a
//!    100 ms timeout: failing open without a breaker (every decision waits
//!    for the timeout) against the default breaker with a fallback limiter.
//!
//! ```sh
//! cargo bench -p tollgate-redis --bench protection
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::Criterion;
use tokio::runtime::Runtime;
use tollgate::protection::CircuitBreaker;
use tollgate::protection::DenyCache;
use tollgate::{Limiter, LimiterBuilder, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::redis::RedisServer;

const TIMEOUT: Duration = Duration::from_millis(100);
const OUTAGE: Duration = Duration::from_secs(2);

fn policy(limit: u64) -> Policy {
    Policy::new(Strategy::SlidingWindow, limit, Duration::from_secs(3_600)).expect("valid policy")
}

fn builder(rt: &Runtime, server: &RedisServer, limit: u64) -> LimiterBuilder<RedisBackend> {
    let backend = rt
        .block_on(RedisBackend::builder().timeout(TIMEOUT).connect(&server.url()))
        .expect("connect");
    Limiter::builder().policy(policy(limit)).backend(backend)
}

/// Decisions per second on one caller over `OUTAGE`.
fn rate_during_outage(rt: &Runtime, limiter: &Limiter<RedisBackend>) -> f64 {
    let started = Instant::now();
    let mut decisions = 0u64;
    while started.elapsed() < OUTAGE {
        rt.block_on(limiter.allow(format!("k{}", decisions % 64)))
            .expect("fail-open and fallback never error");
        decisions += 1;
    }
    decisions as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let server = RedisServer::start();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();

    let mut group = c.benchmark_group("denied_decision");
    for (name, cache) in [("without deny cache", false), ("with deny cache", true)] {
        let builder = builder(&rt, &server, 1);
        let builder = if cache {
            builder.deny_cache(DenyCache::new())
        } else {
            builder
        };
        let limiter = builder.build().expect("valid limiter");
        rt.block_on(limiter.allow("abuser")).expect("decision");
        group.bench_function(name, |b| {
            b.iter(|| black_box(rt.block_on(limiter.allow("abuser")).expect("decision").allowed))
        });
    }
    group.finish();

    let open = builder(&rt, &server, 1_000_000)
        .fail_policy(tollgate::FailPolicy::Open)
        .build()
        .expect("valid");
    let breaker = builder(&rt, &server, 1_000_000)
        .fallback(policy(1_000))
        .circuit_breaker(CircuitBreaker::new())
        .build()
        .expect("valid");
    server.pause();
    let without = rate_during_outage(&rt, &open);
    let with = rate_during_outage(&rt, &breaker);
    server.resume();
    println!();
    println!("decisions per second, one caller, server frozen, {TIMEOUT:?} timeout, over {OUTAGE:?}:");
    println!("  fail open, no breaker        {without:>12.0}");
    println!(
        "  breaker + in-memory fallback {with:>12.0}  ({:.0}x)",
        with / without
    );
    c.final_summary();
}
