//! Deciding at once (`Limiter::decide_now`, `Limiter::operate_now`): a
//! backend that decides now (in memory under a type of its own, as a
//! backend chosen at run time is) gets the synchronous path, whose
//! decisions, state and metrics are exactly those of the awaited path; one
//! that does not gets none; and a set's limiters decide through it too.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use proptest::prelude::*;
use proptest::strategy::Strategy as _;

use crate::support;
use tollgate::backend::memory::MemoryBinding;
use tollgate::backend::BackendError;
use tollgate::backend::{Answer, Backend, Binding, Call, Capabilities, Scope};
use tollgate::clock::ManualClock;
use tollgate::protection::DenyCache;
use tollgate::{
    Decision, Error, FailPolicy, KeyList, Limiter, Limiters, MemoryBackend, Operation, Policy, Strategy,
};

/// The in-memory backend under another type, as a backend chosen at run
/// time is when its choice is memory; `now` says whether it owns up to
/// deciding now.
#[derive(Clone, Debug)]
struct Elsewhere {
    memory: MemoryBackend,
    now: bool,
}

struct ElsewhereBinding {
    memory: MemoryBinding,
    now: bool,
}

impl Backend for Elsewhere {
    type Binding = ElsewhereBinding;

    fn bind(&self, scope: &Scope<'_>) -> Result<ElsewhereBinding, Error> {
        Ok(ElsewhereBinding {
            memory: self.memory.bind(scope)?,
            now: self.now,
        })
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            decides_now: self.now,
            ..self.memory.capabilities()
        }
    }
}

impl Binding for ElsewhereBinding {
    async fn call(&self, call: Call<'_, Self>) -> Result<Answer, BackendError> {
        match call.for_binding() {
            Ok(call) => self.memory.call(call).await,
            Err(_) => Ok(Answer::Apart),
        }
    }

    fn call_now(&self, call: Call<'_, Self>) -> Option<Result<Answer, BackendError>> {
        match call.for_binding() {
            Ok(call) => self.now.then(|| self.memory.call_now(call)).flatten(),
            Err(_) => Some(Ok(Answer::Apart)),
        }
    }
}

fn elsewhere(clock: &ManualClock, now: bool) -> Elsewhere {
    Elsewhere {
        memory: MemoryBackend::new().clock(clock.clone()).reclaim(false),
        now,
    }
}

/// The output of a future that must not wait (an in-memory decision).
fn ready<T>(future: impl Future<Output = T>) -> T {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("an in-memory decision waited"),
    }
}

fn per_minute(limit: u64) -> Policy {
    Policy::new(Strategy::FixedWindow, limit, Duration::from_secs(60)).unwrap()
}

/// The decision [`Limiter::decide_now`] gives at once, if it gives one.
fn now<B: Backend>(limiter: &Limiter<B>, key: &[u8], cost: u64) -> Option<Decision> {
    limiter.decide_now(key, cost).map(Result::unwrap)
}

#[test]
fn a_limiter_on_another_backend_type_that_decides_now_decides_without_waiting() {
    let clock = ManualClock::new(Duration::from_secs(1_000));
    let limiter = Limiter::builder()
        .policy(per_minute(2))
        .backend(elsewhere(&clock, true))
        .build()
        .unwrap();
    assert!(limiter.decides_now());
    let remaining: Vec<_> = (0..3)
        .map(|_| now(&limiter, b"k", 1).map(|d| (d.allowed, d.remaining)))
        .collect();
    assert_eq!(remaining, [Some((true, 1)), Some((true, 0)), Some((false, 0))]);
    // An operation applies at once too, and the awaited path sees it.
    assert_eq!(
        limiter.operate_now(b"k", Operation::Reset).map(|r| r.is_ok()),
        Some(true)
    );
    assert_eq!(ready(limiter.allow("k")).unwrap().remaining, 1);
    // A refund too large is refused at once, as `operate` refuses it.
    let refused = limiter.operate_now(b"k", Operation::Refund(u64::MAX));
    assert!(matches!(refused, Some(Err(Error::Config(_)))), "{refused:?}");

    let limiters = Limiters::builder()
        .default_policy(per_minute(5))
        .resource("login", per_minute(1))
        .backend(elsewhere(&clock, true))
        .build()
        .unwrap();
    assert_eq!(
        limiters
            .with_limiter("login", |l| now(l, b"k", 1))
            .map(|d| d.remaining),
        Some(0)
    );
    assert_eq!(
        limiters
            .with_limiter("search", |l| now(l, b"k", 1))
            .map(|d| d.remaining),
        Some(4)
    );
    assert_eq!(
        limiters
            .with_limiter("login", |l| now(l, b"k", 1))
            .map(|d| d.allowed),
        Some(false)
    );
}

