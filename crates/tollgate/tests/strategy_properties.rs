//! Property tests of the pure strategy functions against SEMANTICS.md.

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use tollgate::strategy::{decide, expires_at, Outcome, Rate, State};
use tollgate::Strategy;

const STRATEGIES: [Strategy; 4] = Strategy::ALL;

/// A rate with small numbers so boundaries are hit often.
fn rate() -> impl proptest::strategy::Strategy<Value = Rate> {
    (1u64..12, 1u64..400).prop_map(|(limit, window)| Rate::new(limit, window))
}

/// Steps of (time delta, cost): mostly small deltas, sometimes zero, costs
/// including peeks and costs above the limit.
fn steps() -> impl proptest::strategy::Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec(
        (
            prop_oneof![3 => 0u64..5, 2 => 0u64..150, 1 => 0u64..1000],
            0u64..15,
        ),
        1..120,
    )
}

/// One replayed request: (now, cost, state before, outcome, state after).
type Step = (u64, u64, Option<State>, Outcome, Option<State>);

fn run(strategy: Strategy, rate: &Rate, start: u64, steps: &[(u64, u64)]) -> Vec<Step> {
    let mut state = None;
    let mut now = start;
    let mut out = Vec::new();
    for &(dt, cost) in steps {
        now += dt;
        let (o, next) = decide(strategy, rate, state, now, cost);
        out.push((now, cost, state, o, next));
        state = next;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn retry_after_is_exact(rate in rate(), start in 0u64..10_000, steps in steps()) {
        for strategy in STRATEGIES {
            for (now, cost, before, o, after) in run(strategy, &rate, start, &steps) {
                let unit = cost.max(1);
                if o.allowed {
                    prop_assert_eq!(o.retry_after, None);
                    continue;
                }
                prop_assert_eq!(after, before.and(after), "a denied request changed nothing it did not roll");
                match o.retry_after {
                    None => prop_assert!(unit > rate.limit, "{strategy}: no retry_after for a cost within the limit"),
                    Some(r) => {
                        prop_assert!(r >= 1);
                        let (at, _) = decide(strategy, &rate, before, now + r, cost);
                        prop_assert!(at.allowed, "{strategy}: denied at now + retry_after ({r})");
                        let (earlier, _) = decide(strategy, &rate, before, now + r - 1, cost);
                        prop_assert!(!earlier.allowed, "{strategy}: admitted one tick before retry_after ({r})");
                    }
                }
            }
        }
    }

    #[test]
    fn remaining_counts_exactly_the_further_unit_requests(rate in rate(), start in 0u64..10_000, steps in steps()) {
        for strategy in STRATEGIES {
            for (now, _, _, o, after) in run(strategy, &rate, start, &steps) {
                let mut state = after;
                for i in 0..o.remaining {
                    let (next, s) = decide(strategy, &rate, state, now, 1);
                    prop_assert!(next.allowed, "{strategy}: unit request {i} of remaining {} denied", o.remaining);
                    state = s;
                }
                let (last, _) = decide(strategy, &rate, state, now, 1);
                prop_assert!(!last.allowed, "{strategy}: more than remaining = {} admitted", o.remaining);
            }
        }
    }

    #[test]
    fn peek_charges_nothing_and_agrees_with_a_unit_request(rate in rate(), start in 0u64..10_000, steps in steps()) {
        for strategy in STRATEGIES {
            for (now, _, _, _, after) in run(strategy, &rate, start, &steps) {
                let (peek, peeked) = decide(strategy, &rate, after, now, 0);
                let (unit, _) = decide(strategy, &rate, after, now, 1);
                prop_assert_eq!(peek.allowed, unit.allowed);
                // A peek may only drop state that had expired.
                let (a, _) = decide(strategy, &rate, after, now, 1);
                let (b, _) = decide(strategy, &rate, peeked, now, 1);
                prop_assert_eq!(a, b, "{}: peek changed the next decision", strategy);
            }
        }
    }

    #[test]
    fn state_is_fresh_after_reset(rate in rate(), start in 0u64..10_000, steps in steps()) {
        for strategy in STRATEGIES {
            for (now, _, _, o, after) in run(strategy, &rate, start, &steps) {
                let (at_reset, left) = decide(strategy, &rate, after, now + o.reset, 0);
                prop_assert_eq!(at_reset.remaining, rate.limit, "{}: not fresh after reset", strategy);
                prop_assert_eq!(left, None);
                if let Some(s) = after {
                    prop_assert_eq!(expires_at(&rate, &s), now + o.reset, "{}: state expiry differs from reset", strategy);
                    if o.reset > 0 {
                        let (before_reset, still) = decide(strategy, &rate, after, now + o.reset - 1, 0);
                        prop_assert!(still.is_some() || before_reset.remaining < rate.limit);
                    }
                } else {
                    prop_assert_eq!(o.reset, 0);
                }
            }
        }
    }

    #[test]
    fn expired_state_decides_exactly_like_absent_state(rate in rate(), start in 0u64..10_000, steps in steps(), later in 0u64..1_000, cost in 0u64..15) {
        // Deleting expired state at any moment never changes a decision.
        for strategy in STRATEGIES {
            for (_, _, _, _, after) in run(strategy, &rate, start, &steps) {
                let Some(s) = after else { continue };
                let at = expires_at(&rate, &s) + later;
                prop_assert_eq!(
                    decide(strategy, &rate, Some(s), at, cost),
                    decide(strategy, &rate, None, at, cost),
                    "{}: expired state {:?} at {}", strategy, s, at
                );
            }
        }
    }

    #[test]
    fn fixed_window_never_admits_more_than_the_limit_per_bucket(rate in rate(), start in 0u64..10_000, steps in steps()) {
        let mut per_bucket = std::collections::HashMap::new();
        for (now, cost, _, o, _) in run(Strategy::FixedWindow, &rate, start, &steps) {
            if o.allowed {
                *per_bucket.entry(now / rate.window).or_insert(0u64) += cost;
            }
        }
        for (bucket, units) in per_bucket {
            prop_assert!(units <= rate.limit, "bucket {bucket} admitted {units} > {}", rate.limit);
        }
    }

    #[test]
    fn buckets_never_exceed_their_capacity(rate in rate(), start in 0u64..10_000, steps in steps()) {
        // GCRA: units admitted in any closed interval [a, b] are at most
        // L + (b - a) / T.
        for strategy in [Strategy::TokenBucket, Strategy::LeakyBucket] {
            let admitted: Vec<(u64, u64)> = run(strategy, &rate, start, &steps)
                .into_iter()
                .filter(|(_, cost, _, o, _)| o.allowed && *cost > 0)
                .map(|(now, cost, ..)| (now, cost))
                .collect();
            for i in 0..admitted.len() {
                let mut units = 0;
                for &(t, c) in &admitted[i..] {
                    units += c;
                    let allowance = rate.limit + (t - admitted[i].0) / rate.interval;
                    prop_assert!(units <= allowance, "{strategy}: {units} units in [{}, {t}] > {allowance}", admitted[i].0);
                }
            }
        }
    }

    #[test]
    fn sliding_window_estimate_never_exceeds_the_limit(rate in rate(), start in 0u64..10_000, steps in steps()) {
        for (now, _, _, o, after) in run(Strategy::SlidingWindow, &rate, start, &steps) {
            if let Some(State::SlidingWindow(s)) = after {
                let e = u128::from(now - s.start);
                let w = u128::from(rate.window);
                let estimate = u128::from(s.prev) * (w - e) + u128::from(s.curr) * w;
                // Admission needs the estimate before the last unit below L,
                // so the estimate after it stays below L + 1.
                prop_assert!(estimate < u128::from(rate.limit + 1) * w);
                prop_assert!(o.remaining <= rate.limit);
            }
        }
    }

    #[test]
    fn token_and_leaky_buckets_admit_the_same_requests(rate in rate(), start in 0u64..10_000, steps in steps()) {
        let token = run(Strategy::TokenBucket, &rate, start, &steps);
        let leaky = run(Strategy::LeakyBucket, &rate, start, &steps);
        for (t, l) in token.iter().zip(&leaky) {
            prop_assert_eq!(t.3, l.3);
        }
    }

    #[test]
    fn time_going_backwards_never_panics_nor_admits_more(rate in rate(), start in 1_000u64..10_000, jumps in prop::collection::vec((-500i64..500, 0u64..4), 1..100)) {
        for strategy in STRATEGIES {
            let mut state = None;
            let mut now = start as i64;
            let (mut earliest, mut latest) = (now, now);
            let mut admitted = 0u64;
            for &(dt, cost) in &jumps {
                now = (now + dt).max(0);
                latest = latest.max(now);
                earliest = earliest.min(now);
                let (o, next) = decide(strategy, &rate, state, now as u64, cost);
                prop_assert!(o.remaining <= rate.limit);
                if o.allowed { admitted += cost; }
                state = next;
            }
            // Whatever the order of clock readings, no strategy admits more
            // than two limits plus what the span of readings refills.
            let span = (latest - earliest) as u64;
            let bound = 2 * rate.limit + rate.limit * span / rate.window + span / rate.interval;
            prop_assert!(admitted <= bound, "{strategy}: {admitted} admitted over a span of {span} > {bound}");
        }
    }
}

#[test]
fn costs_above_the_limit_are_denied_without_retry() {
    for strategy in STRATEGIES {
        let rate = Rate::new(5, 1_000);
        let (o, s) = decide(strategy, &rate, None, 10_000, 6);
        assert!(!o.allowed);
        assert_eq!(o.retry_after, None);
        assert_eq!(o.remaining, 5);
        assert_eq!(s, None);
    }
}

#[test]
fn fixed_window_boundary_burst_allows_two_limits() {
    let rate = Rate::new(3, 1_000);
    let mut state = None;
    let mut admitted = 0;
    for now in [997, 998, 999, 1_000, 1_001, 1_002] {
        let (o, s) = decide(Strategy::FixedWindow, &rate, state, now, 1);
        admitted += u64::from(o.allowed);
        state = s;
    }
    assert_eq!(admitted, 6);
}

#[test]
fn sliding_window_weights_the_previous_window() {
    // L = 10 per 100 ticks; 10 requests in the first window.
    let rate = Rate::new(10, 100);
    let mut state = None;
    for _ in 0..10 {
        let (o, s) = decide(Strategy::SlidingWindow, &rate, state, 0, 1);
        assert!(o.allowed);
        state = s;
    }
    // Half way through the next window the previous one still counts for 5.
    let (o, s) = decide(Strategy::SlidingWindow, &rate, state, 150, 5);
    assert!(o.allowed);
    assert_eq!(o.remaining, 0);
    let (o, _) = decide(Strategy::SlidingWindow, &rate, s, 150, 1);
    assert!(!o.allowed);
    // The estimate is exactly 10: one tick later the previous window's
    // weight has decayed below it.
    assert_eq!(o.retry_after, Some(1));
}

#[test]
fn sliding_window_re_anchors_when_both_counters_roll_to_zero() {
    use tollgate::strategy::SlidingWindowState;
    // L = 4 per 100 ticks. A window started at 0 whose previous count was
    // used but whose current count is empty: at 150 it rolls (k = 1) to
    // prev = curr = 0, which is absent state, so the new window starts at 150,
    // not on the grid at 100.
    let rate = Rate::new(4, 100);
    let stale = State::SlidingWindow(SlidingWindowState {
        start: 0,
        curr: 0,
        prev: 3,
    });
    let (o, s) = decide(Strategy::SlidingWindow, &rate, Some(stale), 150, 1);
    assert!(o.allowed);
    assert_eq!(
        s,
        Some(State::SlidingWindow(SlidingWindowState {
            start: 150,
            curr: 1,
            prev: 0
        }))
    );
    assert_eq!(o.reset, 200, "2W after the re-anchored start");
    assert_eq!((o, s), decide(Strategy::SlidingWindow, &rate, None, 150, 1));
}
