//! Reservations: a request that, instead of being refused, is charged now
//! for a later slot and told how long to wait ([waiting and
//! reservations](crate::_documentation::semantics#waiting-and-reservations)).
//!
//! The buckets can reserve any future slot: their state advances by the
//! cost and the caller proceeds after the delay. A sliding window reserves
//! a slot within its current window: the units are counted in it at once,
//! and the estimate only falls within a window, so the request is still
//! admitted when it proceeds. A fixed window reserves only what it admits
//! now. Both functions are pure, like the strategies.

use super::{
    combine, decide, decide_all, penalty, CompoundOutcome, GcraState, LimitRate, Outcome, SlidingWindow,
    State, Strategy,
};
use crate::policy::MAX_LIMITS;

/// A reservation decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReserveOutcome {
    /// The decision: `allowed` when reserved (with `remaining` and `reset`
    /// after the charge, and no `retry_after`); when refused, nothing was
    /// charged and `retry_after` is the wait after which the reservation
    /// could be made (`None` when it never can: the cost exceeds a limit).
    pub compound: CompoundOutcome,
    /// Ticks from now until the request proceeds (0 when it may proceed at
    /// once; 0 when refused).
    pub delay: u64,
    /// Refused because the earliest slot lies beyond `max_delay`: waiting
    /// brings it no nearer (only units given back do), so an awaited
    /// admission with that deadline ends here. `false` when reserved, and
    /// for a refusal that waiting `retry_after` can end (a fixed window's
    /// denial, a slot past the end of a sliding window's current window).
    pub beyond_max_delay: bool,
}

/// Whether every limit can reserve a slot later than now: a token or
/// leaky bucket, or a sliding window (within its current window). A
/// policy with a fixed window among its limits reserves only what it
/// admits now.
pub(crate) fn reserves_ahead(limits: &[LimitRate]) -> bool {
    limits.iter().all(|l| reserves_later(l.strategy))
}

/// Whether `strategy` can reserve a slot later than now ([`reserves_ahead`]).
fn reserves_later(strategy: Strategy) -> bool {
    matches!(
        strategy,
        Strategy::TokenBucket | Strategy::LeakyBucket | Strategy::SlidingWindow
    )
}

/// Reserves `cost` units on every limit in `limits` at `now`, waiting at
/// most `max_delay` ticks; `states` and `next` as for [`decide_all`].
///
/// When every limit reserves ahead (a bucket, or a sliding window within
/// its current window), the request
/// proceeds at the latest of the limits' earliest slots: a bucket's is
/// `max(now, t + cost × T − L × T)` (`t = max(tat, now)`), a sliding
/// window's the earliest tick at which its estimate, everything charged so
/// far counted, admits the request. Refused, nothing charged, when that
/// lies more than `max_delay` ahead (`retry_after` the excess,
/// [`ReserveOutcome::beyond_max_delay`]), or at or past the end of a
/// sliding window's current window (`retry_after` the time until that
/// window ends: the units must be counted in the window they proceed in).
/// Otherwise every limit is charged as by a request admitted at the proceed
/// time `s`: a bucket's `tat = max(tat, s) + cost × T`, a sliding window's
/// current count grows by the cost. When the cost exceeds a limit, or with
/// a fixed window among the limits, the reservation is the decision itself
/// ([`decide_all`]): admitted with no delay, or refused with the
/// decision's `retry_after`. A cost of 0 is a peek either way.
///
/// # Panics
///
/// As for [`decide_all`].
pub fn reserve_all(
    limits: &[LimitRate],
    states: &[Option<State>],
    next: &mut [Option<State>],
    now: u64,
    cost: u64,
    max_delay: u64,
) -> ReserveOutcome {
    let decided = |next: &mut [Option<State>]| ReserveOutcome {
        compound: decide_all(limits, states, next, now, cost),
        delay: 0,
        beyond_max_delay: false,
    };
    if cost == 0 || !reserves_ahead(limits) {
        return decided(next);
    }
    let now = super::clamp_time(now);
    let Some(slots) = earliest_slots(limits, states, now, cost) else {
        // Never: decided as a request of this cost is.
        return decided(next);
    };
    let delay = slots.proceed - now;
    if delay > max_delay {
        return ReserveOutcome {
            compound: refused(limits, states, next, now, (delay - max_delay, slots.longest)),
            delay: 0,
            beyond_max_delay: true,
        };
    }
    if slots.proceed >= slots.turns {
        return ReserveOutcome {
            compound: refused(limits, states, next, now, (slots.turns - now, slots.turning)),
            delay: 0,
            beyond_max_delay: false,
        };
    }
    ReserveOutcome {
        compound: charged_at(limits, states, next, (now, slots.proceed), cost),
        delay,
        beyond_max_delay: false,
    }
}

