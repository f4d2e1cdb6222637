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
/// When `limits` is empty or longer than [`Policy::MAX_LIMITS`](crate::Policy::MAX_LIMITS), or `states` and
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
    let mut tally = Tally::new();
    for (i, limit) in limits.iter().enumerate() {
        let (outcome, state) = decide(limit.strategy, &limit.rate, states[i], now, cost);
        tally.add(i, &outcome);
        next[i] = state;
    }
    if tally.allowed {
        return tally.admitted();
    }
    decide_denied(limits, states, next, now, cost)
}

/// [`decide_all`] for a request some limit denies: nothing is charged, so
/// the limits that admitted it report their uncharged state, as a peek sees
/// it.
#[cold]
fn decide_denied(
    limits: &[LimitRate],
    states: &[Option<State>],
    next: &mut [Option<State>],
    now: u64,
    cost: u64,
) -> CompoundOutcome {
    let mut outcomes = [Outcome {
        allowed: true,
        remaining: 0,
        reset: 0,
        retry_after: None,
    }; MAX_LIMITS];
    for (i, limit) in limits.iter().enumerate() {
        let (mut outcome, mut state) = decide(limit.strategy, &limit.rate, states[i], now, cost);
        if outcome.allowed && cost > 0 {
            (outcome, state) = decide(limit.strategy, &limit.rate, states[i], now, 0);
        }
        outcomes[i] = outcome;
        next[i] = state;
    }
    combine(&outcomes[..limits.len()])
}

/// The combination of the limits' answers so far, for the common case: an
/// admission.
struct Tally {
    allowed: bool,
    remaining: u64,
    least: usize,
    reset: u64,
}

impl Tally {
    #[inline]
    fn new() -> Self {
        Self {
            allowed: true,
            remaining: u64::MAX,
            least: 0,
            reset: 0,
        }
    }

    /// Adds limit `i`'s answer.
    #[inline]
    fn add(&mut self, i: usize, o: &Outcome) {
        self.allowed &= o.allowed;
        if o.remaining < self.remaining {
            self.remaining = o.remaining;
            self.least = i;
        }
        self.reset = self.reset.max(o.reset);
    }

    /// The admission: the least `remaining` binds, ties to the first listed.
    #[inline]
    fn admitted(&self) -> CompoundOutcome {
        CompoundOutcome {
            outcome: Outcome {
                allowed: true,
                remaining: self.remaining,
                reset: self.reset,
                retry_after: None,
            },
            bound_by: self.least,
        }
    }
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
    let mut tally = Tally::new();
    for (i, o) in outcomes.iter().enumerate() {
        tally.add(i, o);
    }
    if tally.allowed {
        return tally.admitted();
    }
    combine_denied(outcomes, tally.remaining, tally.reset)
}

/// [`combine`] for a denied request.
#[cold]
fn combine_denied(outcomes: &[Outcome], remaining: u64, reset: u64) -> CompoundOutcome {
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
            allowed: false,
            remaining,
            reset,
            retry_after: longest.flatten(),
        },
        bound_by,
    }
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
