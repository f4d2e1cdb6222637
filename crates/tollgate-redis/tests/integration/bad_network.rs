//! The Redis backend behind a bad network (`tollgate_test_support::fault_proxy`
//! between the client and a standalone Redis): latency with jitter, lost
//! replies, a stall longer than the timeout, and a partition healed. In
//! each, no key is admitted beyond its limit counting every call whose
//! answer was lost as charged (SEMANTICS.md, "A call whose answer did not
//! come back"), every call ends within the timeout plus a quantum, and the
//! store decides again within a second of the heal.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tollgate::{Decision, Error, Limiter, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::fault_proxy::{FaultProxy, Faults};
use tollgate_test_support::redis::RedisServer;

/// The backend's timeout in these scenarios.
const TIMEOUT: Duration = Duration::from_millis(250);

/// Slack for a call past its timeout: scheduling on a loaded 2-core VM.
const QUANTUM: Duration = Duration::from_millis(100);

/// A fixed window of `limit` a day (nothing refills during a test), on
/// Redis through `proxy`, and a second limiter straight to Redis to read
/// the store's count.
async fn limiters(
    server: &RedisServer,
    proxy: &FaultProxy,
    limit: u64,
    name: &str,
) -> (Limiter<RedisBackend>, Limiter<RedisBackend>) {
    let policy = Policy::new(Strategy::FixedWindow, limit, Duration::from_secs(86_400)).unwrap();
    let through = RedisBackend::builder()
        .timeout(TIMEOUT)
        .connect_timeout(TIMEOUT)
        .connect(&proxy.redis_url())
        .await
        .unwrap();
    let direct = RedisBackend::builder().connect(&server.url()).await.unwrap();
    let build = |backend: RedisBackend| {
        Limiter::builder()
            .backend(backend)
            .policy(policy)
            .resource(name)
            .build()
            .unwrap()
    };
    let (through, direct) = (build(through), build(direct));
    // The first call loads the function library: done before any fault.
    through.allow_n("warm-up", 0).await.unwrap();
    (through, direct)
}

fn upstream(server: &RedisServer) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], server.port()))
}

/// The units the store holds for `key` (a peek through the direct limiter).
async fn charged(direct: &Limiter<RedisBackend>, key: &str) -> u64 {
    let peek = direct.allow_n(key, 0).await.unwrap();
    peek.limit - peek.remaining
}

