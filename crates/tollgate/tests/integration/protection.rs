//! The deny cache, the circuit breaker and the fallback limiter in front of
//! a real store adapter, on manual clocks.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use proptest::prelude::*;

use crate::support;
use tollgate::backend::store::{Store, StoreBackend};
use tollgate::backend::BackendError;
use tollgate::clock::ManualClock;
use tollgate::protection::CircuitBreaker;
use tollgate::protection::DenyCache;
use tollgate::testing::{FlakyStore, MapStore};
use tollgate::{Decision, FailPolicy, Limit, Limiter, Policy, Strategy};

type Shared = Arc<FlakyStore<MapStore>>;

fn store(clock: &ManualClock) -> Shared {
    Arc::new(FlakyStore::new(MapStore::with_manual_clock(clock)))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().build().unwrap()
}

/// A limiter of `policy` over `store`, as one process would have it.
fn process(
    store: &Shared,
    clock: &ManualClock,
    policy: Policy,
    cache: bool,
) -> Limiter<StoreBackend<Shared>> {
    let backend = StoreBackend::new(store.clone()).clock(clock.clone());
    let builder = Limiter::builder()
        .policy(policy)
        .backend(backend)
        .local_clock(clock.clone());
    let builder = if cache {
        builder.deny_cache(DenyCache::new())
    } else {
        builder
    };
    builder.build().unwrap()
}

