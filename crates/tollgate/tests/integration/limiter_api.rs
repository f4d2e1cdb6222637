//! The limiter and resource-limiter API: configuration errors, resources,
//! peeks, fail policies.

use std::sync::Arc;
use std::time::Duration;

use tollgate::backend::store::{Store, StoreBackend};
use tollgate::backend::BackendErrorKind;
use tollgate::clock::ManualClock;
use tollgate::testing::{FlakyStore, MapStore};
use tollgate::{Error, FailPolicy, Limiter, Limiters, Policy, Strategy};

fn config_field(result: Result<impl std::fmt::Debug, Error>) -> String {
    match result {
        Err(Error::Config(e)) => e.field().to_owned(),
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

#[test]
fn invalid_configuration_names_the_field() {
    let ok = || Limiter::builder().limit(10).window(Duration::from_secs(1));
    assert_eq!(config_field(ok().limit(0).build()), "limit");
    assert_eq!(config_field(ok().window(Duration::ZERO).build()), "window");
    assert_eq!(
        config_field(ok().window(Duration::from_nanos(999)).build()),
        "window"
    );
    assert_eq!(
        config_field(
            ok().window(tollgate::Policy::MAX_WINDOW + Duration::from_secs(1))
                .build()
        ),
        "window"
    );
    assert_eq!(config_field(ok().key_prefix("").build()), "key_prefix");
    assert_eq!(
        config_field(Limiter::builder().window(Duration::from_secs(1)).build()),
        "limit"
    );
    assert_eq!(config_field(Limiter::builder().limit(1).build()), "window");
    assert!(ok().window(tollgate::Policy::MAX_WINDOW).build().is_ok());

    let policy = Policy::new(Strategy::TokenBucket, 1, Duration::from_secs(1)).unwrap();
    assert_eq!(config_field(Limiters::builder().build()), "default");
    let empty = Limiters::builder()
        .default_policy(policy)
        .resource("", policy)
        .build();
    assert_eq!(config_field(empty), r#"resources."""#);
    for bad in ["log\nin", "\u{1b}[31mred", "tab\there", "nul\0"] {
        let built = Limiters::builder()
            .default_policy(policy)
            .resource(bad, policy)
            .build();
        assert_eq!(config_field(built), format!("resources.{bad:?}"), "{bad:?}");
    }
    let err = tollgate::Limiters::check_resource_name("log\nin").unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"invalid resources."log\nin": a resource name must not contain control characters; found U+000A at byte 3"#
    );
    for fine in ["login", "api:v1", "déjà vu", "a.b"] {
        assert!(tollgate::Limiters::check_resource_name(fine).is_ok(), "{fine:?}");
    }
    let twice = Limiters::builder()
        .default_policy(policy)
        .resource("login", policy)
        .resource("login", policy)
        .build();
    assert_eq!(config_field(twice), "resources.login");
    let message = Policy::new(Strategy::FixedWindow, 0, Duration::from_secs(1))
        .unwrap_err()
        .to_string();
    assert_eq!(message, "invalid limit: must be at least 1");
}

#[test]
fn strategies_parse_from_their_names() {
    for s in Strategy::ALL {
        assert_eq!(s.name().parse::<Strategy>().unwrap(), s);
    }
    assert_eq!("Token-Bucket".parse::<Strategy>().unwrap(), Strategy::TokenBucket);
    let err = "gcra".parse::<Strategy>().unwrap_err().to_string();
    assert!(err.contains("\"gcra\"") && err.contains("leaky_bucket"), "{err}");
}

#[test]
fn resources_have_separate_state_and_policies() {
    let clock = ManualClock::new(Duration::from_secs(1_000));
    let limiter = Limiters::builder()
        .clock(clock.clone())
        .default_policy(Policy::new(Strategy::SlidingWindow, 3, Duration::from_secs(10)).unwrap())
        .resource(
            "login",
            Policy::new(Strategy::FixedWindow, 1, Duration::from_secs(60)).unwrap(),
        )
        .resource(
            "search",
            Policy::new(Strategy::TokenBucket, 2, Duration::from_secs(1)).unwrap(),
        )
        .build()
        .unwrap();
    assert!(limiter.limiter("login").check("k").allowed);
    assert!(!limiter.limiter("login").check("k").allowed);
    // Same key, other resources: untouched.
    assert_eq!(limiter.limiter("search").check("k").remaining, 1);
    assert_eq!(limiter.limiter("other").check("k").remaining, 2);
    // Unknown resources share the default policy and its state.
    assert_eq!(limiter.limiter("another").check("k").remaining, 1);
    assert_eq!(
        limiter.named_policy("login").1.limits()[0].strategy(),
        Strategy::FixedWindow
    );
    assert_eq!(limiter.named_policy("nope").1.limits()[0].limit(), 3);
    assert_eq!(limiter.resources().len(), 2);
}

#[test]
fn resources_sharing_a_store_never_collide() {
    let clock = ManualClock::new(Duration::from_secs(1_000));
    let store = StoreBackend::new(MapStore::with_manual_clock(&clock)).clock(clock.clone());
    let policy = Policy::new(Strategy::FixedWindow, 1, Duration::from_secs(60)).unwrap();
    let limiter = Limiters::builder()
        .backend(store)
        .default_policy(policy)
        .resource("a", policy)
        .resource("a:fixed_window", policy)
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        // Resource names that look like another namespace plus a key.
        assert!(
            limiter
                .limiter("a")
                .allow("fixed_window:k")
                .await
                .unwrap()
                .allowed
        );
        assert!(
            limiter
                .limiter("a:fixed_window")
                .allow("k")
                .await
                .unwrap()
                .allowed
        );
        assert!(limiter.limiter("").allow("k").await.unwrap().allowed);
        assert!(
            !limiter
                .limiter("a")
                .allow("fixed_window:k")
                .await
                .unwrap()
                .allowed
        );
    });
}

