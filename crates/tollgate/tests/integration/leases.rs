//! Leased quotas on the custom-store adapter: several limiters standing for
//! several processes lease units of one key from one store, on a manual
//! clock, and the bounds of [leased quotas] hold on random traces. The
//! traces are checked against what the bounds say of the admitted requests
//! alone (a model of the contract, not of the implementation).
//!
//! [leased quotas]: https://docs.rs/tollgate/latest/tollgate/_documentation/semantics/index.html#leased-quotas

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use tollgate::backend::store::Store;
use tollgate::backend::store::StoreBackend;
use tollgate::backend::{decode_record, namespace};
use tollgate::clock::Clock;
use tollgate::clock::ManualClock;
use tollgate::protection::Lease;
use tollgate::strategy::State;
use tollgate::testing::{FlakyStore, MapStore};
use tollgate::{Limiter, Operation, Policy, Strategy};

const START: u64 = 1_700_000_000_000_000_000;

type Shared = Arc<FlakyStore<MapStore>>;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().build().unwrap()
}

/// `n` limiters of `policy` on `store`, each leasing with `lease`.
fn processes(
    n: usize,
    policy: Policy,
    lease: Option<Lease>,
    store: &Shared,
    clock: &ManualClock,
) -> Vec<Limiter<StoreBackend<Shared>>> {
    (0..n)
        .map(|_| {
            let builder = Limiter::builder()
                .backend(StoreBackend::new(store.clone()).clock(clock.clone()))
                .policy(policy)
                .local_clock(clock.clone());
            match lease {
                Some(lease) => builder.lease(lease),
                None => builder,
            }
            .build()
            .unwrap()
        })
        .collect()
}

/// The store's sliding-window start of `key` under `policy`, if any.
fn window_start(rt: &tokio::runtime::Runtime, store: &Shared, policy: &Policy, key: &str) -> Option<u64> {
    let mut full = namespace("tollgate", "", policy.limits()[0].strategy());
    full.extend_from_slice(key.as_bytes());
    let bytes = rt.block_on(store.get(&full)).unwrap()?;
    match decode_record(&bytes).unwrap().state {
        Some(State::SlidingWindow(s)) => Some(s.start),
        _ => None,
    }
}

/// One admitted request: when, and how many units.
#[derive(Clone, Copy, Debug)]
struct Admitted {
    at: u64,
    cost: u64,
    /// The store's sliding window start after the request.
    window: Option<u64>,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 120, ..ProptestConfig::default() })]

    #[test]
    fn leases_keep_the_bounds(
        strategy in 0usize..4,
        limit in 1u64..120,
        window_ms in 5u64..400,
        n in 1usize..4,
        max_units in 1u64..40,
        max_age_ms in 1u64..150,
        trace in prop::collection::vec(
            (prop_oneof![3 => 0u64..300_000, 1 => 0u64..20_000_000], 0usize..3, 1u64..4),
            1..300,
        ),
    ) {
        let strategy = Strategy::ALL[strategy];
        let policy = Policy::new(strategy, limit, Duration::from_millis(window_ms)).unwrap();
        let lease = Lease::new(max_units, Duration::from_millis(max_age_ms));
        let clock = ManualClock::default();
        clock.set_nanos(START);
        let store: Shared = Arc::new(FlakyStore::new(MapStore::with_manual_clock(&clock)));
        let limiters = processes(n, policy, Some(lease), &store, &clock);
        let rt = runtime();
        let mut admitted: Vec<Admitted> = Vec::new();
        let w = policy.limits()[0].rate_nanos().window;
        let t = policy.limits()[0].rate_nanos().interval;
        let held_elsewhere = (n as u64 - 1) * (max_units - 1);
        for &(dt, who, cost) in &trace {
            clock.advance(Duration::from_nanos(dt));
            let now = clock.now_nanos();
            let decision = rt.block_on(limiters[who % n].allow_n("k", cost)).unwrap();
            if decision.allowed {
                let window = window_start(&rt, &store, &policy, "k");
                admitted.push(Admitted { at: now, cost, window });
            } else if strategy == Strategy::FixedWindow {
                // Under-admission: denied only while the units admitted in
                // the bucket, this request and what the others may hold
                // unspent exceed the limit.
                let bucket = now / w;
                let spent: u64 = admitted.iter().filter(|a| a.at / w == bucket).map(|a| a.cost).sum();
                prop_assert!(
                    spent + cost + held_elsewhere > limit,
                    "denied at {now} with {spent} admitted in the bucket, cost {cost}"
                );
            }
        }
        match strategy {
            Strategy::FixedWindow => {
                // No over-admission: at most L units in any bucket.
                let mut by_bucket = std::collections::BTreeMap::<u64, u64>::new();
                for a in &admitted {
                    *by_bucket.entry(a.at / w).or_default() += a.cost;
                }
                for (bucket, units) in by_bucket {
                    prop_assert!(units <= limit, "bucket {bucket}: {units} > {limit}");
                }
            }
            Strategy::SlidingWindow => {
                // No over-admission: at most L units in any of the store's
                // windows [ws, ws + W).
                let mut by_window = std::collections::BTreeMap::<u64, u64>::new();
                for a in &admitted {
                    let ws = a.window.expect("an admitted request leaves a window");
                    prop_assert!(ws <= a.at && a.at < ws + w, "admitted outside its window");
                    *by_window.entry(ws).or_default() += a.cost;
                }
                for (ws, units) in by_window {
                    prop_assert!(units <= limit, "window at {ws}: {units} > {limit}");
                }
            }
            Strategy::TokenBucket | Strategy::LeakyBucket => {
                // At most L + floor((d + A) / T) units in any interval of
                // length d.
                let age = max_age_ms * 1_000_000;
                for (i, first) in admitted.iter().enumerate() {
                    let mut units = 0;
                    for last in &admitted[i..] {
                        units += last.cost;
                        let d = last.at - first.at;
                        prop_assert!(
                            units <= limit + (d + age) / t,
                            "{units} units in {d} ns (L {limit}, T {t}, A {age})"
                        );
                    }
                }
            }
            Strategy::Concurrency => unreachable!("a concurrency limit takes no lease"),
        }
    }
}

