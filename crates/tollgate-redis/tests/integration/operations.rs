//! Per-key operations (reset, block, refund, penalty) on Redis: random
//! traces of decisions and operations, for policies of one limit and
//! compound ones, replayed on a real redis-server with a caller clock and
//! compared with a reference built from the pure strategy functions at
//! microsecond ticks; and the errors for arguments beyond the scripts'
//! exact range.

use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use proptest::test_runner::{Config, TestRunner};
use tollgate::strategy::{decide_all, penalty, refund, LimitRate, State};
use tollgate::{BackendErrorKind, Clock, Decision, Error, Limiter, Operation, Policy, Strategy, Tick};
use tollgate_redis::{RedisBackend, MAX_EXACT_OPERAND};

use crate::differential::{any_compound_policy, any_policy, Harness, START};
use crate::support::RedisServer;

const KEYS: usize = 3;

#[derive(Clone, Copy, Debug)]
enum Step {
    Decide(u64),
    Op(Operation),
}

/// Decisions (peeks and costs above the limit included) and operations,
/// blocks of up to three seconds among them.
fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    prop_oneof![
        8 => (0u64..5).prop_map(Step::Decide),
        1 => (0u64..5).prop_map(|c| Step::Op(Operation::Refund(c))),
        1 => (0u64..5).prop_map(|c| Step::Op(Operation::Penalty(c))),
        1 => Just(Step::Op(Operation::Reset)),
        1 => (0u64..3_000_000_000).prop_map(|ns| Step::Op(Operation::Block(Duration::from_nanos(ns)))),
    ]
}

/// Clock steps in nanoseconds (forwards only: a block that has ended is
/// dropped by the next write), key indexes and steps.
fn trace() -> impl proptest::strategy::Strategy<Value = Vec<(u64, usize, Step)>> {
    prop::collection::vec(
        (
            prop_oneof![0u64..1_000_000, 0u64..1_000_000_000, 0u64..4_000_000_000],
            0usize..KEYS,
            step(),
        ),
        1..80,
    )
}

/// The decisions of `trace` by the pure functions in microseconds: per key,
/// every limit's state and the end of its block. `None` for an operation.
fn reference(limits: &[LimitRate], trace: &[(u64, usize, Step)]) -> Vec<Option<Decision>> {
    let n = limits.len();
    let mut states: Vec<Vec<Option<State>>> = vec![vec![None; n]; KEYS];
    let mut blocked_until = [0u64; KEYS];
    let mut nanos = START;
    let mut out = Vec::new();
    for &(dt, key, step) in trace {
        nanos += dt;
        let now = nanos / 1_000;
        let state = &mut states[key];
        let mut next = vec![None; n];
        match step {
            Step::Decide(cost) if blocked_until[key] > now => {
                let peek = decide_all(limits, state, &mut next, now, 0);
                let left = blocked_until[key] - now;
                out.push(Some(Decision::blocked(
                    left,
                    peek.outcome.reset,
                    limits[0].rate.limit,
                    Tick::Micros,
                )));
                let _ = cost;
            }
            Step::Decide(cost) => {
                let compound = decide_all(limits, state, &mut next, now, cost);
                *state = next;
                out.push(Some(Decision::from_compound(compound, limits, Tick::Micros)));
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
                    Operation::Block(d) => {
                        blocked_until[key] = now + Tick::Micros.from_nanos(d.as_nanos() as u64)
                    }
                    _ => {}
                }
                out.push(None);
            }
        }
    }
    out
}

/// Replays random traces of `policies` on Redis (through `h`) and checks
/// them against [`reference`].
fn matches_the_pure_functions(
    h: &Harness,
    policies: impl proptest::strategy::Strategy<Value = Policy>,
    cases: u32,
) {
    let mut runner = TestRunner::new(Config {
        cases,
        ..Config::default()
    });
    runner
        .run(&(policies, trace()), |(policy, trace)| {
            h.clock.set_nanos(START);
            let limiter = h.limiter(policy);
            let limits: Vec<LimitRate> = policy
                .limits()
                .iter()
                .map(|l| LimitRate {
                    strategy: l.strategy(),
                    rate: l.rate_micros(),
                })
                .collect();
            let expected = reference(&limits, &trace);
            for (i, &(dt, key, step)) in trace.iter().enumerate() {
                h.clock.set_nanos(h.clock.now_nanos() + dt);
                let key = format!("key-{key}");
                let got = match step {
                    Step::Decide(cost) => Some(h.rt.block_on(limiter.allow_n(&key, cost))),
                    Step::Op(op) => {
                        h.rt.block_on(limiter.operate(&key, op))
                            .map_err(|e| TestCaseError::fail(e.to_string()))?;
                        None
                    }
                };
                let got = got.transpose().map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(got, expected[i], "step {} ({:?}) of {}", i, step, policy);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn operations_on_one_limit_match_the_pure_functions() {
    matches_the_pure_functions(&Harness::new(), any_policy(), 128);
}

#[test]
fn operations_run_as_scripts_without_functions_match_the_pure_functions() {
    let h = Harness::with_scripts();
    matches_the_pure_functions(&h, any_policy(), 48);
    matches_the_pure_functions(&h, any_compound_policy(), 32);
}

#[test]
fn operations_on_compound_policies_match_the_pure_functions() {
    matches_the_pure_functions(&Harness::new(), any_compound_policy(), 96);
}

#[tokio::test]
async fn operation_costs_beyond_the_exact_range_are_refused_naming_the_cost() {
    let server = RedisServer::start();
    let backend = RedisBackend::connect(&server.url()).await.unwrap();
    for strategy in Strategy::ALL {
        let limiter = Limiter::builder()
            .backend(backend.clone())
            .strategy(strategy)
            .limit(10)
            .window(Duration::from_secs(60))
            .build()
            .unwrap();
        let err = limiter.penalty("k", MAX_EXACT_OPERAND + 1).await.unwrap_err();
        match &err {
            Error::Backend(e) => {
                assert_eq!(e.kind(), BackendErrorKind::Unsupported, "{e}");
                assert!(
                    e.to_string()
                        .contains("penalty cost 2251799813685249 exceeds 2^51"),
                    "{e}"
                );
            }
            other => panic!("{other}"),
        }
        let err = limiter.refund("k", u64::MAX).await.unwrap_err();
        assert!(matches!(&err, Error::Config(e) if e.field() == "cost"), "{err}");
        // The largest accepted cost saturates and stays exact: denied, and
        // a refund of as much gives everything back.
        limiter.penalty("k", MAX_EXACT_OPERAND).await.unwrap();
        assert!(!limiter.allow("k").await.unwrap().allowed, "{strategy}");
        limiter.reset("k").await.unwrap();
        assert_eq!(limiter.allow_n("k", 0).await.unwrap().remaining, 10, "{strategy}");
    }
}