#[test]
fn a_limiter_on_a_backend_that_must_be_awaited_decides_nothing_at_once_and_charges_nothing() {
    let clock = ManualClock::new(Duration::from_secs(1_000));
    let limiter = Limiter::builder()
        .policy(per_minute(2))
        .deny_cache(DenyCache::new())
        .backend(elsewhere(&clock, false))
        .build()
        .unwrap();
    assert!(!limiter.decides_now());
    assert_eq!(now(&limiter, b"k", 1), None);
    assert!(limiter.operate_now(b"k", Operation::Penalty(2)).is_none());
    // Neither the check nor the operation touched the key.
    assert_eq!(ready(limiter.allow("k")).unwrap().remaining, 1);

    let limiters = Limiters::builder()
        .default_policy(per_minute(2))
        .backend(elsewhere(&clock, false))
        .build()
        .unwrap();
    assert!(!limiters.with_limiter("", Limiter::decides_now));
    assert_eq!(limiters.with_limiter("", |l| now(l, b"k", 1)), None);
}

#[test]
fn a_set_names_the_policy_serving_now_and_a_taken_limiter_keeps_its_own() {
    let limiters = Arc::new(
        Limiters::builder()
            .default_policy(per_minute(5))
            .resource("login", per_minute(1))
            .build()
            .unwrap(),
    );
    let (name, policy) = limiters.named_policy("login");
    assert_eq!((name, policy.limits()[0].limit()), ("login", 1));
    assert_eq!(
        limiters.named_policy("search").0,
        tollgate::Limiters::DEFAULT_POLICY_NAME
    );
    let taken = limiters.limiter("login");
    assert!(ready(taken.allow(b"k")).unwrap().allowed);
    assert!(
        !limiters
            .with_limiter("login", |l| now(l, b"k", 1))
            .unwrap()
            .allowed
    );
    // Replaced, the resource is gone: its requests fall to the default.
    limiters
        .replace(Limiters::builder().default_policy(per_minute(3)))
        .unwrap();
    let (name, policy) = limiters.named_policy("login");
    assert_eq!(
        (name, policy.limits()[0].limit()),
        (tollgate::Limiters::DEFAULT_POLICY_NAME, 3)
    );
    assert_eq!(
        limiters
            .with_limiter("login", |l| now(l, b"k", 1))
            .unwrap()
            .remaining,
        2
    );
    // The limiter taken before the replacement still decides under its
    // own policy, on its own state.
    assert_eq!(taken.policy().limits()[0].limit(), 1);
    assert!(!taken.check("k").allowed);
    // A set made from one limiter serves it as its default.
    let one = Limiters::from(Limiter::builder().policy(per_minute(1)).build().unwrap());
    assert_eq!(one.named_policy("x").0, tollgate::Limiters::DEFAULT_POLICY_NAME);
    assert!(one.limiter("x").check("k").allowed);
    assert!(!one.limiter("").check("k").allowed);
}

fn counters(snapshotter: &Snapshotter) -> Vec<(String, u64)> {
    let mut out: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| match (key.kind(), value) {
            (MetricKind::Counter, DebugValue::Counter(v)) => Some((key.key().name().to_owned(), v)),
            _ => None,
        })
        .collect();
    out.sort();
    out
}

/// One step of a caller: a request or an operation on one of the keys,
/// after the clock has moved on.
#[derive(Clone, Debug)]
enum Step {
    Decide { key: usize, cost: u64 },
    Operate { key: usize, op: Operation },
}

/// The keys: plain ones, one on the exempt list, one in the deny list's
/// network.
const KEYS: [&str; 4] = ["alice", "bob", "exempt", "10.1.2.3"];