#[test]
fn a_hot_key_asks_the_store_once_per_lease() {
    let clock = ManualClock::default();
    clock.set_nanos(START);
    let policy = Policy::new(Strategy::TokenBucket, 10_000, Duration::from_secs(1)).unwrap();
    let rt = runtime();
    let mut calls = Vec::new();
    for lease in [None, Some(Lease::new(64, Duration::from_millis(100)))] {
        let store: Shared = Arc::new(FlakyStore::new(MapStore::with_manual_clock(&clock)));
        let limiters = processes(2, policy, lease, &store, &clock);
        let mut allowed = 0;
        for i in 0..4_000 {
            clock.advance(Duration::from_micros(100));
            allowed += u32::from(rt.block_on(limiters[i % 2].allow("hot")).unwrap().allowed);
        }
        assert_eq!(allowed, 4_000, "{lease:?}");
        calls.push(store.operations());
    }
    // A store call is a few operations of the store (state, lessees); with
    // leases of 64 units the calls fall by more than 16 times.
    assert!(calls[1] * 16 < calls[0], "store operations {calls:?}");
}

#[test]
fn a_lease_is_spent_locally_and_given_back_at_the_end() {
    let clock = ManualClock::default();
    clock.set_nanos(START);
    let policy = Policy::new(Strategy::FixedWindow, 100, Duration::from_secs(10)).unwrap();
    let store: Shared = Arc::new(FlakyStore::new(MapStore::with_manual_clock(&clock)));
    let lease = Lease::new(16, Duration::from_secs(1));
    let rt = runtime();
    let limiters = processes(2, policy, Some(lease), &store, &clock);
    let (a, b) = (&limiters[0], &limiters[1]);
    // The first request takes no lease; spending makes the next ones grow.
    let mut remaining = Vec::new();
    for _ in 0..10 {
        remaining.push(rt.block_on(a.allow("k")).unwrap().remaining);
    }
    assert_eq!(remaining[0], 99, "a key seen once leases nothing");
    // Every decision's remaining is what the store has left plus the
    // lease's unspent units: exact with one process.
    assert_eq!(remaining, (90..100).rev().collect::<Vec<_>>());
    let before = store.operations();
    let spent_locally = rt.block_on(a.allow("k")).unwrap();
    assert!(spent_locally.allowed);
    assert_eq!(store.operations(), before, "decided from the lease");
    // The other process sees the units leased as spent; ending the lease
    // gives them back.
    let seen = rt.block_on(b.allow_n("k", 0)).unwrap().remaining;
    let given = rt.block_on(a.end_leases()).unwrap();
    assert!(given > 0);
    let after = rt.block_on(b.allow_n("k", 0)).unwrap().remaining;
    assert_eq!(after, seen + given, "every unspent unit given back");
    assert_eq!(after, 89, "11 admitted, nothing else charged");
}

