//! Per-key operations, shadow mode and key lists (SEMANTICS.md, "Per-key
//! operations", "Shadow mode", "Exemptions and deny lists").
//!
//! The reference replays a trace of decisions and operations with the pure
//! strategy functions alone; the in-memory backend and the store adapter
//! must match it decision for decision.

use std::time::Duration;

use proptest::prelude::*;
use tollgate_test_support::operation_traces::{self, Step};

use crate::support;
use tollgate::backend::store::StoreBackend;
use tollgate::backend::BackendErrorKind;
use tollgate::backend::Tick;
use tollgate::clock::ManualClock;
use tollgate::testing::MapStore;
use tollgate::{Decision, Error, KeyList, Limiter, Listed, Policy, Strategy};

const START: u64 = 1_700_000_000_000_000_000;

fn policy() -> impl proptest::strategy::Strategy<Value = Policy> {
    support::policy(support::limit(1..6, 1..2_000), 1..3)
}

/// Traces whose clock moves by up to a millisecond or half a second a step.
fn trace() -> impl proptest::strategy::Strategy<Value = Vec<(u64, usize, Step)>> {
    operation_traces::trace(prop_oneof![0u64..1_000_000, 0u64..500_000_000], 1..120)
}

/// The decisions of `trace` from the pure functions, in nanoseconds.
fn reference(policy: &Policy, trace: &[(u64, usize, Step)]) -> Vec<Option<Decision>> {
    operation_traces::reference(&policy.limit_rates(Tick::Nanos), Tick::Nanos, START, trace)
}

async fn replay<B: tollgate::backend::Backend>(
    limiter: &Limiter<B>,
    clock: &ManualClock,
    trace: &[(u64, usize, Step)],
) -> Vec<Option<Decision>> {
    let mut out = Vec::new();
    for &(dt, key, step) in trace {
        clock.advance(Duration::from_nanos(dt));
        let key = format!("key-{key}");
        match step {
            Step::Decide(cost) => out.push(Some(limiter.allow_n(&key, cost).await.unwrap())),
            Step::Op(op) => {
                limiter.operate(&key, op).await.unwrap();
                out.push(None);
            }
        }
    }
    out
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn memory_applies_operations_as_the_pure_functions(policy in policy(), trace in trace()) {
        let clock = ManualClock::default();
        clock.set_nanos(START);
        let limiter = Limiter::builder().policy(policy).clock(clock.clone()).build().unwrap();
        let got = block_on(replay(&limiter, &clock, &trace));
        prop_assert_eq!(got, reference(&policy, &trace), "{}", policy);
    }

    #[test]
    fn the_store_adapter_applies_operations_as_the_pure_functions(policy in policy(), trace in trace()) {
        let clock = ManualClock::default();
        clock.set_nanos(START);
        let backend = StoreBackend::new(MapStore::with_manual_clock(&clock)).clock(clock.clone());
        let limiter = Limiter::builder().policy(policy).backend(backend).build().unwrap();
        let got = block_on(replay(&limiter, &clock, &trace));
        prop_assert_eq!(got, reference(&policy, &trace), "{}", policy);
    }

    #[test]
    fn shadow_decisions_are_enforcing_ones_allowed_and_marked(policy in policy(), trace in trace()) {
        let clock = ManualClock::default();
        clock.set_nanos(START);
        let enforcing = Limiter::builder().policy(policy).clock(clock.clone()).build().unwrap();
        let shadow = Limiter::builder().policy(policy).clock(clock.clone()).shadow(true).build().unwrap();
        for &(dt, key, step) in &trace {
            clock.advance(Duration::from_nanos(dt));
            let cost = match step {
                Step::Decide(cost) => cost,
                _ => 1,
            };
            let key = format!("key-{key}");
            let (e, s) = (enforcing.check_n(&key, cost), shadow.check_n(&key, cost));
            prop_assert!(s.allowed);
            prop_assert_eq!(s.shadow_denied, !e.allowed);
            let mut unshadowed = s;
            unshadowed.allowed = e.allowed;
            unshadowed.shadow_denied = false;
            prop_assert_eq!(unshadowed, e);
        }
    }
}

#[test]
fn a_block_denies_until_it_ends_and_leaves_the_state_as_it_was() {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let limiter = Limiter::builder()
        .strategy(Strategy::TokenBucket)
        .limit(10)
        .window(Duration::from_secs(10))
        .clock(clock.clone())
        .build()
        .unwrap();
    assert_eq!(limiter.check_n("k", 4).remaining, 6);
    block_on(limiter.operate("k", tollgate::Operation::Block(Duration::from_secs(60)))).unwrap();
    clock.advance(Duration::from_secs(15));
    let d = limiter.check("k");
    assert_eq!(
        (d.allowed, d.remaining, d.retry_after),
        (false, 0, Some(Duration::from_secs(45)))
    );
    assert!(!limiter.check_n("k", 0).allowed, "peeks are blocked too");
    clock.advance(Duration::from_secs(45));
    assert_eq!(limiter.check("k").remaining, 9, "the bucket refilled meanwhile");
    // Zero lifts a block; reset ends one and empties the state.
    block_on(limiter.operate("k", tollgate::Operation::Block(Duration::from_secs(60)))).unwrap();
    block_on(limiter.operate("k", tollgate::Operation::Block(Duration::ZERO))).unwrap();
    assert!(limiter.check("k").allowed);
    block_on(limiter.operate("k", tollgate::Operation::Block(Duration::from_secs(60)))).unwrap();
    block_on(limiter.operate("k", tollgate::Operation::Reset)).unwrap();
    assert_eq!(limiter.check("k").remaining, 9);
}