/// Where a reservation's limits let it proceed ([`earliest_slots`]).
struct Slots {
    /// The latest of the limits' earliest slots.
    proceed: u64,
    /// The limit `proceed` is from (ties: the first).
    longest: usize,
    /// The earliest end of a sliding window's current window (`u64::MAX`
    /// without one).
    turns: u64,
    /// The limit `turns` is from.
    turning: usize,
}

/// A bucket's theoretical arrival time at `now` (`now` for any other state).
fn tat_at(state: Option<State>, now: u64) -> u64 {
    match state {
        Some(State::Gcra(s)) => s.tat.max(now),
        _ => now,
    }
}

/// Each limit's earliest slot for `cost` units at `now`, and where the
/// reservation's limits let it proceed; `None` when some limit never
/// admits it (the cost exceeds a bucket's limit, a sliding window's
/// estimate never falls far enough).
fn earliest_slots(limits: &[LimitRate], states: &[Option<State>], now: u64, cost: u64) -> Option<Slots> {
    let mut slots = Slots {
        proceed: now,
        longest: 0,
        turns: u64::MAX,
        turning: 0,
    };
    for (i, limit) in limits.iter().enumerate() {
        let rate = &limit.rate;
        let earliest = if limit.strategy == Strategy::SlidingWindow {
            let state = match states[i] {
                Some(State::SlidingWindow(s)) => Some(s),
                _ => None,
            };
            let (earliest, end) = SlidingWindow::earliest(rate, state, now, cost)?;
            if end < slots.turns {
                (slots.turns, slots.turning) = (end, i);
            }
            earliest
        } else {
            if cost > rate.limit {
                return None;
            }
            let tat = tat_at(states[i], now);
            now + (tat + cost * rate.interval - now).saturating_sub(rate.limit * rate.interval)
        };
        if earliest > slots.proceed {
            (slots.proceed, slots.longest) = (earliest, i);
        }
    }
    Some(slots)
}

/// A refused reservation: a peek's figures at `now`, denied, with
/// `retry_after` and bound by the limit at `bound_by`; nothing charged.
fn refused(
    limits: &[LimitRate],
    states: &[Option<State>],
    next: &mut [Option<State>],
    now: u64,
    (retry_after, bound_by): (u64, usize),
) -> CompoundOutcome {
    let peek = decide_all(limits, states, next, now, 0);
    CompoundOutcome {
        outcome: Outcome {
            allowed: false,
            retry_after: Some(retry_after),
            ..peek.outcome
        },
        bound_by,
    }
}

/// Every limit charged `cost` as by a request admitted at `proceed`
/// (`next` filled), its figures as seen at `now`.
fn charged_at(
    limits: &[LimitRate],
    states: &[Option<State>],
    next: &mut [Option<State>],
    (now, proceed): (u64, u64),
    cost: u64,
) -> CompoundOutcome {
    let mut outcomes = [Outcome {
        allowed: true,
        remaining: 0,
        reset: 0,
        retry_after: None,
    }; MAX_LIMITS];
    for (i, limit) in limits.iter().enumerate() {
        let rate = &limit.rate;
        if limit.strategy == Strategy::SlidingWindow {
            // Counted in the current window now; `remaining` and `reset`
            // as a peek at now sees the charged state.
            next[i] = penalty(limit.strategy, rate, states[i], now, cost);
            let (peek, _) = decide(limit.strategy, rate, next[i], now, 0);
            outcomes[i] = Outcome {
                allowed: true,
                retry_after: None,
                ..peek
            };
            continue;
        }
        let tat = tat_at(states[i], now)
            .max(proceed)
            .saturating_add(cost * rate.interval);
        let ahead = tat - now;
        let burst = rate.limit * rate.interval;
        outcomes[i] = Outcome {
            allowed: true,
            remaining: burst.saturating_sub(ahead) / rate.interval,
            reset: ahead,
            retry_after: None,
        };
        next[i] = Some(State::Gcra(GcraState { tat }));
    }
    combine(&outcomes[..limits.len()])
}

