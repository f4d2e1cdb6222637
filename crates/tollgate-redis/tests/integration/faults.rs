//! Faults with a real server: killed and restarted, frozen, script cache
//! flushed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::backend::BackendErrorKind;
use tollgate::{Error, Limiter, Strategy};
use tollgate_redis::RedisBackend;
use tollgate_test_support::redis::RedisServer;

fn limiter(backend: &RedisBackend, fail_open: bool) -> Limiter<RedisBackend> {
    Limiter::builder()
        .backend(backend.clone())
        .strategy(Strategy::TokenBucket)
        .limit(1_000_000)
        .window(Duration::from_secs(60))
        .fail_policy(if fail_open {
            tollgate::FailPolicy::Open
        } else {
            tollgate::FailPolicy::Closed
        })
        .build()
        .unwrap()
}

fn backend_kind(result: Result<tollgate::Decision, Error>) -> Option<BackendErrorKind> {
    match result {
        Ok(_) => None,
        Err(Error::Backend(err)) => Some(err.kind()),
        Err(other) => panic!("unexpected error {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_fails_decisions_and_a_restarted_one_serves_again() {
    let mut server = RedisServer::start();
    let backend = RedisBackend::connect(&server.url()).await.unwrap();
    let closed = Arc::new(limiter(&backend, false));
    let open = Arc::new(limiter(&backend, true));

    // Load from several tasks while the server is killed under them.
    let mut tasks = Vec::new();
    for task in 0..8 {
        let (closed, open) = (closed.clone(), open.clone());
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0u32, 0u32);
            let until = Instant::now() + Duration::from_millis(600);
            while Instant::now() < until {
                match backend_kind(closed.allow(format!("k{task}")).await) {
                    None => ok += 1,
                    Some(kind) => {
                        assert!(
                            matches!(kind, BackendErrorKind::Unavailable | BackendErrorKind::Timeout),
                            "{kind:?}"
                        );
                        failed += 1;
                    }
                }
                let d = open
                    .allow(format!("k{task}"))
                    .await
                    .expect("fail-open never errors");
                assert!(d.allowed);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            (ok, failed)
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.kill();
    let (mut ok, mut failed) = (0, 0);
    for task in tasks {
        let (o, f) = task.await.unwrap();
        ok += o;
        failed += f;
    }
    assert!(ok > 0, "no decision succeeded before the kill");
    assert!(failed > 0, "no decision failed after the kill");

    // Down: fail closed returns the error, fail open admits and counts.
    let before = open.fail_open_events();
    assert!(before > 0);
    for _ in 0..5 {
        assert!(backend_kind(closed.allow("x").await).is_some());
        let d = open.allow("x").await.unwrap();
        assert!(d.allowed);
        assert_eq!(d.remaining, 0);
        assert_eq!(d.retry_after, None);
    }
    assert_eq!(open.fail_open_events(), before + 5);

    // Back on the same port: the same limiters serve again within a second.
    server.restart();
    let restarted = Instant::now();
    loop {
        if let Ok(d) = closed.allow("after-restart").await {
            assert!(d.allowed);
            assert_eq!(d.remaining, 999_999);
            break;
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(1),
            "no decision succeeded within a second of the restart"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let events = open.fail_open_events();
    assert!(open.allow("after-restart").await.unwrap().remaining > 0);
    assert_eq!(open.fail_open_events(), events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_times_decisions_out_instead_of_hanging() {
    let server = RedisServer::start();
    let backend = RedisBackend::builder()
        .timeout(Duration::from_millis(100))
        .connect(&server.url())
        .await
        .unwrap();
    let closed = limiter(&backend, false);
    let open = limiter(&backend, true);
    assert!(closed.allow("k").await.unwrap().allowed);

    server.pause();
    let started = Instant::now();
    let err = match closed.allow("k").await {
        Err(Error::Backend(err)) => err,
        other => panic!("expected a timeout, got {other:?}"),
    };
    let waited = started.elapsed();
    assert_eq!(err.kind(), BackendErrorKind::Timeout, "{err}");
    assert!(
        waited >= Duration::from_millis(90) && waited < Duration::from_millis(600),
        "{waited:?}"
    );
    assert!(open.allow("k").await.unwrap().allowed);
    assert_eq!(open.fail_open_events(), 1);

    server.resume();
    let resumed = Instant::now();
    loop {
        if closed.allow("k").await.is_ok() {
            break;
        }
        assert!(
            resumed.elapsed() < Duration::from_secs(1),
            "no answer after SIGCONT"
        );
    }
}

#[tokio::test]
async fn decisions_survive_a_flushed_script_cache() {
    let server = RedisServer::start();
    let backend = RedisBackend::connect(&server.url()).await.unwrap();
    for strategy in Strategy::ALL {
        let limiter = Limiter::builder()
            .backend(backend.clone())
            .strategy(strategy)
            .limit(5)
            .window(Duration::from_secs(3_600))
            .build()
            .unwrap();
        assert_eq!(limiter.allow("k").await.unwrap().remaining, 4);
        assert_eq!(server.cli(&["SCRIPT", "FLUSH"]), "OK");
        // The state survives; the script is sent again.
        assert_eq!(limiter.allow("k").await.unwrap().remaining, 3, "{strategy}");
        assert_eq!(limiter.allow("k").await.unwrap().remaining, 2, "{strategy}");
    }
}

#[tokio::test]
async fn foreign_values_under_a_state_key_are_protocol_errors() {
    let server = RedisServer::start();
    let backend = RedisBackend::connect(&server.url()).await.unwrap();
    let limiter = limiter(&backend, false);
    server.cli(&["SET", "tollgate::token_bucket:text", "not a state"]);
    server.cli(&["HSET", "tollgate::token_bucket:hash", "f", "1"]);
    for key in ["text", "hash"] {
        match limiter.allow(key).await {
            Err(Error::Backend(err)) => assert_eq!(err.kind(), BackendErrorKind::Protocol, "{key}: {err}"),
            other => panic!("{key}: expected a protocol error, got {other:?}"),
        }
    }
}
