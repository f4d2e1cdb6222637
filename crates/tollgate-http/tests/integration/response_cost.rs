//! Costs known after the response, through real listeners: a response a
//! predicate picks is refunded, a response cost header settles the charge
//! up or down, an unreadable one leaves it; only what the store charged is
//! given back (not exempt keys, shadow-mode denials or fail-open
//! admissions); a compound policy is refunded on every limit; a refund that
//! fails leaves the response as the service sent it. Each scenario runs on
//! an in-memory limiter and on a store the tower layer must await.

use crate::on_both_stacks;
use crate::support;

use std::sync::Arc;
use std::time::Duration;

use support::apps::{start, Stack, TOKENS_USED};
use support::{client, clock, header, url};
use tollgate::backend::store::StoreBackend;
use tollgate::backend::Backend;
use tollgate::clock::ManualClock;
use tollgate::testing::{FlakyStore, MapStore};
use tollgate::{
    FailPolicy, KeyList, Limit, Limiter, LimiterBuilder, Limiters, MemoryBackend, Policy, Strategy,
};
use tollgate_http::{Adjustments, RateLimit};

/// The key of every request of these tests (the peer address).
const KEY: &str = "127.0.0.1";

fn fixed(limit: u64, secs: u64) -> Limit {
    Limit::new(Strategy::FixedWindow, limit, Duration::from_secs(secs)).unwrap()
}

type Configure = fn(LimiterBuilder<MemoryBackend>) -> LimiterBuilder<MemoryBackend>;

/// Runs `$scenario(stack, clock, limiters)` twice, each on a fresh clock:
/// on an in-memory limiter, then on a store the tower layer must await,
/// each built by `$configure` from a builder on the clock and shared as a
/// set of one.
macro_rules! in_memory_and_on_a_store {
    ($scenario:ident, $stack:expr, $configure:expr) => {{
        let configure: Configure = $configure;
        let clock = support::clock();
        let limiter = configure(Limiter::builder().clock(clock.clone()))
            .build()
            .unwrap();
        $scenario($stack, &clock, limiter.into()).await;
        let clock = support::clock();
        let builder = configure(Limiter::builder().clock(clock.clone()))
            .backend(StoreBackend::new(MapStore::with_manual_clock(&clock)).clock(clock.clone()));
        $scenario($stack, &clock, builder.build().unwrap().into()).await;
    }};
}

/// Sends `GET path`; returns the status and `RateLimit-Remaining`.
async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, Option<String>) {
    let res = client().get(url(addr, path)).send().await.unwrap();
    (res.status().as_u16(), header(&res, "ratelimit-remaining"))
}

fn remaining(n: u64) -> Option<String> {
    Some(n.to_string())
}

fn counts(refunds: u64, penalties: u64, failed: u64, unread: u64) -> Adjustments {
    let mut a = Adjustments::default();
    (a.refunds, a.penalties, a.failed, a.unread) = (refunds, penalties, failed, unread);
    a
}

async fn server_errors_are_refunded_and_successes_charged<B: Backend>(
    stack: Stack,
    _: &ManualClock,
    limiters: Arc<Limiters<B>>,
) {
    let config = RateLimit::new(limiters).no_charge_on_server_errors();
    let server = start(stack, config.clone()).await;
    // Each is charged (its headers say so), then refunded.
    for code in [500, 503, 500, 502, 599] {
        assert_eq!(
            get(server.addr, &format!("/status/{code}")).await,
            (code, remaining(2))
        );
    }
    // The quota is intact; a 2xx and a 4xx are charged.
    assert_eq!(get(server.addr, "/").await, (200, remaining(2)));
    assert_eq!(get(server.addr, "/status/404").await, (404, remaining(1)));
    assert_eq!(get(server.addr, "/status/201").await, (201, remaining(0)));
    assert_eq!(get(server.addr, "/status/500").await, (429, remaining(0)));
    assert_eq!(config.adjustments(), counts(5, 0, 0, 0));
}

