//! Leasing: a request that takes more units than it spends, for the
//! process to spend later without asking the store ([leased
//! quotas](crate::_documentation::semantics#leased-quotas)).
//!
//! A store that leases runs [`lease_all`] where it would run
//! [`decide_all`], and [`give_back`] first when the call returns the units
//! of an ended lease; both are pure, like the strategies.

use super::{decide_all, refund, CompoundOutcome, FixedWindow, LimitRate, State, Strategy};

/// What a store asked for a lease decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseOutcome {
    /// The decision of the request itself: admitted iff its `cost` units
    /// were admitted (alone or with the lease); `remaining`, `reset` and
    /// `bound_by` after everything charged, lease included.
    pub compound: CompoundOutcome,
    /// The units charged beyond the request's cost: the lease (0 when none
    /// was granted).
    pub extra: u64,
    /// For a lease on a window (fixed or sliding), the tick at which the
    /// earliest window it was charged in ends: its units are spent before
    /// it, and given back only before it. `None` when no
    /// lease was granted or every limit is a bucket.
    pub window_end: Option<u64>,
}

/// Decides a request of `cost` units that asks for up to `want` more as a
/// lease, against every limit in `limits` as one step, at `now`, with
/// `lessees` processes (this one included, at least 1) having leased the
/// key recently.
///
/// The lease is `extra = min(want, share)` with
/// `share = floor(left / (2 × lessees)) − cost` (floored at 0), `left`
/// being what the limits would admit at `now` before this request (their
/// smallest `remaining` to a peek). `cost + extra` units are decided as one
/// request; when that is denied, or `extra` is 0, `cost` units alone are
/// decided, exactly as [`decide_all`] decides them. `states` and `next`
/// are as for [`decide_all`].
///
/// # Panics
///
/// As for [`decide_all`].
pub fn lease_all(
    limits: &[LimitRate],
    states: &[Option<State>],
    next: &mut [Option<State>],
    now: u64,
    cost: u64,
    want: u64,
    lessees: u64,
) -> LeaseOutcome {
    let extra = if cost == 0 || want == 0 {
        0
    } else {
        let left = decide_all(limits, states, next, now, 0).outcome.remaining;
        let share = (left / lessees.max(1).saturating_mul(2)).saturating_sub(cost);
        want.min(share)
    };
    if extra > 0 {
        let compound = decide_all(limits, states, next, now, cost.saturating_add(extra));
        if compound.outcome.allowed {
            return LeaseOutcome {
                compound,
                extra,
                window_end: window_end(limits, next),
            };
        }
    }
    LeaseOutcome {
        compound: decide_all(limits, states, next, now, cost),
        extra: 0,
        window_end: None,
    }
}

/// The tick at which the earliest window of `states` (after a charge)
/// ends: `start + W` of each fixed or sliding window; `None` when no limit
/// is a window.
pub fn window_end(limits: &[LimitRate], states: &[Option<State>]) -> Option<u64> {
    limits
        .iter()
        .zip(states)
        .filter_map(|(limit, state)| match (limit.strategy, state) {
            (Strategy::FixedWindow, Some(State::FixedWindow(s))) => {
                Some(FixedWindow::end_of(&limit.rate, s.start))
            }
            (Strategy::SlidingWindow, Some(State::SlidingWindow(s))) => {
                Some(s.start.saturating_add(limit.rate.window))
            }
            _ => None,
        })
        .min()
}

/// The tick before which the unspent units of a lease whose charge left
/// `states` are given back when the lease ends: the earliest of the end of
/// each window it was charged in (fixed or sliding) and of each bucket's
/// `tat` after the charge, when the bucket's debt from before the lease,
/// the lease's own units last, has drained. [`u64::MAX`] when no limit
/// holds state.
pub fn return_before(limits: &[LimitRate], states: &[Option<State>]) -> u64 {
    limits
        .iter()
        .zip(states)
        .filter_map(|(limit, state)| match (limit.strategy, state) {
            (Strategy::FixedWindow | Strategy::SlidingWindow, _) => {
                window_end(std::slice::from_ref(limit), std::slice::from_ref(state))
            }
            (_, Some(State::Gcra(s))) => Some(s.tat),
            _ => None,
        })
        .min()
        .unwrap_or(u64::MAX)
}

