//! Differential tests: the in-memory backend and the custom-store adapter
//! make exactly the decisions of the pure strategy functions on random traces.

use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use tollgate::backend::store::StoreBackend;
use tollgate::backend::Tick;
use tollgate::clock::ManualClock;
use tollgate::strategy::{decide, State};
use tollgate::testing::MapStore;
use tollgate::{Decision, Limiter, Policy, Strategy};

/// (time step in ns, key index, cost)
fn trace() -> impl proptest::strategy::Strategy<Value = Vec<(u64, usize, u64)>> {
    prop::collection::vec(
        (
            prop_oneof![2 => 0u64..1_000, 2 => 0u64..50_000_000, 1 => 0u64..3_000_000_000],
            0usize..4,
            0u64..6,
        ),
        1..150,
    )
}

fn policy() -> impl proptest::strategy::Strategy<Value = Policy> {
    (0usize..4, 1u64..8, 1u64..2_000).prop_map(|(s, limit, window_ms)| {
        Policy::new(Strategy::ALL[s], limit, Duration::from_millis(window_ms)).expect("valid policy")
    })
}

fn oracle(policy: &Policy, trace: &[(u64, usize, u64)], start: u64) -> Vec<Decision> {
    let rate = policy.limits()[0].rate_nanos();
    let mut states: [Option<State>; 4] = [None; 4];
    let mut now = start;
    trace
        .iter()
        .map(|&(dt, key, cost)| {
            now += dt;
            let (outcome, next) = decide(policy.limits()[0].strategy(), &rate, states[key], now, cost);
            states[key] = next;
            Decision::from_outcome(outcome, policy.limits()[0].limit(), Tick::Nanos)
        })
        .collect()
}

const START: u64 = 1_700_000_000_000_000_000;

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn memory_backend_matches_the_strategy_functions(policy in policy(), trace in trace()) {
        let clock = ManualClock::default();
        clock.set_nanos(START);
        let limiter = Limiter::builder().policy(policy).clock(clock.clone()).build().unwrap();
        let expected = oracle(&policy, &trace, START);
        for (i, &(dt, key, cost)) in trace.iter().enumerate() {
            clock.advance(Duration::from_nanos(dt));
            let got = limiter.check_n(format!("key-{key}"), cost);
            prop_assert_eq!(got, expected[i], "request {} of {:?}", i, policy);
        }
    }

    #[test]
    fn store_adapter_matches_the_strategy_functions(policy in policy(), trace in trace()) {
        let clock = ManualClock::default();
        clock.set_nanos(START);
        let backend = StoreBackend::new(MapStore::with_manual_clock(&clock)).clock(clock.clone());
        let limiter = Limiter::builder().policy(policy).backend(backend).build().unwrap();
        let expected = oracle(&policy, &trace, START);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for (i, &(dt, key, cost)) in trace.iter().enumerate() {
            clock.advance(Duration::from_nanos(dt));
            let got = rt.block_on(limiter.allow_n(format!("key-{key}"), cost)).unwrap();
            prop_assert_eq!(got, expected[i], "request {} of {:?}", i, policy);
        }
    }

    #[test]
    fn micro_tick_store_matches_the_strategy_functions_in_microseconds(policy in policy(), trace in trace()) {
        let clock = ManualClock::default();
        clock.set_nanos(START);
        let backend = StoreBackend::new(MapStore::with_manual_clock(&clock))
            .clock(clock.clone())
            .tick(Tick::Micros);
        let limiter = Limiter::builder().policy(policy).backend(backend).build().unwrap();
        let rate = policy.limits()[0].rate_micros();
        let mut states: [Option<State>; 4] = [None; 4];
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for &(dt, key, cost) in &trace {
            clock.advance(Duration::from_nanos(dt));
            let (outcome, next) = decide(policy.limits()[0].strategy(), &rate, states[key], clock_micros(&clock), cost);
            states[key] = next;
            let got = rt.block_on(limiter.allow_n(format!("key-{key}"), cost)).unwrap();
            prop_assert_eq!(got, Decision::from_outcome(outcome, policy.limits()[0].limit(), Tick::Micros));
        }
    }
}

fn clock_micros(clock: &ManualClock) -> u64 {
    use tollgate::clock::Clock;
    clock.now_nanos() / 1_000
}
