//! Redis Cluster: three primaries started and joined by the test; keys spread
//! over all of them, and shared limits stay exact, compound ones and
//! calendar windows included, whose state keys for one rate-limit key share
//! a slot.

use crate::support;

use std::time::Duration;

use support::limiters::limiters;
use support::window_count;
use tollgate::calendar::{Calendar, Period};
use tollgate::{Limit, Limiter, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::redis::cluster::Cluster;
use tollgate_test_support::redis::{cli, RedisServer};

/// Each strategy alone with a limit of 10 per hour, and a compound policy
/// whose sliding window (8 per hour) is tighter than its bucket (10).
fn policies() -> Vec<Policy> {
    let hour = Duration::from_secs(3_600);
    let mut policies: Vec<Policy> = Strategy::ALL
        .iter()
        .map(|&s| Policy::new(s, 10, hour).unwrap())
        .collect();
    // Calendar windows (years: a run does not cross a boundary), alone
    // and beside a rate, their boundaries sent with every call.
    let year = |zone| Calendar::new(Period::Year, zone, None).unwrap();
    policies.push(Limit::per_calendar(10, year("UTC")).unwrap().into());
    policies.push(
        Policy::compound([
            Limit::per_calendar(9, year("Europe/Berlin")).unwrap(),
            // Not the hour of the last policy's bucket: every policy here
            // counts under the same resource.
            Limit::new(Strategy::TokenBucket, 10, 2 * hour).unwrap(),
        ])
        .unwrap(),
    );
    let compound = Policy::compound([
        Limit::new(Strategy::TokenBucket, 10, hour).unwrap(),
        Limit::new(Strategy::SlidingWindow, 8, hour).unwrap(),
    ]);
    policies.push(compound.unwrap());
    policies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_decisions_spread_over_primaries_and_stay_exact() {
    let cluster = Cluster::start(3, 0, 2_000);
    let urls = cluster.urls();
    // The test is about exactness, not latency: 1,440 tasks at once on a
    // loaded 2-core machine can keep a decision waiting past the default
    // 200 ms timeout, so allow far more.
    let builder = || RedisBackend::builder().timeout(Duration::from_secs(10));
    let mut backends = Vec::new();
    // Each backend knows a different single seed; they find the others.
    for url in &urls {
        let backend = builder().connect_cluster(&[url]).await.unwrap();
        assert!(backend.is_cluster());
        backends.push(backend);
    }
    backends.push(builder().connect_cluster(&urls).await.unwrap());

    for policy in policies() {
        let limiters = limiters(&backends, policy, "");
        let tightest = policy.limits().iter().map(Limit::limit).min().unwrap() as u32;
        // 24 keys; every limiter runs 3 tasks per key of 5 requests each:
        // 60 requests per key for a limit of 10 (or 8).
        let mut tasks = Vec::new();
        for key in 0..24 {
            for limiter in &limiters {
                for _ in 0..3 {
                    let limiter = limiter.clone();
                    tasks.push(tokio::spawn(async move {
                        let mut admitted = 0;
                        for _ in 0..5 {
                            if limiter.allow(format!("user-{key}")).await.unwrap().allowed {
                                admitted += 1;
                            }
                        }
                        (key, admitted)
                    }));
                }
            }
        }
        let mut per_key = [0u32; 24];
        for task in tasks {
            let (key, admitted) = task.await.unwrap();
            per_key[key] += admitted;
        }
        assert_eq!(per_key, [tightest; 24], "{policy}");
    }

    // A compound policy's state keys for one rate-limit key share a slot,
    // so one primary holds them all (and its sliding window counts what was
    // admitted); different keys spread over every primary.
    let policy = policies().pop().unwrap();
    let compound = Limiter::builder()
        .backend(backends[0].clone())
        .policy(policy)
        .build()
        .unwrap();
    let binding = support::bound_default(&backends[0], &policy);
    let mut owners = Vec::new();
    for key in 0..24 {
        let names: Vec<String> = binding
            .state_keys(format!("user-{key}").as_bytes())
            .into_iter()
            .map(|k| String::from_utf8(k).unwrap())
            .collect();
        let slot = cluster.slot(&names[0]);
        assert!(names.iter().all(|n| cluster.slot(n) == slot), "{names:?}");
        let owner = cluster.owner(slot);
        assert!(
            names.iter().all(|n| cli(owner, &["EXISTS", n]) == "1"),
            "{names:?}"
        );
        assert_eq!(window_count(&cli(owner, &["GET", &names[1]])), 8, "{names:?}");
        owners.push(owner);
    }
    owners.sort_unstable();
    owners.dedup();
    assert_eq!(owners.len(), 3, "the compound keys landed on {owners:?}");
    // With every script cache flushed, the script is sent again (EVAL) to
    // the primary of the keys' slot.
    for node in &cluster.nodes {
        assert_eq!(node.cli(&["SCRIPT", "FLUSH"]), "OK");
    }
    for key in 0..24 {
        let denied = compound.allow(format!("user-{key}")).await.unwrap();
        assert_eq!((denied.allowed, denied.bound_by, denied.remaining), (false, 1, 0));
    }

    // The keys landed on every primary.
    for node in &cluster.nodes {
        let keys: u64 = node.cli(&["DBSIZE"]).parse().unwrap();
        assert!(keys > 0, "no key on the primary at port {}", node.port());
    }

    // Keys with one hash tag share a slot, so they share a primary.
    let limiter = Limiter::builder()
        .backend(backends[0].clone())
        .strategy(Strategy::TokenBucket)
        .limit(1)
        .window(Duration::from_secs(3_600))
        .build()
        .unwrap();
    assert!(limiter.allow("{tenant-7}:alice").await.unwrap().allowed);
    assert!(limiter.allow("{tenant-7}:bob").await.unwrap().allowed);
    assert!(!limiter.allow("{tenant-7}:bob").await.unwrap().allowed);
    let holders: Vec<u16> = cluster
        .nodes
        .iter()
        .filter(|n| n.cli(&["EXISTS", "tollgate::token_bucket:{tenant-7}:alice"]) == "1")
        .map(RedisServer::port)
        .collect();
    assert_eq!(holders.len(), 1);
    assert_eq!(
        cli(holders[0], &["EXISTS", "tollgate::token_bucket:{tenant-7}:bob"]),
        "1"
    );
}

/// Operations on a compound key run as one script on the primary that owns
/// its slot: a penalty charges every limit, a block denies on every
/// primary's keys, a refund and a reset give the budget back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_on_compound_keys_work_on_a_cluster() {
    let cluster = Cluster::start(3, 0, 2_000);
    let backend = RedisBackend::connect_cluster(&cluster.urls()).await.unwrap();
    let policy = policies().pop().unwrap();
    let binding = support::bound_default(&backend, &policy);
    let limiter = Limiter::builder()
        .backend(backend)
        .policy(policy)
        .build()
        .unwrap();
    let keys: Vec<String> = (0..12).map(|i| format!("user-{i}")).collect();
    let mut owners = std::collections::HashSet::new();
    for key in &keys {
        let state_keys = binding.state_keys(key.as_bytes());
        let slot = cluster.slot(&String::from_utf8(state_keys[0].clone()).unwrap());
        owners.insert(cluster.owner(slot));
        limiter
            .operate(key, tollgate::Operation::Penalty(5))
            .await
            .unwrap();
        // The sliding window (8) binds: 3 left.
        assert_eq!(limiter.allow_n(key, 0).await.unwrap().remaining, 3, "{key}");
        limiter
            .operate(key, tollgate::Operation::Refund(2))
            .await
            .unwrap();
        assert_eq!(limiter.allow_n(key, 0).await.unwrap().remaining, 5, "{key}");
        limiter
            .operate(key, tollgate::Operation::Block(Duration::from_secs(60)))
            .await
            .unwrap();
        let d = limiter.allow(key).await.unwrap();
        assert!(
            !d.allowed && d.retry_after.unwrap() > Duration::from_secs(55),
            "{key}"
        );
        for state_key in &state_keys {
            let port = cluster.owner(slot);
            let value = cli(port, &["GET", std::str::from_utf8(state_key).unwrap()]);
            assert!(value.starts_with('B'), "{key}: {value}");
        }
        limiter.operate(key, tollgate::Operation::Reset).await.unwrap();
        assert_eq!(limiter.allow_n(key, 0).await.unwrap().remaining, 8, "{key}");
    }
    assert_eq!(owners.len(), 3, "the keys spread over every primary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_decided_in_one_call_only_within_one_slot() {
    use tollgate::together::{allow_in_one_step, Part, Role};
    let cluster = Cluster::start(3, 0, 2_000);
    let backend = RedisBackend::connect_cluster(&cluster.urls()).await.unwrap();
    let policy = Policy::new(Strategy::FixedWindow, 1, Duration::from_secs(3_600)).unwrap();
    let limiter = |resource: &str| {
        Limiter::builder()
            .backend(backend.clone())
            .policy(policy)
            .resource(resource)
            .build()
            .unwrap()
    };
    let (a, b) = (limiter("a"), limiter("b"));
    let slot = |resource: &str, key: &str| {
        let binding = support::bound(&backend, Limiter::DEFAULT_KEY_PREFIX, resource, &policy);
        cluster.slot(&String::from_utf8(binding.state_keys(key.as_bytes())[0].clone()).unwrap())
    };
    let parts = |key: &'static str| {
        [
            Part {
                limiter: &a,
                key: key.as_bytes(),
                cost: 1,
                role: Role::Decisive,
            },
            Part {
                limiter: &b,
                key: key.as_bytes(),
                cost: 1,
                role: Role::Decisive,
            },
        ]
    };
    // A hash tag in the caller's key puts both limits' state in one slot.
    assert_eq!(slot("a", "{user-1}"), slot("b", "{user-1}"));
    let decisions = allow_in_one_step(&parts("{user-1}"))
        .await
        .expect("one slot: one call")
        .unwrap();
    assert!(decisions.iter().all(|d| d.allowed && d.remaining == 0));
    // The second request is denied by both, and nothing is charged.
    let decisions = allow_in_one_step(&parts("{user-1}")).await.unwrap().unwrap();
    assert!(decisions.iter().all(|d| !d.allowed));
    // Without one, the limits' state keys land in different slots: the
    // caller is told to decide one by one.
    assert_ne!(slot("a", "user-1"), slot("b", "user-1"));
    assert!(allow_in_one_step(&parts("user-1")).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leases_on_a_cluster_stay_exact_and_keep_their_lessees_in_the_key_slot() {
    let cluster = Cluster::start(3, 0, 2_000);
    let urls = cluster.urls();
    let mut backends = Vec::new();
    for _ in 0..4 {
        let backend = RedisBackend::builder()
            .timeout(Duration::from_secs(10))
            .connect_cluster(&urls)
            .await
            .unwrap();
        backends.push(backend);
    }
    let lease = tollgate::protection::Lease::new(8, Duration::from_secs(30));
    for (p, policy) in policies().into_iter().enumerate() {
        let prefix = format!("lease{p}");
        let limiters: Vec<_> = backends
            .iter()
            .map(|backend| {
                std::sync::Arc::new(
                    Limiter::builder()
                        .backend(backend.clone())
                        .policy(policy)
                        .key_prefix(&prefix)
                        .lease(lease)
                        .build()
                        .unwrap(),
                )
            })
            .collect();
        let tightest = policy.limits().iter().map(Limit::limit).min().unwrap();
        // Two rounds of 4 tasks per limiter and key, 4 requests each; the
        // leases end in between, giving back what they held.
        let mut per_key = [0u64; 12];
        for round in 0..2 {
            let mut tasks = Vec::new();
            for key in 0..12 {
                for limiter in &limiters {
                    for _ in 0..4 {
                        let limiter = limiter.clone();
                        tasks.push(tokio::spawn(async move {
                            let mut admitted = 0;
                            for _ in 0..4 {
                                admitted +=
                                    u64::from(limiter.allow(format!("user-{key}")).await.unwrap().allowed);
                            }
                            (key, admitted)
                        }));
                    }
                }
            }
            for task in tasks {
                let (key, admitted) = task.await.unwrap();
                per_key[key] += admitted;
            }
            assert!(
                per_key.iter().all(|&n| n <= tightest),
                "{policy} round {round}: {per_key:?}"
            );
            for limiter in &limiters {
                limiter.end_leases().await.unwrap();
            }
        }
        // Every unit given back was spent by the second round.
        assert_eq!(per_key, [tightest; 12], "{policy}");
        // The lessees of a key live in its slot.
        let state = support::bound(&backends[0], &prefix, "", &policy)
            .state_keys(b"user-0")
            .remove(0);
        let state = String::from_utf8(state).unwrap();
        let slot = cluster.slot(&state);
        let owner = cluster.owner(slot);
        // A calendar window has the compound layout even alone.
        let compound_layout = policy.is_compound() || policy.limits()[0].calendar().is_some();
        let lessees = if compound_layout {
            format!("{state}:lessees")
        } else {
            format!("{{{state}}}:lessees")
        };
        assert_eq!(cluster.slot(&lessees), slot, "{lessees}");
        assert_eq!(
            cli(owner, &["EXISTS", &lessees]),
            "1",
            "{policy}: {lessees} on {owner}"
        );
    }
}