fn step() -> impl proptest::strategy::Strategy<Value = (u64, Step)> {
    let decide = (0..KEYS.len(), 0u64..4).prop_map(|(key, cost)| Step::Decide { key, cost });
    let op = prop_oneof![
        (0u64..3).prop_map(Operation::Refund),
        (0u64..3).prop_map(Operation::Penalty),
        (0u64..3_000).prop_map(|ms| Operation::Block(Duration::from_millis(ms))),
        Just(Operation::Reset),
    ];
    let operate = (0..KEYS.len(), op).prop_map(|(key, op)| Step::Operate { key, op });
    (0u64..1_500, prop_oneof![6 => decide, 1 => operate])
}

/// A limiter of `policy` on `backend`, with the options of `variant`: none;
/// a deny cache; shadow mode with a deny cache; the lists, a deny cache
/// and a fallback behind a circuit breaker.
fn twin<B: Backend>(backend: B, clock: &ManualClock, policy: Policy, variant: u8) -> Limiter<B> {
    let builder = Limiter::builder()
        .policy(policy)
        .backend(backend)
        .local_clock(clock.clone());
    let builder = match variant {
        0 => builder,
        1 => builder.deny_cache(DenyCache::new()),
        2 => builder.deny_cache(DenyCache::new()).shadow(true),
        _ => builder
            .deny_cache(DenyCache::new())
            .exempt(KeyList::parse("exempt", ["exempt"]).unwrap())
            .deny(KeyList::parse("deny", ["10.0.0.0/8"]).unwrap())
            .fail_policy(FailPolicy::Fallback)
            .fallback(per_minute(1)),
    };
    builder.build().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// The same requests and operations, checked at once on a limiter over
    /// another backend type that decides now, awaited on a twin in memory,
    /// and checked through `Limiter<MemoryBackend>::check_n` on a third:
    /// the same decisions, and the same counts in the metrics (deny cache
    /// hits, shadow denials, admissions and denials).
    #[test]
    fn checking_at_once_decides_as_awaiting_on_a_twin(
        policy in support::policy(support::limit(1..6, 500..5_000), 1..4),
        variant in 0u8..4,
        steps in prop::collection::vec(step(), 1..80),
    ) {
        let clocks = [(); 3].map(|_| ManualClock::new(Duration::from_secs(1_000)));
        let recorders = [(); 3].map(|_| DebuggingRecorder::new());
        let memory = |clock: &ManualClock| MemoryBackend::new().clock(clock.clone()).reclaim(false);
        let checked = metrics::with_local_recorder(&recorders[0], || {
            twin(elsewhere(&clocks[0], true), &clocks[0], policy, variant)
        });
        let awaited = metrics::with_local_recorder(&recorders[1], || {
            twin(memory(&clocks[1]), &clocks[1], policy, variant)
        });
        let in_memory = metrics::with_local_recorder(&recorders[2], || {
            twin(memory(&clocks[2]), &clocks[2], policy, variant)
        });
        prop_assert!(checked.decides_now());
        for (i, (advance_ms, step)) in steps.iter().enumerate() {
            for clock in &clocks {
                clock.advance(Duration::from_millis(*advance_ms));
            }
            match step {
                Step::Decide { key, cost } => {
                    let key = KEYS[*key];
                    let now = now(&checked, key.as_bytes(), *cost);
                    let later = ready(awaited.allow_n(key, *cost)).unwrap();
                    let direct = in_memory.check_n(key, *cost);
                    prop_assert_eq!(now, Some(later), "step {}: {:?}", i, step);
                    prop_assert_eq!(direct, later, "step {}: {:?}", i, step);
                }
                Step::Operate { key, op } => {
                    let key = KEYS[*key];
                    let now = checked.operate_now(key.as_bytes(), *op);
                    let later = ready(awaited.operate(key, *op));
                    let direct = in_memory.operate_now(key, *op);
                    prop_assert_eq!(now.map(|r| r.is_ok()), Some(later.is_ok()), "step {}", i);
                    prop_assert_eq!(direct.map(|r| r.is_ok()), Some(later.is_ok()), "step {}", i);
                }
            }
        }
        let [checked, awaited, in_memory] = recorders.map(|r| counters(&r.snapshotter()));
        prop_assert_eq!(&checked, &awaited);
        prop_assert_eq!(&in_memory, &awaited);
    }
}
