//! The in-memory backend against the pure strategy functions: random
//! sequences of decisions, refunds, penalties and resets on a few keys,
//! at random times, must give the same decisions on both, field for field.

#![no_main]

use std::collections::HashMap;
use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tollgate::backend::Tick;
use tollgate::clock::{Clock, ManualClock};
use tollgate::strategy::{decide, penalty, refund, State};
use tollgate::{Decision, Limiter, Operation, Policy, Strategy};

/// The policy: a strategy, a limit and a window in milliseconds, small so
/// that boundaries are met often.
#[derive(Arbitrary, Debug)]
struct Setup {
    strategy: u8,
    limit: u8,
    window_ms: u16,
    steps: Vec<Step>,
}

#[derive(Arbitrary, Debug)]
struct Step {
    /// Time passing before the step, in microseconds.
    advance_us: u32,
    key: u8,
    action: Action,
}

#[derive(Arbitrary, Debug)]
enum Action {
    Decide(u8),
    Refund(u8),
    Penalty(u8),
    Reset,
}

fuzz_target!(|setup: Setup| {
    let strategy = Strategy::ALL[usize::from(setup.strategy) % 4];
    let limit = u64::from(setup.limit % 20) + 1;
    let window = Duration::from_millis(u64::from(setup.window_ms % 5_000) + 1);
    let policy = Policy::new(strategy, limit, window).expect("a valid policy");
    let rate = policy.limits()[0].rate_nanos();
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let limiter = Limiter::builder()
        .clock(clock.clone())
        .policy(policy)
        .build()
        .expect("a limiter");
    let mut states: HashMap<u8, Option<State>> = HashMap::new();
    for step in setup.steps.iter().take(500) {
        clock.advance(Duration::from_micros(u64::from(step.advance_us % 10_000_000)));
        let now = clock.now_nanos();
        let key = [b'k', step.key % 4];
        let state = states.entry(step.key % 4).or_insert(None);
        match step.action {
            Action::Decide(cost) => {
                let cost = u64::from(cost % 25);
                let (outcome, next) = decide(strategy, &rate, *state, now, cost);
                *state = next;
                let expected = Decision::from_outcome(outcome, limit, Tick::Nanos);
                assert_eq!(limiter.check_n(key, cost), expected, "{step:?} at {now}");
            }
            Action::Refund(cost) => {
                *state = refund(strategy, &rate, *state, now, u64::from(cost));
                limiter
                    .operate_now(key, Operation::Refund(u64::from(cost)))
                    .expect("in memory")
                    .expect("a valid refund");
            }
            Action::Penalty(cost) => {
                *state = penalty(strategy, &rate, *state, now, u64::from(cost));
                limiter
                    .operate_now(key, Operation::Penalty(u64::from(cost)))
                    .expect("in memory")
                    .expect("a valid penalty");
            }
            Action::Reset => {
                *state = None;
                limiter
                    .operate_now(key, Operation::Reset)
                    .expect("in memory")
                    .expect("a reset");
            }
        }
    }
});
