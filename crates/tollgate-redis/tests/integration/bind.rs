//! Binding policies: what the scripts cannot compute exactly is rejected when
//! the limiter is built, and clock readings out of range fail the decision.

use std::time::Duration;

use tollgate::backend::BackendErrorKind;
use tollgate::clock::ManualClock;
use tollgate::{Error, Limiter, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::redis::RedisServer;

fn build(backend: &RedisBackend, strategy: Strategy, limit: u64, window: Duration) -> Result<(), Error> {
    Limiter::builder()
        .backend(backend.clone())
        .strategy(strategy)
        .limit(limit)
        .window(window)
        .build()
        .map(drop)
}

#[tokio::test]
async fn policies_beyond_exact_script_arithmetic_are_rejected_at_build() {
    let server = RedisServer::start();
    let backend = RedisBackend::connect(&server.url()).await.unwrap();
    let day = Duration::from_secs(86_400);

    // A million a day is 8.64e16 for the sliding window's L × W: too large.
    match build(&backend, Strategy::SlidingWindow, 1_000_000, day) {
        Err(Error::Config(err)) => {
            assert_eq!(err.field(), "limit");
            assert!(err.reason().contains("window"), "{err}");
        }
        other => panic!("expected a configuration error, got {other:?}"),
    }
    // The other strategies compute it exactly; a thousand a day is fine too.
    for strategy in [
        Strategy::FixedWindow,
        Strategy::TokenBucket,
        Strategy::LeakyBucket,
    ] {
        build(&backend, strategy, 1_000_000, day).unwrap();
    }
    build(&backend, Strategy::SlidingWindow, 1_000, day).unwrap();

    // 80 years is beyond 2^51 µs.
    let long = Duration::from_secs(80 * 365 * 86_400);
    match build(&backend, Strategy::FixedWindow, 1, long) {
        Err(Error::Config(err)) => assert_eq!(err.field(), "window", "{err}"),
        other => panic!("expected a configuration error, got {other:?}"),
    }
    match build(&backend, Strategy::TokenBucket, 1 << 52, day) {
        Err(Error::Config(err)) => assert_eq!(err.field(), "limit", "{err}"),
        other => panic!("expected a configuration error, got {other:?}"),
    }
}

#[tokio::test]
async fn caller_clocks_beyond_2_pow_52_microseconds_fail_the_decision() {
    let server = RedisServer::start();
    // The year 2200.
    let clock = ManualClock::new(Duration::from_secs(230 * 365 * 86_400));
    let backend = RedisBackend::builder()
        .caller_clock(clock.clone())
        .connect(&server.url())
        .await
        .unwrap();
    let limiter = Limiter::builder()
        .backend(backend)
        .strategy(Strategy::TokenBucket)
        .limit(5)
        .window(Duration::from_secs(1))
        .build()
        .unwrap();
    match limiter.allow("k").await {
        Err(Error::Backend(err)) => {
            assert_eq!(err.kind(), BackendErrorKind::Protocol, "{err}");
            assert!(err.to_string().contains("clock reading out of range"), "{err}");
        }
        other => panic!("expected a backend error, got {other:?}"),
    }
    clock.set(Duration::from_secs(55 * 365 * 86_400));
    assert_eq!(limiter.allow("k").await.unwrap().remaining, 4);
}
