//! Limits chosen per request (`Overrides`): against the pure strategy
//! functions deciding one state per key under each request's rate, in
//! memory and on the custom-store adapter; a window of its own; the
//! ceiling and the capacity; memory bounded whatever limits arrive.

use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use tollgate::backend::store::StoreBackend;
use tollgate::backend::{Backend, Tick};
use tollgate::calendar::{Calendar, Period};
use tollgate::clock::ManualClock;
use tollgate::strategy::{decide, State};
use tollgate::testing::MapStore;
use tollgate::{Decision, Error, Limit, Limiter, Overrides, Policy, Strategy};

const START: u64 = 1_700_000_000_000_000_000;

/// (time step in ns, key, limit named, cost)
fn trace() -> impl proptest::strategy::Strategy<Value = Vec<(u64, usize, u64, u64)>> {
    prop::collection::vec(
        (
            prop_oneof![2 => 0u64..1_000, 2 => 0u64..50_000_000, 1 => 0u64..2_000_000_000],
            0usize..3,
            1u64..12,
            0u64..4,
        ),
        1..120,
    )
}

/// Each decision against the pure function with the rate of the limit the
/// request names, on one state per key.
fn agrees<B: Backend + Clone>(
    overrides: &Overrides<B>,
    clock: &ManualClock,
    trace: &[(u64, usize, u64, u64)],
    decide_with: impl Fn(&Limiter<B>, &str, u64) -> Decision,
) -> Result<(), TestCaseError> {
    let base = *overrides.base().policy().single().unwrap();
    let mut states: [Option<State>; 3] = [None; 3];
    let mut now = START;
    for (i, &(dt, key, limit, cost)) in trace.iter().enumerate() {
        now += dt;
        clock.set_nanos(now);
        let rate = Limit::new(base.strategy(), limit, base.window())
            .unwrap()
            .rate_nanos();
        let (outcome, next) = decide(base.strategy(), &rate, states[key], now, cost);
        states[key] = next;
        let expected = Decision::from_outcome(outcome, limit, Tick::Nanos);
        let limiter = overrides.limiter(limit, None).unwrap();
        let got = decide_with(&limiter, &format!("tenant-{key}"), cost);
        prop_assert_eq!(
            got,
            expected,
            "step {} (limit {}, cost {}) of {:?}",
            i,
            limit,
            cost,
            base
        );
    }
    Ok(())
}

