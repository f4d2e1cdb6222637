//! Per-key operations (reset, block, refund, penalty) on Redis: random
//! traces of decisions and operations, for policies of one limit and
//! compound ones, replayed on a real redis-server with a caller clock and
//! compared with the reference of the pure strategy functions at
//! microsecond ticks (`tollgate_test_support::operation_traces`, shared
//! with the core's tests); and the errors for arguments beyond the scripts'
//! exact range.

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tollgate::backend::BackendErrorKind;
use tollgate::backend::Tick;
use tollgate::clock::Clock;
use tollgate::{Error, Limiter, Policy, Strategy};
use tollgate_redis::{RedisBackend, MAX_EXACT_OPERAND};
use tollgate_test_support::operation_traces::{reference, trace, Step};
use tollgate_test_support::redis::RedisServer;

use crate::differential::{any_compound_policy, any_policy, Harness, START};

/// Clock steps in nanoseconds: up to a millisecond, a second or four.
fn gaps() -> impl proptest::strategy::Strategy<Value = u64> {
    prop_oneof![0u64..1_000_000, 0u64..1_000_000_000, 0u64..4_000_000_000]
}

/// Replays random traces of `policies` on Redis (through `h`) and checks
/// them against their [`reference`].
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
        .run(&(policies, trace(gaps(), 1..80)), |(policy, trace)| {
            h.clock.set_nanos(START);
            let limiter = h.limiter(policy);
            let expected = reference(&policy.limit_rates(Tick::Micros), Tick::Micros, START, &trace);
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
        let err = limiter
            .operate("k", tollgate::Operation::Penalty(MAX_EXACT_OPERAND + 1))
            .await
            .unwrap_err();
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
        let err = limiter
            .operate("k", tollgate::Operation::Refund(u64::MAX))
            .await
            .unwrap_err();
        assert!(matches!(&err, Error::Config(e) if e.field() == "cost"), "{err}");
        // The largest accepted cost saturates and stays exact: denied, and
        // a refund of as much gives everything back.
        limiter
            .operate("k", tollgate::Operation::Penalty(MAX_EXACT_OPERAND))
            .await
            .unwrap();
        assert!(!limiter.allow("k").await.unwrap().allowed, "{strategy}");
        limiter.operate("k", tollgate::Operation::Reset).await.unwrap();
        assert_eq!(limiter.allow_n("k", 0).await.unwrap().remaining, 10, "{strategy}");
    }
}
