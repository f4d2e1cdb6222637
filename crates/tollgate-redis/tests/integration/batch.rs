//! Batched calls: decisions that arrive while calls to the server are in
//! flight go out together, each decided alone and exactly. With the clock
//! standing still, a key's concurrent decisions, in whatever order and
//! batches they went out, are the sequence a store deciding them one by one
//! gives (the same multiset of answers), for every strategy and a compound
//! policy, as functions and as scripts; and they did go out in fewer calls
//! than decisions. A blocked key's answers in a batch are a blocked key's,
//! and decisions of different costs in one batch each pay their own.

use std::sync::Arc;
use std::time::Duration;

use tollgate::backend::store::StoreBackend;
use tollgate::backend::Tick;
use tollgate::clock::ManualClock;
use tollgate::testing::MapStore;
use tollgate::{Decision, Limit, Limiter, Operation, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::redis::RedisServer;

fn policies() -> Vec<Policy> {
    let minute = Duration::from_secs(60);
    let mut all: Vec<Policy> = Strategy::ALL
        .iter()
        .map(|&s| Policy::new(s, 20, minute).unwrap())
        .collect();
    all.push(
        Policy::compound([
            Limit::new(Strategy::TokenBucket, 25, minute).unwrap(),
            Limit::new(Strategy::SlidingWindow, 20, Duration::from_secs(10)).unwrap(),
        ])
        .unwrap(),
    );
    all
}

/// What one decision says, without what differs by the order it went out
/// in (nothing, with the clock standing still).
fn answer(d: &Decision) -> (bool, u64, Duration, Option<Duration>) {
    (d.allowed, d.remaining, d.reset, d.retry_after)
}

/// Decisions `0..n` of `limiter`, each on the key and cost `request(i)`
/// gives, all in flight at once (so that they go out in batches); their
/// answers in the order of `i`.
fn all_at_once(
    rt: &tokio::runtime::Runtime,
    limiter: &Arc<Limiter<RedisBackend>>,
    n: usize,
    request: impl Fn(usize) -> (String, u64),
) -> Vec<Decision> {
    rt.block_on(async {
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let (limiter, (key, cost)) = (limiter.clone(), request(i));
                tokio::spawn(async move { limiter.allow_n(key, cost).await.unwrap() })
            })
            .collect();
        let mut got = Vec::with_capacity(n);
        for task in tasks {
            got.push(task.await.unwrap());
        }
        got
    })
}

fn decisions_agree(server: &RedisServer, url: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let clock = ManualClock::default();
    clock.set_nanos(1_700_000_000_000_000_000);
    let backend = rt
        .block_on(RedisBackend::builder().caller_clock(clock.clone()).connect(url))
        .unwrap();
    const KEYS: usize = 6;
    const PER_KEY: usize = 40;
    for (case, policy) in policies().into_iter().enumerate() {
        let limiter = Arc::new(
            Limiter::builder()
                .backend(backend.clone())
                .policy(policy)
                .key_prefix(format!("batch{case}"))
                .build()
                .unwrap(),
        );
        // Key 0 is blocked: its answers in a batch are a blocked key's.
        let block = Operation::Block(Duration::from_secs(30));
        rt.block_on(limiter.operate("key0", block)).unwrap();
        let before = server.script_calls();
        let got: Vec<(usize, Decision)> =
            all_at_once(&rt, &limiter, KEYS * PER_KEY, |i| (format!("key{}", i % KEYS), 1))
                .into_iter()
                .enumerate()
                .map(|(i, d)| (i % KEYS, d))
                .collect();
        let sent = server.script_calls() - before;
        assert!(
            sent < (KEYS * PER_KEY) as u64,
            "{policy}: {sent} calls for {} decisions",
            KEYS * PER_KEY
        );
        // The same requests one by one on the custom-store adapter: with
        // unit costs and the clock standing still, the k-th decision of a
        // key answers alike whatever went before it, so one key's answers,
        // in whatever order and batches, are the sequence's.
        let one_by_one = Limiter::builder()
            .backend(
                StoreBackend::new(Arc::new(MapStore::with_manual_clock(&clock)))
                    .clock(clock.clone())
                    .tick(Tick::Micros),
            )
            .policy(policy)
            .build()
            .unwrap();
        rt.block_on(one_by_one.operate("key0", block)).unwrap();
        for key in 0..KEYS {
            let mut batched: Vec<_> = got.iter().filter(|g| g.0 == key).map(|g| answer(&g.1)).collect();
            let mut alone: Vec<_> = (0..PER_KEY)
                .map(|_| answer(&rt.block_on(one_by_one.allow_n(format!("key{key}"), 1)).unwrap()))
                .collect();
            batched.sort_unstable();
            alone.sort_unstable();
            assert_eq!(batched, alone, "{policy}, key {key}");
        }
        // Costs that differ within a batch (a batch of equal costs sends
        // one): one decision per key, so each answer is its key's own,
        // whatever the batches. Costs above the limit are denied without a
        // retry, as alone.
        let costs = |i: usize| 1 + (i as u64 * 7) % 24;
        let before = server.script_calls();
        let got = all_at_once(&rt, &limiter, KEYS * PER_KEY, move |i| {
            (format!("cost{i}"), costs(i))
        });
        let sent = server.script_calls() - before;
        assert!(
            sent < (KEYS * PER_KEY) as u64,
            "{policy}: {sent} calls for mixed costs"
        );
        for (i, batched) in got.iter().enumerate() {
            let alone = rt
                .block_on(one_by_one.allow_n(format!("cost{i}"), costs(i)))
                .unwrap();
            assert_eq!(answer(batched), answer(&alone), "{policy}, cost {}", costs(i));
        }
    }
}

#[test]
fn batched_decisions_are_exact_and_save_calls() {
    let server = RedisServer::start();
    decisions_agree(&server, &server.url());
}

#[test]
fn batched_scripts_are_exact_and_save_calls() {
    let server = RedisServer::start();
    decisions_agree(&server, &server.url_without_functions());
}
