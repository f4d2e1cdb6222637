//! The contract of deciding together ([`tollgate::together`]) from the pure
//! strategy functions: what a request of several parts must decide and
//! leave, whatever the backend. The core's tests check the in-memory and
//! store-adapter backends against it, and the Redis backend's tests check
//! the one-call scripts.

use proptest::prelude::*;
use tollgate::backend::{Backend, Tick};
use tollgate::strategy::{decide_all, LimitRate, State};
use tollgate::together::Part;
use tollgate::{Decision, Limiter};

/// One part of a planned request: a policy index, a key index, a cost and
/// whether the part is decisive.
pub type PlanPart = (usize, usize, u64, bool);

/// The state of every policy's every key, one per limit.
pub type States = Vec<Vec<[Option<State>; tollgate::Policy::MAX_LIMITS]>>;

/// Random requests of one to four parts over `policies` policies and
/// `keys` keys, each with a clock step in nanoseconds (occasionally
/// backwards): costs from 0 to 4 and now and then the largest cost, a
/// fifth of the parts not decisive.
pub fn request(policies: usize, keys: usize) -> impl Strategy<Value = (i64, Vec<PlanPart>)> {
    (
        prop_oneof![3 => 0i64..2_000_000, 2 => 0i64..2_000_000_000, 1 => -1_000i64..0],
        prop::collection::vec(
            (
                0..policies,
                0..keys,
                prop_oneof![30 => 0u64..5, 1 => Just(u64::MAX)],
                prop_oneof![4 => Just(true), 1 => Just(false)],
            ),
            1..5,
        ),
    )
}

/// The parts of a planned request on `limiters` and `keys`.
pub fn parts<'a, B: Backend>(
    plan: &[PlanPart],
    limiters: &'a [Limiter<B>],
    keys: &'a [Vec<u8>],
) -> Vec<Part<'a, B>> {
    plan.iter()
        .map(|&(p, k, cost, decisive)| Part {
            limiter: &limiters[p],
            key: &keys[k],
            cost,
            decisive,
        })
        .collect()
}

/// A part decided alone for `cost` against `state` at `now` (in `tick`s):
/// its decision and next state (charged only when it admits).
pub fn alone(
    limits: &[LimitRate],
    state: &[Option<State>; tollgate::Policy::MAX_LIMITS],
    now: u64,
    cost: u64,
    tick: Tick,
) -> (Decision, [Option<State>; tollgate::Policy::MAX_LIMITS]) {
    let n = limits.len();
    let mut next = [None; tollgate::Policy::MAX_LIMITS];
    let outcome = decide_all(limits, &state[..n], &mut next[..n], now, cost);
    (Decision::from_compound(outcome, limits, tick), next)
}

/// The decisions of `parts` at `now` under the contract, and `states` as
/// the request leaves them: the parts in order, each against the charges
/// of the earlier ones; at the first decisive denial nothing is charged,
/// that part reports its denial and every other part what a request of it
/// alone gets against the stored state (a charge-free decision when that
/// admits).
pub fn expected(
    limits: &[Vec<LimitRate>],
    states: &mut States,
    parts: &[PlanPart],
    now: u64,
    tick: Tick,
) -> Vec<Decision> {
    let mut current = states.clone();
    let mut decisions = Vec::new();
    let mut denial = None;
    for (i, &(p, k, cost, decisive)) in parts.iter().enumerate() {
        let (decision, next) = alone(&limits[p], &current[p][k], now, cost, tick);
        current[p][k] = next;
        let denied = !decision.allowed;
        decisions.push(decision);
        if denied && decisive {
            denial = Some(i);
            break;
        }
    }
    let Some(denial) = denial else {
        *states = current;
        return decisions;
    };
    let mut all = Vec::new();
    for (i, &(p, k, cost, _)) in parts.iter().enumerate() {
        if i == denial {
            all.push(decisions[denial]);
            continue;
        }
        let (decision, _) = alone(&limits[p], &states[p][k], now, cost, tick);
        all.push(if decision.allowed && cost > 0 {
            alone(&limits[p], &states[p][k], now, 0, tick).0
        } else {
            decision
        });
    }
    // A charge-free decision still moves a state on (a window rolls), as
    // the store's does.
    for &(p, k, _, _) in parts {
        let (_, next) = alone(&limits[p], &states[p][k], now, 0, tick);
        current[p][k] = next;
    }
    for &(p, k, _, _) in parts {
        states[p][k] = current[p][k];
    }
    all
}