/// Gives back `units` of an ended lease on every limit, as
/// [`refund`](super::refund) does, when `now` is before `before` (the
/// lease's [`return_before`]): after the window the lease was charged in,
/// its units no longer count and nothing is given back. A bucket gives
/// back only what of the lease still weighs on it: the lease's units were
/// its last, and drain by `before` (its `tat` after the charge), so at
/// `now` at most `floor((before - now) / T)` of them remain; giving back
/// more would admit units that had already come back by themselves.
/// Returns the states to store.
pub(crate) fn give_back(
    limits: &[LimitRate],
    states: &mut [Option<State>],
    now: u64,
    units: u64,
    before: u64,
) {
    if units == 0 || now >= before {
        return;
    }
    for (limit, state) in limits.iter().zip(states.iter_mut()) {
        let units = match limit.strategy {
            Strategy::TokenBucket | Strategy::LeakyBucket => {
                units.min((before - now) / limit.rate.interval.max(1))
            }
            Strategy::FixedWindow | Strategy::SlidingWindow | Strategy::Concurrency => units,
        };
        if units > 0 {
            *state = refund(limit.strategy, &limit.rate, *state, now, units);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::Rate;

    fn limits(strategy: Strategy, limit: u64, window: u64) -> [LimitRate; 1] {
        [LimitRate {
            strategy,
            rate: Rate::new(limit, window),
        }]
    }

    #[test]
    fn a_small_limit_is_leased_one_request_at_a_time_near_its_end() {
        for strategy in [
            Strategy::FixedWindow,
            Strategy::SlidingWindow,
            Strategy::TokenBucket,
            Strategy::LeakyBucket,
        ] {
            let limits = limits(strategy, 5, 1_000);
            let mut state = [None];
            let mut extras = Vec::new();
            for _ in 0..5 {
                let mut next = [None];
                let out = lease_all(&limits, &state, &mut next, 10, 1, 64, 1);
                assert!(out.compound.outcome.allowed, "{strategy:?}");
                extras.push(out.extra);
                state = next;
                if out.compound.outcome.remaining == 0 {
                    break;
                }
            }
            // 5 left: share floor(5 / 2) - 1 = 1; from 3 left on, share 0.
            assert_eq!(extras, [1, 0, 0, 0], "{strategy:?}");
        }
    }

    #[test]
    fn a_lease_denied_whole_decides_the_request_alone() {
        let limits = limits(Strategy::FixedWindow, 100, 1_000);
        let mut next = [None];
        // Two lessees: share floor(100 / 4) - 1 = 24.
        let out = lease_all(&limits, &[None], &mut next, 0, 1, 64, 2);
        assert_eq!((out.extra, out.compound.outcome.remaining), (24, 75));
        assert_eq!(out.window_end, Some(1_000));
        let cost_over = lease_all(&limits, &[None], &mut next, 0, 101, 64, 1);
        assert!(!cost_over.compound.outcome.allowed);
        assert_eq!(cost_over.extra, 0);
    }

    #[test]
    fn units_are_given_back_only_inside_their_window() {
        let limits = limits(Strategy::FixedWindow, 100, 1_000);
        let mut next = [None];
        let out = lease_all(&limits, &[None], &mut next, 0, 1, 10, 1);
        assert_eq!(out.extra, 10);
        let before = out.window_end.unwrap();
        let mut late = next;
        give_back(&limits, &mut late, 1_000, 10, before);
        assert_eq!(late, next, "nothing given back once the window ended");
        give_back(&limits, &mut next, 999, 10, before);
        let mut peek = [None];
        let left = decide_all(&limits, &next, &mut peek, 999, 0).outcome.remaining;
        assert_eq!(left, 99);
    }
}
