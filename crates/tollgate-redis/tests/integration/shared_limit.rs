//! Shared limits: several limiters, each on its own connection, with many
//! tasks deciding on the same key at once admit exactly the limit. Also the
//! state keys' layout and expiry on the server clock.

use crate::support;

use std::time::Duration;

use support::limiters::{connect_many, hammer, limiters};
use tollgate::{Limiter, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::redis::RedisServer;

/// Windows long enough that nothing refills or rolls over during the test.
/// The fixed window's buckets are aligned to the epoch, so a 50-year window
/// has its boundaries in 2020 and 2070.
fn window(strategy: Strategy) -> Duration {
    match strategy {
        Strategy::FixedWindow => Duration::from_secs(50 * 365 * 24 * 3600),
        _ => Duration::from_secs(3_600),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn limiters_on_separate_connections_admit_exactly_the_limit() {
    let server = RedisServer::start();
    let backends = connect_many(RedisBackend::builder(), &server.url(), 4).await;
    for strategy in Strategy::ALL {
        let policy = Policy::new(strategy, 50, window(strategy)).unwrap();
        let limiters = limiters(&backends, policy, "shared");
        // 512 unit requests for a limit of 50.
        assert_eq!(hammer(&limiters, "unit", 1).await, 50, "{strategy}");
        // 512 requests of 3 units: 16 fit (48 units), the 17th never does.
        assert_eq!(hammer(&limiters, "weighted", 3).await, 48, "{strategy}");
        let peek = limiters[0].allow_n("weighted", 0).await.unwrap();
        assert_eq!(peek.remaining, 2, "{strategy}");
    }
}

#[tokio::test]
async fn state_keys_follow_the_layout_and_expire_with_their_state() {
    let server = RedisServer::start();
    let backend = RedisBackend::builder()
        .expiry_grace(Duration::ZERO)
        .connect(&server.url())
        .await
        .unwrap();
    let limiter = Limiter::builder()
        .backend(backend.clone())
        .strategy(Strategy::TokenBucket)
        .limit(2)
        .window(Duration::from_millis(400))
        .key_prefix("app")
        .resource("login")
        .build()
        .unwrap();
    let key = "app:login:token_bucket:user:{42}";

    // A peek on a fresh key creates nothing.
    assert!(limiter.allow_n("user:{42}", 0).await.unwrap().allowed);
    assert_eq!(server.cli(&["EXISTS", key]), "0");

    assert!(limiter.allow("user:{42}").await.unwrap().allowed);
    let tat: u64 = server.cli(&["GET", key]).parse().expect("tat in microseconds");
    let pttl: i64 = server.cli(&["PTTL", key]).parse().unwrap();
    assert!((1..=200).contains(&pttl), "PTTL {pttl} for one 200ms token");
    let expire_at_ms: u64 = server.cli(&["PEXPIRETIME", key]).parse().unwrap();
    assert_eq!(
        expire_at_ms,
        tat.div_ceil(1_000),
        "expiry is tat rounded up to ms"
    );

    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(server.cli(&["EXISTS", key]), "0", "the key outlived its state");
    let d = limiter.allow("user:{42}").await.unwrap();
    assert_eq!(d.remaining, 1);

    // With a grace, the key outlives its state by that much.
    let graceful = Limiter::builder()
        .backend(
            RedisBackend::builder()
                .expiry_grace(Duration::from_secs(5))
                .connect(&server.url())
                .await
                .unwrap(),
        )
        .strategy(Strategy::SlidingWindow)
        .limit(2)
        .window(Duration::from_millis(100))
        .build()
        .unwrap();
    assert!(graceful.allow("g").await.unwrap().allowed);
    let raw = server.cli(&["GET", "tollgate::sliding_window:g"]);
    let fields: Vec<u64> = raw.split(':').map(|f| f.parse().unwrap()).collect();
    assert_eq!(fields[1..], [1, 0], "start:curr:prev, got {raw}");
    let pttl: i64 = server
        .cli(&["PTTL", "tollgate::sliding_window:g"])
        .parse()
        .unwrap();
    assert!((5_000..=5_200).contains(&pttl), "PTTL {pttl}");
}

/// Unit requests until one is denied; the number admitted.
async fn flood(limiter: &Limiter<impl tollgate::backend::Backend>, key: &str) -> u64 {
    let mut admitted = 0;
    while limiter.allow(key).await.unwrap().allowed {
        admitted += 1;
        assert!(admitted <= 1_000, "a flood never ends");
    }
    admitted
}

/// The bound documented for caller clocks (`caller_clock`,
/// docs/redis.md): at one instant, two hosts whose clocks are `s` apart,
/// the one behind writing first, are admitted together `L` plus what `s` of
/// elapsed time grants, and never more than one limit per host.
fn documented_skew_bound(strategy: Strategy, limit: u64, window_us: u64, start_us: u64, s_us: u64) -> u64 {
    let extra = match strategy {
        Strategy::TokenBucket | Strategy::LeakyBucket => s_us / (window_us / limit),
        Strategy::FixedWindow if (start_us + s_us) / window_us > start_us / window_us => limit,
        Strategy::FixedWindow => 0,
        Strategy::SlidingWindow if s_us < window_us => 0,
        Strategy::SlidingWindow => (limit * (s_us - window_us)).div_ceil(window_us),
        Strategy::Concurrency => unreachable!("the skew bound is a rate's"),
    };
    limit + extra.min(limit)
}

#[tokio::test]
async fn caller_clock_skew_re_grants_exactly_the_documented_bound() {
    let server = RedisServer::start();
    let (limit, window_us) = (10u64, 1_000_000u64);
    // 0.3 s into a second, so that the fixed window's buckets (whole
    // seconds) are crossed by skews from 0.7 s on.
    let start_us = 1_700_000_000_300_000u64;
    let skews_us = [
        0, 1, 99_999, 100_000, 250_000, 699_999, 700_000, 999_999, 1_000_000, 1_250_000, 1_999_999,
        2_000_000, 5_000_000,
    ];
    for strategy in Strategy::ALL {
        for (case, &s_us) in skews_us.iter().enumerate() {
            let behind = tollgate::clock::ManualClock::new(Duration::from_micros(start_us));
            let ahead = tollgate::clock::ManualClock::new(Duration::from_micros(start_us + s_us));
            let host = async |clock: &tollgate::clock::ManualClock| {
                let backend = RedisBackend::builder()
                    .caller_clock(clock.clone())
                    .expiry_grace(Duration::from_secs(3_600))
                    .connect(&server.url())
                    .await
                    .unwrap();
                Limiter::builder()
                    .backend(backend)
                    .strategy(strategy)
                    .limit(limit)
                    .window(Duration::from_micros(window_us))
                    .build()
                    .unwrap()
            };
            let (a, b) = (host(&behind).await, host(&ahead).await);

            // The host behind writes first: the host ahead takes the skew
            // for elapsed time.
            let key = format!("behind-first-{case}");
            let admitted = flood(&a, &key).await + flood(&b, &key).await;
            assert_eq!(flood(&a, &key).await + flood(&b, &key).await, 0, "{strategy}");
            let bound = documented_skew_bound(strategy, limit, window_us, start_us, s_us);
            assert_eq!(admitted, bound, "{strategy}, skew {s_us}µs");

            // It is what one host on one clock admits over that time.
            let clock = tollgate::clock::ManualClock::new(Duration::from_micros(start_us));
            let one_host = Limiter::builder()
                .clock(clock.clone())
                .strategy(strategy)
                .limit(limit)
                .window(Duration::from_micros(window_us))
                .build()
                .unwrap();
            let mut over_time = flood(&one_host, "k").await;
            clock.advance(Duration::from_micros(s_us));
            over_time += flood(&one_host, "k").await;
            assert_eq!(admitted, over_time, "{strategy}, skew {s_us}µs");

            // The host ahead writing first grants nothing extra.
            let key = format!("ahead-first-{case}");
            let admitted = flood(&b, &key).await + flood(&a, &key).await;
            assert_eq!(admitted, limit, "{strategy}, skew {s_us}µs");
        }
    }
}
