//! Estimates settled by usage on Redis (SEMANTICS.md, "Estimates
//! settled"): random traces of holds, settles and clock advances answer
//! exactly as the in-memory backend on the same caller clock (as functions
//! and as scripts); holds from two services on one Redis, settled in a
//! random order, charge each tenant exactly its usage; each hold and each
//! settle is one script call; a reset deletes a key's holds; and holds are
//! kept on every shard of a cluster.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use proptest::test_runner::{Config, TestRunner};
use tollgate::strategy::holds::HoldId;
use tollgate::{Decision, Limit, Limiter, Policy, Strategy};

use crate::differential::{Harness, START};

/// One step of a trace.
#[derive(Clone, Debug)]
enum Op {
    Hold {
        key: u8,
        estimate: u64,
    },
    /// Settle the `n`-th latest hold made so far (modulo their number),
    /// settled before or not.
    Settle {
        n: usize,
        used: u64,
    },
    /// Move the clock on by this many microseconds.
    Advance {
        micros: u64,
    },
}

fn op(limit: u64, window: u64) -> impl proptest::strategy::Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, 0..=limit + 1).prop_map(|(key, estimate)| Op::Hold { key, estimate }),
        4 => (prop_oneof![3 => 0usize..2, 1 => any::<usize>()], 0..=limit * 2)
            .prop_map(|(n, used)| Op::Settle { n, used }),
        3 => (0..window / 2 + 1).prop_map(|micros| Op::Advance { micros }),
        // Past the window: the holds made before can no longer be settled.
        1 => (window..window * 2 + 1).prop_map(|micros| Op::Advance { micros }),
    ]
}

/// A limit whose window in microseconds is a multiple of its limit, so that
/// nanosecond and microsecond ticks decide alike.
fn divisible_limit(strategy: Strategy) -> impl proptest::strategy::Strategy<Value = Limit> {
    (1u64..9, prop_oneof![1u64..20, 1u64..300_000]).prop_map(move |(limit, interval_us)| {
        Limit::new(strategy, limit, Duration::from_micros(limit * interval_us)).unwrap()
    })
}

/// A policy of each strategy, or a compound one of a fixed window, a
/// sliding window and a token bucket on different windows.
fn any_policy() -> impl proptest::strategy::Strategy<Value = Policy> {
    let rate = [
        Strategy::FixedWindow,
        Strategy::SlidingWindow,
        Strategy::TokenBucket,
        Strategy::LeakyBucket,
    ];
    prop_oneof![
        4 => (0usize..4).prop_flat_map(move |s| divisible_limit(rate[s]).prop_map(Policy::from)),
        1 => (
            divisible_limit(Strategy::FixedWindow),
            divisible_limit(Strategy::SlidingWindow),
            divisible_limit(Strategy::TokenBucket),
        )
            .prop_map(|(a, b, c)| {
                let (b, c) = (
                    Limit::new(b.strategy(), b.limit(), b.window() * 2).unwrap(),
                    Limit::new(c.strategy(), c.limit(), c.window() * 3).unwrap(),
                );
                Policy::compound(vec![a, b, c]).unwrap()
            }),
    ]
}

/// The policy and the steps of a trace.
fn trace() -> impl proptest::strategy::Strategy<Value = (Policy, Vec<Op>)> {
    any_policy().prop_flat_map(|policy| {
        let limit = policy.limits().iter().map(|l| l.limit()).max().unwrap();
        let window = policy.limits().iter().map(|l| l.window()).max().unwrap();
        let window = u64::try_from(window.as_micros()).unwrap();
        (Just(policy), proptest::collection::vec(op(limit, window), 1..60))
    })
}

/// A hold made on both sides of a trace.
struct Twin {
    key: Vec<u8>,
    on_redis: HoldId,
    in_memory: HoldId,
}