#[test]
fn a_flood_on_an_over_limit_key_stops_at_the_store_after_the_first_denial() {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let store = store(&clock);
    let policy = Policy::new(Strategy::SlidingWindow, 10, Duration::from_secs(60)).unwrap();
    let limiter = process(&store, &clock, policy, true);
    let rt = rt();
    let mut admitted = 0;
    for _ in 0..1_000 {
        clock.advance(Duration::from_micros(10));
        if rt.block_on(limiter.allow("abuser")).unwrap().allowed {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 10);
    // Each store decision is a get and, when admitted, a set: 10 admissions
    // and the one denial that filled the cache.
    assert_eq!(store.operations(), 10 * 2 + 1);
    // A cached answer: denied, nothing remaining, the time left to wait.
    let cached = rt.block_on(limiter.allow("abuser")).unwrap();
    let fresh = process(&store, &clock, policy, false);
    let asked = rt.block_on(fresh.allow("abuser")).unwrap();
    assert!(!cached.allowed && !asked.allowed);
    assert_eq!(cached.remaining, 0);
    let (c, a) = (cached.retry_after.unwrap(), asked.retry_after.unwrap());
    assert!(
        c <= a && a - c < Duration::from_millis(11),
        "cached {c:?}, store {a:?}"
    );
    // A peek is never answered from the cache.
    let before = store.operations();
    rt.block_on(limiter.allow_n("abuser", 0)).unwrap();
    assert_eq!(store.operations(), before + 1);
}

#[test]
fn a_cached_denial_of_a_compound_policy_names_the_binding_limit() {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let store = store(&clock);
    let policy = Policy::compound([
        Limit::new(Strategy::TokenBucket, 100, Duration::from_secs(1)).unwrap(),
        Limit::new(Strategy::FixedWindow, 3, Duration::from_secs(3_600)).unwrap(),
    ])
    .unwrap();
    let limiter = process(&store, &clock, policy, true);
    let rt = rt();
    for _ in 0..3 {
        assert!(rt.block_on(limiter.allow("k")).unwrap().allowed);
    }
    let denied = rt.block_on(limiter.allow("k")).unwrap();
    let ops = store.operations();
    let cached = rt.block_on(limiter.allow_n("k", 2)).unwrap();
    assert_eq!(store.operations(), ops, "answered locally");
    assert_eq!((cached.bound_by, cached.limit), (denied.bound_by, denied.limit));
    assert_eq!((cached.bound_by, cached.limit), (1, 3));
}

/// Two processes share a store, one request at a time from either, with
/// random costs and gaps (in microseconds); the deny cache must not change one admission.
fn decisions(trace: &[(u64, bool, usize, u64)], policy: Policy, cache: bool) -> Vec<bool> {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let store = store(&clock);
    let a = process(&store, &clock, policy, cache);
    let b = process(&store, &clock, policy, cache);
    let rt = rt();
    trace
        .iter()
        .map(|&(gap, first, key, cost)| {
            clock.advance(Duration::from_micros(gap));
            let limiter = if first { &a } else { &b };
            let d: Decision = rt.block_on(limiter.allow_n(format!("k{key}"), cost)).unwrap();
            d.allowed
        })
        .collect()
}

/// One or two limits with short windows, so that denials end often within
/// a trace.
fn any_policy() -> impl proptest::strategy::Strategy<Value = Policy> {
    support::policy(support::limit(1..6, 1..40), 1..3)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn the_deny_cache_never_changes_an_admission(
        policy in any_policy(),
        trace in prop::collection::vec(
            (prop_oneof![3 => 0u64..3_000, 1 => 0u64..50_000], any::<bool>(), 0usize..2, 0u64..4),
            1..150,
        ),
    ) {
        prop_assert_eq!(decisions(&trace, policy, true), decisions(&trace, policy, false));
    }
}

#[test]
fn the_breaker_keeps_requests_from_a_failing_store_and_the_fallback_decides_them() {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let store = store(&clock);
    let shared = Policy::new(Strategy::TokenBucket, 100, Duration::from_secs(60)).unwrap();
    let fallback = Policy::new(Strategy::FixedWindow, 5, Duration::from_secs(60)).unwrap();
    let limiter = Limiter::builder()
        .policy(shared)
        .backend(StoreBackend::new(store.clone()).clock(clock.clone()))
        .fallback(fallback)
        .local_clock(clock.clone())
        .build()
        .unwrap();
    assert_eq!(limiter.fail_policy(), FailPolicy::Fallback);
    let rt = rt();
    assert!(!rt.block_on(limiter.allow("k")).unwrap().fallback);

    store.set_failing(true);
    let mut admitted = 0;
    for _ in 0..50 {
        let d = rt.block_on(limiter.allow("k")).unwrap();
        assert!(d.fallback && d.limit == 5);
        admitted += u64::from(d.allowed);
    }
    assert_eq!(admitted, 5, "the fallback policy bounds admissions");
    // The default breaker opens after 3 failures: 3 calls reached the store.
    assert_eq!(store.failures(), 3);

    // While the cool-down runs nothing reaches the store; after it, one probe.
    clock.advance(Duration::from_millis(99));
    rt.block_on(limiter.allow("k")).unwrap();
    assert_eq!(store.failures(), 3);
    clock.advance(Duration::from_millis(1));
    rt.block_on(limiter.allow("k")).unwrap();
    assert_eq!(store.failures(), 4, "one probe");

    // The store comes back: within the longest cool-down (1 s) it decides again.
    store.set_failing(false);
    clock.advance(Duration::from_secs(1));
    let back = rt.block_on(limiter.allow("k")).unwrap();
    assert!(!back.fallback && back.allowed && back.limit == 100);
    assert!(!rt.block_on(limiter.allow("k")).unwrap().fallback);
}

#[test]
fn an_open_breaker_fails_closed_at_once_with_a_message() {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let store = store(&clock);
    let limiter = Limiter::builder()
        .policy(Policy::new(Strategy::FixedWindow, 5, Duration::from_secs(1)).unwrap())
        .backend(StoreBackend::new(store.clone()).clock(clock.clone()))
        .circuit_breaker(
            CircuitBreaker::new()
                .failures(2)
                .cooldown(Duration::from_millis(500)),
        )
        .local_clock(clock.clone())
        .build()
        .unwrap();
    let rt = rt();
    store.set_failing(true);
    for _ in 0..2 {
        let err = rt.block_on(limiter.allow("k")).unwrap_err();
        assert!(err.to_string().contains("switched to failing"), "{err}");
    }
    let err = rt.block_on(limiter.allow("k")).unwrap_err();
    assert!(
        err.to_string()
            .contains("circuit breaker is open after 2 consecutive failures"),
        "{err}"
    );
    assert!(err.to_string().contains("500 ms"), "{err}");
    assert_eq!(store.failures(), 2);
}

/// A store whose reads never finish while it is stalled, like a server
/// that stopped answering.
struct Stalling {
    inner: MapStore,
    stalled: AtomicBool,
}

impl Store for Stalling {
    async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, BackendError> {
        if self.stalled.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        self.inner.get(key).await
    }

    async fn set(&self, key: &[u8], value: Vec<u8>, ttl: Duration) -> Result<(), BackendError> {
        self.inner.set(key, value, ttl).await
    }

    async fn delete(&self, key: &[u8]) -> Result<(), BackendError> {
        self.inner.delete(key).await
    }
}

#[test]
fn a_probe_dropped_before_it_finished_lets_the_next_request_probe() {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let store = Arc::new(Stalling {
        inner: MapStore::with_manual_clock(&clock),
        stalled: AtomicBool::new(false),
    });
    let flaky = Arc::new(FlakyStore::new(store.clone()));
    let limiter = Limiter::builder()
        .policy(Policy::new(Strategy::FixedWindow, 5, Duration::from_secs(1)).unwrap())
        .backend(StoreBackend::new(flaky.clone()).clock(clock.clone()))
        .circuit_breaker(CircuitBreaker::new().failures(1))
        .local_clock(clock.clone())
        .build()
        .unwrap();
    let rt = rt();
    flaky.set_failing(true);
    assert!(rt.block_on(limiter.allow("k")).is_err());
    flaky.set_failing(false);
    clock.advance(Duration::from_millis(100));
    // The probe goes out and hangs in the store; its caller gives up.
    store.stalled.store(true, Ordering::SeqCst);
    let mut probe = Box::pin(limiter.allow("k"));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(probe.as_mut().poll(&mut cx).is_pending());
    drop(probe);
    // The next request probes instead of finding the breaker stuck open.
    store.stalled.store(false, Ordering::SeqCst);
    assert!(rt.block_on(limiter.allow("k")).unwrap().allowed);
}

#[test]
fn fallback_settings_that_contradict_the_fail_policy_are_refused() {
    let policy = Policy::new(Strategy::FixedWindow, 5, Duration::from_secs(1)).unwrap();
    let err = Limiter::builder()
        .policy(policy)
        .fallback(policy)
        .fail_policy(tollgate::FailPolicy::Open)
        .build()
        .unwrap_err();
    assert!(err.to_string().starts_with("invalid fallback:"), "{err}");
    let err = Limiter::builder()
        .policy(policy)
        .fail_policy(FailPolicy::Fallback)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("no fallback policy"), "{err}");
}

