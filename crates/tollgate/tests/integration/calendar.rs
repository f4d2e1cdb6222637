//! Calendar windows decided by the in-memory backend and the store adapter,
//! against a model of the contract: a count per period (the periods as
//! `Calendar::period_at` names them, which the library's own tests check
//! against a model of the calendar), `reset` and `retry_after` the exact
//! time to the next boundary.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proptest::prelude::*;
use tollgate::backend::store::StoreBackend;
use tollgate::calendar::{Calendar, Period};
use tollgate::clock::ManualClock;
use tollgate::testing::MapStore;
use tollgate::{Decision, Limit, Limiter, Policy};

/// 2026-01-01T00:00:00Z in nanoseconds.
const START: u64 = 1_767_225_600_000_000_000;

fn calendars() -> Vec<Calendar> {
    vec![
        Calendar::new(Period::Month, "Europe/Berlin", Some("2026-01-15T09:00:00")).unwrap(),
        Calendar::new(Period::Day, "America/New_York", Some("2026-03-08T02:30:00")).unwrap(),
        Calendar::new(Period::Week, "UTC", None).unwrap(),
        Calendar::new(
            Period::Quarter,
            "Australia/Lord_Howe",
            Some("2026-02-28T02:15:00"),
        )
        .unwrap(),
        Calendar::new(Period::Year, "Pacific/Apia", Some("2024-02-29T00:00:00")).unwrap(),
    ]
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64
}

/// The contract's fixed window over `calendar`'s periods, per key.
struct Model {
    calendar: Calendar,
    limit: u64,
    /// Per key: the start of the period counted and its count.
    counts: HashMap<usize, (u64, u64)>,
}

impl Model {
    fn decide(&mut self, key: usize, now: u64, cost: u64) -> Decision {
        let at = UNIX_EPOCH + Duration::from_nanos(now);
        let (start, end) = self.calendar.period_at(at);
        let (start, end) = (nanos(start), nanos(end));
        let count = match self.counts.get(&key) {
            Some(&(s, c)) if s == start => c,
            _ => 0,
        };
        let unit = cost.max(1);
        let allowed = unit <= self.limit && count + unit <= self.limit;
        let count = if allowed { count + cost } else { count };
        self.counts.insert(key, (start, count));
        let to_end = Duration::from_nanos(end - now);
        Decision::new(
            allowed,
            self.limit,
            self.limit - count,
            if count > 0 { to_end } else { Duration::ZERO },
            (!allowed && unit <= self.limit).then_some(to_end),
        )
    }
}