fn base() -> impl proptest::strategy::Strategy<Value = Policy> {
    (0usize..4, 1u64..12, 1u64..2_000).prop_map(|(s, limit, window_ms)| {
        Policy::new(Strategy::ALL[s], limit, Duration::from_millis(window_ms)).unwrap()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// A key keeps one state whatever limit each request names: a fixed or
    /// sliding window its count, a bucket its level in time.
    #[test]
    fn memory_overrides_decide_one_state_under_each_requests_limit(policy in base(), trace in trace()) {
        let clock = ManualClock::default();
        let overrides = Overrides::new(Limiter::builder().policy(policy).clock(clock.clone())).unwrap();
        agrees(&overrides, &clock, &trace, |limiter, key, cost| limiter.check_n(key, cost))?;
    }

    #[test]
    fn store_overrides_decide_one_state_under_each_requests_limit(policy in base(), trace in trace()) {
        let clock = ManualClock::default();
        let backend = StoreBackend::new(MapStore::with_manual_clock(&clock)).clock(clock.clone());
        let overrides = Overrides::new(Limiter::builder().policy(policy).backend(backend)).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        agrees(&overrides, &clock, &trace, |limiter, key, cost| rt.block_on(limiter.allow_n(key, cost)).unwrap())?;
    }
}

fn fixed(limit: u64, window: Duration) -> Policy {
    Policy::new(Strategy::FixedWindow, limit, window).unwrap()
}

/// A window of its own keeps state of its own; the base window's state is
/// the base limiter's, also when reached through `Overrides::over`.
#[test]
fn another_window_counts_apart_and_the_base_window_shares_the_base_state() {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let builder = Limiter::builder()
        .policy(fixed(10, Duration::from_secs(60)))
        .clock(clock.clone());
    let base = std::sync::Arc::new(builder.clone().build().unwrap());
    let overrides = Overrides::over(base.clone(), builder).unwrap();
    assert!(std::sync::Arc::ptr_eq(
        &overrides.limiter(10, None).unwrap(),
        &base
    ));
    assert_eq!(base.check_n("t", 4).remaining, 6);
    // 100 a minute: the 4 spent count.
    assert_eq!(overrides.limiter(100, None).unwrap().check("t").remaining, 95);
    // 3 a minute: 5 spent, nothing left, denied until the minute ends.
    let lowered = overrides.limiter(3, None).unwrap().check("t");
    assert!(!lowered.allowed && lowered.remaining == 0);
    // 1,000 a day: a state of its own.
    let day = Duration::from_secs(86_400);
    let daily = overrides.limiter(1_000, Some(day)).unwrap();
    assert_eq!(daily.check("t").remaining, 999);
    assert_eq!(
        overrides.limiter(500, Some(day)).unwrap().check("t").remaining,
        498
    );
    assert_eq!(
        base.check_n("t", 0).remaining,
        5,
        "the minute's state is untouched"
    );
    // 0: every request over the limit.
    assert!(!overrides.limiter(0, None).unwrap().check_n("t", 0).allowed);
}

/// A calendar named per request (a tenant's month from its billing day):
/// a state of its own, counted in the calendar's periods, with `reset` at
/// the next boundary; the same calendar as the base policy's shares the
/// base state; a strategy other than a fixed window refuses calendars.
#[test]
fn a_calendar_named_per_request_counts_in_its_periods() {
    // 2026-03-14T12:00:00Z.
    let now = std::time::UNIX_EPOCH + Duration::from_secs(1_773_489_600);
    let clock = ManualClock::new(now.duration_since(std::time::UNIX_EPOCH).unwrap());
    let overrides = Overrides::new(
        Limiter::builder()
            .policy(fixed(10, Duration::from_secs(60)))
            .clock(clock.clone()),
    )
    .unwrap();
    let billing = Calendar::new(Period::Month, "Europe/Berlin", Some("2026-01-15T09:00:00")).unwrap();
    let monthly = overrides.calendar_limiter(3, billing).unwrap();
    let (_, end) = billing.period_at(now);
    for left in [2, 1, 0] {
        let decision = monthly.check("tenant");
        assert!(decision.allowed && decision.remaining == left, "{decision:?}");
        assert_eq!(decision.reset, end.duration_since(now).unwrap());
    }
    let denied = monthly.check("tenant");
    assert!(!denied.allowed);
    assert_eq!(denied.retry_after, Some(end.duration_since(now).unwrap()));
    // Another limit in the same calendar counts the same state.
    assert_eq!(
        overrides
            .calendar_limiter(5, billing)
            .unwrap()
            .check("tenant")
            .remaining,
        1
    );
    // The base minute is untouched.
    assert_eq!(overrides.base().check_n("tenant", 0).remaining, 10);
    // Past the boundary (15 March, 09:00 in Berlin), a new period.
    clock.advance(end.duration_since(now).unwrap());
    assert_eq!(monthly.check("tenant").remaining, 2);

    // A base policy in the same calendar shares its state.
    let base: Policy = Limit::per_calendar(10, billing).unwrap().into();
    let overrides = Overrides::new(Limiter::builder().policy(base).clock(clock.clone())).unwrap();
    assert_eq!(overrides.base().check_n("t", 4).remaining, 6);
    assert_eq!(
        overrides
            .calendar_limiter(100, billing)
            .unwrap()
            .check("t")
            .remaining,
        95
    );

    let bucket = Overrides::new(
        Limiter::builder().policy(Policy::new(Strategy::TokenBucket, 10, Duration::from_secs(60)).unwrap()),
    )
    .unwrap();
    let Err(Error::Config(err)) = bucket.calendar_limiter(5, billing) else {
        panic!("a token bucket counts in no calendar");
    };
    assert_eq!(err.field(), "calendar");
    assert!(err.to_string().contains("token_bucket"), "{err}");
}

#[test]
fn limits_above_the_ceiling_and_windows_past_the_capacity_are_refused() {
    let overrides = Overrides::new(Limiter::builder().policy(fixed(10, Duration::from_secs(60))))
        .unwrap()
        .ceiling(1_000)
        .capacity(2);
    assert_eq!(overrides.max_limit(), 1_000);
    let Err(Error::Config(err)) = overrides.limiter(1_001, None) else {
        panic!("a limit above the ceiling is refused");
    };
    assert_eq!(err.field(), "limit");
    assert!(err.to_string().contains("1000"), "{err}");
    let Err(Error::Config(err)) = overrides.limiter(5, Some(Duration::ZERO)) else {
        panic!("a zero window is refused");
    };
    assert_eq!(err.field(), "window");
    overrides.limiter(5, Some(Duration::from_secs(1))).unwrap();
    overrides.limiter(5, Some(Duration::from_secs(2))).unwrap();
    let Err(Error::Config(err)) = overrides.limiter(5, Some(Duration::from_secs(3))) else {
        panic!("a third window is refused");
    };
    assert_eq!(err.field(), "window");
    assert!(err.to_string().contains("2 windows"), "{err}");
    // A window already served is still served.
    overrides.limiter(7, Some(Duration::from_secs(2))).unwrap();
    let compound = Policy::compound([
        Limit::new(Strategy::FixedWindow, 1, Duration::from_secs(1)).unwrap(),
        Limit::new(Strategy::FixedWindow, 10, Duration::from_secs(60)).unwrap(),
    ])
    .unwrap();
    let Err(Error::Config(err)) = Overrides::new(Limiter::builder().policy(compound)) else {
        panic!("a compound base is refused");
    };
    assert_eq!(err.field(), "policy");
}

/// 100,000 distinct limits named: the plans kept stay within the capacity
/// and every key's state stays exact (one state per key, whatever limit).
#[test]
fn memory_is_bounded_whatever_limits_requests_name() {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let overrides = Overrides::new(
        Limiter::builder()
            .policy(fixed(10, Duration::from_secs(3_600)))
            .clock(clock.clone()),
    )
    .unwrap()
    .capacity(64);
    for i in 0..100_000u64 {
        let limiter = overrides.limiter(1_000 + i, None).unwrap();
        limiter.check(format!("k{}", i % 10));
    }
    assert!(overrides.plans_kept() <= 64, "{overrides:?}");
    // Ten keys, one state each in the base window's table.
    assert_eq!(overrides.base().stored_keys(), 10);
    // Each key was named 10,000 times, each time under a limit above what
    // it had spent: 10,000 spent, whatever the limit.
    assert_eq!(overrides.base().check_n("k3", 0).remaining, 0);
    assert_eq!(
        overrides
            .limiter(20_000, None)
            .unwrap()
            .check_n("k3", 0)
            .remaining,
        10_000
    );
}
