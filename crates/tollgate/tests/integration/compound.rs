//! Compound policies: several limits decided as one step, as SEMANTICS.md
//! ("Several limits on one request") defines them.
//!
//! The reference below implements that section directly from the single
//! strategy functions, independently of `strategy::decide_all`; the
//! in-memory backend and the store adapter must match it decision for
//! decision, and under contention no limit may ever be charged for a
//! request another limit denied.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use crate::support;
use tollgate::backend::store::StoreBackend;
use tollgate::backend::Tick;
use tollgate::clock::ManualClock;
use tollgate::strategy::{decide, Outcome, State};
use tollgate::testing::MapStore;
use tollgate::{Decision, Limit, Limiter, Policy, Strategy};

const START: u64 = 1_700_000_000_000_000_000;
const KEYS: usize = 3;

fn limit() -> impl proptest::strategy::Strategy<Value = Limit> {
    support::limit(1..8, 1..3_000)
}

/// Two or three limits, duplicates (same strategy and window) dropped.
fn compound_policy() -> impl proptest::strategy::Strategy<Value = Policy> {
    support::policy(limit(), 2..4)
}

/// (time step in ns, key index, cost); costs include peeks (0) and costs
/// above the largest limit (8).
fn trace() -> impl proptest::strategy::Strategy<Value = Vec<(u64, usize, u64)>> {
    prop::collection::vec(
        (
            prop_oneof![2 => 0u64..1_000, 2 => 0u64..100_000_000, 1 => 0u64..4_000_000_000],
            0usize..KEYS,
            prop_oneof![1 => Just(0u64), 6 => 1u64..4, 1 => 4u64..9],
        ),
        1..120,
    )
}

/// The contract, written from the single-limit functions: each limit
/// decides alone on the state its admitted requests left; the request is
/// admitted iff all admit, and only then is any state replaced.
fn reference(policy: &Policy, trace: &[(u64, usize, u64)]) -> Vec<Decision> {
    let limits = policy.limits();
    let mut states: Vec<Vec<Option<State>>> = vec![vec![None; limits.len()]; KEYS];
    let mut now = START;
    let mut decisions = Vec::new();
    for &(dt, key, cost) in trace {
        now += dt;
        let alone: Vec<(Outcome, Option<State>)> = limits
            .iter()
            .zip(&states[key])
            .map(|(l, s)| decide(l.strategy(), &l.rate_nanos(), *s, now, cost))
            .collect();
        let allowed = alone.iter().all(|(o, _)| o.allowed);
        // Each limit's answer about its state after the decision: charged
        // when admitted, otherwise as it was (a peek reads it).
        let after: Vec<Outcome> = if allowed || cost == 0 {
            alone.iter().map(|(o, _)| *o).collect()
        } else {
            limits
                .iter()
                .zip(&states[key])
                .zip(&alone)
                .map(|((l, s), (o, _))| {
                    if o.allowed {
                        decide(l.strategy(), &l.rate_nanos(), *s, now, 0).0
                    } else {
                        *o
                    }
                })
                .collect()
        };
        if allowed {
            states[key] = alone.iter().map(|(_, s)| *s).collect();
        }
        let remaining = after.iter().map(|o| o.remaining).min().unwrap();
        let reset = after.iter().map(|o| o.reset).max().unwrap();
        let (retry_after, bound_by) = if allowed {
            let least = after.iter().map(|o| o.remaining).min().unwrap();
            (None, after.iter().position(|o| o.remaining == least).unwrap())
        } else {
            // retry_i: 0 for a limit that admits, None (never) for one the
            // cost exceeds; the binding limit has the longest.
            let retry: Vec<Option<u64>> = alone
                .iter()
                .map(|(o, _)| if o.allowed { Some(0) } else { o.retry_after })
                .collect();
            match retry.iter().position(Option::is_none) {
                Some(i) => (None, i),
                None => {
                    let longest = alone
                        .iter()
                        .zip(&retry)
                        .filter(|((o, _), _)| !o.allowed)
                        .map(|(_, r)| r.unwrap())
                        .max()
                        .unwrap();
                    let i = alone
                        .iter()
                        .zip(&retry)
                        .position(|((o, _), r)| !o.allowed && *r == Some(longest))
                        .unwrap();
                    (Some(longest), i)
                }
            }
        };
        let mut decision = Decision::new(
            allowed,
            limits[bound_by].limit(),
            remaining,
            Tick::Nanos.duration(reset),
            retry_after.map(|t| Tick::Nanos.duration(t)),
        );
        decision.bound_by = bound_by;
        decisions.push(decision);
    }
    decisions
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn memory_decides_compound_policies_as_the_contract_says(policy in compound_policy(), trace in trace()) {
        let clock = ManualClock::default();
        clock.set_nanos(START);
        let limiter = Limiter::builder().policy(policy).clock(clock.clone()).build().unwrap();
        let expected = reference(&policy, &trace);
        for (i, &(dt, key, cost)) in trace.iter().enumerate() {
            clock.advance(Duration::from_nanos(dt));
            let got = limiter.check_n(format!("key-{key}"), cost);
            prop_assert_eq!(got, expected[i], "request {} (cost {}) of {}", i, cost, policy);
        }
    }

    #[test]
    fn the_store_adapter_decides_compound_policies_as_the_contract_says(
        policy in compound_policy(),
        trace in trace(),
    ) {
        let clock = ManualClock::default();
        clock.set_nanos(START);
        let backend = StoreBackend::new(MapStore::with_manual_clock(&clock)).clock(clock.clone());
        let limiter = Limiter::builder().policy(policy).backend(backend).build().unwrap();
        let expected = reference(&policy, &trace);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for (i, &(dt, key, cost)) in trace.iter().enumerate() {
            clock.advance(Duration::from_nanos(dt));
            let got = rt.block_on(limiter.allow_n(format!("key-{key}"), cost)).unwrap();
            prop_assert_eq!(got, expected[i], "request {} (cost {}) of {}", i, cost, policy);
        }
    }

    #[test]
    fn one_limit_in_a_compound_list_decides_as_that_limit_alone(limit in limit(), trace in trace()) {
        let clock = ManualClock::default();
        clock.set_nanos(START);
        let store = StoreBackend::new(MapStore::with_manual_clock(&clock)).clock(clock.clone());
        let alone = Limiter::builder().policy(Policy::from(limit)).clock(clock.clone()).build().unwrap();
        let listed = Limiter::builder()
            .policy(Policy::compound([limit]).unwrap())
            .backend(store)
            .build()
            .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for &(dt, key, cost) in &trace {
            clock.advance(Duration::from_nanos(dt));
            let key = format!("key-{key}");
            prop_assert_eq!(rt.block_on(listed.allow_n(&key, cost)).unwrap(), alone.check_n(&key, cost));
        }
    }
}