/// Gives back a reservation of `cost` units whose charge left the states
/// `reserved` (one per limit), at `now`, when that is still possible: before
/// the reservation's proceed time `proceed`, and while every limit's state
/// is still the one it left (nothing charged since). Fills `next` and
/// returns `true` then; returns `false`, `next` untouched, otherwise.
pub fn cancel_all(
    limits: &[LimitRate],
    states: &[Option<State>],
    next: &mut [Option<State>],
    now: u64,
    cost: u64,
    reserved: &[Option<State>],
    proceed: u64,
) -> bool {
    if now >= proceed || states != reserved {
        return false;
    }
    for (i, limit) in limits.iter().enumerate() {
        next[i] = super::refund(limit.strategy, &limit.rate, states[i], now, cost);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::Rate;

    fn bucket(limit: u64, window: u64) -> LimitRate {
        LimitRate {
            strategy: Strategy::TokenBucket,
            rate: Rate::new(limit, window),
        }
    }

    #[test]
    fn a_bucket_reserves_the_next_slots_in_order() {
        // 10 per 1,000 ticks: T = 100, a burst of 10.
        let limits = [bucket(10, 1_000)];
        let mut state = [None];
        let mut delays = Vec::new();
        for _ in 0..13 {
            let mut next = [None];
            let r = reserve_all(&limits, &state, &mut next, 0, 1, 1_000);
            assert!(r.compound.outcome.allowed);
            delays.push(r.delay);
            state = next;
        }
        assert_eq!(delays, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 100, 200, 300]);
        let mut next = [None];
        let refused = reserve_all(&limits, &state, &mut next, 0, 1, 350);
        assert!(!refused.compound.outcome.allowed);
        assert_eq!(refused.compound.outcome.retry_after, Some(50), "400 - 350");
        let over = reserve_all(&limits, &state, &mut next, 0, 11, u64::MAX);
        assert_eq!(
            (over.compound.outcome.allowed, over.compound.outcome.retry_after),
            (false, None)
        );
    }

    #[test]
    fn a_cancel_gives_back_only_the_last_reservation_before_it_proceeds() {
        let limits = [bucket(1, 1_000)];
        let mut first = [None];
        reserve_all(&limits, &[None], &mut first, 0, 1, 0);
        let mut second = [None];
        let r = reserve_all(&limits, &first, &mut second, 0, 1, 5_000);
        assert_eq!(r.delay, 1_000);
        let mut next = [None];
        assert!(
            !cancel_all(&limits, &second, &mut next, 1_000, 1, &second, 1_000),
            "proceeded"
        );
        assert!(
            !cancel_all(&limits, &second, &mut next, 10, 1, &first, 1_000),
            "not the last"
        );
        assert!(cancel_all(&limits, &second, &mut next, 10, 1, &second, 1_000));
        assert_eq!(next, first, "as if never reserved");
    }

    #[test]
    fn a_window_reserves_only_what_it_admits_now() {
        let limits = [LimitRate {
            strategy: Strategy::FixedWindow,
            rate: Rate::new(1, 1_000),
        }];
        let mut state = [None];
        let r = reserve_all(&limits, &[None], &mut state, 0, 1, u64::MAX);
        assert_eq!((r.compound.outcome.allowed, r.delay), (true, 0));
        let mut next = [None];
        let r = reserve_all(&limits, &state, &mut next, 10, 1, u64::MAX);
        assert!(!r.compound.outcome.allowed);
        assert_eq!(r.compound.outcome.retry_after, Some(990));
    }

    fn sliding(limit: u64, window: u64) -> LimitRate {
        LimitRate {
            strategy: Strategy::SlidingWindow,
            rate: Rate::new(limit, window),
        }
    }

    #[test]
    fn a_sliding_window_reserves_the_slots_its_estimate_frees_within_the_window() {
        // 10 per 1,000 ticks, the first window full: in the second, the
        // previous window's weight frees a unit every 100 ticks.
        let limits = [sliding(10, 1_000)];
        let mut state = [None];
        let mut next = [None];
        reserve_all(&limits, &state, &mut next, 0, 10, 0);
        state = next;
        let mut proceeds = Vec::new();
        for _ in 0..10 {
            let mut next = [None];
            let r = reserve_all(&limits, &state, &mut next, 1_000, 1, u64::MAX);
            assert!(r.compound.outcome.allowed);
            assert!(!r.beyond_max_delay);
            proceeds.push(1_000 + r.delay);
            state = next;
        }
        assert_eq!(
            proceeds,
            [1_001, 1_101, 1_201, 1_301, 1_401, 1_501, 1_601, 1_701, 1_801, 1_901]
        );
        // Each proceeds where a plain decision, counting what proceeded
        // before it, admits it.
        let mut n = [None];
        reserve_all(&limits, &[None], &mut n, 0, 10, 0);
        let mut plain = n;
        for &at in &proceeds {
            let mut n = [None];
            assert!(
                decide_all(&limits, &plain, &mut n, at, 1).outcome.allowed,
                "at {at}"
            );
            plain = n;
        }
        // The window is spoken for: the next slot lies in the window after,
        // whose counts this one cannot hold. Refused until it turns.
        let r = reserve_all(&limits, &state, &mut next, 1_000, 1, u64::MAX);
        assert!(!r.compound.outcome.allowed);
        assert_eq!(r.compound.outcome.retry_after, Some(1_000));
        assert!(!r.beyond_max_delay, "waiting for the window helps");
        // Beyond the longest wait: refused for good, by the excess.
        let mut one = [None];
        reserve_all(&limits, &[None], &mut one, 0, 10, 0);
        let r = reserve_all(&limits, &one, &mut next, 1_000, 1, 0);
        assert_eq!(r.compound.outcome.retry_after, Some(1), "as a decision says");
        assert!(r.beyond_max_delay);
    }

    #[test]
    fn a_sliding_reservation_given_back_leaves_the_state_it_found() {
        let limits = [sliding(2, 1_000)];
        let mut full = [None];
        reserve_all(&limits, &[None], &mut full, 0, 2, 0);
        let mut reserved = [None];
        let r = reserve_all(&limits, &full, &mut reserved, 1_000, 1, u64::MAX);
        assert_eq!(r.delay, 1, "the previous window's weight frees a unit at once");
        let mut next = [None];
        assert!(cancel_all(
            &limits, &reserved, &mut next, 1_000, 1, &reserved, 1_001
        ));
        let mut rolled = [None];
        decide_all(&limits, &full, &mut rolled, 1_000, 0);
        assert_eq!(next, rolled, "as if never reserved");
    }

    #[test]
    fn a_bucket_and_a_sliding_window_reserve_together_or_not_at_all() {
        // The bucket frees a unit every 100 ticks; the window holds 3 per
        // 1,000 and is full until its previous window's weight falls.
        let limits = [bucket(10, 1_000), sliding(3, 1_000)];
        let mut state = [None, None];
        let mut next = [None, None];
        let r = reserve_all(&limits, &state, &mut next, 0, 3, 0);
        assert!(r.compound.outcome.allowed);
        state = next;
        // In the window: the sliding window admits nothing more until it
        // turns, so nothing is charged on the bucket either.
        let r = reserve_all(&limits, &state, &mut next, 10, 1, u64::MAX);
        assert!(!r.compound.outcome.allowed);
        assert_eq!(
            (r.compound.outcome.retry_after, r.compound.bound_by),
            (Some(990), 1)
        );
        assert_eq!(next, state, "nothing charged");
    }
}
