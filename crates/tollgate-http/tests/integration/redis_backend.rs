//! The middleware on a Redis backend: decisions shared through a real
//! `redis-server` (started on a free port), and a server that dies: 503
//! under fail-closed (or a custom reply), admission under fail-open.

use crate::on_both_stacks;
use crate::support;

use std::time::Duration;

use support::apps::{start, Stack};
use support::redis::RedisServer;
use support::{client, header, present, url};
use tollgate::{Limiter, Strategy};
use tollgate_config::AnyBackend;
use tollgate_http::http::StatusCode;
use tollgate_http::{RateLimit, Reply};

fn limiter(backend: &AnyBackend, fail_open: bool) -> Limiter<AnyBackend> {
    Limiter::builder()
        .backend(backend.clone())
        .strategy(Strategy::TokenBucket)
        .limit(2)
        .window(Duration::from_secs(3600))
        .fail_policy(if fail_open {
            tollgate::FailPolicy::Open
        } else {
            tollgate::FailPolicy::Closed
        })
        .build()
        .unwrap()
}

async fn redis_decides_and_a_dead_server_fails_closed(stack: Stack) {
    let mut redis = RedisServer::start();
    let backend = support::redis::backend(&redis.url()).await;
    let closed = start(stack, RateLimit::new(limiter(&backend, false))).await;
    let custom = start(
        stack,
        RateLimit::new(limiter(&backend, false)).on_failure(|failure| {
            Reply::text(StatusCode::BAD_GATEWAY, format!("limiter: {}", failure.error()))
        }),
    )
    .await;
    let open = start(stack, RateLimit::new(limiter(&backend, true))).await;
    let c = client();

    // Up: exact decisions (token bucket, 2 per hour: one token per 1800 s).
    for remaining in ["1", "0"] {
        let res = c.get(url(closed.addr, "/")).send().await.unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(header(&res, "ratelimit-remaining").as_deref(), Some(remaining));
    }
    let res = c.get(url(closed.addr, "/")).send().await.unwrap();
    assert_eq!(res.status(), 429);
    assert_eq!(header(&res, "retry-after").as_deref(), Some("1800"));

    redis.kill();

    let res = c.get(url(closed.addr, "/")).send().await.unwrap();
    assert_eq!(res.status(), 503);
    assert_eq!(present(&res), []);
    assert_eq!(res.text().await.unwrap(), "rate limiter unavailable\n");

    let res = c.get(url(custom.addr, "/")).send().await.unwrap();
    assert_eq!(res.status(), 502);
    assert!(res
        .text()
        .await
        .unwrap()
        .starts_with("limiter: rate-limit backend"));

    // Fail-open admits, without rate-limit headers: the limiter has no
    // figures for a key it could not read.
    let res = c.get(url(open.addr, "/")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(present(&res), []);
    assert_eq!(res.text().await.unwrap(), "ok");
}

on_both_stacks!(redis_decides_and_a_dead_server_fails_closed);
