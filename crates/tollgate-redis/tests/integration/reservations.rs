//! Reservations on Redis: random traces of reservations and cancels,
//! decided on a real redis-server with a caller clock and, beside it, by
//! the core's custom-store adapter on the same clock at microsecond ticks
//! (which runs the pure `reserve_all` and `cancel_all`): every reservation,
//! delay and cancel agrees, for buckets, windows and compound policies, as
//! functions and as scripts.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tollgate::backend::store::StoreBackend;
use tollgate::backend::Tick;
use tollgate::testing::MapStore;
use tollgate::{Limiter, Policy, Reservation};

use crate::differential::{any_compound_policy, any_policy, Harness, START};

fn agrees_with_the_store_adapter(
    h: &Harness,
    policies: impl proptest::strategy::Strategy<Value = Policy>,
    cases: u32,
) {
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    let steps = prop::collection::vec(
        (
            prop_oneof![3 => 0u64..2_000_000, 1 => 0u64..2_000_000_000],
            0u64..4,
            prop_oneof![1 => Just(0u64), 3 => 0u64..4_000],
            prop_oneof![4 => Just(None), 1 => (0usize..3).prop_map(Some)],
        ),
        1..60,
    );
    runner
        .run(&(policies, steps), |(policy, steps)| {
            h.clock.set_nanos(START);
            let redis = h.limiter(policy);
            let store = Limiter::builder()
                .backend(
                    StoreBackend::new(Arc::new(MapStore::with_manual_clock(&h.clock)))
                        .clock(h.clock.clone())
                        .tick(Tick::Micros),
                )
                .policy(policy)
                .build()
                .unwrap();
            let mut made: Vec<(Reservation, Reservation)> = Vec::new();
            for (i, &(dt, cost, max_ms, cancel)) in steps.iter().enumerate() {
                h.clock.advance(Duration::from_nanos(dt));
                if let Some(back) = cancel {
                    if let Some(at) = made.len().checked_sub(back + 1) {
                        let (on_redis, on_store) = made.remove(at);
                        let got = h.rt.block_on(redis.cancel(on_redis)).unwrap();
                        let want = h.rt.block_on(store.cancel(on_store)).unwrap();
                        prop_assert_eq!(got, want, "cancel at step {} of {}", i, policy);
                        continue;
                    }
                }
                let max_delay = Duration::from_millis(max_ms);
                let got = h.rt.block_on(redis.reserve_n("k", cost, max_delay)).unwrap();
                let want = h.rt.block_on(store.reserve_n("k", cost, max_delay)).unwrap();
                prop_assert_eq!(got.decision(), want.decision(), "step {} of {}", i, policy);
                prop_assert_eq!(got.delay(), want.delay(), "step {} of {}", i, policy);
                prop_assert_eq!(
                    got.exceeds_max_delay(),
                    want.exceeds_max_delay(),
                    "step {} of {}",
                    i,
                    policy
                );
                if got.is_reserved() {
                    made.push((got, want));
                }
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn reservations_on_redis_agree_with_the_store_adapter() {
    let h = Harness::new();
    agrees_with_the_store_adapter(&h, any_policy(), 128);
    agrees_with_the_store_adapter(&h, any_compound_policy(), 64);
}

#[test]
fn reservations_run_as_scripts_agree_too() {
    let h = Harness::with_scripts();
    agrees_with_the_store_adapter(&h, any_policy(), 32);
    agrees_with_the_store_adapter(&h, any_compound_policy(), 16);
}
