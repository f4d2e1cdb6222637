//! The deny cache, the circuit breaker and the fallback limiter against a
//! real server: script calls counted by the server itself, and outages made
//! by killing and freezing it under load.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::protection::CircuitBreaker;
use tollgate::protection::DenyCache;
use tollgate::{Limiter, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::redis::RedisServer;

fn policy(limit: u64) -> Policy {
    Policy::new(Strategy::SlidingWindow, limit, Duration::from_secs(600)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_on_an_over_limit_key_makes_a_handful_of_script_calls() {
    let server = RedisServer::start();
    // Two processes' worth of limiters, each on its own connection.
    let mut limiters = Vec::new();
    for _ in 0..2 {
        let backend = RedisBackend::connect(&server.url()).await.unwrap();
        limiters.push(
            Limiter::builder()
                .policy(policy(10))
                .backend(backend)
                .deny_cache(DenyCache::new())
                .build()
                .unwrap(),
        );
    }
    // Load the function library first, so that no retry after a missing
    // function is counted below.
    limiters[0].allow("warm-up").await.unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    let mut admitted = 0;
    for i in 0..1_000 {
        if limiters[i % 2].allow("abuser").await.unwrap().allowed {
            admitted += 1;
        }
    }
    // Exactly what the store alone admits.
    assert_eq!(admitted, 10);
    // 10 admissions plus the one denial each process cached.
    let calls = server.script_calls();
    assert_eq!(calls, 10 + 2, "script calls for 1,000 decisions");
    // Without the cache every decision is a script call.
    let plain = Limiter::builder()
        .policy(policy(10))
        .backend(RedisBackend::connect(&server.url()).await.unwrap())
        .build()
        .unwrap();
    server.cli(&["CONFIG", "RESETSTAT"]);
    for _ in 0..100 {
        assert!(!plain.allow("abuser").await.unwrap().allowed);
    }
    assert_eq!(server.script_calls(), 100);
}

/// A limiter on a shared limit of 1,000 per minute with a fallback of 5 per
/// minute per process, and a short timeout. The fallback is a token bucket,
/// not a fixed window: these tests run on the real clock, and a window
/// boundary inside a load would give every key a second 5 (one refilled
/// token takes 12 s, longer than any load here).
async fn with_fallback(server: &RedisServer) -> Arc<Limiter<RedisBackend>> {
    let backend = RedisBackend::builder()
        .timeout(Duration::from_millis(100))
        .connect(&server.url())
        .await
        .unwrap();
    Arc::new(
        Limiter::builder()
            .policy(Policy::new(Strategy::TokenBucket, 1_000, Duration::from_secs(60)).unwrap())
            .backend(backend)
            .fallback(Policy::new(Strategy::TokenBucket, 5, Duration::from_secs(60)).unwrap())
            .circuit_breaker(CircuitBreaker::new())
            .build()
            .unwrap(),
    )
}

/// Decides on `keys` keys for `for_how_long`, returning (decisions, fallback
/// decisions, fallback admissions per key).
async fn load(limiter: &Limiter<RedisBackend>, keys: usize, for_how_long: Duration) -> (u64, u64, Vec<u64>) {
    let until = Instant::now() + for_how_long;
    let (mut decisions, mut fallbacks) = (0, 0);
    let mut admitted = vec![0; keys];
    while Instant::now() < until {
        for (key, admitted) in admitted.iter_mut().enumerate() {
            let d = limiter.allow(format!("k{key}")).await.unwrap();
            decisions += 1;
            if d.fallback {
                fallbacks += 1;
                *admitted += u64::from(d.allowed);
            }
        }
    }
    (decisions, fallbacks, admitted)
}

/// Waits until the store decides again, at most `within`.
async fn store_back(limiter: &Limiter<RedisBackend>, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        if !limiter.allow("probe").await.unwrap().fallback {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "the store did not take over within {within:?}"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_is_replaced_by_the_fallback_at_memory_speed_and_taken_back() {
    let mut server = RedisServer::start();
    let limiter = with_fallback(&server).await;
    let (_, fallbacks, _) = load(&limiter, 4, Duration::from_millis(100)).await;
    assert_eq!(fallbacks, 0);

    server.kill();
    // Past the first failures the breaker is open: decisions flow from
    // memory, and no key gets more than the fallback's 5.
    let (decisions, fallbacks, admitted) = load(&limiter, 4, Duration::from_millis(500)).await;
    assert_eq!(
        fallbacks, decisions,
        "every decision during the outage is the fallback's"
    );
    // Each would take the 100 ms timeout without the breaker: 5 in 500 ms.
    assert!(decisions > 500, "only {decisions} decisions in 500 ms of outage");
    assert!(admitted.iter().all(|&a| a == 5), "{admitted:?}");

    server.restart();
    let took = store_back(&limiter, Duration::from_millis(1_500)).await;
    assert!(took <= Duration::from_secs(1), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_idle_spell_the_first_request_goes_to_a_store_that_is_back() {
    let mut server = RedisServer::start();
    let limiter = with_fallback(&server).await;
    assert!(!limiter.allow("k").await.unwrap().fallback);
    server.kill();
    // Long enough for failed probes to grow the cool-down to its longest.
    let (decisions, fallbacks, _) = load(&limiter, 2, Duration::from_millis(1_500)).await;
    assert_eq!(fallbacks, decisions);
    // The server comes back while nobody asks; the connection the outage
    // broke is still the limiter's.
    server.restart();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let first = limiter.allow("k").await.unwrap();
    assert!(
        !first.fallback,
        "the first request after the idle spell went to the fallback"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_traffic_the_store_decides_again_within_a_second_of_accepting() {
    let mut server = RedisServer::start();
    let limiter = with_fallback(&server).await;
    let mut took = Vec::new();
    for _ in 0..3 {
        server.kill();
        let (decisions, fallbacks, _) = load(&limiter, 2, Duration::from_millis(1_500)).await;
        assert_eq!(fallbacks, decisions);
        server.restart();
        took.push(store_back(&limiter, Duration::from_millis(1_500)).await);
    }
    took.sort();
    assert!(took[2] <= Duration::from_secs(1), "{took:?}");
    eprintln!("back to the store after a restart: {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_costs_a_few_timeouts_then_none() {
    let server = RedisServer::start();
    let limiter = with_fallback(&server).await;
    assert!(!limiter.allow("k").await.unwrap().fallback);

    server.pause();
    // Three timeouts of 100 ms open the breaker; after that, no decision
    // waits for the server.
    let started = Instant::now();
    for _ in 0..3 {
        assert!(limiter.allow("k").await.unwrap().fallback);
    }
    assert!(
        started.elapsed() >= Duration::from_millis(290),
        "{:?}",
        started.elapsed()
    );
    let open = Instant::now();
    let (decisions, fallbacks, admitted) = load(&limiter, 2, Duration::from_millis(300)).await;
    assert_eq!(fallbacks, decisions);
    assert!(
        decisions > 200,
        "{decisions} decisions in {:?} with the breaker open",
        open.elapsed()
    );
    assert!(admitted.iter().all(|&a| a <= 5), "{admitted:?}");

    server.resume();
    store_back(&limiter, Duration::from_millis(1_500)).await;
}