#[test]
fn peek_reports_without_charging() {
    let limiter = Limiter::builder()
        .strategy(Strategy::FixedWindow)
        .limit(2)
        .window(Duration::from_secs(60))
        .clock(ManualClock::new(Duration::from_secs(60)))
        .build()
        .unwrap();
    for _ in 0..5 {
        let d = limiter.check_n("k", 0);
        assert!(d.allowed);
        assert_eq!(d.remaining, 2);
    }
    assert_eq!(limiter.stored_keys(), 0, "a peek must not create state");
    assert!(limiter.check_n("k", 2).allowed);
    let d = limiter.check_n("k", 0);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(Duration::from_secs(60)));
}

fn flaky(clock: &ManualClock) -> StoreBackend<FlakyStore<MapStore>> {
    StoreBackend::new(FlakyStore::new(MapStore::with_manual_clock(clock))).clock(clock.clone())
}

#[tokio::test]
async fn fail_closed_returns_the_backend_error() {
    let clock = ManualClock::new(Duration::from_secs(10));
    let backend = flaky(&clock);
    let store = backend.store().clone();
    let limiter = Limiter::builder()
        .limit(1)
        .window(Duration::from_secs(1))
        .backend(backend)
        .build()
        .unwrap();
    assert_eq!(limiter.fail_policy(), FailPolicy::Closed);
    assert!(limiter.allow("k").await.unwrap().allowed);
    store.set_failing(true);
    for _ in 0..3 {
        match limiter.allow("k").await {
            Err(Error::Backend(e)) => assert_eq!(e.kind(), BackendErrorKind::Unavailable),
            other => panic!("fail-closed must return the error, got {other:?}"),
        }
    }
    assert_eq!(limiter.fail_open_events(), 0);
    store.set_failing(false);
    // Nothing was charged or lost while failing: still denied until the window passes.
    assert!(!limiter.allow("k").await.unwrap().allowed);
}

#[tokio::test]
async fn fail_open_admits_and_counts() {
    let clock = ManualClock::new(Duration::from_secs(10));
    let backend = flaky(&clock);
    let store = backend.store().clone();
    let limiter = Limiter::builder()
        .limit(1)
        .window(Duration::from_secs(1))
        .fail_policy(tollgate::FailPolicy::Open)
        .backend(backend)
        .build()
        .unwrap();
    // A genuine admission of the last unit: allowed with nothing remaining,
    // like a fail-open one, but marked as real.
    let last = limiter.allow("k").await.unwrap();
    assert!(last.allowed && last.remaining == 0 && !last.fail_open);
    assert!(!limiter.allow("k").await.unwrap().fail_open);
    store.set_failing(true);
    for i in 1..=3 {
        let d = limiter.allow("k").await.unwrap();
        assert!(d.allowed);
        assert!(d.fail_open, "a fail-open admission must say so");
        assert_eq!((d.remaining, d.reset, d.retry_after), (0, Duration::ZERO, None));
        assert_eq!(limiter.fail_open_events(), i);
    }
    assert!(store.failures() >= 3);
    store.set_failing(false);
    let d = limiter.allow("k").await.unwrap();
    assert!(!d.allowed && !d.fail_open);
}

