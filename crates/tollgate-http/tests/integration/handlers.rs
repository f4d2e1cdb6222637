//! Replaceable replies and keys other than the client address: custom
//! denial and key-error handlers, API-key headers, closures, the path.

use crate::on_both_stacks;
use crate::support;

use std::time::Duration;

use support::apps::{start, Stack};
use support::{assert_problem, client, clock, echo_key, header, key_of, url};
use tollgate::{Limiter, Policy, Strategy};
use tollgate_http::http::StatusCode;
use tollgate_http::{KeyErrorKind, KeyExtractor, MissingKey, RateLimit, Reply, ReplyFormat};

fn limiter(limit: u64) -> Limiter {
    let policy = Policy::new(Strategy::FixedWindow, limit, Duration::from_secs(10)).unwrap();
    Limiter::builder().clock(clock()).policy(policy).build().unwrap()
}

async fn a_custom_denial_keeps_the_rate_limit_headers(stack: Stack) {
    let config = RateLimit::new(limiter(1)).on_denied(|denied| {
        Reply::text(
            StatusCode::IM_A_TEAPOT,
            format!("slow down, {} left", denied.decision().remaining),
        )
        .try_with_header("x-custom", "yes")
        .unwrap()
    });
    let s = start(stack, config).await;
    let c = client();
    assert_eq!(c.get(url(s.addr, "/")).send().await.unwrap().status(), 200);
    let res = c.get(url(s.addr, "/")).send().await.unwrap();
    assert_eq!(res.status(), 418);
    assert_eq!(header(&res, "x-custom").as_deref(), Some("yes"));
    assert_eq!(header(&res, "retry-after").as_deref(), Some("8"));
    assert_eq!(header(&res, "ratelimit-remaining").as_deref(), Some("0"));
    assert_eq!(res.text().await.unwrap(), "slow down, 0 left");
}

async fn api_keys_are_limited_separately_and_required(stack: Stack) {
    let config = RateLimit::new(limiter(1))
        .key(KeyExtractor::header("X-Api-Key"))
        .on_denied(echo_key);
    let s = start(stack, config).await;
    let c = client();
    let with_key = |key: &'static str| {
        let c = c.clone();
        move || c.get(url(s.addr, "/")).header("x-api-key", key)
    };
    assert_eq!(key_of(with_key("alpha")).await, Ok("alpha".into()));
    assert_eq!(key_of(with_key("beta")).await, Ok("beta".into()));

    let res = c.get(url(s.addr, "/")).send().await.unwrap();
    assert_eq!(res.status(), 400);
    assert_eq!(header(&res, "ratelimit-limit"), None);
    assert_eq!(res.text().await.unwrap(), "the x-api-key header is required\n");
    let empty = c
        .get(url(s.addr, "/"))
        .header("x-api-key", "")
        .send()
        .await
        .unwrap();
    assert_eq!(empty.status(), 400);
}

async fn key_errors_can_be_problem_json_or_a_custom_reply(stack: Stack) {
    let config = RateLimit::new(limiter(1))
        .key(KeyExtractor::header("x-api-key"))
        .format(ReplyFormat::ProblemJson);
    let s = start(stack, config).await;
    let res = client().get(url(s.addr, "/")).send().await.unwrap();
    assert_problem(res, 400, "Bad Request", "the x-api-key header is required").await;

    let config = RateLimit::new(limiter(1))
        .key(KeyExtractor::header("x-api-key"))
        .on_key_error(|rejected| {
            assert_eq!(rejected.error().kind(), KeyErrorKind::Missing);
            Reply::text(StatusCode::UNAUTHORIZED, "an API key is required")
                .try_with_header("www-authenticate", "ApiKey")
                .unwrap()
        });
    let s = start(stack, config).await;
    let res = client().get(url(s.addr, "/")).send().await.unwrap();
    assert_eq!(res.status(), 401);
    assert_eq!(header(&res, "www-authenticate").as_deref(), Some("ApiKey"));
    assert_eq!(res.text().await.unwrap(), "an API key is required");
}

async fn a_missing_key_can_fall_back_to_the_peer_address(stack: Stack) {
    let config = RateLimit::new(limiter(1))
        .key(KeyExtractor::header("x-api-key"))
        .missing_key(MissingKey::PeerIp)
        .on_denied(echo_key);
    let s = start(stack, config).await;
    let c = client();
    assert_eq!(key_of(|| c.get(url(s.addr, "/"))).await, Ok("127.0.0.1".into()));
}

async fn closures_and_paths_make_keys(stack: Stack) {
    let config = RateLimit::new(limiter(1))
        .key(KeyExtractor::custom(|req| {
            Some(format!("{}:{}", req.method(), req.header_str("x-tenant")?))
        }))
        .on_denied(echo_key);
    let s = start(stack, config).await;
    let c = client();
    let tenant = || c.get(url(s.addr, "/")).header("x-tenant", "acme");
    assert_eq!(key_of(tenant).await, Ok("GET:acme".into()));
    let res = c.get(url(s.addr, "/")).send().await.unwrap();
    assert_eq!(
        (res.status().as_u16(), res.text().await.unwrap()),
        (400, "the request has no rate-limit key\n".into())
    );

    let config = RateLimit::new(limiter(1))
        .key(KeyExtractor::path())
        .on_denied(echo_key);
    let s = start(stack, config).await;
    assert_eq!(
        key_of(|| c.get(url(s.addr, "/users/1?x=y"))).await,
        Ok("/users/1".into())
    );
    assert_eq!(
        key_of(|| c.get(url(s.addr, "/users/2"))).await,
        Ok("/users/2".into())
    );
}

on_both_stacks!(
    a_custom_denial_keeps_the_rate_limit_headers,
    api_keys_are_limited_separately_and_required,
    key_errors_can_be_problem_json_or_a_custom_reply,
    a_missing_key_can_fall_back_to_the_peer_address,
    closures_and_paths_make_keys,
);

/// An axum server that does not record peer addresses cannot key by them:
/// that is a server error, not the client's.
#[tokio::test]
async fn without_connect_info_the_peer_address_is_a_server_error() {
    let app = ::axum::Router::new()
        .route("/", ::axum::routing::get(|| async { "ok" }))
        .layer(RateLimit::new(limiter(1)).layer());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { ::axum::serve(listener, app).await.unwrap() });
    let res = client().get(url(addr, "/")).send().await.unwrap();
    assert_eq!(res.status(), 500);
    assert_eq!(res.text().await.unwrap(), "the peer address is unknown\n");
}