async fn the_response_header_settles_the_charge_up_and_down<B: Backend>(
    stack: Stack,
    _: &ManualClock,
    limiters: Arc<Limiters<B>>,
) {
    let config = RateLimit::new(limiters)
        .cost(3)
        .cost_from_response_header(TOKENS_USED);
    let server = start(stack, config.clone()).await;
    let c = client();
    // Charged 3 of 10, then 4 more: 7 used.
    let res = c.get(url(server.addr, "/used/7")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(header(&res, "ratelimit-remaining"), remaining(7));
    // The header reaches the client by default.
    assert_eq!(header(&res, TOKENS_USED).as_deref(), Some("7"));
    // 7 + 3 = 10 admitted, then 3 given back: 7 used.
    assert_eq!(get(server.addr, "/used/0").await, (200, remaining(0)));
    // 7 + 3 admitted, then 2 given back: 8 used.
    assert_eq!(get(server.addr, "/used/1").await, (200, remaining(0)));
    // 8 + 3 is over: denied with the 2 left, nothing settled.
    assert_eq!(get(server.addr, "/used/0").await, (429, remaining(2)));
    assert_eq!(config.adjustments(), counts(2, 1, 0, 0));
}

async fn an_unreadable_header_leaves_the_charge<B: Backend>(
    stack: Stack,
    _: &ManualClock,
    limiters: Arc<Limiters<B>>,
) {
    let config = RateLimit::new(limiters)
        .cost(3)
        .cost_from_response_header(TOKENS_USED)
        .remove_response_cost_header(true);
    let server = start(stack, config.clone()).await;
    let c = client();
    // No header, then values that are not a cost: each charged 3.
    assert_eq!(get(server.addr, "/").await, (200, remaining(7)));
    for (path, left) in [("/used/1.5", 4), ("/used/-1", 1)] {
        let res = c.get(url(server.addr, path)).send().await.unwrap();
        assert_eq!(
            (res.status().as_u16(), header(&res, "ratelimit-remaining")),
            (200, remaining(left))
        );
        assert_eq!(
            header(&res, TOKENS_USED),
            None,
            "{path}: the header was not removed"
        );
    }
    // 9 + 3 is over, whatever the response would have said.
    assert_eq!(get(server.addr, "/used/0").await, (429, remaining(1)));
    assert_eq!(config.adjustments(), counts(0, 0, 0, 3));
}

async fn a_compound_policy_is_refunded_on_every_limit<B: Backend>(
    stack: Stack,
    clock: &ManualClock,
    limiters: Arc<Limiters<B>>,
) {
    let server = start(stack, RateLimit::new(limiters).no_charge_on_server_errors()).await;
    for _ in 0..6 {
        assert_eq!(get(server.addr, "/status/500").await, (500, remaining(1)));
    }
    assert_eq!(get(server.addr, "/").await, (200, remaining(1)));
    assert_eq!(get(server.addr, "/").await, (200, remaining(0)));
    assert_eq!(get(server.addr, "/").await.0, 429);
    // The next 10 s: the hourly limit has 2 of 4 left, as if the errors had
    // never been.
    clock.advance(Duration::from_secs(10));
    assert_eq!(get(server.addr, "/").await, (200, remaining(1)));
    assert_eq!(get(server.addr, "/").await, (200, remaining(0)));
    assert_eq!(get(server.addr, "/").await.0, 429);
}

/// Nothing was charged for an exempt key, so nothing is refunded.
async fn an_exempt_key_is_not_refunded<B: Backend>(
    stack: Stack,
    _: &ManualClock,
    limiters: Arc<Limiters<B>>,
) {
    let config = RateLimit::new(limiters).no_charge_on_server_errors();
    let server = start(stack, config.clone()).await;
    for _ in 0..3 {
        assert_eq!(get(server.addr, "/status/500").await, (500, remaining(1)));
    }
    assert_eq!(config.adjustments(), counts(0, 0, 0, 0));
}

/// A request enforcement would deny is charged nothing in shadow mode, so
/// nothing is refunded: the state stays as enforcement left it.
async fn a_shadow_denial_is_not_refunded<B: Backend>(
    stack: Stack,
    _: &ManualClock,
    limiters: Arc<Limiters<B>>,
) {
    let config = RateLimit::new(limiters.clone()).no_charge_on_server_errors();
    let server = start(stack, config.clone()).await;
    assert_eq!(get(server.addr, "/").await, (200, remaining(1)));
    assert_eq!(get(server.addr, "/").await, (200, remaining(0)));
    for _ in 0..2 {
        assert_eq!(get(server.addr, "/status/503").await, (503, remaining(0)));
    }
    assert_eq!(config.adjustments(), counts(0, 0, 0, 0));
    let peek = limiters.limiter("").allow_n(KEY, 0).await.unwrap();
    assert!(peek.shadow_denied && peek.remaining == 0, "{peek:?}");
}

/// A fail-open admission charged nothing; a refund the store fails leaves
/// the response as the service sent it, and the charge as it was.
async fn failures_leave_the_response(stack: Stack) {
    let clock = clock();
    let store = Arc::new(FlakyStore::new(MapStore::with_manual_clock(&clock)));
    let limiter = Limiter::builder()
        .backend(StoreBackend::new(store.clone()).clock(clock.clone()))
        .policy(Policy::from(fixed(5, 10)))
        .fail_policy(FailPolicy::Open)
        .build()
        .unwrap();
    let limiters: Arc<Limiters<_>> = limiter.into();
    let failing = store.clone();
    // The store fails from the moment the service has answered.
    let config = RateLimit::new(limiters.clone()).no_charge_when(move |status| {
        failing.set_failing(true);
        status.is_server_error()
    });
    let server = start(stack, config.clone()).await;
    let res = client()
        .get(url(server.addr, "/status/503"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 503);
    assert_eq!(header(&res, "ratelimit-remaining"), remaining(4));
    assert_eq!(config.adjustments(), counts(0, 0, 1, 0));
    // Admitted by fail-open: nothing charged, nothing to refund.
    let res = client()
        .get(url(server.addr, "/status/503"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (res.status().as_u16(), header(&res, "ratelimit-remaining")),
        (503, None)
    );
    assert_eq!(config.adjustments(), counts(0, 0, 1, 0));
    // The failed refund left the first charge.
    store.set_failing(false);
    assert_eq!(limiters.limiter("").allow_n(KEY, 0).await.unwrap().remaining, 4);
}

async fn server_errors(stack: Stack) {
    in_memory_and_on_a_store!(server_errors_are_refunded_and_successes_charged, stack, |b| {
        b.policy(Policy::from(fixed(3, 10)))
    });
}

async fn header_up_and_down(stack: Stack) {
    in_memory_and_on_a_store!(the_response_header_settles_the_charge_up_and_down, stack, |b| {
        b.policy(Policy::from(fixed(10, 10)))
    });
}

async fn unreadable_header(stack: Stack) {
    in_memory_and_on_a_store!(an_unreadable_header_leaves_the_charge, stack, |b| {
        b.policy(Policy::from(fixed(10, 10)))
    });
}

async fn compound(stack: Stack) {
    // 2 per 10 s and 4 per 100 s: six server errors would spend both.
    in_memory_and_on_a_store!(a_compound_policy_is_refunded_on_every_limit, stack, |b| {
        b.policy(Policy::compound([fixed(2, 10), fixed(4, 100)]).unwrap())
    });
}

async fn not_charged(stack: Stack) {
    in_memory_and_on_a_store!(an_exempt_key_is_not_refunded, stack, |b| {
        b.policy(Policy::from(fixed(1, 10)))
            .exempt(KeyList::parse("exempt", [KEY]).unwrap())
    });
    in_memory_and_on_a_store!(a_shadow_denial_is_not_refunded, stack, |b| {
        b.policy(Policy::from(fixed(2, 10))).shadow(true)
    });
}

on_both_stacks!(
    server_errors,
    header_up_and_down,
    unreadable_header,
    compound,
    not_charged,
    failures_leave_the_response,
);