#[tokio::test]
async fn resource_limiters_mark_fail_open_decisions() {
    let clock = ManualClock::new(Duration::from_secs(10));
    let policy = Policy::new(Strategy::TokenBucket, 5, Duration::from_secs(1)).unwrap();
    let backend = flaky(&clock);
    let store = backend.store().clone();
    let limiter = Limiters::builder()
        .default_policy(policy)
        .resource("login", policy)
        .fail_policy(FailPolicy::Open)
        .backend(backend)
        .build()
        .unwrap();
    for resource in ["login", "other"] {
        assert!(!limiter.limiter(resource).allow("k").await.unwrap().fail_open);
    }
    store.set_failing(true);
    for resource in ["login", "other"] {
        let d = limiter.limiter(resource).allow_n("k", 2).await.unwrap();
        assert!(d.allowed && d.fail_open, "{resource}: {d:?}");
    }
}

#[test]
fn store_keys_follow_the_documented_layout() {
    let clock = ManualClock::new(Duration::from_secs(10));
    let store = Arc::new(MapStore::with_manual_clock(&clock));
    struct Shared(Arc<MapStore>);
    impl Store for Shared {
        fn get(
            &self,
            key: &[u8],
        ) -> impl std::future::Future<Output = Result<Option<Vec<u8>>, tollgate::backend::BackendError>> + Send
        {
            self.0.get(key)
        }
        fn set(
            &self,
            key: &[u8],
            value: Vec<u8>,
            ttl: Duration,
        ) -> impl std::future::Future<Output = Result<(), tollgate::backend::BackendError>> + Send {
            self.0.set(key, value, ttl)
        }
        fn delete(
            &self,
            key: &[u8],
        ) -> impl std::future::Future<Output = Result<(), tollgate::backend::BackendError>> + Send {
            self.0.delete(key)
        }
    }
    let limiter = Limiter::builder()
        .strategy(Strategy::TokenBucket)
        .limit(5)
        .window(Duration::from_secs(1))
        .key_prefix("app")
        .resource("api:v1")
        .backend(StoreBackend::new(Shared(store.clone())).clock(clock.clone()))
        .build()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(limiter.allow("user:1")).unwrap();
    let stored = rt
        .block_on(store.get(b"app:api%3Av1:token_bucket:user:1"))
        .unwrap();
    assert!(stored.is_some(), "state stored under the documented key");
    // Its TTL is the reset time: it is gone once the bucket is full again.
    clock.advance(Duration::from_millis(200));
    assert!(store.is_empty());
}

#[test]
fn sweeps_keep_state_through_small_clock_steps_back() {
    let clock = ManualClock::new(Duration::from_millis(500));
    let limiter = Limiter::builder()
        .strategy(Strategy::FixedWindow)
        .limit(1)
        .window(Duration::from_secs(1))
        .backend(
            tollgate::MemoryBackend::new()
                .clock(clock.clone())
                .sweep_interval(Duration::from_secs(3_600)),
        )
        .build()
        .unwrap();
    assert!(limiter.check("k").allowed);
    // The bucket ended at 1s; at 1.5s a sweep must still keep its state...
    clock.set(Duration::from_millis(1_500));
    limiter.sweep();
    assert_eq!(limiter.stored_keys(), 1);
    // ...so a clock stepping back into the bucket still sees it spent.
    clock.set(Duration::from_millis(600));
    assert!(!limiter.check("k").allowed);
    // Once the state is more than the tolerance past its expiry, it goes.
    clock.set(Duration::from_millis(2_001));
    limiter.sweep();
    assert_eq!(limiter.stored_keys(), 0);
}

