//! Decisions batched under load: many concurrent decisions of one policy
//! over a small pool go out in fewer calls of `decide` than decisions, and
//! each is decided exactly as alone (the remaining units they report are
//! every value once, as one call each would give them in some order).

use std::sync::Arc;
use std::time::Duration;

use tollgate::{Limiter, Policy, Strategy};
use tollgate_postgres::PostgresBackend;

use crate::support::TestDatabase;

const TASKS: usize = 64;
const LIMIT: u64 = 500;

/// Runs `TASKS` tasks of `per_task` decisions each on one key, and returns
/// the remaining units of every admitted decision, sorted.
async fn remaining_of_admitted(limiter: &Arc<Limiter<PostgresBackend>>, per_task: usize) -> Vec<u64> {
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                for _ in 0..per_task {
                    let d = limiter.allow("hot").await.unwrap();
                    if d.allowed {
                        seen.push(d.remaining);
                    }
                }
                seen
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all.sort_unstable();
    all
}

/// Concurrent decisions of a policy of one `strategy` over a pool of 2
/// go out in fewer calls than decisions, each decided as alone.
async fn batched_as_alone(strategy: Strategy) {
    let db = TestDatabase::create().await;
    db.track_functions().await;
    let backend = PostgresBackend::builder(db.url())
        .pool_size(2)
        .timeout(Duration::from_secs(20))
        .connect()
        .await
        .unwrap();
    let limiter = Arc::new(
        Limiter::builder()
            .backend(backend.clone())
            .policy(Policy::new(strategy, LIMIT, Duration::from_secs(3_600)).unwrap())
            .build()
            .unwrap(),
    );
    // 640 requests for 500 units: every remaining figure from 499 down to
    // 0 exactly once, whatever the batches.
    let seen = remaining_of_admitted(&limiter, 10).await;
    assert_eq!(seen, (0..LIMIT).collect::<Vec<_>>());
    drop((limiter, backend));
    let calls = db.function_calls(&["decide", "decide_fixed_window"], 1).await;
    assert!(calls > 0, "the database counted no call");
    assert!(
        calls < (TASKS * 10) as i64 / 2,
        "{calls} calls for {} decisions: not batched",
        TASKS * 10
    );
}

/// A fixed window: `decide_fixed_window`'s loop over a call's requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_fixed_window_decisions_go_out_together_and_each_decides_as_alone() {
    batched_as_alone(Strategy::FixedWindow).await;
}

/// A sliding window: the general `decide`'s loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sliding_window_decisions_go_out_together_and_each_decides_as_alone() {
    batched_as_alone(Strategy::SlidingWindow).await;
}
