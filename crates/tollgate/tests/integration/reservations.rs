//! Reservations on random traces with a manual clock: the in-memory
//! backend and the custom-store adapter agree reservation for reservation,
//! a reservation with no room to wait is exactly a decision, and what
//! proceeds (each reservation's units counted at its proceed time, those
//! given back left out) stays within the strategy's bound.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use tollgate::backend::store::StoreBackend;
use tollgate::clock::Clock;
use tollgate::clock::ManualClock;
use tollgate::testing::MapStore;
use tollgate::{Limit, Limiter, Policy, Reservation, Strategy};

const START: u64 = 1_700_000_000_000_000_000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().build().unwrap()
}

/// A bucket of either kind, a window, two buckets together, or a bucket
/// and a sliding window together.
fn policy() -> impl proptest::strategy::Strategy<Value = Policy> {
    (0usize..6, 1u64..12, 1u64..2_000).prop_map(|(kind, limit, window_ms)| {
        let window = Duration::from_millis(window_ms);
        match kind {
            0 => Policy::new(Strategy::TokenBucket, limit, window).unwrap(),
            1 => Policy::new(Strategy::LeakyBucket, limit, window).unwrap(),
            2 => Policy::new(Strategy::FixedWindow, limit, window).unwrap(),
            3 => Policy::new(Strategy::SlidingWindow, limit, window).unwrap(),
            4 => Policy::compound([
                Limit::new(Strategy::TokenBucket, limit, window).unwrap(),
                Limit::new(Strategy::TokenBucket, limit * 3, window * 5).unwrap(),
            ])
            .unwrap(),
            _ => Policy::compound([
                Limit::new(Strategy::TokenBucket, limit * 2, window).unwrap(),
                Limit::new(Strategy::SlidingWindow, limit * 3, window * 4).unwrap(),
            ])
            .unwrap(),
        }
    })
}

/// One step: (time step in ns, cost, max_delay in ms, cancel the
/// reservation this many back instead, if any).
type Step = (u64, u64, u64, Option<usize>);

fn steps() -> impl proptest::strategy::Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (
            prop_oneof![3 => 0u64..5_000_000, 1 => 0u64..1_000_000_000],
            0u64..4,
            prop_oneof![1 => Just(0u64), 3 => 0u64..3_000],
            prop_oneof![4 => Just(None), 1 => (0usize..4).prop_map(Some)],
        ),
        1..120,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn reservations_agree_across_backends_and_keep_the_bound(policy in policy(), steps in steps()) {
        let clock = ManualClock::default();
        clock.set_nanos(START);
        let rt = runtime();
        let memory = Limiter::builder().policy(policy).clock(clock.clone()).build().unwrap();
        let store = Limiter::builder()
            .backend(StoreBackend::new(Arc::new(MapStore::with_manual_clock(&clock))).clock(clock.clone()))
            .policy(policy)
            .build()
            .unwrap();
        // (proceed time, cost, given back) of every reservation made.
        let mut made: Vec<(u64, u64, bool)> = Vec::new();
        // Each reservation made on both backends, by its index in `made`.
        let mut reservations: Vec<(usize, (Reservation, Reservation))> = Vec::new();
        for &(dt, cost, max_ms, cancel) in &steps {
            clock.advance(Duration::from_nanos(dt));
            let now = clock.now_nanos();
            if let Some(back) = cancel {
                if let Some(i) = reservations.len().checked_sub(back + 1) {
                    let (index, reservation) = reservations.remove(i);
                    let (on_store, reservation) = reservation;
                    let given = rt.block_on(memory.cancel(reservation)).unwrap();
                    let given_too = rt.block_on(store.cancel(on_store)).unwrap();
                    prop_assert_eq!(given, given_too, "cancel at {}", now);
                    if given {
                        prop_assert!(now < made[index].0, "given back after it proceeded");
                        made[index].2 = true;
                    }
                    continue;
                }
            }
            let max_delay = Duration::from_millis(max_ms);
            let got = rt.block_on(memory.reserve_n("k", cost, max_delay)).unwrap();
            let also = rt.block_on(store.reserve_n("k", cost, max_delay)).unwrap();
            prop_assert_eq!(got.decision(), also.decision());
            prop_assert_eq!(got.delay(), also.delay());
            prop_assert_eq!(got.exceeds_max_delay(), also.exceeds_max_delay());
            prop_assert!(got.delay() <= max_delay);
            if got.is_reserved() && cost > 0 {
                made.push((now + got.delay().as_nanos() as u64, cost, false));
                reservations.push((made.len() - 1, (also, got)));
            } else if !got.is_reserved() {
                prop_assert!(got.delay().is_zero());
                if let Some(retry) = got.decision().retry_after {
                    prop_assert!(!retry.is_zero(), "a refusal waits for something");
                }
            }
        }
        // The bound: units proceeding in any interval of length d.
        let proceeding: Vec<(u64, u64)> = {
            let mut v: Vec<(u64, u64)> = made.iter().filter(|m| !m.2).map(|m| (m.0, m.1)).collect();
            v.sort_unstable();
            v
        };
        for limit in policy.limits() {
            let rate = limit.rate_nanos();
            for (i, first) in proceeding.iter().enumerate() {
                let mut units = 0;
                for last in &proceeding[i..] {
                    units += last.1;
                    let d = last.0 - first.0;
                    match limit.strategy() {
                        Strategy::TokenBucket | Strategy::LeakyBucket => prop_assert!(
                            units <= rate.limit + d / rate.interval,
                            "{} units proceed within {} ns under {}", units, d, policy
                        ),
                        // A window admits at most L per window.
                        Strategy::FixedWindow => prop_assert!(
                            d >= rate.window || units <= 2 * rate.limit,
                            "{} units within {} ns under {}", units, d, policy
                        ),
                        // Checked below, by deciding what proceeded; the
                        // policies here hold no concurrency limit.
                        Strategy::SlidingWindow | Strategy::Concurrency => {}
                    }
                }
            }
        }
        // A sliding window alone: every request that proceeds, decided at
        // its proceed time by a plain limiter that sees only what
        // proceeded before it, is admitted (no over-admission at all).
        if let [limit] = policy.limits() {
            if limit.strategy() == Strategy::SlidingWindow {
                let plain_clock = ManualClock::default();
                let plain = Limiter::builder().policy(policy).clock(plain_clock.clone()).build().unwrap();
                for &(at, cost) in &proceeding {
                    plain_clock.set_nanos(at);
                    prop_assert!(
                        plain.check_n("k", cost).allowed,
                        "{} units proceed at {} under {}, which a decision there denies", cost, at, policy
                    );
                }
            }
        }
    }

    #[test]
    fn a_reservation_with_no_room_to_wait_is_a_decision(policy in policy(), steps in steps()) {
        let clock = ManualClock::default();
        clock.set_nanos(START);
        let rt = runtime();
        let reserving = Limiter::builder().policy(policy).clock(clock.clone()).build().unwrap();
        let deciding = Limiter::builder().policy(policy).clock(clock.clone()).build().unwrap();
        for &(dt, cost, _, _) in &steps {
            clock.advance(Duration::from_nanos(dt));
            let reserved = rt.block_on(reserving.reserve_n("k", cost, Duration::ZERO)).unwrap();
            let decided = deciding.check_n("k", cost);
            prop_assert_eq!(reserved.decision(), &decided);
            prop_assert!(reserved.delay().is_zero());
        }
    }
}