#[test]
fn refunds_give_back_what_was_charged_and_no_more() {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    for strategy in Strategy::ALL {
        let limiter = Limiter::builder()
            .strategy(strategy)
            .limit(10)
            .window(Duration::from_secs(3_600))
            .clock(clock.clone())
            .build()
            .unwrap();
        assert_eq!(limiter.check_n("k", 7).remaining, 3, "{strategy}");
        block_on(limiter.operate("k", tollgate::Operation::Refund(5))).unwrap();
        assert_eq!(limiter.check_n("k", 0).remaining, 8, "{strategy}");
        block_on(limiter.operate("k", tollgate::Operation::Refund(100))).unwrap();
        assert_eq!(limiter.check_n("k", 0).remaining, 10, "{strategy}");
        block_on(limiter.operate("k", tollgate::Operation::Penalty(25))).unwrap();
        let d = limiter.check("k");
        assert_eq!((d.allowed, d.remaining), (false, 0), "{strategy}");
    }
}

#[test]
fn operation_arguments_out_of_range_are_refused_naming_them() {
    let limiter = Limiter::builder()
        .limit(1)
        .window(Duration::from_secs(1))
        .build()
        .unwrap();
    let err = block_on(limiter.operate("k", tollgate::Operation::Refund(u64::MAX))).unwrap_err();
    assert!(matches!(&err, Error::Config(e) if e.field() == "cost"), "{err}");
    let err = block_on(limiter.operate("k", tollgate::Operation::Block(Duration::from_secs(u64::MAX))))
        .unwrap_err();
    assert!(
        matches!(&err, Error::Config(e) if e.field() == "duration"),
        "{err}"
    );
}

/// A backend without per-key operations.
struct Plain(tollgate::MemoryBackend);

struct PlainBinding(tollgate::backend::memory::MemoryBinding);

impl tollgate::backend::Backend for Plain {
    type Binding = PlainBinding;
    fn bind(&self, scope: &tollgate::backend::Scope<'_>) -> Result<PlainBinding, Error> {
        self.0.bind(scope).map(PlainBinding)
    }
}

impl tollgate::backend::Binding for PlainBinding {
    async fn call(
        &self,
        call: tollgate::backend::Call<'_, Self>,
    ) -> Result<tollgate::backend::Answer, tollgate::backend::BackendError> {
        match call {
            tollgate::backend::Call::Decide { key, cost } => {
                self.0.call(tollgate::backend::Call::Decide { key, cost }).await
            }
            other => Err(other.unsupported()),
        }
    }
}

#[test]
fn a_backend_without_operations_says_so() {
    let limiter = Limiter::builder()
        .limit(1)
        .window(Duration::from_secs(1))
        .backend(Plain(tollgate::MemoryBackend::new()))
        .build()
        .unwrap();
    let err = block_on(limiter.operate("k", tollgate::Operation::Reset)).unwrap_err();
    match err {
        Error::Backend(e) => {
            assert_eq!(e.kind(), BackendErrorKind::Unsupported);
            assert!(
                e.to_string().contains("no per-key operations (reset was asked)"),
                "{e}"
            );
        }
        other => panic!("{other}"),
    }
}

#[test]
fn exempt_keys_are_never_charged_and_denied_keys_never_pass() {
    let limiter = Limiter::builder()
        .strategy(Strategy::FixedWindow)
        .limit(2)
        .window(Duration::from_secs(60))
        .exempt(KeyList::parse("exempt", ["10.0.0.0/8", "2001:db8::/32", "monitor"]).unwrap())
        .deny(KeyList::parse("deny", ["10.6.6.6", "banned"]).unwrap())
        .build()
        .unwrap();
    for key in ["10.1.2.3", "::ffff:10.9.9.9", "2001:db8::42", "monitor"] {
        for _ in 0..5 {
            let d = limiter.check(key);
            assert!(
                d.allowed && d.remaining == 2 && d.listed == Some(Listed::Exempt),
                "{key}"
            );
        }
    }
    assert_eq!(limiter.stored_keys(), 0, "exempt keys are not stored");
    for key in ["10.6.6.6", "banned"] {
        let d = limiter.check(key);
        assert_eq!(
            (d.allowed, d.retry_after, d.listed),
            (false, None, Some(Listed::Denied)),
            "{key}"
        );
    }
    // Everyone else is limited as usual.
    assert!(limiter.check("192.0.2.1").allowed && limiter.check("192.0.2.1").allowed);
    assert!(!limiter.check("192.0.2.1").allowed);
}