/// The in-memory decision `expected` as microsecond ticks read it, beside
/// Redis's `got`: a sliding window's retry delay is the first tick at which
/// its estimate falls far enough, the nanosecond answer rounded up to a
/// whole microsecond (rounding may tie two limits' delays, and a tie names
/// the first listed, so the binding limit is Redis's), as in
/// `differential.rs`.
fn in_micros(policy: &Policy, mut expected: Decision, got: &Decision) -> Decision {
    let sliding = policy
        .limits()
        .iter()
        .any(|l| l.strategy() == Strategy::SlidingWindow);
    if sliding && !expected.allowed {
        expected.retry_after = expected
            .retry_after
            .map(|d| Duration::from_micros(d.as_nanos().div_ceil(1_000) as u64));
        expected.bound_by = got.bound_by;
        expected.limit = policy.limits()[got.bound_by].limit();
    }
    expected
}

/// Runs `ops` on a limiter of the harness's Redis and on an in-memory
/// limiter on the same clock, comparing every answer.
fn agree(h: &Harness, policy: Policy, ops: &[Op], seen: &Seen) -> Result<(), TestCaseError> {
    h.clock.set_nanos(START);
    let redis = h.limiter(policy);
    let memory = Limiter::builder()
        .clock(h.clock.clone())
        .policy(policy)
        .build()
        .unwrap();
    let mut made: Vec<Twin> = Vec::new();
    let mut now = START / 1_000;
    for (step, op) in ops.iter().enumerate() {
        let at = format!("step {step}: {op:?}");
        match *op {
            Op::Advance { micros } => {
                now += micros;
                h.clock.set_nanos(now * 1_000);
            }
            Op::Hold { key, estimate } => {
                let key = vec![b'k', key];
                let got = h.rt.block_on(redis.hold(&key, estimate)).unwrap();
                let want = h.rt.block_on(memory.hold(&key, estimate)).unwrap();
                let expected = in_micros(&policy, *want.decision(), got.decision());
                prop_assert_eq!(got.decision(), &expected, "{}", at);
                prop_assert_eq!(got.id().is_some(), want.id().is_some(), "{}", at);
                if let (Some(on_redis), Some(in_memory)) = (got.id(), want.id()) {
                    made.push(Twin {
                        key,
                        on_redis,
                        in_memory,
                    });
                }
            }
            Op::Settle { n, used } if !made.is_empty() => {
                let twin = &made[made.len() - 1 - n % made.len()];
                let got = h.rt.block_on(redis.settle(&twin.key, twin.on_redis, used));
                let want = h.rt.block_on(memory.settle(&twin.key, twin.in_memory, used));
                let (got, mut want) = (got.unwrap(), want.unwrap());
                want.decision = in_micros(&policy, want.decision, &got.decision);
                prop_assert_eq!(got, want, "{}", at);
                let (counter, over) = if got.settled {
                    (&seen.settled, used != 0)
                } else {
                    (&seen.refused, true)
                };
                counter.fetch_add(usize::from(over), Ordering::Relaxed);
            }
            Op::Settle { .. } => {}
        }
    }
    Ok(())
}

/// What the traces did: settles that settled with some usage, and
/// settles that found their hold gone.
#[derive(Default)]
struct Seen {
    settled: AtomicUsize,
    refused: AtomicUsize,
}

fn agrees_with_memory(h: &Harness, cases: u32) {
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    let seen = Seen::default();
    runner
        .run(&trace(), |(policy, ops)| agree(h, policy, &ops, &seen))
        .unwrap();
    let (settled, refused) = (seen.settled.into_inner(), seen.refused.into_inner());
    assert!(
        settled > cases as usize && refused > cases as usize / 4,
        "{settled} settled, {refused} refused"
    );
}

#[test]
fn holds_and_settles_answer_as_in_memory() {
    agrees_with_memory(&Harness::new(), 96);
}

#[test]
fn holds_and_settles_answer_as_in_memory_as_scripts() {
    agrees_with_memory(&Harness::with_scripts(), 24);
}
