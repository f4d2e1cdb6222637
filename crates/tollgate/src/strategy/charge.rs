//! Usage reported after the fact (`charge: always`): a request decided by
//! the strategies' own test and charged whether admitted or not.

use super::compound::{decide_all, CompoundOutcome, LimitRate};
use super::{penalty, State};
use crate::policy::MAX_LIMITS;

/// A decision of every limit of a request, as [`decide_all`] and
/// [`charge_all`] make it: `(limits, states, next, now, cost)`.
pub(crate) type DecideAll =
    fn(&[LimitRate], &[Option<State>], &mut [Option<State>], u64, u64) -> CompoundOutcome;

/// Decides a request of `cost` against every limit, as [`decide_all`]
/// does, and charges it whether admitted or not
/// ([usage reported after the fact](crate::_documentation::semantics#usage-reported-after-the-fact-charge-always)).
///
/// Admitted, this is [`decide_all`]'s answer. Denied (and `cost > 0`),
/// every limit is charged `cost` as a penalty charges it, `next` holds the
/// charged states, and the outcome is what a peek reads from them: not
/// allowed, with `remaining`, `reset` and `retry_after` (the wait for a
/// unit request) of the state after the charge. A cost of 0 stays a peek.
///
/// # Panics
///
/// As [`decide_all`].
pub fn charge_all(
    limits: &[LimitRate],
    states: &[Option<State>],
    next: &mut [Option<State>],
    now: u64,
    cost: u64,
) -> CompoundOutcome {
    let decided = decide_all(limits, states, next, now, cost);
    if decided.outcome.allowed || cost == 0 {
        return decided;
    }
    let mut charged = [None; MAX_LIMITS];
    for (i, limit) in limits.iter().enumerate() {
        charged[i] = penalty(limit.strategy, &limit.rate, states[i], now, cost);
    }
    let mut after = decide_all(limits, &charged[..limits.len()], next, now, 0);
    // A unit request never fits where the charged request did not.
    after.outcome.allowed = false;
    after
}
