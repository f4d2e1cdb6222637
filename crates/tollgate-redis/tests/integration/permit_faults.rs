//! Permits behind the fault proxy (every reply held back, as a one-way
//! partition holds them): a release whose reply was lost freed its units
//! once, and sent again frees nothing more; an acquire whose reply was lost
//! made its permit, which holds its units until its `ttl` and no longer.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::{Limiter, Policy, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::fault_proxy::{FaultProxy, Faults};
use tollgate_test_support::redis::RedisServer;

/// How long a call through the proxy waits for its reply.
const TIMEOUT: Duration = Duration::from_millis(300);

fn upstream(server: &RedisServer) -> SocketAddr {
    server.url().trim_start_matches("redis://").parse().unwrap()
}

/// A concurrency limit of `limit` with permits lasting `ttl`: one limiter
/// through `proxy` (failing closed) and one straight to Redis.
async fn limiters(
    server: &RedisServer,
    proxy: &FaultProxy,
    limit: u64,
    ttl: Duration,
) -> (Arc<Limiter<RedisBackend>>, Arc<Limiter<RedisBackend>>) {
    let policy = Policy::new(Strategy::Concurrency, limit, ttl).unwrap();
    let through = RedisBackend::builder()
        .timeout(TIMEOUT)
        .connect_timeout(TIMEOUT)
        .connect(&proxy.redis_url())
        .await
        .unwrap();
    let direct = RedisBackend::builder().connect(&server.url()).await.unwrap();
    let build = |backend: RedisBackend| {
        Arc::new(
            Limiter::builder()
                .backend(backend)
                .policy(policy)
                .resource("permit-faults")
                .build()
                .unwrap(),
        )
    };
    (build(through), build(direct))
}

/// Lets replies through again, and waits until a call through the proxy
/// is answered (the connection the partition broke is made again).
async fn heal(proxy: &FaultProxy, through: &Arc<Limiter<RedisBackend>>) {
    proxy.heal();
    let deadline = Instant::now() + Duration::from_secs(10);
    // A peek of a key no test holds.
    while through.acquire_permit("nobody", 0).await.is_err() {
        assert!(Instant::now() < deadline, "the proxy never answered again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_release_whose_reply_was_lost_frees_once_and_again_frees_nothing() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(upstream(&server));
    let (through, direct) = limiters(&server, &proxy, 2, Duration::from_secs(30)).await;
    let first = direct.acquire_permit("k", 1).await.unwrap().detach().unwrap();
    let second = direct.acquire_permit("k", 1).await.unwrap();
    assert!(second.decision().allowed);
    proxy.set(Faults {
        replies_lost: true,
        ..Faults::default()
    });
    assert!(
        through.release_permit("k", first).await.is_err(),
        "the reply was lost"
    );
    // The release ran: its unit is free.
    let third = direct.acquire_permit("k", 1).await.unwrap();
    assert!(third.decision().allowed, "the lost release freed its unit");
    heal(&proxy, &through).await;
    let again = through.release_permit("k", first).await.unwrap();
    assert!(!again.decision.allowed, "sent again, the release frees nothing");
    assert_eq!(again.in_flight(), 2, "the second and third permits still hold");
    assert!(!direct.acquire_permit("k", 1).await.unwrap().decision().allowed);
}

#[tokio::test]
async fn an_acquire_whose_reply_was_lost_holds_its_units_until_its_ttl() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(upstream(&server));
    let ttl = Duration::from_millis(800);
    let (through, direct) = limiters(&server, &proxy, 1, ttl).await;
    // The server has the function library (a first call loads it), so the
    // acquire sent into the partition runs.
    drop(direct.acquire_permit("nobody", 0).await.unwrap());
    proxy.set(Faults {
        replies_lost: true,
        ..Faults::default()
    });
    let sent = Instant::now();
    assert!(
        through.acquire_permit("k", 1).await.is_err(),
        "the reply was lost"
    );
    // Its permit was made: the unit is held, as if the caller held it.
    let denied = direct.acquire_permit("k", 1).await.unwrap();
    assert!(
        !denied.decision().allowed,
        "the unanswered acquire holds its unit"
    );
    assert!(denied.decision().retry_after.is_some_and(|r| r <= ttl));
    // And no longer than its ttl.
    loop {
        if direct.acquire_permit("k", 1).await.unwrap().decision().allowed {
            break;
        }
        assert!(
            sent.elapsed() < ttl * 3,
            "the lost acquire's unit never came back"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let back = sent.elapsed();
    assert!(
        back >= ttl - Duration::from_millis(50),
        "back after {back:?}, before its ttl"
    );
    assert!(back <= ttl + Duration::from_millis(300), "back after {back:?}");
    heal(&proxy, &through).await;
}
