//! Deciding together ([`tollgate::together`]): on random requests of one to
//! four parts over three policies and three keys (a policy and key named
//! twice, shadow parts, costs above the limit), one Redis call makes
//! exactly the decisions the contract derives from the pure functions, and
//! leaves exactly the states it says; concurrent requests on separate
//! connections never see each other's passing charges; and each part gets
//! what a request of it alone gets from its limiter's deny cache and lease.

use crate::differential::{any_compound_policy, any_policy, Harness, START};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tollgate::backend::Tick;
use tollgate::protection::DenyCache;
use tollgate::protection::Lease;
use tollgate::together::{self, Part, Role};
use tollgate::{Limiter, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::redis::RedisServer;
use tollgate_test_support::together_model::{request, requests_match_the_contract};

const POLICIES: usize = 3;
const KEYS: usize = 3;

fn matches_the_contract(
    h: &Harness,
    policies: impl proptest::strategy::Strategy<Value = Policy>,
    cases: u32,
) {
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    let plan = (
        prop::collection::vec(policies, POLICIES),
        prop::collection::vec(request(POLICIES, KEYS), 1..40),
    );
    runner
        .run(&plan, |(policies, requests)| {
            h.clock.set_nanos(START + 987_654_321);
            let limiters: Vec<Limiter<RedisBackend>> = policies.iter().map(|p| h.limiter(*p)).collect();
            // One script call decides each request's parts (no lists,
            // leases or open breakers here); the roles are concluded after.
            requests_match_the_contract(
                (&h.rt, &h.clock),
                (&policies, &limiters),
                KEYS,
                &requests,
                (START / 2, Tick::Micros),
            )
        })
        .unwrap();
}

#[test]
fn one_call_decides_as_the_contract_says_on_single_limits() {
    matches_the_contract(&Harness::new(), any_policy(), 96);
}

#[test]
fn one_call_decides_as_the_contract_says_on_compound_policies() {
    matches_the_contract(&Harness::new(), any_compound_policy(), 48);
}

#[test]
fn scripts_decide_together_as_the_library_does() {
    matches_the_contract(&Harness::with_scripts(), any_policy(), 24);
}

/// A request whose second part is over its limit never shows its first
/// part's charge to anyone: with 32 such requests in flight on other
/// connections, a request for the one unit left on the first part's key is
/// admitted every time. Decided one by one with refunds, it is denied
/// whenever it lands between a charge and its refund.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_request_never_shows_a_charge_to_others() {
    let server = RedisServer::start();
    let policy = Policy::new(Strategy::FixedWindow, 1, Duration::from_secs(3_600)).unwrap();
    let limiter = |backend: RedisBackend, resource: &str| {
        Arc::new(
            Limiter::builder()
                .backend(backend)
                .policy(policy)
                .resource(resource)
                .build()
                .unwrap(),
        )
    };
    let flood_backend = RedisBackend::connect(&server.url()).await.unwrap();
    let (shared, full) = (
        limiter(flood_backend.clone(), "shared"),
        limiter(flood_backend, "full"),
    );
    assert!(full.allow("f").await.unwrap().allowed);
    let other = limiter(RedisBackend::connect(&server.url()).await.unwrap(), "shared");
    let mut admitted = 0;
    for round in 0..20 {
        let key = format!("k{round}");
        let stop = Arc::new(AtomicBool::new(false));
        let denials = Arc::new(AtomicU64::new(0));
        let flood: Vec<_> = (0..32)
            .map(|_| {
                let (shared, full, key) = (shared.clone(), full.clone(), key.clone());
                let (stop, denials) = (stop.clone(), denials.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let parts = [
                            Part {
                                limiter: &*shared,
                                key: key.as_bytes(),
                                cost: 1,
                                role: Role::Decisive,
                            },
                            Part {
                                limiter: &*full,
                                key: b"f",
                                cost: 1,
                                role: Role::Decisive,
                            },
                        ];
                        let decisions = together::allow_in_one_step(&parts).await.unwrap().unwrap();
                        assert!(!decisions[1].allowed, "{decisions:?}");
                        denials.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        // The flood is running: every task has had time for a request.
        while denials.load(Ordering::Relaxed) < 64 {
            tokio::task::yield_now().await;
        }
        admitted += u32::from(other.allow(&key).await.unwrap().allowed);
        stop.store(true, Ordering::Relaxed);
        for task in flood {
            task.await.unwrap();
        }
    }
    assert_eq!(
        admitted, 20,
        "requests for a free unit denied by another request's passing charge"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_part_denies_the_request_and_charges_nothing() {
    let server = RedisServer::start();
    let backend = RedisBackend::connect(&server.url()).await.unwrap();
    let limiter = |resource: &str, limit: u64| {
        Limiter::builder()
            .backend(backend.clone())
            .policy(Policy::new(Strategy::TokenBucket, limit, Duration::from_secs(3_600)).unwrap())
            .resource(resource)
            .build()
            .unwrap()
    };
    let (free, blocked) = (limiter("free", 5), limiter("blocked", 5));
    blocked
        .operate("k", tollgate::Operation::Block(Duration::from_secs(60)))
        .await
        .unwrap();
    let part = |limiter, decisive| Part {
        limiter,
        key: b"k",
        cost: 2,
        role: if decisive { Role::Decisive } else { Role::Shadow },
    };
    let decisions = together::allow_in_one_step(&[part(&free, true), part(&blocked, true)])
        .await
        .unwrap()
        .unwrap();
    assert!(
        decisions[0].allowed && decisions[0].remaining == 5,
        "{decisions:?}"
    );
    let left = decisions[1].retry_after.unwrap();
    assert!(
        !decisions[1].allowed && left > Duration::from_secs(55),
        "{decisions:?}"
    );
    assert_eq!(
        free.allow_n("k", 0).await.unwrap().remaining,
        5,
        "nothing charged"
    );
    // The block stays; a shadow part's block denies nothing.
    let decisions = together::allow_in_one_step(&[part(&free, true), part(&blocked, false)])
        .await
        .unwrap()
        .unwrap();
    assert!(
        decisions[0].allowed && decisions[0].remaining == 3,
        "{decisions:?}"
    );
    assert!(!decisions[1].allowed);
    assert!(!blocked.allow("k").await.unwrap().allowed, "still blocked");
}

/// A limiter of `policy` on the harness's Redis with a deny cache on the
/// harness's clock, under a key prefix of its own.
fn cached(h: &Harness, policy: Policy, prefix: &str) -> Limiter<RedisBackend> {
    Limiter::builder()
        .backend(h.backend().clone())
        .policy(policy)
        .key_prefix(prefix)
        .local_clock(h.clock.clone())
        .deny_cache(DenyCache::default())
        .build()
        .unwrap()
}

#[test]
fn each_part_gets_from_the_deny_cache_what_it_alone_gets() {
    let h = Harness::new();
    let mut runner = TestRunner::new(Config {
        cases: 64,
        ..Config::default()
    });
    let case = AtomicU64::new(0);
    // The first call loads the function library into Redis, a second call.
    let warm = cached(
        &h,
        Policy::new(Strategy::FixedWindow, 1, Duration::from_secs(1)).unwrap(),
        "warm",
    );
    h.rt.block_on(warm.allow_n("k", 0)).unwrap();
    let plan = (
        any_policy(),
        prop::collection::vec(
            (prop_oneof![3 => 0u64..200_000, 1 => 0u64..5_000_000_000], 0u64..3),
            1..80,
        ),
    );
    runner
        .run(&plan, |(policy, trace)| {
            h.clock.set_nanos(START);
            let case = case.fetch_add(1, Ordering::Relaxed);
            // The same limit decided alone, and as the first part of a
            // request whose second part never denies.
            let alone = cached(&h, policy, &format!("alone{case}"));
            let first = cached(&h, policy, &format!("first{case}"));
            let free = cached(
                &h,
                Policy::new(Strategy::FixedWindow, 1 << 40, Duration::from_secs(3_600)).unwrap(),
                &format!("free{case}"),
            );
            for (i, &(dt, cost)) in trace.iter().enumerate() {
                h.clock.advance(Duration::from_nanos(dt));
                let before = h.script_calls();
                let want = h.rt.block_on(alone.allow_n("k", cost)).unwrap();
                let alone_calls = h.script_calls() - before;
                let parts = [
                    Part {
                        limiter: &first,
                        key: b"k",
                        cost,
                        role: Role::Decisive,
                    },
                    Part {
                        limiter: &free,
                        key: b"f",
                        cost: 1,
                        role: Role::Decisive,
                    },
                ];
                let before = h.script_calls();
                let got =
                    h.rt.block_on(together::allow_in_one_step(&parts))
                        .ok_or_else(|| TestCaseError::fail("Redis did not decide together"))?
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let calls = h.script_calls() - before;
                prop_assert_eq!(got[0], want, "request {} (cost {}) of {}", i, cost, policy);
                prop_assert_eq!(
                    calls,
                    alone_calls,
                    "store calls of request {} (cost {}) of {}",
                    i,
                    cost,
                    policy
                );
                // A denial the cache held asked the store nothing, and the
                // other part was not asked about.
                prop_assert_eq!(got[1].not_asked, calls == 0, "request {}", i);
                prop_assert_eq!(got[1].allowed, true);
            }
            Ok(())
        })
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_admitted_from_its_lease_is_charged_only_when_the_request_is_admitted() {
    let server = RedisServer::start();
    let backend = RedisBackend::connect(&server.url()).await.unwrap();
    let hot = Limiter::builder()
        .backend(backend.clone())
        .policy(Policy::new(Strategy::FixedWindow, 1_000_000, Duration::from_secs(3_600)).unwrap())
        .key_prefix("hot")
        .lease(Lease::new(16, Duration::from_secs(60)))
        .build()
        .unwrap();
    let tight = Limiter::builder()
        .backend(backend)
        .policy(Policy::new(Strategy::FixedWindow, 30, Duration::from_secs(3_600)).unwrap())
        .key_prefix("tight")
        .deny_cache(DenyCache::default())
        .build()
        .unwrap();
    let parts = [
        Part {
            limiter: &hot,
            key: b"k",
            cost: 1,
            role: Role::Decisive,
        },
        Part {
            limiter: &tight,
            key: b"k",
            cost: 1,
            role: Role::Decisive,
        },
    ];
    let mut admitted = 0;
    let mut denied_before_the_store = 0;
    for _ in 0..100 {
        let before = server.script_calls();
        let decided = together::allow_all(&parts).await.unwrap();
        if decided.decisions.iter().all(|d| d.allowed) {
            admitted += 1;
        } else if server.script_calls() == before {
            denied_before_the_store += 1;
        }
    }
    assert_eq!(admitted, 30, "the tight limit decides");
    assert!(
        denied_before_the_store > 60,
        "{denied_before_the_store} of 70 denials from the cache"
    );
    // What the hot key's leases spent on denied requests went back to the
    // lease: once every lease has ended, Redis holds exactly the admitted.
    hot.end_leases().await.unwrap();
    let charged: u64 = server
        .cli(&["GET", "hot::fixed_window:k"])
        .trim()
        .split(':')
        .nth(1)
        .unwrap_or("0")
        .parse()
        .unwrap();
    assert_eq!(charged, 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_naming_keys_in_opposite_orders_never_wait_on_each_other() {
    let server = RedisServer::start();
    let backend = RedisBackend::connect(&server.url()).await.unwrap();
    let limiter = |prefix: &str| {
        Arc::new(
            Limiter::builder()
                .backend(backend.clone())
                .policy(Policy::new(Strategy::FixedWindow, 3, Duration::from_millis(1)).unwrap())
                .key_prefix(prefix)
                .deny_cache(DenyCache::default())
                .build()
                .unwrap(),
        )
    };
    let (a, b) = (limiter("a"), limiter("b"));
    let mut tasks = Vec::new();
    for t in 0..16 {
        let (a, b) = (a.clone(), b.clone());
        tasks.push(tokio::spawn(async move {
            let mut admitted = 0u32;
            for _ in 0..1_000 {
                let first = Part {
                    limiter: &*a,
                    key: b"k",
                    cost: 1,
                    role: Role::Decisive,
                };
                let second = Part {
                    limiter: &*b,
                    key: b"k",
                    cost: 1,
                    role: Role::Decisive,
                };
                let parts = if t % 2 == 0 {
                    [first, second]
                } else {
                    [second, first]
                };
                let decided = together::allow_all(&parts).await.unwrap();
                admitted += u32::from(decided.decisions.iter().all(|d| d.allowed));
            }
            admitted
        }));
    }
    // Every request is answered: a request waits for another's answer only
    // while it holds no single flight of its own.
    let all = tokio::time::timeout(Duration::from_secs(60), async {
        let mut admitted = 0;
        for task in tasks {
            admitted += task.await.unwrap();
        }
        admitted
    })
    .await
    .expect("no request waits on another that waits on it");
    assert!(all > 0, "windows of 1 ms admitted some");
}
