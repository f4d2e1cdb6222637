//! Admission through real listeners: exact limits under concurrency,
//! separate clients, per-route and per-method policies, and allowed requests
//! passing through untouched with their responses streamed.

use crate::on_both_stacks;
use crate::support;

use std::time::Duration;

use support::apps::{start, Stack};
use support::{assert_exactly, burst, client, client_from, clock, header, url};
use tollgate::{Limiter, Limiters, Policy, Strategy};
use tollgate_http::{RateLimit, ResourceExtractor};

fn fixed(limit: u64) -> Policy {
    Policy::new(Strategy::FixedWindow, limit, Duration::from_secs(10)).unwrap()
}

async fn exactly_the_limit_of_a_concurrent_burst_is_admitted(stack: Stack) {
    let limiter = Limiter::builder()
        .clock(clock())
        .policy(fixed(5))
        .build()
        .unwrap();
    let server = start(stack, RateLimit::new(limiter)).await;
    let c = client();
    let results = burst(|| c.get(url(server.addr, "/")), 20).await;
    assert_exactly(&results, 5, "8");

    // Another client (another source address) has its own budget...
    let other = client_from([127, 0, 0, 2]);
    let res = other.get(url(server.addr, "/")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(header(&res, "ratelimit-remaining").as_deref(), Some("4"));
    assert_eq!(res.text().await.unwrap(), "ok");
    // ...and the first one is still limited.
    let res = client().get(url(server.addr, "/")).send().await.unwrap();
    assert_eq!(res.status(), 429);
}

async fn route_templates_share_one_policy(stack: Stack) {
    let limiters = Limiters::builder()
        .clock(clock())
        .default_policy(fixed(100))
        .resource("/users/{id}", fixed(2))
        .build()
        .unwrap();
    let server = start(stack, RateLimit::new(limiters)).await;
    let c = client();
    let get = |path: &'static str| c.get(url(server.addr, path)).send();

    let res = get("/users/1").await.unwrap();
    assert_eq!(
        (res.status().as_u16(), header(&res, "ratelimit-remaining")),
        (200, Some("1".into()))
    );
    assert_eq!(res.text().await.unwrap(), "user 1");
    let res = get("/users/2").await.unwrap();
    assert_eq!(
        (res.status().as_u16(), header(&res, "ratelimit-remaining")),
        (200, Some("0".into()))
    );
    let res = get("/users/3").await.unwrap();
    assert_eq!(res.status(), 429);
    assert_eq!(header(&res, "ratelimit-limit").as_deref(), Some("2"));

    // Other routes use the default policy.
    let res = get("/").await.unwrap();
    assert_eq!(
        (res.status().as_u16(), header(&res, "ratelimit-limit")),
        (200, Some("100".into()))
    );
    assert_eq!(header(&res, "ratelimit-remaining").as_deref(), Some("99"));
}

async fn methods_can_select_the_policy(stack: Stack) {
    let limiters = Limiters::builder()
        .clock(clock())
        .default_policy(fixed(100))
        .resource("POST", fixed(1))
        .build()
        .unwrap();
    let server = start(
        stack,
        RateLimit::new(limiters).resource(ResourceExtractor::method()),
    )
    .await;
    let c = client();
    let res = c.post(url(server.addr, "/")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.text().await.unwrap(), "posted");
    assert_eq!(c.post(url(server.addr, "/")).send().await.unwrap().status(), 429);
    assert_eq!(c.get(url(server.addr, "/")).send().await.unwrap().status(), 200);
}

async fn an_allowed_request_reaches_the_service_untouched(stack: Stack) {
    let limiter = Limiter::builder()
        .clock(clock())
        .policy(fixed(5))
        .build()
        .unwrap();
    let server = start(stack, RateLimit::new(limiter)).await;
    let res = client()
        .post(url(server.addr, "/echo?q=1"))
        .header("x-test", "kept")
        .body("the body")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(header(&res, "ratelimit-remaining").as_deref(), Some("4"));
    assert_eq!(res.text().await.unwrap(), "x-test=kept body=the body");
}

async fn response_bodies_are_streamed(stack: Stack) {
    let limiter = Limiter::builder()
        .clock(clock())
        .policy(fixed(5))
        .build()
        .unwrap();
    let server = start(stack, RateLimit::new(limiter)).await;
    let exchange = async {
        let mut res = client().get(url(server.addr, "/stream")).send().await.unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(header(&res, "ratelimit-remaining").as_deref(), Some("4"));
        // The first chunk arrives while the service has not finished its body:
        // a middleware that buffered the body would never deliver it.
        assert_eq!(res.chunk().await.unwrap().as_deref(), Some(&b"first;"[..]));
        server.gate.add_permits(1);
        let mut rest = Vec::new();
        while let Some(chunk) = res.chunk().await.unwrap() {
            rest.extend_from_slice(&chunk);
        }
        assert_eq!(rest, b"second");
    };
    tokio::time::timeout(Duration::from_secs(20), exchange)
        .await
        .expect("the first chunk was held back until the body ended");
}

on_both_stacks!(
    exactly_the_limit_of_a_concurrent_burst_is_admitted,
    route_templates_share_one_policy,
    methods_can_select_the_policy,
    an_allowed_request_reaches_the_service_untouched,
    response_bodies_are_streamed,
);
