//! Skipped requests, through real listeners: by path, by method and by a
//! closure, they reach the service without a decision, a charge or
//! rate-limit headers, on an in-memory limiter and on one that must be
//! awaited.

use crate::on_both_stacks;
use crate::support;

use std::time::Duration;

use support::apps::{start, Stack};
use support::{client, clock, header, url};
use tollgate::backend::store::StoreBackend;
use tollgate::backend::Backend;
use tollgate::testing::MapStore;
use tollgate::{Limiter, Policy, Strategy};
use tollgate_http::{RateLimit, Skip};

fn fixed(limit: u64) -> Policy {
    Policy::new(Strategy::FixedWindow, limit, Duration::from_secs(10)).unwrap()
}

/// The status, the `RateLimit-Remaining` header and whether any rate-limit
/// header was sent.
async fn sent(request: reqwest::RequestBuilder) -> (u16, Option<String>, bool) {
    let res = request.send().await.unwrap();
    let any = res
        .headers()
        .keys()
        .any(|name| name.as_str().starts_with("ratelimit") || name.as_str() == "retry-after");
    (res.status().as_u16(), header(&res, "ratelimit-remaining"), any)
}

async fn skipped_requests_pass_without_a_charge_or_headers<B: Backend>(stack: Stack, limiter: Limiter<B>) {
    let config = RateLimit::new(limiter)
        .skip(Skip::path("/users/1"))
        .skip(Skip::method("POST"))
        .skip_if(|req| req.header("x-probe").is_some());
    let server = start(stack, config).await;
    let c = client();
    let untouched = (200, None, false);
    for _ in 0..3 {
        assert_eq!(sent(c.get(url(server.addr, "/users/1"))).await, untouched);
        assert_eq!(sent(c.post(url(server.addr, "/"))).await, untouched);
        assert_eq!(
            sent(c.get(url(server.addr, "/")).header("x-probe", "1")).await,
            untouched
        );
    }
    // None of the nine was charged: the one unit of the quota is intact.
    assert_eq!(
        sent(c.get(url(server.addr, "/"))).await,
        (200, Some("0".into()), true)
    );
    assert_eq!(sent(c.get(url(server.addr, "/users/2"))).await.0, 429);
    // Skipped requests still pass once the quota is spent.
    assert_eq!(sent(c.get(url(server.addr, "/users/1"))).await, untouched);
    assert_eq!(sent(c.post(url(server.addr, "/"))).await, untouched);
}

async fn skipped_in_memory(stack: Stack) {
    let limiter = Limiter::builder()
        .clock(clock())
        .policy(fixed(1))
        .build()
        .unwrap();
    skipped_requests_pass_without_a_charge_or_headers(stack, limiter).await;
}

async fn skipped_on_an_awaited_limiter(stack: Stack) {
    let clock = clock();
    let limiter = Limiter::builder()
        .backend(StoreBackend::new(MapStore::with_manual_clock(&clock)).clock(clock.clone()))
        .policy(fixed(1))
        .build()
        .unwrap();
    skipped_requests_pass_without_a_charge_or_headers(stack, limiter).await;
}

on_both_stacks!(skipped_in_memory, skipped_on_an_awaited_limiter);
