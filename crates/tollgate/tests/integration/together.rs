//! Deciding together on the backends that decide one part at a time (in
//! memory and through the store adapter): [`together::allow_all`] makes
//! exactly the decisions the contract derives from the pure functions and
//! leaves exactly the states it says (the same model the Redis backend's
//! one-call scripts are checked against), and the service's Envoy
//! scenarios (all or nothing, a key named twice, a blocked descriptor)
//! hold in the core.

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tollgate::backend::store::StoreBackend;
use tollgate::backend::{Backend, Tick};
use tollgate::clock::ManualClock;
use tollgate::testing::MapStore;
use tollgate::together::{self, Part, Role};
use tollgate::{Limiter, Policy, Strategy};
use tollgate_test_support::together_model::{request, requests_match_the_contract};

use crate::support;

const START: u64 = 1_700_000_000_000_000_000;
const POLICIES: usize = 3;
const KEYS: usize = 3;

fn any_policy() -> impl proptest::strategy::Strategy<Value = Policy> {
    support::policy(support::limit(1..6, 1..3_000), 1..3)
}

/// Random requests on `POLICIES` limiters built by `build`, each decided by
/// `decide_all` and compared with the contract's model at nanosecond
/// ticks; then every key's state, by a charge-free decision.
fn matches_the_contract<B: Backend>(build: impl Fn(Policy, &ManualClock) -> Limiter<B>, cases: u32) {
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    let plan = (
        prop::collection::vec(any_policy(), POLICIES),
        prop::collection::vec(request(POLICIES, KEYS), 1..40),
    );
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runner
        .run(&plan, |(policies, requests)| {
            let clock = ManualClock::default();
            clock.set_nanos(START);
            let limiters: Vec<Limiter<B>> = policies.iter().map(|p| build(*p, &clock)).collect();
            requests_match_the_contract(
                (&rt, &clock),
                (&policies, &limiters),
                KEYS,
                &requests,
                (START / 2, Tick::Nanos),
            )
        })
        .unwrap();
}

#[test]
fn in_memory_requests_decide_as_the_contract_says() {
    matches_the_contract(
        |policy, clock| {
            Limiter::builder()
                .policy(policy)
                .clock(clock.clone())
                .build()
                .unwrap()
        },
        96,
    );
}

#[test]
fn store_adapter_requests_decide_as_the_contract_says() {
    matches_the_contract(
        |policy, clock| {
            let backend = StoreBackend::new(MapStore::with_manual_clock(clock)).clock(clock.clone());
            Limiter::builder()
                .policy(policy)
                .backend(backend)
                .build()
                .unwrap()
        },
        48,
    );
}

/// The service's Envoy scenario, in the core: an address limit of 3 and a
/// user limit of 5 a second, decided together in memory.
#[tokio::test]
async fn several_parts_are_all_or_nothing() {
    let clock = ManualClock::default();
    clock.set_nanos(START);
    let limiter = |limit| {
        Limiter::builder()
            .strategy(Strategy::FixedWindow)
            .limit(limit)
            .window(Duration::from_secs(1))
            .clock(clock.clone())
            .build()
            .unwrap()
    };
    let (address, user) = (limiter(3), limiter(5));
    let part = |limiter, key: &'static str| Part {
        limiter,
        key: key.as_bytes(),
        cost: 1,
        role: Role::Decisive,
    };
    let left = |limiter: &Limiter, key: &str| limiter.check_n(key, 0).remaining;
    let both = [part(&address, "10.0.0.2"), part(&user, "alice")];
    for _ in 0..3 {
        let decided = together::allow_all(&both).await.unwrap();
        assert!(decided.decisions.iter().all(|d| d.allowed));
    }
    assert_eq!(left(&user, "alice"), 2);
    // The address is used up: denied, and the user's limit not charged.
    for _ in 0..3 {
        let decided = together::allow_all(&both).await.unwrap();
        assert!(!decided.decisions[0].allowed);
        assert!(decided.decisions[1].allowed);
        assert_eq!(decided.decisions[1].remaining, 2);
    }
    assert_eq!(left(&user, "alice"), 2);
    // The user first: charged, given back when the address denies, and
    // reported as it stands, not as it stood while charged.
    let user_first = [part(&user, "alice"), part(&address, "10.0.0.2")];
    let decided = together::allow_all(&user_first).await.unwrap();
    assert!(!decided.decisions[1].allowed);
    assert!(decided.decisions[0].allowed);
    assert_eq!(decided.decisions[0].remaining, 2);
    assert_eq!(decided.partial_charges, 0);
    assert_eq!(left(&user, "alice"), 2);
    // One key twice counts twice: 2 + 2 fit in 5, a third pair does not,
    // and charges nothing.
    let twice = [part(&user, "bob"), part(&user, "bob")];
    assert!(together::allow_all(&twice).await.unwrap().decisions[1].allowed);
    assert!(together::allow_all(&twice).await.unwrap().decisions[1].allowed);
    let third = together::allow_all(&twice).await.unwrap();
    assert!(third.decisions[0].allowed && !third.decisions[1].allowed);
    assert_eq!(third.decisions[0].remaining, 1);
    assert_eq!(left(&user, "bob"), 1);
    // A request that a part admitting nothing denies reports every other
    // part as it stands, charging nothing: a fitting part admitted, a
    // used-up one denied with the wait it would get alone.
    let zero = Limiter::builder()
        .policy(tollgate::Policy::zero(Duration::from_secs(1)).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap();
    let blocked = [
        part(&user, "carol"),
        part(&address, "10.0.0.2"),
        part(&zero, "carol"),
    ];
    let decided = together::allow_all(&blocked).await.unwrap();
    assert!(decided.denied && !decided.decisions[2].allowed);
    let reported = decided.decisions;
    assert!(reported[0].allowed);
    assert_eq!(reported[0].remaining, 5);
    assert!(!reported[1].allowed);
    assert_eq!(reported[1].retry_after, Some(Duration::from_secs(1)));
    assert_eq!(left(&user, "carol"), 5);
    // A part that is not decisive never denies the request.
    let lenient = [
        Part {
            role: Role::Shadow,
            ..part(&address, "10.0.0.2")
        },
        part(&user, "dave"),
    ];
    let decided = together::allow_all(&lenient).await.unwrap();
    assert!(!decided.denied && decided.decisions[1].allowed);
    let shadow = decided.decisions[0];
    assert!(
        shadow.allowed && shadow.shadow_denied,
        "reported admitted: {shadow:?}"
    );
    assert_eq!(left(&user, "dave"), 4);
}