/// One decision, timed: its answer and how long it took.
async fn timed(limiter: &Limiter<RedisBackend>, key: &str) -> (Result<Decision, Error>, Duration) {
    let started = Instant::now();
    let answer = limiter.allow(key).await;
    (answer, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_with_jitter_changes_no_decision() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(upstream(&server));
    let (limiter, direct) = limiters(&server, &proxy, 20, "latency").await;
    proxy.set(Faults {
        latency: Duration::from_millis(50),
        jitter: Duration::from_millis(20),
        ..Faults::default()
    });
    let mut admitted = 0;
    let mut slowest = Duration::ZERO;
    for _ in 0..30 {
        let (answer, took) = timed(&limiter, "k").await;
        slowest = slowest.max(took);
        admitted += u64::from(answer.unwrap().allowed);
    }
    assert_eq!(admitted, 20, "exactly the limit");
    assert_eq!(charged(&direct, "k").await, 20);
    assert!(slowest < TIMEOUT, "{slowest:?}: two 30-70 ms legs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_replies_charge_at_most_what_was_sent_and_the_store_decides_again_after_the_heal() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(upstream(&server));
    let (limiter, direct) = limiters(&server, &proxy, 10, "partition").await;
    let mut admitted = 0;
    for _ in 0..4 {
        admitted += u64::from(limiter.allow("k").await.unwrap().allowed);
    }
    // A one-way partition: the commands run, their replies are lost.
    proxy.set(Faults {
        replies_lost: true,
        ..Faults::default()
    });
    let mut lost = 0;
    for _ in 0..4 {
        let (answer, took) = timed(&limiter, "k").await;
        assert!(
            matches!(answer, Err(Error::Backend(_))),
            "fail closed: {answer:?}"
        );
        assert!(took < TIMEOUT + QUANTUM, "{took:?} past the timeout");
        lost += 1;
    }
    let held = charged(&direct, "k").await;
    assert!(
        held >= admitted && held <= admitted + lost,
        "the store holds {held}: {admitted} admitted and at most {lost} lost"
    );
    // Healed: decided again within a second, and never beyond the limit
    // counting the lost calls as charged.
    proxy.heal();
    let healed = Instant::now();
    loop {
        match limiter.allow("k").await {
            Ok(decision) => {
                admitted += u64::from(decision.allowed);
                break;
            }
            Err(_) => {
                // Possibly charged too (it may have been sent before its
                // connection, which the partition ended, was dropped).
                lost += 1;
                assert!(
                    healed.elapsed() < Duration::from_secs(1),
                    "not deciding a second after the heal"
                );
            }
        }
    }
    for _ in 0..20 {
        admitted += u64::from(limiter.allow("k").await.unwrap().allowed);
    }
    let held = charged(&direct, "k").await;
    assert_eq!(held, 10, "the limit is reached, never passed");
    assert!(
        admitted <= 10 && held <= admitted + lost,
        "{admitted} admitted, {lost} lost, {held} held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_longer_than_the_timeout_is_decided_by_the_fallback_and_the_breaker() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(upstream(&server));
    let policy = Policy::new(Strategy::FixedWindow, 100, Duration::from_secs(86_400)).unwrap();
    let backend = RedisBackend::builder()
        .timeout(TIMEOUT)
        .connect_timeout(TIMEOUT)
        .connect(&proxy.redis_url())
        .await
        .unwrap();
    let fallback = Policy::new(Strategy::FixedWindow, 3, Duration::from_secs(86_400)).unwrap();
    let limiter = Limiter::builder()
        .backend(backend)
        .policy(policy)
        .resource("stall")
        .fallback(fallback)
        .build()
        .unwrap();
    assert!(limiter.allow("k").await.unwrap().allowed);
    proxy.set(Faults {
        stall: true,
        ..Faults::default()
    });
    // Each call ends by its timeout; after 3 failures the breaker opens
    // and the fallback answers at once.
    let mut answers = Vec::new();
    for _ in 0..8 {
        let (answer, took) = timed(&limiter, "k").await;
        assert!(took < TIMEOUT + QUANTUM, "{took:?} past the timeout");
        answers.push((answer.unwrap(), took));
    }
    assert!(answers.iter().all(|(d, _)| d.fallback), "the fallback decides");
    assert_eq!(
        answers.iter().filter(|(d, _)| d.allowed).count(),
        3,
        "within the fallback's limit"
    );
    assert!(
        answers[4..].iter().all(|(_, took)| *took < QUANTUM),
        "the breaker is open: no waiting"
    );
    proxy.heal();
    let healed = Instant::now();
    loop {
        let decision = limiter.allow("k").await.unwrap();
        if !decision.fallback {
            break;
        }
        assert!(
            healed.elapsed() < Duration::from_secs(1),
            "the store decides again within a second"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_percent_of_replies_lost_never_over_admits() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(upstream(&server));
    let (limiter, direct) = limiters(&server, &proxy, 50, "loss").await;
    proxy.set(Faults {
        reply_loss_ppm: 50_000,
        ..Faults::default()
    });
    let (mut admitted, mut failed) = (0u64, 0u64);
    for _ in 0..200 {
        let (answer, took) = timed(&limiter, "k").await;
        assert!(took < TIMEOUT + QUANTUM, "{took:?} past the timeout");
        match answer {
            Ok(decision) => admitted += u64::from(decision.allowed),
            Err(_) => failed += 1,
        }
    }
    proxy.heal();
    let held = charged(&direct, "k").await;
    assert!(admitted <= 50, "{admitted} admitted");
    assert!(
        held >= admitted && held <= admitted + failed,
        "held {held}, {admitted} admitted, {failed} failed"
    );
    assert!(failed > 0, "some replies were lost");
}
