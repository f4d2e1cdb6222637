//! Reservations: a request that, instead of being refused, is charged now
//! for a later slot and told how long to wait ([waiting and
//! reservations](crate::_documentation::semantics#waiting-and-reservations)).
//!
//! The buckets can reserve a future slot: their state advances by the cost
//! and the caller proceeds after the delay. A window holds no future
//! bucket, so a policy with a window among its limits reserves only what it
//! admits now. Both functions are pure, like the strategies.

use super::{combine, decide_all, CompoundOutcome, GcraState, LimitRate, Outcome, State, Strategy};
use crate::policy::MAX_LIMITS;

/// A reservation decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReserveOutcome {
    /// The decision: `allowed` when reserved (with `remaining` and `reset`
    /// after the charge, and no `retry_after`); when refused, nothing was
    /// charged and `retry_after` is the wait after which the same
    /// reservation would be made (`None` when it never can: the cost
    /// exceeds a limit).
    pub compound: CompoundOutcome,
    /// Ticks from now until the request proceeds (0 when it may proceed at
    /// once; 0 when refused).
    pub delay: u64,
}

/// Whether every limit is a bucket (token or leaky): only then can a
/// policy reserve a future slot.
pub fn reserves_ahead(limits: &[LimitRate]) -> bool {
    limits
        .iter()
        .all(|l| matches!(l.strategy, Strategy::TokenBucket | Strategy::LeakyBucket))
}

/// Whether every limit of `policy` is a bucket ([`reserves_ahead`]).
pub(crate) fn reserves_ahead_policy(policy: &crate::Policy) -> bool {
    policy
        .limits()
        .iter()
        .all(|l| matches!(l.strategy(), Strategy::TokenBucket | Strategy::LeakyBucket))
}

/// Reserves `cost` units on every limit in `limits` at `now`, waiting at
/// most `max_delay` ticks; `states` and `next` as for [`decide_all`].
///
/// With buckets only ([`reserves_ahead`]), the delay is the largest of the
/// limits' `max(0, t + cost × T − now − L × T)` (`t = max(tat, now)`); within
/// `max_delay` every limit is charged as by a request admitted at
/// `s = now + delay`: `tat = max(tat, s) + cost × T`. Beyond it, or when the
/// cost exceeds a limit, nothing is charged. With a window among the limits
/// the reservation is the decision itself ([`decide_all`]): admitted with
/// no delay, or refused with the decision's `retry_after`. A cost of 0 is a
/// peek either way.
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
    if cost == 0 || !reserves_ahead(limits) {
        let compound = decide_all(limits, states, next, now, cost);
        return ReserveOutcome { compound, delay: 0 };
    }
    let now = super::clamp_time(now);
    let tat = |i: usize| match states[i] {
        Some(State::Gcra(s)) => s.tat.max(now),
        _ => now,
    };
    let mut delay = 0u64;
    // The limit with the longest wait binds a refusal (ties: the first).
    let mut longest = 0;
    for (i, limit) in limits.iter().enumerate() {
        let rate = &limit.rate;
        if cost > rate.limit {
            // Never: decided as a request of this cost is.
            let compound = decide_all(limits, states, next, now, cost);
            return ReserveOutcome { compound, delay: 0 };
        }
        let wait = (tat(i) + cost * rate.interval - now).saturating_sub(rate.limit * rate.interval);
        if wait > delay {
            delay = wait;
            longest = i;
        }
    }
    if delay > max_delay {
        let peek = decide_all(limits, states, next, now, 0);
        let compound = CompoundOutcome {
            outcome: Outcome {
                allowed: false,
                retry_after: Some(delay - max_delay),
                ..peek.outcome
            },
            bound_by: longest,
        };
        return ReserveOutcome { compound, delay: 0 };
    }
    let proceed = now.saturating_add(delay);
    let mut outcomes = [Outcome {
        allowed: true,
        remaining: 0,
        reset: 0,
        retry_after: None,
    }; MAX_LIMITS];
    for (i, limit) in limits.iter().enumerate() {
        let rate = &limit.rate;
        let tat = tat(i).max(proceed).saturating_add(cost * rate.interval);
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
    ReserveOutcome {
        compound: combine(&outcomes[..limits.len()]),
        delay,
    }
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
}