/// A store that lets other tasks run before each read, as a round trip
/// would.
struct Yielding(MapStore);

impl Store for Yielding {
    async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, BackendError> {
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        self.0.get(key).await
    }

    async fn set(&self, key: &[u8], value: Vec<u8>, ttl: Duration) -> Result<(), BackendError> {
        self.0.set(key, value, ttl).await
    }

    async fn delete(&self, key: &[u8]) -> Result<(), BackendError> {
        self.0.delete(key).await
    }
}

/// Sixteen callers of one over-limit key, each time a unit comes back:
/// admitted exactly as without the cache, and with how many store
/// operations per admission.
fn hot_key_rounds(strategy: Strategy, cache: bool) -> (u64, u64) {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let store = Arc::new(FlakyStore::new(Yielding(MapStore::with_manual_clock(&clock))));
    let backend = StoreBackend::new(store.clone()).clock(clock.clone());
    let policy = Policy::new(strategy, 10, Duration::from_secs(1)).unwrap();
    let mut builder = Limiter::builder()
        .policy(policy)
        .backend(backend)
        .local_clock(clock.clone());
    if cache {
        builder = builder.deny_cache(DenyCache::new());
    }
    let limiter = Arc::new(builder.build().unwrap());
    let rt = rt();
    // Use the key up.
    for _ in 0..20 {
        rt.block_on(limiter.allow("hot")).unwrap();
    }
    let before = store.operations();
    let mut admitted = 0;
    for _ in 0..50 {
        // One unit comes back (the buckets), or a new window starts.
        clock.advance(Duration::from_millis(if strategy == Strategy::FixedWindow {
            1_000
        } else {
            100
        }));
        let callers: Vec<_> = (0..16)
            .map(|_| {
                let limiter = limiter.clone();
                rt.spawn(async move { limiter.allow("hot").await.unwrap().allowed })
            })
            .collect();
        for caller in callers {
            admitted += u64::from(rt.block_on(caller).unwrap());
        }
    }
    (admitted, store.operations() - before)
}

#[test]
fn one_caller_per_key_asks_the_store_when_a_cached_denial_runs_out() {
    for strategy in [
        Strategy::TokenBucket,
        Strategy::LeakyBucket,
        Strategy::FixedWindow,
    ] {
        let (admitted, uncached_ops) = hot_key_rounds(strategy, false);
        let (cached_admitted, ops) = hot_key_rounds(strategy, true);
        assert_eq!(
            cached_admitted, admitted,
            "{strategy:?}: the cache changed admissions"
        );
        // Without the cache every caller asks: a read each, a write per
        // admission. With it, the admitted requests one after another (a
        // read and a write each), the last of which leaves nothing and is
        // cached as the denial the next request would meet: nothing more.
        assert!(uncached_ops >= 16 * 50, "{strategy:?}: {uncached_ops}");
        let per_admission = ops as f64 / cached_admitted as f64;
        assert!(
            per_admission <= 2.0,
            "{strategy:?}: {ops} store operations for {cached_admitted} admissions"
        );
    }
}
