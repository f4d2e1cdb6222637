//! One hot key shared by a fleet, with and without leases: decisions per
//! second, Redis function calls per decision, Redis CPU per decision and
//! units admitted per second.
//!
//! ```sh
//! cargo bench -p tollgate-redis --bench leases
//! ```
//!
//! The benchmark starts its own `redis-server`. Four limiters stand for
//! four processes: each has its own connection (its own `RedisBackend`)
//! and its own leases, and 16 tasks per limiter (64 callers in all) decide
//! unit requests for one key as fast as they can on a two-thread runtime,
//! for `SECONDS` seconds (default 3) after a warm-up of 0.5 s, `ROUNDS`
//! times (default 3; medians are printed). The limit is 10,000 per second;
//! the key is mostly over it, so each configuration is measured with and
//! without a deny cache, which answers the key's denials locally:
//!
//! - `store`: every decision is a function call (today's default);
//! - `deny cache`: denials answered from the cache;
//! - `lease`: `Lease::new(64, 100ms)`;
//! - `lease + deny cache`: both.
//!
//! Function calls are read from `INFO commandstats` (`cmdstat_fcall`), the
//! server's CPU from `/proc/<pid>/stat`. Two loads are measured:
//!
//! - **saturated**: every caller asks again as soon as it is answered, so
//!   the key is over its limit most of the time;
//! - **paced**: the callers ask 8,000 times per second in all (80% of the
//!   limit), so every request could be admitted: what leases save there
//!   is the store's work, and `admitted/s` shows any under-admission.
//!
//! The exactness of what is admitted is not measured here but tested
//! (`tests/integration/leases.rs` and the core's lease tests).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::protection::DenyCache;
use tollgate::protection::Lease;
use tollgate::{Limiter, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::bench::{env_number, median};
use tollgate_test_support::process_cpu::cpu_seconds;
use tollgate_test_support::redis::RedisServer;

const PROCESSES: usize = 4;
const CALLERS_PER_PROCESS: usize = 16;
const CALLERS: usize = PROCESSES * CALLERS_PER_PROCESS;
const LIMIT: u64 = 10_000;

/// One measurement.
#[derive(Clone, Copy, Debug, Default)]
struct Run {
    decisions_per_second: f64,
    calls_per_decision: f64,
    redis_us_per_decision: f64,
    admitted_per_second: f64,
    failed: u64,
}

/// What the callers share.
#[derive(Default)]
struct Tally {
    decided: AtomicU64,
    admitted: AtomicU64,
    failed: AtomicU64,
    counting: AtomicBool,
    stop: AtomicBool,
}

/// One caller: decides for the hot key until told to stop, `every` apart
/// when paced.
async fn caller(limiter: Arc<Limiter<RedisBackend>>, tally: Arc<Tally>, every: Option<Duration>) {
    let mut ticks = every.map(|every| {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks
    });
    while !tally.stop.load(Ordering::Relaxed) {
        if let Some(ticks) = &mut ticks {
            ticks.tick().await;
        }
        // A failure (a timeout under this load) counts as not admitted; the
        // failures are reported.
        let allowed = match limiter.allow("hot").await {
            Ok(decision) => decision.allowed,
            Err(_) => {
                tally.failed.fetch_add(1, Ordering::Relaxed);
                false
            }
        };
        if tally.counting.load(Ordering::Relaxed) {
            tally.decided.fetch_add(1, Ordering::Relaxed);
            tally.admitted.fetch_add(u64::from(allowed), Ordering::Relaxed);
        }
    }
}

/// A configuration: its name, its lease and whether it has a deny cache.
type Configuration = (&'static str, Option<Lease>, bool);

fn measure(
    rt: &tokio::runtime::Runtime,
    server: &RedisServer,
    strategy: Strategy,
    (_, lease, deny_cache): Configuration,
    pace: Option<f64>,
    prefix: &str,
) -> Run {
    let seconds = env_number("SECONDS", 3.0);
    let policy = Policy::new(strategy, LIMIT, Duration::from_secs(1)).unwrap();
    let limiters: Vec<Arc<Limiter<RedisBackend>>> = (0..PROCESSES)
        .map(|_| {
            let backend = rt
                .block_on(
                    RedisBackend::builder()
                        .timeout(Duration::from_secs(2))
                        .connect(&server.url()),
                )
                .unwrap();
            let mut builder = Limiter::builder()
                .backend(backend)
                .policy(policy)
                .key_prefix(prefix);
            if let Some(lease) = lease {
                builder = builder.lease(lease);
            }
            if deny_cache {
                builder = builder.deny_cache(DenyCache::new());
            }
            Arc::new(builder.build().unwrap())
        })
        .collect();
    let tally = Arc::new(Tally::default());
    let every = pace.map(|total| Duration::from_secs_f64(CALLERS as f64 / total));
    let tasks: Vec<_> = (0..CALLERS)
        .map(|i| rt.spawn(caller(limiters[i % PROCESSES].clone(), tally.clone(), every)))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let pid = server.pid().to_string();
    let (calls, cpu) = (server.script_calls(), cpu_seconds(&pid).unwrap_or(0.0));
    tally.counting.store(true, Ordering::Relaxed);
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    tally.counting.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    let (calls, cpu) = (
        server.script_calls() - calls,
        cpu_seconds(&pid).unwrap_or(0.0) - cpu,
    );
    tally.stop.store(true, Ordering::Relaxed);
    for task in tasks {
        rt.block_on(task).unwrap();
    }
    for limiter in &limiters {
        rt.block_on(limiter.end_leases()).unwrap();
    }
    let decisions = tally.decided.load(Ordering::Relaxed).max(1) as f64;
    Run {
        decisions_per_second: decisions / elapsed,
        calls_per_decision: calls as f64 / decisions,
        redis_us_per_decision: cpu * 1e6 / decisions,
        admitted_per_second: tally.admitted.load(Ordering::Relaxed) as f64 / elapsed,
        failed: tally.failed.load(Ordering::Relaxed),
    }
}

fn main() {
    let rounds = env_number("ROUNDS", 3.0) as usize;
    let seconds = env_number("SECONDS", 3.0);
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let lease = Some(Lease::new(64, Duration::from_millis(100)));
    let configurations: [Configuration; 4] = [
        ("store", None, false),
        ("deny cache", None, true),
        ("lease", lease, false),
        ("lease + deny cache", lease, true),
    ];
    println!(
        "{PROCESSES} processes x {CALLERS_PER_PROCESS} callers, one key, limit {LIMIT}/s; medians of {rounds} \
         rounds of {seconds} s"
    );
    println!(
        "| load | strategy | configuration | decisions/s | x store | calls per decision | Redis µs per \
         decision | admitted/s |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut case = 0;
    for (load, pace) in [("saturated", None), ("paced", Some(0.8 * LIMIT as f64))] {
        for strategy in [
            Strategy::FixedWindow,
            Strategy::SlidingWindow,
            Strategy::TokenBucket,
        ] {
            let mut runs: Vec<Vec<Run>> = vec![Vec::new(); configurations.len()];
            for _ in 0..rounds {
                for (i, configuration) in configurations.iter().enumerate() {
                    case += 1;
                    let prefix = format!("bench{case}");
                    runs[i].push(measure(&rt, &server, strategy, *configuration, pace, &prefix));
                }
            }
            for (i, (name, _, _)) in configurations.iter().enumerate() {
                let field = |f: fn(&Run) -> f64| median(runs[i].iter().map(f));
                // Ratios to the store's figure within each round.
                let ratio = median(
                    runs[i]
                        .iter()
                        .zip(&runs[0])
                        .map(|(r, base)| r.decisions_per_second / base.decisions_per_second),
                );
                println!(
                    "| {load} | {} | {name} | {:.0} | {ratio:.2} | {:.4} | {:.2} | {:.0} |",
                    strategy.name(),
                    field(|r| r.decisions_per_second),
                    field(|r| r.calls_per_decision),
                    field(|r| r.redis_us_per_decision),
                    field(|r| r.admitted_per_second),
                );
                let failed: u64 = runs[i].iter().map(|r| r.failed).sum();
                if failed > 0 {
                    println!("  ({failed} decisions failed, counted as not admitted)");
                }
            }
        }
    }
}
