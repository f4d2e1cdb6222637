//! Deciding together ([`tollgate::together`]) on PostgreSQL: on random
//! requests of one to four parts over three policies and three keys (a
//! policy and key named twice, quotas and shadow parts, costs above the
//! limit, the clock going back), one call of `together` makes exactly the
//! decisions the contract derives from the pure functions, charges
//! nothing it takes back, and leaves exactly the states it says.

use crate::differential::{any_policy, Harness, START};
use crate::support::TestDatabase;

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tollgate::backend::Tick;
use tollgate::together::{self, Part, Role};
use tollgate::{Limiter, Operation, Policy, Strategy};
use tollgate_postgres::PostgresBackend;
use tollgate_test_support::together_model::{request, requests_match_the_contract};

const POLICIES: usize = 3;
const KEYS: usize = 3;

#[test]
fn one_call_decides_the_parts_of_a_request_as_the_contract_says() {
    let h = Harness::new();
    let mut runner = TestRunner::new(Config {
        cases: 64,
        ..Config::default()
    });
    let plan = (
        prop::collection::vec(any_policy(), POLICIES),
        prop::collection::vec(request(POLICIES, KEYS), 1..30),
    );
    runner
        .run(&plan, |(policies, requests)| {
            h.clock.set_nanos(START + 987_654_321);
            let limiters: Vec<Limiter<PostgresBackend>> = policies.iter().map(|p| h.limiter(*p)).collect();
            // Decided one by one, a denied request would charge and give
            // back (partial charges): the contract's check refuses that.
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

/// A request of two parts is one call of `together` and none of `decide`;
/// a part on a blocked key denies it, charging the other part nothing, and
/// the block stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_of_parts_is_one_call_and_a_block_denies_it_and_stays() {
    let db = TestDatabase::create().await;
    db.track_functions().await;
    let backend = PostgresBackend::builder(db.url())
        .pool_size(2)
        .connect()
        .await
        .unwrap();
    let hour = Duration::from_secs(3_600);
    let limiter = |strategy, limit, resource: &str| {
        let policy = Policy::new(strategy, limit, hour).unwrap();
        Limiter::builder()
            .backend(backend.clone())
            .policy(policy)
            .resource(resource)
            .build()
            .unwrap()
    };
    let (client, route) = (
        limiter(Strategy::FixedWindow, 3, "client"),
        limiter(Strategy::SlidingWindow, 10, "route"),
    );
    let request = |who: &'static str| {
        [(&client, who.as_bytes()), (&route, b"/a".as_slice())].map(|(limiter, key)| Part {
            limiter,
            key,
            cost: 1,
            role: Role::Decisive,
        })
    };
    for i in 0..5 {
        let got = together::allow_all(&request("alice")).await.unwrap();
        assert_eq!(got.denied, i >= 3, "request {i}: {got:?}");
        assert_eq!(got.partial_charges, 0);
    }
    // The route was charged by the three admitted requests alone.
    assert_eq!(route.allow_n("/a", 0).await.unwrap().remaining, 7);
    route
        .operate("/a", Operation::Block(Duration::from_secs(600)))
        .await
        .unwrap();
    let got = together::allow_all(&request("bob")).await.unwrap();
    assert!(got.denied && !got.decisions[1].allowed, "{got:?}");
    assert_eq!(
        client.allow_n("bob", 0).await.unwrap().remaining,
        3,
        "bob's part was charged"
    );
    let peek = route.allow_n("/a", 0).await.unwrap();
    assert!(
        !peek.allowed && peek.retry_after > Some(Duration::from_secs(500)),
        "the block went: {peek:?}"
    );
    drop((client, route, backend));
    assert_eq!(db.function_calls(&["together"], 6).await, 6);
    assert_eq!(
        db.function_calls(&["decide", "decide_fixed_window"], 0).await,
        3,
        "only the three peeks decide"
    );
}
