//! Leases on Redis: random traces of two processes leasing one key, decided
//! on a real redis-server with a caller clock and, beside it, by the core's
//! custom-store adapter on the same clock at microsecond ticks (which runs
//! the pure `lease_all`): every decision, every lease and every unit given
//! back agree. And a hot key asks Redis once per lease, not per request.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tollgate::backend::store::StoreBackend;
use tollgate::backend::Tick;
use tollgate::clock::ManualClock;
use tollgate::protection::Lease;
use tollgate::testing::MapStore;
use tollgate::{Limiter, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::redis::RedisServer;

use crate::differential::{any_compound_policy, any_policy, Harness, START};

/// `n` processes of `policy` on the harness's Redis leasing with `lease`
/// under `prefix`.
fn on_redis(h: &Harness, n: usize, policy: Policy, lease: Lease, prefix: &str) -> Vec<Limiter<RedisBackend>> {
    (0..n)
        .map(|_| {
            Limiter::builder()
                .backend(h.backend().clone())
                .policy(policy)
                .key_prefix(prefix)
                .local_clock(h.clock.clone())
                .lease(lease)
                .build()
                .unwrap()
        })
        .collect()
}

fn on_store(
    n: usize,
    policy: Policy,
    lease: Lease,
    clock: &ManualClock,
) -> Vec<Limiter<StoreBackend<Arc<MapStore>>>> {
    let store = Arc::new(MapStore::with_manual_clock(clock));
    (0..n)
        .map(|_| {
            Limiter::builder()
                .backend(
                    StoreBackend::new(store.clone())
                        .clock(clock.clone())
                        .tick(Tick::Micros),
                )
                .policy(policy)
                .local_clock(clock.clone())
                .lease(lease)
                .build()
                .unwrap()
        })
        .collect()
}

fn agrees_with_the_store_adapter(
    fleet: &Harness,
    policies: impl proptest::strategy::Strategy<Value = Policy>,
    cases: u32,
) {
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    let case = std::sync::atomic::AtomicU64::new(0);
    let gaps = prop_oneof![3 => 0u64..200_000, 1 => 0u64..50_000_000];
    runner
        .run(
            &(
                policies,
                1u64..24,
                1u64..200,
                prop::collection::vec((gaps, 0usize..2, 0u64..3), 1..120),
            ),
            |(policy, max_units, age_ms, trace)| {
                let lease = Lease::new(max_units, Duration::from_millis(age_ms));
                let prefix = format!("lease{}", case.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
                fleet.clock.set_nanos(START);
                let redis = on_redis(fleet, 2, policy, lease, &prefix);
                let store = on_store(2, policy, lease, &fleet.clock);
                for (i, &(dt, who, cost)) in trace.iter().enumerate() {
                    fleet.clock.advance(Duration::from_nanos(dt));
                    let got = fleet.rt.block_on(redis[who].allow_n("k", cost)).unwrap();
                    let want = fleet.rt.block_on(store[who].allow_n("k", cost)).unwrap();
                    prop_assert_eq!(
                        got,
                        want,
                        "request {} (process {}, cost {}) of {}",
                        i,
                        who,
                        cost,
                        policy
                    );
                }
                for who in 0..2 {
                    let got = fleet.rt.block_on(redis[who].end_leases()).unwrap();
                    let want = fleet.rt.block_on(store[who].end_leases()).unwrap();
                    prop_assert_eq!(got, want, "units given back by process {}", who);
                }
                let got = fleet.rt.block_on(redis[0].allow_n("k", 0)).unwrap();
                let want = fleet.rt.block_on(store[0].allow_n("k", 0)).unwrap();
                prop_assert_eq!(got, want, "the state once every lease ended");
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn leases_on_redis_agree_with_the_store_adapter() {
    let fleet = Harness::new();
    agrees_with_the_store_adapter(&fleet, any_policy(), 96);
    agrees_with_the_store_adapter(&fleet, any_compound_policy(), 48);
}

#[test]
fn a_hot_key_calls_redis_once_per_lease() {
    let fleet = Harness::new();
    fleet.clock.set_nanos(START);
    let policy = Policy::new(Strategy::TokenBucket, 10_000, Duration::from_secs(1)).unwrap();
    let limiters = on_redis(
        &fleet,
        2,
        policy,
        Lease::new(64, Duration::from_millis(100)),
        "hot",
    );
    let client = redis::Client::open(fleet.url()).unwrap();
    let calls = || -> u64 {
        let mut conn = client.get_connection().unwrap();
        let info: String = redis::cmd("INFO").arg("commandstats").query(&mut conn).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("cmdstat_fcall:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().unwrap())
    };
    let before = calls();
    let mut allowed = 0;
    for i in 0..3_200 {
        fleet.clock.advance(Duration::from_micros(100));
        allowed += u64::from(fleet.rt.block_on(limiters[i % 2].allow("hot")).unwrap().allowed);
    }
    let made = calls() - before;
    assert_eq!(allowed, 3_200);
    assert!(
        made * 32 <= 3_200 + 32 * 16,
        "{made} function calls for 3,200 decisions"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_outlives_an_outage_and_nothing_is_charged_twice() {
    let server = RedisServer::start();
    let backend = RedisBackend::builder()
        .timeout(Duration::from_millis(200))
        .connect(&server.url())
        .await
        .unwrap();
    let limiter = Limiter::builder()
        .backend(backend)
        .policy(Policy::new(Strategy::FixedWindow, 1_000, Duration::from_secs(3_600)).unwrap())
        .key_prefix("outage")
        .lease(Lease::new(32, Duration::from_secs(30)))
        .build()
        .unwrap();
    let mut admitted = 0;
    for _ in 0..20 {
        admitted += u64::from(limiter.allow("k").await.unwrap().allowed);
    }
    let charged = |server: &RedisServer| -> u64 {
        server
            .cli(&["GET", "outage::fixed_window:k"])
            .split(':')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap()
    };
    let leased = charged(&server) - admitted;
    assert!(leased > 0, "a lease was taken");
    // Frozen: the lease's units are spent without the store, then the
    // store's absence meets the fail policy (closed: an error).
    server.pause();
    let mut during = 0;
    let failed = loop {
        match limiter.allow("k").await {
            Ok(decision) => {
                assert!(decision.allowed);
                during += 1;
            }
            Err(err) => break err,
        }
        assert!(during <= leased, "more admitted than leased");
    };
    assert_eq!(during, leased, "every leased unit spent during the outage");
    assert!(matches!(failed, tollgate::Error::Backend(_)), "{failed}");
    server.resume();
    let (mut after, mut failures) = (0, 1);
    for _ in 0..10 {
        match limiter.allow("k").await {
            Ok(decision) => after += u64::from(decision.allowed),
            // The connection the outage broke fails once more.
            Err(_) => failures += 1,
        }
    }
    limiter.end_leases().await.unwrap();
    // Never fewer units charged than admitted (nothing given back twice);
    // more only by what a call that timed out may have charged after all
    // (the server ran it once it woke up): at most a lease's worth each.
    let spent = admitted + during + after;
    let charged = charged(&server);
    assert!(
        (spent..=spent + failures * 32).contains(&charged),
        "{charged} charged for {spent} admitted with {failures} failed calls"
    );
}