/// A burst cap of 60 per second and a sustained cap of 100 per hour.
fn burst_and_sustained() -> Policy {
    Policy::compound([
        Limit::new(Strategy::FixedWindow, 60, Duration::from_secs(1)).unwrap(),
        Limit::new(Strategy::TokenBucket, 100, Duration::from_secs(3_600)).unwrap(),
    ])
    .unwrap()
}

/// Two phases of contention one second apart: the burst cap admits 60 of
/// the first phase; had the hourly bucket been charged for the requests
/// the burst cap denied, the second phase would get fewer than the 40 the
/// bucket has left.
fn hammer(check: impl Fn() -> bool + Sync, clock: &ManualClock) -> [u64; 2] {
    let mut phases = [0; 2];
    for phase in &mut phases {
        let admitted = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..200 {
                        if check() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        *phase = admitted.load(Ordering::Relaxed);
        clock.advance(Duration::from_secs(2));
    }
    phases
}

#[test]
fn threads_on_one_key_never_charge_a_limit_for_a_denied_request() {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let limiter = Limiter::builder()
        .policy(burst_and_sustained())
        .clock(clock.clone())
        .build()
        .unwrap();
    assert_eq!(hammer(|| limiter.check("hot").allowed, &clock), [60, 40]);
}

/// Threads deciding many keys on one shard, each key by every thread, in
/// different orders: new keys (decided under the shard locks, growing the
/// slot arrays) meet decisions on known keys (made without them) and
/// resets (deletions). Every key must still get exactly its limit.
#[test]
fn threads_on_many_keys_each_get_exactly_the_tightest_limit() {
    const KEYS: u64 = 3_000;
    const THREADS: u64 = 4;
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let limiter = Limiter::builder()
        .policy(
            Policy::compound([
                Limit::new(Strategy::SlidingWindow, 3, Duration::from_secs(60)).unwrap(),
                Limit::new(Strategy::TokenBucket, 5, Duration::from_secs(3_600)).unwrap(),
            ])
            .unwrap(),
        )
        .backend(tollgate::MemoryBackend::new().shards(1).clock(clock.clone()))
        .build()
        .unwrap();
    let admitted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (limiter, admitted) = (&limiter, &admitted);
            s.spawn(move || {
                for round in 0..2 {
                    for i in 0..KEYS {
                        // Each thread walks the keys from its own offset.
                        let k = (i * 7 + t * KEYS / THREADS + round) % KEYS;
                        if limiter.check(format!("k{k}")).allowed {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
        // Resets of keys nobody decides on delete state beside them.
        s.spawn(|| {
            for i in 0..KEYS {
                let key = format!("other{i}");
                limiter
                    .operate_now(key.as_bytes(), tollgate::Operation::Reset)
                    .expect("in memory, at once")
                    .unwrap();
                limiter.check(&key);
            }
        });
    });
    assert_eq!(admitted.load(Ordering::Relaxed), KEYS * 3);
    for k in 0..KEYS {
        let peek = limiter.check_n(format!("k{k}"), 0);
        assert_eq!((peek.remaining, peek.bound_by), (0, 0), "key k{k}");
    }
}

#[test]
fn tasks_through_the_store_adapter_never_charge_a_limit_for_a_denied_request() {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let backend = StoreBackend::new(MapStore::with_manual_clock(&clock)).clock(clock.clone());
    let limiter = Arc::new(
        Limiter::builder()
            .policy(burst_and_sustained())
            .backend(backend)
            .build()
            .unwrap(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .build()
        .unwrap();
    let check = || rt.block_on(limiter.allow("hot")).unwrap().allowed;
    assert_eq!(hammer(check, &clock), [60, 40]);
}

#[test]
fn the_decision_names_the_binding_limit() {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let limiter = Limiter::builder()
        .policy(burst_and_sustained())
        .clock(clock.clone())
        .build()
        .unwrap();
    let first = limiter.check("k");
    // 59 left of the burst, 99 of the hour: the burst binds.
    assert_eq!((first.bound_by, first.limit, first.remaining), (0, 60, 59));
    for _ in 0..59 {
        assert!(limiter.check("k").allowed);
    }
    let denied = limiter.check("k");
    assert!(!denied.allowed);
    assert_eq!((denied.bound_by, denied.limit, denied.remaining), (0, 60, 0));
    assert_eq!(denied.retry_after, Some(Duration::from_secs(1) - Duration::ZERO));
    // A cost above both limits can never pass: no retry, and the tie goes
    // to the first listed.
    clock.advance(Duration::from_secs(1));
    let never = limiter.check_n("k", 101);
    assert_eq!(
        (never.allowed, never.retry_after, never.bound_by),
        (false, None, 0)
    );
    // Once the hour has 10 left, a cost of 20 fits the burst cap but waits
    // for the bucket, which binds.
    for _ in 0..30 {
        assert!(limiter.check("k").allowed);
    }
    let waits = limiter.check_n("k", 20);
    assert_eq!(
        (waits.allowed, waits.bound_by, waits.limit, waits.remaining),
        (false, 1, 100, 10)
    );
    // 10 more units of 36 s each, less the second that has passed.
    assert_eq!(waits.retry_after, Some(Duration::from_secs(36 * 10 - 1)));
}

#[test]
fn compound_policies_refuse_empty_oversized_and_redundant_lists() {
    let l = |s, n, secs| Limit::new(s, n, Duration::from_secs(secs)).unwrap();
    let err = Policy::compound([]).unwrap_err();
    assert_eq!(err.field(), "limits");
    let many = (1..=tollgate::Policy::MAX_LIMITS as u64 + 1).map(|i| l(Strategy::FixedWindow, 10, i));
    let err = Policy::compound(many).unwrap_err();
    assert_eq!(err.field(), "limits");
    assert!(err.reason().contains("more than 8"), "{err}");
    let err = Policy::compound([
        l(Strategy::TokenBucket, 10, 1),
        l(Strategy::FixedWindow, 10, 1),
        l(Strategy::TokenBucket, 20, 1),
    ])
    .unwrap_err();
    assert_eq!(err.field(), "limits[2]");
    assert!(err.reason().contains("limits[0]"), "{err}");
    let eight = (1..=tollgate::Policy::MAX_LIMITS as u64).map(|i| l(Strategy::SlidingWindow, 10 * i, i));
    assert_eq!(
        Policy::compound(eight).unwrap().limits().len(),
        tollgate::Policy::MAX_LIMITS
    );
}

#[test]
fn a_policy_and_a_limit_given_together_are_refused() {
    let err = Limiter::builder()
        .policy(burst_and_sustained())
        .limit(5)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("invalid policy"), "{err}");
}
