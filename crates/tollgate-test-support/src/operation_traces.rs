//! Random traces of decisions and per-key operations (reset, block, refund,
//! penalty) over a few keys, and their reference: the decisions the pure
//! strategy functions give for a trace. Every backend must match the
//! reference decision for decision; the core's tests replay the traces on
//! the in-memory backend and the store adapter, the Redis backend's on a
//! redis-server.

use std::ops::Range;
use std::time::Duration;

use proptest::prelude::*;
use tollgate::backend::Tick;
use tollgate::strategy::{decide_all, penalty, refund, LimitRate, State};
use tollgate::{Decision, Operation};

/// How many keys a trace uses; its steps name them by index, `0..KEYS`.
pub const KEYS: usize = 3;

/// One step of a trace on one key.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// A decision of this cost.
    Decide(u64),
    /// An operation.
    Op(Operation),
}

/// Decisions (peeks and costs above the limit included) and operations,
/// blocks of up to three seconds among them.
pub fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (0u64..5).prop_map(Step::Decide),
        1 => (0u64..5).prop_map(|c| Step::Op(Operation::Refund(c))),
        1 => (0u64..5).prop_map(|c| Step::Op(Operation::Penalty(c))),
        1 => Just(Step::Op(Operation::Reset)),
        1 => (0u64..3_000_000_000).prop_map(|ns| Step::Op(Operation::Block(Duration::from_nanos(ns)))),
    ]
}

/// Traces of `len` steps: the clock moved forwards by `gaps` nanoseconds
/// (a block that has ended is dropped by the next write), a key index and
/// a [`step`].
pub fn trace(
    gaps: impl Strategy<Value = u64>,
    len: Range<usize>,
) -> impl Strategy<Value = Vec<(u64, usize, Step)>> {
    prop::collection::vec((gaps, 0usize..KEYS, step()), len)
}

/// The decisions of `trace`, its clock starting at `start` nanoseconds, by
/// the pure functions on `limits` at `tick`: per key, the state of every
/// limit and the end of its block. `None` for an operation.
pub fn reference(
    limits: &[LimitRate],
    tick: Tick,
    start: u64,
    trace: &[(u64, usize, Step)],
) -> Vec<Option<Decision>> {
    let n = limits.len();
    let mut states: Vec<Vec<Option<State>>> = vec![vec![None; n]; KEYS];
    let mut blocked_until = [0u64; KEYS];
    let mut nanos = start;
    let mut out = Vec::new();
    for &(dt, key, step) in trace {
        nanos += dt;
        let now = tick.from_nanos(nanos);
        let state = &mut states[key];
        let mut next = vec![None; n];
        match step {
            Step::Decide(_) if blocked_until[key] > now => {
                let peek = decide_all(limits, state, &mut next, now, 0);
                out.push(Some(Decision::blocked(
                    blocked_until[key] - now,
                    peek.outcome.reset,
                    limits[0].rate.limit,
                    tick,
                )));
            }
            Step::Decide(cost) => {
                let compound = decide_all(limits, state, &mut next, now, cost);
                *state = next;
                out.push(Some(Decision::from_compound(compound, limits, tick)));
            }
            Step::Op(op) => {
                for (i, l) in limits.iter().enumerate() {
                    state[i] = match op {
                        Operation::Refund(c) => refund(l.strategy, &l.rate, state[i], now, c),
                        Operation::Penalty(c) => penalty(l.strategy, &l.rate, state[i], now, c),
                        Operation::Reset => None,
                        _ => state[i],
                    };
                }
                match op {
                    Operation::Reset => blocked_until[key] = 0,
                    Operation::Block(d) => blocked_until[key] = now + tick.from_nanos(d.as_nanos() as u64),
                    _ => {}
                }
                out.push(None);
            }
        }
    }
    out
}
