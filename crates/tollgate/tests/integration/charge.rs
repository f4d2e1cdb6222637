//! `strategy::charge_all`, usage reported after the fact (SEMANTICS.md,
//! "Usage reported after the fact"): the strategies' own test, then a
//! charge whether admitted or not.

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use tollgate::strategy::{charge_all, decide, decide_all, penalty, LimitRate, Rate, State};
use tollgate::Strategy;

fn limit(strategy: Strategy, rate: Rate) -> [LimitRate; 1] {
    [LimitRate { strategy, rate }]
}

/// One report of `cost` at `now` on a single limit: the outcome and the
/// state after.
fn charge(
    strategy: Strategy,
    rate: Rate,
    state: Option<State>,
    now: u64,
    cost: u64,
) -> (tollgate::strategy::Outcome, Option<State>) {
    let mut next = [None];
    let charged = charge_all(&limit(strategy, rate), &[state], &mut next, now, cost);
    (charged.outcome, next[0])
}

fn rate() -> impl proptest::strategy::Strategy<Value = Rate> {
    (1u64..12, 1u64..400).prop_map(|(limit, window)| Rate::new(limit, window))
}

fn strategy() -> impl proptest::strategy::Strategy<Value = Strategy> {
    prop::sample::select(Strategy::ALL.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Admitted, a report is the decision itself; denied, it is the
    /// penalty of its cost, read as a peek reads the charged state.
    #[test]
    fn a_report_is_the_decision_when_it_fits_and_a_penalty_when_not(
        strategy in strategy(),
        rate in rate(),
        steps in prop::collection::vec((0u64..200, 0u64..30), 1..60),
    ) {
        let mut state = None;
        let mut now = 1_000;
        for (dt, cost) in steps {
            now += dt;
            let (decided, decided_state) = decide(strategy, &rate, state, now, cost);
            let (charged, charged_state) = charge(strategy, rate, state, now, cost);
            if decided.allowed || cost == 0 {
                prop_assert_eq!(charged, decided);
                prop_assert_eq!(charged_state, decided_state);
            } else {
                let penalised = penalty(strategy, &rate, state, now, cost);
                let (peek, _) = decide(strategy, &rate, penalised, now, 0);
                prop_assert!(!charged.allowed);
                prop_assert_eq!((charged.remaining, charged.reset, charged.retry_after), (peek.remaining, peek.reset, peek.retry_after));
                prop_assert_eq!(charged.remaining, 0);
                // The wait is exact: a unit request is admitted after it,
                // and not a tick before.
                let wait = charged.retry_after.expect("a unit request is admitted in time");
                prop_assert!(decide(strategy, &rate, penalised, now + wait, 1).0.allowed);
                if wait > 0 {
                    prop_assert!(!decide(strategy, &rate, penalised, now + wait - 1, 1).0.allowed);
                }
            }
            state = charged_state;
        }
    }

    /// An AI gateway's sequence, one request at a time: a check (a peek),
    /// then, when admitted, a report of the tokens used. In a fixed window
    /// the stored count is the exact sum of the bucket's reports, never
    /// more than `L - 1` plus the largest report, and a check is admitted
    /// exactly while a unit fits.
    #[test]
    fn a_fixed_window_counts_every_report_and_bounds_the_overrun(
        rate in rate(),
        steps in prop::collection::vec((0u64..120, 1u64..40), 1..80),
    ) {
        let strategy = Strategy::FixedWindow;
        let mut state: Option<State> = None;
        let mut now = 10_000;
        let mut bucket = now / rate.window;
        let mut reported = 0u64;
        let mut largest = 0u64;
        for (dt, tokens) in steps {
            now += dt;
            if now / rate.window != bucket {
                bucket = now / rate.window;
                reported = 0;
                largest = 0;
            }
            let count = |state: &Option<State>| match state {
                Some(State::FixedWindow(s)) if s.start / rate.window == bucket => s.count,
                _ => 0,
            };
            let (check, after_check) = decide(strategy, &rate, state, now, 0);
            prop_assert_eq!(check.allowed, count(&state) < rate.limit);
            state = after_check;
            if !check.allowed {
                continue;
            }
            let (_, after) = charge(strategy, rate, state, now, tokens);
            state = after;
            reported += tokens;
            largest = largest.max(tokens);
            prop_assert_eq!(count(&state), reported);
            prop_assert!(count(&state) <= rate.limit - 1 + largest);
        }
    }

    /// A bucket carries the overrun as debt: a report into a full bucket
    /// is charged whether it fits or not, and the next unit request waits
    /// exactly for the debt to be repaid at the bucket's rate.
    #[test]
    fn a_bucket_repays_the_overrun_in_time(
        strategy in prop::sample::select(vec![Strategy::TokenBucket, Strategy::LeakyBucket]),
        rate in rate(),
        tokens in 1u64..60,
    ) {
        let now = 1_000_000;
        let (first, state) = charge(strategy, rate, None, now, tokens);
        prop_assert_eq!(first.allowed, tokens <= rate.limit);
        let t = (rate.window / rate.limit).max(1);
        prop_assert_eq!(state, Some(State::Gcra(tollgate::strategy::GcraState { tat: now + tokens * t })));
        let (peek, _) = decide(strategy, &rate, state, now, 0);
        prop_assert_eq!(peek.allowed, tokens < rate.limit);
        if !peek.allowed {
            prop_assert_eq!(peek.retry_after, Some((tokens + 1 - rate.limit) * t));
        }
    }
}

#[test]
fn a_compound_report_charges_every_limit() {
    let limits = [
        LimitRate {
            strategy: Strategy::FixedWindow,
            rate: Rate::new(5, 100),
        },
        LimitRate {
            strategy: Strategy::TokenBucket,
            rate: Rate::new(10, 1_000),
        },
    ];
    let mut next = [None, None];
    // 7 units do not fit in the first limit: denied, and both charged.
    let charged = charge_all(&limits, &[None, None], &mut next, 1_000, 7);
    assert!(!charged.outcome.allowed);
    assert_eq!(charged.outcome.remaining, 0);
    assert!(matches!(next[0], Some(State::FixedWindow(s)) if s.count == 7));
    assert_eq!(
        next[1],
        Some(State::Gcra(tollgate::strategy::GcraState {
            tat: 1_000 + 7 * 100
        }))
    );
    // A report that fits is the decision itself.
    let mut again = [None, None];
    let fits = charge_all(&limits, &[None, None], &mut again, 1_000, 3);
    let mut decided = [None, None];
    assert_eq!(fits, decide_all(&limits, &[None, None], &mut decided, 1_000, 3));
    assert_eq!(again, decided);
}