#[test]
fn limits_beyond_exact_arithmetic_are_refused_naming_the_field() {
    let second = Duration::from_secs(1);
    for strategy in Strategy::ALL {
        assert!(Policy::new(
            strategy,
            tollgate::Policy::MAX_LIMIT,
            tollgate::Policy::MAX_WINDOW
        )
        .is_ok());
        let err = Policy::new(strategy, tollgate::Policy::MAX_LIMIT + 1, second).unwrap_err();
        assert_eq!(err.field(), "limit");
        assert_eq!(
            err.to_string(),
            "invalid limit: 4611686018427387905 exceeds 2^62 = 4611686018427387904, the maximum \
             limit, within which every time and product the strategies compute is exact"
        );
        let built = Limiter::builder()
            .strategy(strategy)
            .limit(u64::MAX)
            .window(second)
            .build();
        assert_eq!(config_field(built), "limit");
    }
}

#[tokio::test]
async fn clock_readings_past_the_latest_time_never_admit_more() {
    // Near 2^64 ns (the year 2554), three per second. Decisions count such
    // readings as MAX_TICK; sweeps and store expiries must agree with them.
    let clock = ManualClock::new(Duration::ZERO);
    for strategy in Strategy::ALL {
        clock.set_nanos(u64::MAX - 10_000_000_000);
        let memory = Limiter::builder()
            .strategy(strategy)
            .limit(3)
            .window(Duration::from_secs(1))
            .backend(
                tollgate::MemoryBackend::new()
                    .clock(clock.clone())
                    .sweep_interval(Duration::from_secs(3_600)),
            )
            .build()
            .unwrap();
        let store = Limiter::builder()
            .strategy(strategy)
            .limit(3)
            .window(Duration::from_secs(1))
            .backend(StoreBackend::new(MapStore::with_manual_clock(&clock)).clock(clock.clone()))
            .build()
            .unwrap();
        let mut admitted = (0, 0);
        for _ in 0..5 {
            admitted.0 += u32::from(memory.check("k").allowed);
            admitted.1 += u32::from(store.allow("k").await.unwrap().allowed);
            clock.advance(Duration::from_millis(1));
            memory.sweep();
        }
        assert_eq!(admitted, (3, 3), "{strategy}: (in memory, store)");
        assert_eq!(memory.stored_keys(), 1, "{strategy}: state swept too early");
    }
}

#[test]
fn without_reclaim_nothing_is_ever_deleted() {
    let clock = ManualClock::new(Duration::from_secs(10));
    let limiter = Limiter::builder()
        .strategy(Strategy::TokenBucket)
        .limit(1)
        .window(Duration::from_secs(1))
        .backend(tollgate::MemoryBackend::new().clock(clock.clone()).reclaim(false))
        .build()
        .unwrap();
    for i in 0..10_000 {
        limiter.check(format!("k{i}"));
    }
    clock.advance(Duration::from_secs(100));
    for i in 0..10_000 {
        limiter.check(format!("new{i}"));
    }
    // Only an explicit sweep deletes.
    assert_eq!(limiter.stored_keys(), 20_000);
}

/// A backend that serves only limits up to 100.
struct SmallLimitsOnly(tollgate::MemoryBackend);

impl tollgate::backend::Backend for SmallLimitsOnly {
    type Binding = tollgate::backend::memory::MemoryBinding;

    fn bind(&self, scope: &tollgate::backend::Scope<'_>) -> Result<Self::Binding, Error> {
        if scope.policy.limits()[0].limit() > 100 {
            return Err(tollgate::ConfigError::new("limit", "above 100").into());
        }
        self.0.bind(scope)
    }
}

#[test]
fn a_resource_the_backend_cannot_serve_is_named_in_the_error() {
    let small = Policy::new(Strategy::FixedWindow, 10, Duration::from_secs(1)).unwrap();
    let large = Policy::new(Strategy::FixedWindow, 1_000, Duration::from_secs(1)).unwrap();
    let err = Limiters::builder()
        .backend(SmallLimitsOnly(tollgate::MemoryBackend::new()))
        .default_policy(small)
        .resource("login", small)
        .resource("bulk", large)
        .build();
    assert_eq!(config_field(err), "resources.bulk.limit");
}
