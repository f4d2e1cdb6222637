//! Several limits decided as one step: the compound decision.
//!
//! Each limit keeps its own state and decides by its own strategy function;
//! this module only combines their answers, exactly as [several limits on
//! one request](crate::_documentation::semantics#several-limits-on-one-request-compound-policies)
//! says. A request is admitted iff every limit admits it, and only then is
//! every limit charged. Every backend runs [`decide_all`] (or, on Redis, a
//! script that decides each limit, checked against it, and [`combine`]), so
//! compound decisions agree across backends like single ones.

use super::{decide, Outcome, Rate, State, Strategy};
use crate::policy::MAX_LIMITS;

/// One limit of a compound decision, in a backend's clock ticks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitRate {
    /// The limit's strategy.
    pub strategy: Strategy,
    /// The limit's rate in the backend's ticks.
    pub rate: Rate,
}

/// The result of a compound decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompoundOutcome {
    /// The combined outcome: allowed iff every limit admits; `remaining` the
    /// smallest, `reset` the largest of the limits' answers; `retry_after`
    /// (when denied) the largest delay, or `None` when the cost exceeds any
    /// limit.
    pub outcome: Outcome,
    /// The index of the limit that bound the decision: when denied, the
    /// denying limit with the longest `retry_after` (`None` counting as
    /// longest); when allowed, the limit with the least `remaining`. Ties go
    /// to the first listed.
    pub bound_by: usize,
}

/// Decides one request of `cost` units against every limit in `limits` as
/// one step.
///
/// `states[i]` is limit `i`'s stored state; on return `next[i]` holds the
/// state to store for it (`None`: delete). When the request is denied, no
/// limit is charged: a limit that would have admitted it keeps its state
/// (brought forward to `now`, which is equivalent) and reports what a peek
/// would. With one limit this is exactly that limit's [`decide`].
///
/// # Panics
///
/// When `limits` is empty or longer than [`MAX_LIMITS`], or `states` and
/// `next` are shorter than `limits`; a [`crate::Policy`] never has such
/// limits.
pub fn decide_all(
    limits: &[LimitRate],
    states: &[Option<State>],
    next: &mut [Option<State>],
    now: u64,
    cost: u64,
) -> CompoundOutcome {
    assert!(
        !limits.is_empty() && limits.len() <= MAX_LIMITS,
        "a compound decision takes 1 to {MAX_LIMITS} limits"
    );
    let n = limits.len();
    let mut outcomes = [Outcome {
        allowed: true,
        remaining: 0,
        reset: 0,
        retry_after: None,
    }; MAX_LIMITS];
    for i in 0..n {
        let (outcome, state) = decide(limits[i].strategy, &limits[i].rate, states[i], now, cost);
        outcomes[i] = outcome;
        next[i] = state;
    }
    let outcomes = &mut outcomes[..n];
    if !outcomes.iter().all(|o| o.allowed) && cost > 0 {
        // Nothing is charged: the limits that admitted report their
        // uncharged state, as a peek sees it.
        for i in 0..n {
            if outcomes[i].allowed {
                let (outcome, state) = decide(limits[i].strategy, &limits[i].rate, states[i], now, 0);
                outcomes[i] = outcome;
                next[i] = state;
            }
        }
    }
    combine(outcomes)
}

/// Combines the answers of the limits of one compound decision into its
/// outcome and binding limit, as [`decide_all`] does; for backends that
/// decide each limit elsewhere (the Redis scripts) and combine here.
///
/// `outcomes[i]` is limit `i`'s answer to the request. When any limit
/// denies a request of non-zero cost, a limit that admitted it must report
/// its uncharged state (its answer to a peek, `cost` 0), since nothing is
/// charged; the request is admitted iff every limit admits it.
///
/// # Panics
///
/// When `outcomes` is empty.
pub fn combine(outcomes: &[Outcome]) -> CompoundOutcome {
    assert!(
        !outcomes.is_empty(),
        "a compound decision takes at least one limit"
    );
    let allowed = outcomes.iter().all(|o| o.allowed);
    let remaining = outcomes.iter().map(|o| o.remaining).min().unwrap_or(0);
    let reset = outcomes.iter().map(|o| o.reset).max().unwrap_or(0);
    if allowed {
        let bound_by = first_index_of_min(outcomes.iter().map(|o| o.remaining));
        return CompoundOutcome {
            outcome: Outcome {
                allowed,
                remaining,
                reset,
                retry_after: None,
            },
            bound_by,
        };
    }
    // Denied: `None` (the cost exceeds that limit) counts as the longest
    // delay, and makes the combined delay `None` too.
    let delay = |o: &Outcome| match (o.allowed, o.retry_after) {
        (true, _) => Some(0),
        (false, Some(d)) => Some(d),
        (false, None) => None,
    };
    let mut bound_by = 0;
    let mut longest: Option<Option<u64>> = None;
    for (i, o) in outcomes.iter().enumerate() {
        if o.allowed {
            continue;
        }
        let d = delay(o);
        let longer = match (longest, d) {
            (None, _) => true,
            (Some(None), _) => false,
            (Some(Some(_)), None) => true,
            (Some(Some(a)), Some(b)) => b > a,
        };
        if longer {
            longest = Some(d);
            bound_by = i;
        }
    }
    CompoundOutcome {
        outcome: Outcome {
            allowed,
            remaining,
            reset,
            retry_after: longest.flatten(),
        },
        bound_by,
    }
}

fn first_index_of_min(values: impl Iterator<Item = u64>) -> usize {
    let mut best = (0, u64::MAX);
    for (i, v) in values.enumerate() {
        if v < best.1 {
            best = (i, v);
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(strategy: Strategy, l: u64, w: u64) -> LimitRate {
        LimitRate {
            strategy,
            rate: Rate::new(l, w),
        }
    }

    #[test]
    fn a_denial_by_one_limit_charges_none() {
        let limits = [
            limit(Strategy::TokenBucket, 10, 1_000),
            limit(Strategy::FixedWindow, 2, 1_000_000),
        ];
        let mut states = [None, None];
        let mut next = [None, None];
        for expected in [true, true, false, false] {
            let d = decide_all(&limits, &states, &mut next, 100, 1);
            assert_eq!(d.outcome.allowed, expected);
            states = next;
        }
        // The bucket was charged twice, not four times: 8 left at t=100.
        let (peek, _) = decide(Strategy::TokenBucket, &limits[0].rate, states[0], 100, 0);
        assert_eq!(peek.remaining, 8);
        let d = decide_all(&limits, &states, &mut next, 100, 1);
        assert_eq!((d.outcome.remaining, d.bound_by), (0, 1));
    }

    #[test]
    fn a_cost_above_any_limit_has_no_retry_and_names_that_limit() {
        let limits = [
            limit(Strategy::SlidingWindow, 100, 1_000),
            limit(Strategy::TokenBucket, 5, 1_000),
        ];
        let d = decide_all(&limits, &[None, None], &mut [None, None], 0, 6);
        assert!(!d.outcome.allowed);
        assert_eq!((d.outcome.retry_after, d.bound_by), (None, 1));
        assert_eq!(d.outcome.remaining, 5);
    }
}