#[test]
fn a_bucket_hands_out_the_next_slots_and_a_cancel_gives_the_last_one_back() {
    let clock = ManualClock::default();
    clock.set_nanos(START);
    let rt = runtime();
    // 10 per second: one slot every 100 ms after a burst of 10.
    let limiter = Limiter::builder()
        .strategy(Strategy::TokenBucket)
        .limit(10)
        .window(Duration::from_secs(1))
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut delays = Vec::new();
    let mut last = None;
    for _ in 0..13 {
        let r = rt
            .block_on(limiter.reserve_n("k", 1, Duration::from_secs(1)))
            .unwrap();
        assert!(r.is_reserved());
        delays.push(r.delay().as_millis());
        last = Some(r);
    }
    assert_eq!(delays, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 100, 200, 300]);
    let refused = rt
        .block_on(limiter.reserve_n("k", 1, Duration::from_millis(350)))
        .unwrap();
    assert!(!refused.is_reserved());
    assert_eq!(refused.decision().retry_after, Some(Duration::from_millis(50)));
    assert!(
        !rt.block_on(limiter.cancel(refused)).unwrap(),
        "nothing to give back"
    );
    assert!(rt.block_on(limiter.cancel(last.unwrap())).unwrap());
    let again = rt
        .block_on(limiter.reserve_n("k", 1, Duration::from_secs(1)))
        .unwrap();
    assert_eq!(
        again.delay(),
        Duration::from_millis(300),
        "the slot given back is taken again"
    );
}

#[test]
fn shadow_mode_lets_a_reservation_proceed_at_once_and_the_lists_decide_first() {
    let clock = ManualClock::default();
    clock.set_nanos(START);
    let rt = runtime();
    let limiter = Limiter::builder()
        .strategy(Strategy::TokenBucket)
        .limit(1)
        .window(Duration::from_secs(1))
        .clock(clock.clone())
        .shadow(true)
        .exempt(tollgate::KeyList::parse("exempt", ["trusted"]).unwrap())
        .build()
        .unwrap();
    let first = rt
        .block_on(limiter.reserve_n("k", 1, Duration::from_secs(5)))
        .unwrap();
    assert!(first.is_reserved() && first.delay().is_zero() && !first.decision().shadow_denied);
    let second = rt
        .block_on(limiter.reserve_n("k", 1, Duration::from_secs(5)))
        .unwrap();
    assert!(second.is_reserved() && second.delay().is_zero() && second.decision().shadow_denied);
    // Charged as enforcement would: a third waits behind both.
    let third = rt.block_on(limiter.reserve_n("k", 1, Duration::ZERO)).unwrap();
    assert_eq!(third.decision().retry_after, Some(Duration::from_secs(2)));
    let exempt = rt
        .block_on(limiter.reserve_n("trusted", 1, Duration::ZERO))
        .unwrap();
    assert!(exempt.is_reserved() && exempt.delay().is_zero());
    assert_eq!(exempt.decision().listed, Some(tollgate::Listed::Exempt));
}
