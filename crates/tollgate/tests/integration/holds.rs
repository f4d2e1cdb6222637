//! Estimates settled by actual usage (SEMANTICS.md, "Estimates settled"),
//! in memory and on a custom store: a hold and its settle leave a key
//! exactly as a request of the estimate followed by a refund of what was
//! not used (or a penalty of what went over) does; a settle counts once;
//! and many holds settled at random leave each key charged exactly the sum
//! of their usage.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use tollgate::backend::store::StoreBackend;
use tollgate::backend::Backend;
use tollgate::clock::ManualClock;
use tollgate::testing::MapStore;
use tollgate::{Decision, Error, Limiter, Operation, Policy, Strategy};

const START: Duration = Duration::from_secs(1_700_000_000);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().build().unwrap()
}

/// What a peek tells of a key: the figures two limiters must agree on.
fn figures(d: &Decision) -> (bool, u64, Duration, Option<Duration>) {
    (d.allowed, d.remaining, d.reset, d.retry_after)
}

/// Holds `estimate` on `held` and settles it with `used`; charges
/// `estimate` on `plain` and refunds or penalizes the difference. Both
/// must then answer alike.
async fn hold_and_settle<B: Backend, C: Backend>(
    held: &Limiter<B>,
    plain: &Limiter<C>,
    (key, estimate, used): (&str, u64, u64),
) {
    let hold = held.hold(key, estimate).await.unwrap();
    let charged = plain.allow_n(key, estimate).await.unwrap();
    assert_eq!(figures(hold.decision()), figures(&charged), "hold {estimate}");
    let Some(id) = hold.id() else {
        return;
    };
    let settled = held.settle(key, id, used).await.unwrap();
    assert!(settled.settled);
    match used.cmp(&estimate) {
        std::cmp::Ordering::Less => plain
            .operate(key, Operation::Refund(estimate - used))
            .await
            .unwrap(),
        std::cmp::Ordering::Greater => plain
            .operate(key, Operation::Penalty(used - estimate))
            .await
            .unwrap(),
        std::cmp::Ordering::Equal => {}
    }
    let peek = plain.allow_n(key, 0).await.unwrap();
    assert_eq!(
        figures(&settled.decision),
        figures(&peek),
        "settled {estimate} with {used}"
    );
    let again = held.settle(key, id, used).await.unwrap();
    assert!(!again.settled, "a second settle counts for nothing");
    assert_eq!(figures(&again.decision), figures(&peek));
}

fn policy() -> impl proptest::strategy::Strategy<Value = Policy> {
    (0usize..3, 5u64..50).prop_map(|(kind, limit)| {
        let strategy = [
            Strategy::TokenBucket,
            Strategy::LeakyBucket,
            Strategy::FixedWindow,
        ][kind];
        Policy::new(strategy, limit, Duration::from_secs(3_600)).unwrap()
    })
}

fn steps() -> impl proptest::strategy::Strategy<Value = Vec<(u8, u64, u64)>> {
    proptest::collection::vec((0u8..3, 0u64..20, 0u64..30), 1..40)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_settled_hold_is_a_charge_then_a_refund_or_a_penalty(policy in policy(), steps in steps()) {
        let clock = ManualClock::new(START);
        let memory = Limiter::builder().clock(clock.clone()).policy(policy).build().unwrap();
        let store = StoreBackend::new(MapStore::with_manual_clock(&clock)).clock(clock.clone());
        let stored = Limiter::builder().backend(store).policy(policy).build().unwrap();
        let plain = Limiter::builder().clock(clock.clone()).policy(policy).build().unwrap();
        let plain_too = Limiter::builder().clock(clock.clone()).policy(policy).build().unwrap();
        runtime().block_on(async {
            for (key, estimate, used) in steps {
                let key = format!("k{key}");
                hold_and_settle(&memory, &plain, (&key, estimate, used)).await;
                hold_and_settle(&stored, &plain_too, (&key, estimate, used)).await;
                clock.advance(Duration::from_millis(7));
            }
        });
    }
}

