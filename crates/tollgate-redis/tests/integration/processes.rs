//! Shared limits across operating-system processes: the test re-runs its own
//! binary as worker processes, each with its own `RedisBackend` (its own
//! connection), which hammer the same keys at the same moment. Together they
//! admit exactly the limit, never one unit more; with two limits on one key
//! (a compound policy), exactly the tighter one, and both are charged
//! exactly what was admitted.
//!
//! A worker is the ignored test `worker_process`, run by the parent with
//! `--ignored --exact processes::worker_process` and the settings in environment
//! variables; it connects, says `ready`, waits for `go` on its standard
//! input, then decides and prints what it admitted.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use support::window_count;
use tollgate::{Limit, Limiter, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::redis::RedisServer;

use tollgate_test_support::worker_admissions::{admit_and_say, admitted};
use tollgate_test_support::workers::{worker_runtime, WorkerTest, Workers};

/// The environment variable that turns `worker_process` into a worker: the
/// Redis URL to use.
const WORKER_URL: &str = "TOLLGATE_REDIS_WORKER_URL";

/// The worker: the ignored test `worker_process`, whose lines for the
/// parent start with `tollgate-worker:`.
fn worker() -> WorkerTest {
    WorkerTest::new(module_path!(), "worker_process", "tollgate-worker:")
}

const WORKERS: usize = 4;
/// Concurrent tasks in each worker, and requests per task and key.
const TASKS: usize = 8;
const REQUESTS: usize = 16;
const LIMIT: u64 = 50;

/// Windows long enough that nothing refills or rolls over during the test
/// (the fixed window's buckets are aligned to the epoch: 50-year buckets
/// have their boundaries in 2020 and 2070).
fn window(strategy: Strategy) -> Duration {
    match strategy {
        Strategy::FixedWindow => Duration::from_secs(50 * 365 * 24 * 3600),
        _ => Duration::from_secs(3_600),
    }
}

/// (key, cost) pairs every worker requests, for every policy.
const KEYS: [(&str, u64); 2] = [("unit", 1), ("weighted", 3)];

/// The policies every worker decides on, by name: one per strategy with
/// the limit `LIMIT`, and a compound one whose sliding window (`LIMIT` −
/// 10) is tighter than its fixed window (`LIMIT`).
fn policies() -> Vec<(String, Policy)> {
    let limit = |strategy, limit| Limit::new(strategy, limit, window(strategy)).unwrap();
    let mut policies: Vec<(String, Policy)> = Strategy::ALL
        .iter()
        .map(|&s| (s.name().to_owned(), Policy::from(limit(s, LIMIT))))
        .collect();
    let compound = Policy::compound([
        limit(Strategy::FixedWindow, LIMIT),
        limit(Strategy::SlidingWindow, LIMIT - 10),
    ]);
    policies.push(("compound".to_owned(), compound.unwrap()));
    policies
}

fn limiter(backend: &RedisBackend, policy: Policy) -> Limiter<RedisBackend> {
    Limiter::builder()
        .backend(backend.clone())
        .policy(policy)
        .resource("processes")
        .build()
        .unwrap()
}

#[test]
#[ignore = "a worker process started by limits_are_exact_across_processes"]
fn worker_process() {
    let Ok(url) = std::env::var(WORKER_URL) else {
        return;
    };
    worker_runtime().block_on(async {
        let backend = RedisBackend::builder()
            .timeout(Duration::from_secs(5))
            .connect(&url)
            .await
            .unwrap();
        let limiters: Vec<_> = policies()
            .into_iter()
            .map(|(name, policy)| (name, Arc::new(limiter(&backend, policy))))
            .collect();
        worker().ready();
        let within = Duration::from_secs(30);
        admit_and_say(&worker(), &limiters, &KEYS, TASKS, REQUESTS, within).await;
    });
}

#[test]
fn limits_are_exact_across_processes() {
    let server = RedisServer::start();
    let workers = Workers::start(&worker(), WORKERS, &[(WORKER_URL, &server.url())]);
    let admitted = admitted(&workers.finish());
    let requested = (WORKERS * TASKS * REQUESTS) as u64;
    for (name, policy) in policies() {
        let tightest = policy.limits().iter().map(Limit::limit).min().unwrap();
        for (key, cost) in KEYS {
            assert!(requested * cost > 4 * LIMIT, "the test must overload the limit");
            // Whole requests of `cost` units that fit in the tightest limit.
            let expected = tightest / cost * cost;
            let got = admitted[&(name.clone(), key.to_owned())];
            assert_eq!(
                got, expected,
                "{name} {key}: {WORKERS} processes admitted {got} units"
            );
        }
    }
    // The state on the server agrees: a peek from yet another connection
    // sees the budget spent, and each of the compound policy's windows
    // counts exactly what was admitted.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let backend = RedisBackend::connect(&server.url()).await.unwrap();
        for (name, policy) in policies() {
            let limiter = limiter(&backend, policy);
            let peek = limiter.allow_n("unit", 0).await.unwrap();
            assert!(!peek.allowed && peek.remaining == 0, "{name}: {peek:?}");
            if policy.is_compound() {
                for (key, _) in KEYS {
                    let units = admitted[&(name.clone(), key.to_owned())];
                    let binding =
                        crate::support::bound(&backend, Limiter::DEFAULT_KEY_PREFIX, "processes", &policy);
                    for state_key in binding.state_keys(key.as_bytes()) {
                        let state_key = String::from_utf8(state_key).unwrap();
                        let state = server.cli(&["GET", &state_key]);
                        assert_eq!(window_count(&state), units, "{state_key}: {state}");
                    }
                }
            }
        }
    });
}