#[test]
fn an_operation_ends_the_lease_first() {
    let clock = ManualClock::default();
    clock.set_nanos(START);
    let policy = Policy::new(Strategy::TokenBucket, 50, Duration::from_secs(50)).unwrap();
    let store: Shared = Arc::new(FlakyStore::new(MapStore::with_manual_clock(&clock)));
    let rt = runtime();
    let limiters = processes(
        1,
        policy,
        Some(Lease::new(8, Duration::from_secs(5))),
        &store,
        &clock,
    );
    let a = &limiters[0];
    for _ in 0..6 {
        assert!(rt.block_on(a.allow("k")).unwrap().allowed);
    }
    rt.block_on(a.operate("k", Operation::Block(Duration::from_secs(1))))
        .unwrap();
    let blocked = rt.block_on(a.allow("k")).unwrap();
    assert!(!blocked.allowed, "a block is not spent around by a lease");
    clock.advance(Duration::from_secs(1));
    // The lease's units were given back before the block: 6 spent.
    let peek = rt.block_on(a.allow_n("k", 0)).unwrap();
    assert_eq!(peek.remaining, 50 - 6 + 1, "one unit refilled during the block");
}

#[test]
fn lease_settings_out_of_range_are_refused_by_name() {
    for (lease, field) in [
        (Lease::new(0, Duration::from_millis(100)), "lease.max_units"),
        (Lease::new(1 << 21, Duration::from_millis(100)), "lease.max_units"),
        (Lease::new(8, Duration::ZERO), "lease.max_age"),
        (Lease::new(8, Duration::from_secs(3_600)), "lease.max_age"),
    ] {
        let err = Limiter::builder()
            .policy(Policy::new(Strategy::FixedWindow, 10, Duration::from_secs(1)).unwrap())
            .lease(lease)
            .build()
            .unwrap_err();
        assert!(err.to_string().contains(field), "{err}");
    }
}

#[test]
fn a_lease_is_not_spent_after_its_age() {
    let clock = ManualClock::default();
    clock.set_nanos(START);
    let policy = Policy::new(Strategy::TokenBucket, 1_000, Duration::from_secs(1)).unwrap();
    let store: Shared = Arc::new(FlakyStore::new(MapStore::with_manual_clock(&clock)));
    let rt = runtime();
    let age = Duration::from_millis(50);
    let limiters = processes(1, policy, Some(Lease::new(32, age)), &store, &clock);
    let a = &limiters[0];
    for _ in 0..20 {
        assert!(rt.block_on(a.allow("k")).unwrap().allowed);
    }
    let before = store.operations();
    assert!(rt.block_on(a.allow("k")).unwrap().allowed);
    assert_eq!(store.operations(), before, "spent from the lease");
    clock.advance(age - Duration::from_nanos(1));
    assert!(rt.block_on(a.allow("k")).unwrap().allowed);
    assert_eq!(store.operations(), before, "still within its age");
    clock.advance(Duration::from_nanos(1));
    assert!(rt.block_on(a.allow("k")).unwrap().allowed);
    assert!(store.operations() > before, "a lease of age max_age is over");
}

#[test]
fn shadow_mode_and_the_lists_decide_with_leases_as_without() {
    let rt = runtime();
    let policy = Policy::new(Strategy::FixedWindow, 5, Duration::from_secs(60)).unwrap();
    let run = |lease: Option<Lease>| {
        let clock = ManualClock::default();
        clock.set_nanos(START);
        let store: Shared = Arc::new(FlakyStore::new(MapStore::with_manual_clock(&clock)));
        let mut builder = Limiter::builder()
            .backend(StoreBackend::new(store.clone()).clock(clock.clone()))
            .policy(policy)
            .local_clock(clock.clone())
            .shadow(true)
            .exempt(tollgate::KeyList::parse("exempt", ["10.0.0.0/8"]).unwrap())
            .deny(tollgate::KeyList::parse("deny", ["abuser"]).unwrap());
        if let Some(lease) = lease {
            builder = builder.lease(lease);
        }
        let limiter = builder.build().unwrap();
        let mut seen = Vec::new();
        for key in [
            "k", "k", "10.1.2.3", "k", "abuser", "k", "k", "k", "k", "10.1.2.3",
        ] {
            let d = rt.block_on(limiter.allow(key)).unwrap();
            seen.push((key, d.allowed, d.shadow_denied, d.remaining, d.listed));
        }
        rt.block_on(limiter.end_leases()).unwrap();
        let enforced = processes(1, policy, None, &store, &clock);
        let left = rt.block_on(enforced[0].allow_n("k", 0)).unwrap().remaining;
        (seen, left, store.operations() > 0)
    };
    let (with, left_with, _) = run(Some(Lease::new(4, Duration::from_secs(1))));
    let (without, left_without, _) = run(None);
    assert_eq!(with, without, "the same decisions");
    assert_eq!(
        (left_with, left_without),
        (0, 0),
        "5 charged, the shadow-denied ones not"
    );
    assert_eq!(
        with.iter().filter(|d| d.2).count(),
        3,
        "two over the limit and the denied key: {with:?}"
    );
}
