//! Shared limits across operating-system processes: the test re-runs its
//! own binary as two, then four, worker processes, each with its own
//! `PostgresBackend` (its own pool), which hammer the same keys at the same
//! moment. Together they admit exactly the limit: a fixed window, a token
//! bucket and a compound policy (the tighter of its two limits), whose
//! windows are long enough that nothing refills during the test.
//!
//! A worker is the ignored test `worker_process`, run with the database's
//! URL in an environment variable; it connects, says `ready`, waits for
//! `go` on its standard input, then decides and prints what it admitted.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tollgate::{Limit, Limiter, Policy, Strategy};
use tollgate_postgres::PostgresBackend;
use tollgate_test_support::worker_admissions::{admit_and_say, admitted};
use tollgate_test_support::workers::{worker_runtime, WorkerTest, Workers};

use crate::support::TestDatabase;

/// The environment variable that turns `worker_process` into a worker.
const WORKER_URL: &str = "TOLLGATE_POSTGRES_WORKER_URL";

/// The worker: the ignored test `worker_process`, whose lines for the
/// parent start with `tollgate-worker:`.
fn worker() -> WorkerTest {
    WorkerTest::new(module_path!(), "worker_process", "tollgate-worker:")
}

/// Concurrent tasks in each worker per policy and key, and requests each.
const TASKS: usize = 6;
const REQUESTS: usize = 12;
const LIMIT: u64 = 40;
/// Keys and the cost of each request on them.
const KEYS: [(&str, u64); 2] = [("unit", 1), ("triple", 3)];

/// Windows no decision outlives: a fixed window's buckets of 50 years are
/// aligned to the epoch (boundaries in 2020 and 2070).
const YEARS_50: Duration = Duration::from_secs(50 * 365 * 86_400);

fn policies() -> Vec<(&'static str, Policy)> {
    let fixed = Limit::new(Strategy::FixedWindow, LIMIT, YEARS_50).unwrap();
    let bucket = Limit::new(Strategy::TokenBucket, LIMIT, YEARS_50).unwrap();
    let sliding = Limit::new(Strategy::SlidingWindow, LIMIT + 25, YEARS_50).unwrap();
    vec![
        ("fixed", Policy::from(fixed)),
        ("bucket", Policy::from(bucket)),
        ("compound", Policy::compound(vec![sliding, fixed]).unwrap()),
    ]
}

fn limiter(backend: &PostgresBackend, name: &str, policy: Policy) -> Limiter<PostgresBackend> {
    Limiter::builder()
        .backend(backend.clone())
        .policy(policy)
        .key_prefix(name)
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
        let backend = PostgresBackend::builder(url)
            .pool_size(4)
            .timeout(Duration::from_secs(10))
            .connect()
            .await
            .unwrap();
        let limiters: Vec<_> = policies()
            .into_iter()
            .map(|(name, policy)| (name.to_owned(), Arc::new(limiter(&backend, name, policy))))
            .collect();
        worker().ready();
        let within = Duration::from_secs(60);
        admit_and_say(&worker(), &limiters, &KEYS, TASKS, REQUESTS, within).await;
    });
}

/// Runs `n` workers on `url` at once and adds up what each admitted per
/// policy and key.
fn run_workers(n: usize, url: &str) -> HashMap<(String, String), u64> {
    let workers = Workers::start(&worker(), n, &[(WORKER_URL, url)]);
    admitted(&workers.finish())
}

#[test]
fn limits_are_exact_across_two_and_four_processes() {
    for n in [2, 4] {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let db = runtime.block_on(TestDatabase::create());
        // Installed once here, so that the workers race on decisions only.
        runtime
            .block_on(PostgresBackend::builder(db.url()).connect())
            .unwrap();
        let admitted = run_workers(n, &db.url());
        for (name, policy) in policies() {
            let tightest = policy.limits().iter().map(Limit::limit).min().unwrap();
            for (key, cost) in KEYS {
                assert!(
                    (n * TASKS * REQUESTS) as u64 * cost > 2 * LIMIT,
                    "the test must overload"
                );
                let got = admitted[&(name.to_owned(), key.to_owned())];
                assert_eq!(
                    got,
                    tightest / cost * cost,
                    "{name} {key}: {n} processes admitted {got} units"
                );
            }
        }
        drop(runtime);
    }
}