/// (step in seconds, key, cost): steps from a second to two weeks, so that
/// a trace crosses many boundaries and lands near some.
fn trace() -> impl proptest::strategy::Strategy<Value = Vec<(u64, usize, u64)>> {
    prop::collection::vec(
        (
            prop_oneof![3 => 0u64..60, 2 => 0u64..86_400, 1 => 0u64..1_209_600],
            0usize..3,
            0u64..5,
        ),
        1..200,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn memory_and_the_store_adapter_decide_as_the_model(
        which in 0usize..5,
        limit in 1u64..8,
        trace in trace(),
    ) {
        let calendar = calendars()[which];
        let policy = Policy::from(Limit::per_calendar(limit, calendar).unwrap());
        let clock = ManualClock::default();
        clock.set_nanos(START);
        let memory = Limiter::builder().policy(policy).clock(clock.clone()).build().unwrap();
        let store = Limiter::builder()
            .policy(policy)
            .backend(StoreBackend::new(MapStore::with_manual_clock(&clock)).clock(clock.clone()))
            .build()
            .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut model = Model { calendar, limit, counts: HashMap::new() };
        let mut now = START;
        for (i, &(step, key, cost)) in trace.iter().enumerate() {
            now += step * 1_000_000_000 + 7;
            clock.set_nanos(now);
            let expected = model.decide(key, now, cost);
            let got = memory.check_n(format!("k{key}"), cost);
            prop_assert_eq!(got, expected, "memory, request {} of {}", i, calendar);
            let got = rt.block_on(store.allow_n(format!("k{key}"), cost)).unwrap();
            prop_assert_eq!(got, expected, "store, request {} of {}", i, calendar);
        }
    }
}

#[test]
fn a_monthly_quota_resets_at_the_billing_boundary() {
    let billing = Calendar::new(Period::Month, "Europe/Berlin", Some("2026-01-15T09:00:00")).unwrap();
    // 2026-03-15T07:59:59Z: a second before 09:00 in Berlin (winter time).
    let clock = ManualClock::new(Duration::from_secs(1_773_561_599));
    let limiter = Limiter::builder()
        .policy(Limit::per_calendar(3, billing).unwrap().into())
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(limiter.check_n("tenant", 3).allowed);
    let denied = limiter.check("tenant");
    assert!(!denied.allowed);
    assert_eq!(denied.retry_after, Some(Duration::from_secs(1)));
    assert_eq!(denied.reset, Duration::from_secs(1));
    clock.advance(Duration::from_secs(1));
    let fresh = limiter.check("tenant");
    assert!(fresh.allowed);
    assert_eq!(fresh.remaining, 2);
    // The period from 15 March runs to 15 April 09:00 CEST, 07:00 UTC:
    // 31 days less the hour the clocks went forward.
    assert_eq!(fresh.reset, Duration::from_secs(31 * 86_400 - 3_600));
}

#[test]
fn a_clock_that_steps_back_over_a_boundary_keeps_the_period_it_counted() {
    let day = Calendar::new(Period::Day, "UTC", None).unwrap();
    // One second into 2026-01-02.
    let clock = ManualClock::new(Duration::from_secs(1_767_312_001));
    let limiter = Limiter::builder()
        .policy(Limit::per_calendar(2, day).unwrap().into())
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(limiter.check_n("k", 2).allowed);
    // Back into 1 January: still the count of 2 January, not a fresh day.
    clock.set(Duration::from_secs(1_767_311_990));
    let denied = limiter.check("k");
    assert!(!denied.allowed);
    assert_eq!(denied.retry_after, Some(Duration::from_secs(86_400)));
}

#[test]
fn a_reload_keeps_the_count_while_the_calendar_stays() {
    let month = Calendar::new(Period::Month, "UTC", None).unwrap();
    let clock = ManualClock::new(Duration::from_nanos(START));
    let first = Limiter::builder()
        .policy(Limit::per_calendar(10, month).unwrap().into())
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(first.check_n("k", 6).allowed);
    // A new limit over the same calendar: the same count, the new limit.
    let raised = Limiter::builder()
        .policy(Limit::per_calendar(20, month).unwrap().into())
        .clock(clock.clone())
        .build_from(&first)
        .unwrap();
    assert_eq!(raised.check("k").remaining, 13);
    // Another anchor: another calendar, a fresh count.
    let moved = Calendar::new(Period::Month, "UTC", Some("2026-01-15T00:00:00")).unwrap();
    let fresh = Limiter::builder()
        .policy(Limit::per_calendar(20, moved).unwrap().into())
        .clock(clock.clone())
        .build_from(&raised)
        .unwrap();
    assert_eq!(fresh.check("k").remaining, 19);
}

#[test]
fn a_calendar_beside_a_rate_is_one_compound_policy() {
    let day = Calendar::new(Period::Day, "UTC", None).unwrap();
    let clock = ManualClock::new(Duration::from_nanos(START));
    let policy = Policy::compound([
        Limit::per_calendar(5, day).unwrap(),
        Limit::new(tollgate::Strategy::TokenBucket, 2, Duration::from_secs(1)).unwrap(),
    ])
    .unwrap();
    let limiter = Limiter::builder()
        .policy(policy)
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut admitted = 0;
    for _ in 0..100 {
        admitted += u32::from(limiter.check("k").allowed);
        clock.advance(Duration::from_millis(500));
    }
    // The bucket admits 2, then one per 500 ms; the day stops it at 5.
    assert_eq!(admitted, 5);
    let denied = limiter.check("k");
    assert_eq!(denied.bound_by, 0);
    assert_eq!(denied.retry_after, Some(Duration::from_secs(86_400 - 50)));
}