/// Many holds with random estimates and usage, settled in a shuffled
/// order: each key is charged exactly the sum of its usage.
async fn usage_is_exact<B: Backend>(limiter: Arc<Limiter<B>>) {
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |bound: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % bound
    };
    let mut open = Vec::new();
    let mut used_by = [0u64; 10];
    for _ in 0..1_000 {
        let tenant = next(10) as usize;
        let estimate = 1 + next(100);
        let hold = limiter.hold(format!("t{tenant}"), estimate).await.unwrap();
        open.push((tenant, hold.id().expect("the budget is large")));
        if open.len() > 50 {
            let (tenant, id) = open.swap_remove(next(open.len() as u64) as usize);
            let used = next(200);
            used_by[tenant] += used;
            assert!(
                limiter
                    .settle(format!("t{tenant}"), id, used)
                    .await
                    .unwrap()
                    .settled
            );
        }
    }
    for (tenant, id) in open {
        let used = next(200);
        used_by[tenant] += used;
        assert!(
            limiter
                .settle(format!("t{tenant}"), id, used)
                .await
                .unwrap()
                .settled
        );
    }
    for (tenant, used) in used_by.iter().enumerate() {
        let peek = limiter.allow_n(format!("t{tenant}"), 0).await.unwrap();
        assert_eq!(peek.remaining, 10_000_000 - used, "tenant {tenant}");
    }
}

#[tokio::test]
async fn each_key_is_charged_exactly_its_usage() {
    let policy = Policy::new(Strategy::FixedWindow, 10_000_000, Duration::from_secs(3_600)).unwrap();
    let clock = ManualClock::new(START);
    let memory = Limiter::builder()
        .clock(clock.clone())
        .policy(policy)
        .build()
        .unwrap();
    usage_is_exact(Arc::new(memory)).await;
    let store = StoreBackend::new(MapStore::with_manual_clock(&clock)).clock(clock.clone());
    usage_is_exact(Arc::new(
        Limiter::builder().backend(store).policy(policy).build().unwrap(),
    ))
    .await;
}

#[tokio::test]
async fn a_hold_settles_within_its_window_and_an_old_bucket_gives_nothing_back() {
    let clock = ManualClock::new(START);
    let policy = Policy::new(Strategy::FixedWindow, 10, Duration::from_secs(60)).unwrap();
    let limiter = Limiter::builder()
        .clock(clock.clone())
        .policy(policy)
        .build()
        .unwrap();
    let hold = limiter.hold("k", 8).await.unwrap();
    let late = limiter.hold("late", 8).await.unwrap();
    // The bucket ends 40 s after START (START is 20 s into one).
    clock.advance(Duration::from_secs(45));
    // The bucket it was charged in has passed: nothing to give back.
    let settled = limiter.settle("k", hold.id().unwrap(), 2).await.unwrap();
    assert!(settled.settled);
    assert_eq!(settled.decision.remaining, 10);
    clock.advance(Duration::from_secs(15));
    let expired = limiter.settle("late", late.id().unwrap(), 20).await.unwrap();
    assert!(!expired.settled, "past the window: nothing charged");
    assert_eq!(expired.decision.remaining, 10);
}

#[tokio::test]
async fn denials_exemptions_and_concurrency_limits_hold_nothing() {
    let policy = Policy::new(Strategy::TokenBucket, 5, Duration::from_secs(60)).unwrap();
    let limiter = Limiter::builder()
        .policy(policy)
        .exempt(tollgate::KeyList::parse("exempt", ["vip"]).unwrap())
        .build()
        .unwrap();
    let denied = limiter.hold("k", 6).await.unwrap();
    assert!(!denied.decision().allowed && denied.id().is_none());
    let vip = limiter.hold("vip", 3).await.unwrap();
    assert!(vip.decision().allowed && vip.id().is_none());
    let concurrency = Policy::new(Strategy::Concurrency, 5, Duration::from_secs(60)).unwrap();
    let permits = Limiter::builder().policy(concurrency).build().unwrap();
    let Err(Error::Config(err)) = permits.hold("k", 1).await else {
        panic!("a concurrency limit took a hold");
    };
    assert_eq!(err.field(), "strategy");
}
