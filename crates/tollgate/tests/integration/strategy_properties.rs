//! Property tests of the pure strategy functions against SEMANTICS.md.

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use tollgate::strategy::{decide, expires_at, penalty, refund, Outcome, Rate, State, MAX_TICK};
use tollgate::Policy;
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

    /// A refund of what a request was just charged gives back exactly that:
    /// the state decides as before the charge (SEMANTICS.md, "Per-key
    /// operations"); a refund of more gives back no more.
    #[test]
    fn a_refund_right_after_a_charge_undoes_it(rate in rate(), start in 0u64..10_000, steps in steps(), extra in 0u64..5) {
        for strategy in STRATEGIES {
            for (now, cost, before, o, after) in run(strategy, &rate, start, &steps) {
                if !o.allowed || cost == 0 {
                    continue;
                }
                let undone = refund(strategy, &rate, after, now, cost);
                let expected = decide(strategy, &rate, before, now, 0).0;
                prop_assert_eq!(decide(strategy, &rate, undone, now, 0).0, expected, "{} refund of {}", strategy, cost);
                // Giving back more than was charged in this request only
                // gives back earlier charges that still count; it never
                // makes room beyond a fresh state.
                let more = refund(strategy, &rate, after, now, cost + extra);
                let fresh = decide(strategy, &rate, None, now, 0).0;
                prop_assert!(decide(strategy, &rate, more, now, 0).0.remaining <= fresh.remaining);
            }
        }
    }

    /// A penalty charges like an admitted request of the same cost, without
    /// the admission test.
    #[test]
    fn a_penalty_charges_like_an_admitted_request(rate in rate(), start in 0u64..10_000, steps in steps()) {
        for strategy in STRATEGIES {
            for (now, cost, before, o, after) in run(strategy, &rate, start, &steps) {
                let charged = penalty(strategy, &rate, before, now, cost);
                if o.allowed {
                    prop_assert_eq!(
                        decide(strategy, &rate, charged, now, 0).0,
                        decide(strategy, &rate, after, now, 0).0,
                        "{} penalty of {}", strategy, cost
                    );
                } else if cost > 0 {
                    // Charged past the limit: denied from here on, with
                    // nothing remaining.
                    let (next, _) = decide(strategy, &rate, charged, now, 1);
                    prop_assert_eq!((next.allowed, next.remaining), (false, 0), "{}", strategy);
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
            // Steps back into a fixed window's bucket that a later reading
            // has left: its state may be gone, and the bucket fresh again.
            let mut revisits = 0u64;
            for &(dt, cost) in &jumps {
                now = (now + dt).max(0);
                if now as u64 / rate.window < latest as u64 / rate.window {
                    revisits += 1;
                }
                latest = latest.max(now);
                earliest = earliest.min(now);
                let (o, next) = decide(strategy, &rate, state, now as u64, cost);
                prop_assert!(o.remaining <= rate.limit);
                if o.allowed { admitted += cost; }
                state = next;
            }
            // Whatever the order of clock readings, no strategy admits more
            // than two limits plus what the span of readings refills, and a
            // fixed window one limit more per step back into a bucket it
            // forgot (SEMANTICS.md, "now").
            let span = (latest - earliest) as u64;
            let forgotten = if strategy == Strategy::FixedWindow { rate.limit * revisits } else { 0 };
            let bound = 2 * rate.limit + rate.limit * span / rate.window + span / rate.interval + forgotten;
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

/// The longest window a policy accepts, in nanosecond ticks.
const LONGEST: u64 = tollgate::Policy::MAX_WINDOW.as_nanos() as u64;

/// Rates at the edges of what a policy accepts (the largest limit, the
/// longest window), anywhere in between, and small ones; `Rate::new` clamps
/// the limit `u64::MAX` to [`Policy::MAX_LIMIT`].
fn edge_rate() -> impl proptest::strategy::Strategy<Value = Rate> {
    let limit = prop_oneof![
        1u64..12,
        Policy::MAX_LIMIT - 12..=Policy::MAX_LIMIT,
        1u64..=Policy::MAX_LIMIT,
        Just(u64::MAX)
    ];
    let window = prop_oneof![1u64..400, LONGEST - 400..=LONGEST, 1u64..=LONGEST];
    (limit, window).prop_map(|(l, w)| Rate::new(l, w))
}

/// Clock readings near the end of the accepted range, past it, and early.
fn edge_time() -> impl proptest::strategy::Strategy<Value = u64> {
    prop_oneof![
        MAX_TICK - (1 << 62)..=MAX_TICK,
        MAX_TICK - 1_000..=MAX_TICK.saturating_add(1_000),
        MAX_TICK..=u64::MAX,
        u64::MAX - 1_000..=u64::MAX,
        0u64..1 << 62,
    ]
}

/// A rate and steps of (time delta, cost) scaled to it: deltas of a few
/// ticks or up to three windows, costs of a few units or around the limit.
fn edge_case() -> impl proptest::strategy::Strategy<Value = (Rate, u64, Vec<(u64, u64)>)> {
    (edge_rate(), edge_time()).prop_flat_map(|(rate, start)| {
        let (l, w) = (rate.limit, rate.window);
        let step = (
            prop_oneof![0u64..3, 0..=w.saturating_mul(3), 0..=u64::MAX],
            prop_oneof![0u64..4, l - 1..=l + 1, 0..=l],
        );
        (Just(rate), Just(start), prop::collection::vec(step, 1..40))
    })
}

/// Like [`run`], with time deltas saturating at `u64::MAX`.
fn run_saturating(strategy: Strategy, rate: &Rate, start: u64, steps: &[(u64, u64)]) -> Vec<Step> {
    let mut state = None;
    let mut now = start;
    let mut out = Vec::new();
    for &(dt, cost) in steps {
        now = now.saturating_add(dt);
        let (o, next) = decide(strategy, rate, state, now, cost);
        out.push((now, cost, state, o, next));
        state = next;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    #[test]
    fn decisions_stay_exact_at_the_largest_limits_and_latest_times((rate, start, steps) in edge_case()) {
        prop_assert!(rate.limit <= Policy::MAX_LIMIT && rate.window <= LONGEST);
        for strategy in STRATEGIES {
            let mut per_instant: Option<(u64, u128)> = None;
            for (now, cost, before, o, after) in run_saturating(strategy, &rate, start, &steps) {
                // Readings past the latest accepted time count as that time.
                let at = now.min(MAX_TICK);
                prop_assert!(o.remaining <= rate.limit, "{strategy}: remaining {} > L", o.remaining);
                // `remaining` is exact: a request of that cost is admitted,
                // one unit more is not.
                if o.remaining > 0 {
                    prop_assert!(decide(strategy, &rate, after, now, o.remaining).0.allowed,
                        "{strategy}: {} remaining but a request of that cost is denied", o.remaining);
                }
                prop_assert!(!decide(strategy, &rate, after, now, o.remaining + 1).0.allowed,
                    "{strategy}: more than remaining = {} admitted", o.remaining);
                // From absent state, at most L units are admitted at one instant.
                per_instant = match per_instant {
                    Some((t, used)) if t == at => Some((t, used)),
                    _ if before.is_none() => Some((at, 0)),
                    _ => None,
                };
                if let Some((_, used)) = per_instant.as_mut() {
                    *used += if o.allowed { u128::from(cost) } else { 0 };
                    prop_assert!(*used <= u128::from(rate.limit), "{strategy}: {used} units admitted at one instant > L = {}", rate.limit);
                }
                if let Some(r) = o.retry_after {
                    prop_assert!(!o.allowed && r >= 1);
                    if let Some(t) = at.checked_add(r).filter(|t| *t <= MAX_TICK) {
                        prop_assert!(decide(strategy, &rate, before, t, cost).0.allowed,
                            "{strategy}: denied at now + retry_after ({r})");
                        prop_assert!(!decide(strategy, &rate, before, t - 1, cost).0.allowed,
                            "{strategy}: admitted before now + retry_after ({r})");
                    }
                }
                if let Some(t) = at.checked_add(o.reset).filter(|t| *t <= MAX_TICK) {
                    let (fresh, left) = decide(strategy, &rate, after, t, 0);
                    prop_assert_eq!((fresh.remaining, left), (rate.limit, None), "{}: not fresh after reset", strategy);
                }
            }
        }
    }
}

#[test]
fn the_largest_limit_admits_no_more_than_itself_at_one_instant() {
    // L, L and 1 unit at one instant: only the first fits.
    let rate = Rate::new(u64::MAX, 1_000_000_000);
    let l = rate.limit;
    assert_eq!(l, Policy::MAX_LIMIT);
    for strategy in STRATEGIES {
        for now in [
            1_700_000_000_000_000_000,
            MAX_TICK - 1,
            MAX_TICK,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let (first, state) = decide(strategy, &rate, None, now, l);
            assert!(
                first.allowed && first.remaining == 0,
                "{strategy} at {now}: {first:?}"
            );
            let (second, state) = decide(strategy, &rate, state, now, l);
            assert!(
                !second.allowed && second.remaining == 0,
                "{strategy} at {now}: {second:?}"
            );
            let (third, _) = decide(strategy, &rate, state, now, 1);
            assert!(
                !third.allowed && third.remaining == 0,
                "{strategy} at {now}: {third:?}"
            );
        }
    }
}

#[test]
fn clock_readings_past_the_latest_time_never_admit_more_than_the_limit() {
    // Three per second; five unit requests at (and after) readings near
    // 2^64 ns, the year 2554. Past MAX_TICK the clock counts as stopped.
    let rate = Rate::new(3, 1_000_000_000);
    for strategy in STRATEGIES {
        for start in [
            MAX_TICK - 1,
            MAX_TICK,
            MAX_TICK + 1,
            u64::MAX - 2_000_000_000,
            u64::MAX - 1,
        ] {
            let mut state = None;
            let mut admitted = 0;
            for i in 0..5 {
                let now = start.saturating_add(i * 100_000_000);
                let (o, next) = decide(strategy, &rate, state, now, 1);
                admitted += u64::from(o.allowed);
                state = next;
            }
            assert_eq!(admitted, 3, "{strategy} from {start}");
        }
    }
}
