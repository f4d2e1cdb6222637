//! What a request costs, through real listeners: a constant, a constant
//! per route, a request header, a closure; every malformed cost header is a
//! 400 that charges nothing; a cost of 0 is a peek and a cost above the
//! limit a 429 without `Retry-After`. Each admitted or denied response is
//! checked against a twin limiter charged the same costs on the same clock.

use crate::on_both_stacks;
use crate::support;

use std::time::Duration;

use reqwest::header::HeaderValue;
use support::apps::{start, start_per_route, Stack};
use support::{assert_problem, client, clock, count_fields, header, present, url};
use tollgate::backend::store::StoreBackend;
use tollgate::backend::Backend;
use tollgate::clock::ManualClock;
use tollgate::testing::MapStore;
use tollgate::{Limiter, Policy, Strategy};
use tollgate_http::http::StatusCode;
use tollgate_http::{CostError, RateLimit, Reply, ReplyFormat};

fn fixed(limit: u64) -> Policy {
    Policy::new(Strategy::FixedWindow, limit, Duration::from_secs(10)).unwrap()
}

/// An in-memory limiter of `limit` per 10 s on `clock`.
fn limiter(clock: &ManualClock, limit: u64) -> Limiter {
    Limiter::builder()
        .clock(clock.clone())
        .policy(fixed(limit))
        .build()
        .unwrap()
}

/// The same on a store, so that the tower layer awaits each decision.
fn awaited_limiter(clock: &ManualClock, limit: u64) -> Limiter<StoreBackend<MapStore>> {
    Limiter::builder()
        .backend(StoreBackend::new(MapStore::with_manual_clock(clock)).clock(clock.clone()))
        .policy(fixed(limit))
        .build()
        .unwrap()
}

/// Sends `request`, charges `cost` to `reference`, and checks that the
/// response was decided as the reference decided: status and headers.
/// Returns the response.
async fn assert_decided(
    request: reqwest::RequestBuilder,
    reference: &Limiter<impl Backend>,
    cost: u64,
) -> reqwest::Response {
    let res = request.send().await.unwrap();
    let d = reference.allow_n("client", cost).await.unwrap();
    let expected = if d.allowed { 200 } else { 429 };
    assert_eq!(res.status(), expected, "cost {cost}: {d:?}");
    assert_eq!(present(&res), count_fields(&d, false), "cost {cost}: {d:?}");
    res
}

async fn a_constant_cost_is_charged_for_every_request(stack: Stack) {
    let clock = clock();
    let server = start(stack, RateLimit::new(limiter(&clock, 10)).cost(4)).await;
    let reference = limiter(&clock, 10);
    let c = client();
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let res = assert_decided(c.get(url(server.addr, "/")), &reference, 4).await;
        statuses.push(res.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 429]);
}

async fn a_constant_cost_per_route(stack: Stack) {
    let clock = clock();
    let config = RateLimit::new(limiter(&clock, 10));
    let addr = start_per_route(stack, config.clone(), config.cost(5)).await;
    let reference = limiter(&clock, 10);
    let c = client();
    let mut statuses = Vec::new();
    for (path, cost) in [("/costly", 5), ("/", 1), ("/costly", 5), ("/", 1)] {
        let res = assert_decided(c.get(url(addr, path)), &reference, cost).await;
        statuses.push(res.status().as_u16());
    }
    // The routes draw on one budget: 10 − 5 − 1 leaves too little for 5.
    assert_eq!(statuses, [200, 200, 429, 200]);
}

async fn a_cost_header_prices_each_request(stack: Stack) {
    let clock = clock();
    let config = RateLimit::new(limiter(&clock, 10)).cost(2).cost_header("X-Cost");
    let server = start(stack, config).await;
    let reference = limiter(&clock, 10);
    let c = client();
    let get = |cost: Option<&str>| {
        let request = c.get(url(server.addr, "/"));
        match cost {
            Some(cost) => request.header("x-cost", cost),
            None => request,
        }
    };
    let steps: [(Option<&str>, u64, u16); 6] = [
        (Some("3"), 3, 200),
        // Without the header, the constant.
        (None, 2, 200),
        // A peek: admitted, nothing charged.
        (Some("0"), 0, 200),
        (Some("007"), 7, 429),
        (Some("5"), 5, 200),
        // Nothing is left: a peek is denied, with the delay a unit
        // request would wait.
        (Some("0"), 0, 429),
    ];
    for (value, cost, status) in steps {
        let res = assert_decided(get(value), &reference, cost).await;
        assert_eq!(res.status(), status, "{value:?}");
    }
    // A cost above the limit can never be admitted: 429 without
    // Retry-After, charging nothing.
    for (value, cost) in [("11", 11), ("18446744073709551615", u64::MAX)] {
        let res = assert_decided(get(Some(value)), &reference, cost).await;
        assert_eq!(res.status(), 429);
        assert_eq!(header(&res, "retry-after"), None, "{value}");
        assert_eq!(
            res.text().await.unwrap(),
            "rate limit exceeded; the request costs more than the limit allows and can never be admitted\n"
        );
    }
}

/// Each malformed value of a cost header, with what the 400 says of it.
fn malformed() -> Vec<(Vec<HeaderValue>, &'static str)> {
    const NOT_DIGITS: &str = "it holds characters other than the digits 0 to 9";
    let one = |bytes: &[u8]| vec![HeaderValue::from_bytes(bytes).unwrap()];
    vec![
        (one(b""), "it is empty"),
        (one(b"-1"), "it is negative"),
        (one(b"-0"), "it has a sign"),
        (one(b"+1"), "it has a sign"),
        (one(b"1.5"), NOT_DIGITS),
        (one(b"0x10"), NOT_DIGITS),
        (one(b"1 2"), NOT_DIGITS),
        (one(b"1,2"), NOT_DIGITS),
        (one(b"ten"), NOT_DIGITS),
        (one(b"18446744073709551616"), "it is too large"),
        (one(b"99999999999999999999999999"), "it is too large"),
        (one(b"\xff\xfe"), "it is not ASCII"),
        (one("５".as_bytes()), "it is not ASCII"),
        (
            vec![HeaderValue::from_static("1"), HeaderValue::from_static("2")],
            "it appears more than once",
        ),
    ]
}

/// Sends each malformed cost header to `addr` and checks the 400; then
/// checks that none of them was charged.
async fn assert_malformed_costs_are_refused<B: Backend>(addr: std::net::SocketAddr, reference: &Limiter<B>) {
    let c = client();
    assert_decided(c.get(url(addr, "/")).header("x-cost", "1"), reference, 1).await;
    for (values, problem) in malformed() {
        let mut request = c.get(url(addr, "/"));
        for value in &values {
            request = request.header("x-cost", value.clone());
        }
        let res = request.send().await.unwrap();
        assert_eq!(res.status(), 400, "{values:?}");
        assert_eq!(present(&res), [], "{values:?}");
        assert_eq!(
            header(&res, "content-type").as_deref(),
            Some("text/plain; charset=utf-8")
        );
        assert_eq!(
            res.text().await.unwrap(),
            format!(
                "the x-cost header must be one decimal integer from 0 to 18446744073709551615; {problem}\n"
            ),
            "{values:?}"
        );
    }
    // None of them was decided or charged.
    assert_decided(c.get(url(addr, "/")).header("x-cost", "1"), reference, 1).await;
}

async fn every_malformed_cost_header_is_a_400_that_charges_nothing(stack: Stack) {
    let clock = clock();
    let config = RateLimit::new(limiter(&clock, 10)).cost_header("x-cost");
    let server = start(stack, config).await;
    assert_malformed_costs_are_refused(server.addr, &limiter(&clock, 10)).await;
}

async fn a_limiter_that_must_be_awaited_is_charged_the_same(stack: Stack) {
    let clock = clock();
    let config = RateLimit::new(awaited_limiter(&clock, 10)).cost_header("x-cost");
    let server = start(stack, config).await;
    let reference = awaited_limiter(&clock, 10);
    assert_malformed_costs_are_refused(server.addr, &reference).await;
    let c = client();
    for (value, cost) in [("6", 6), ("4", 4), ("11", 11)] {
        assert_decided(
            c.get(url(server.addr, "/")).header("x-cost", value),
            &reference,
            cost,
        )
        .await;
    }
}

async fn a_closure_prices_each_request(stack: Stack) {
    let clock = clock();
    // Users cost 10; other routes their body's size in bytes.
    let config = RateLimit::new(limiter(&clock, 100)).cost_fn(|req| match req.route().as_deref() {
        Some("/users/{id}") => Ok(10),
        _ => req
            .header_str("content-length")
            .ok_or_else(|| CostError::new("this route is priced by its content-length"))?
            .parse()
            .map_err(|_| CostError::new("the content-length is not a number")),
    });
    let server = start(stack, config).await;
    let reference = limiter(&clock, 100);
    let c = client();
    assert_decided(c.get(url(server.addr, "/users/1")), &reference, 10).await;
    let res = assert_decided(
        c.post(url(server.addr, "/echo")).body("0123456789abc"),
        &reference,
        13,
    )
    .await;
    assert_eq!(res.text().await.unwrap(), "x-test=- body=0123456789abc");

    let res = c.get(url(server.addr, "/")).send().await.unwrap();
    assert_eq!(res.status(), 400);
    assert_eq!(present(&res), []);
    assert_eq!(
        res.text().await.unwrap(),
        "this route is priced by its content-length\n"
    );
    // The refused request was not charged.
    assert_decided(c.get(url(server.addr, "/users/2")), &reference, 10).await;
}

/// Sends `GET /` to `addr` with cost header `value`.
async fn priced(addr: std::net::SocketAddr, value: &str) -> reqwest::Response {
    client()
        .get(url(addr, "/"))
        .header("x-cost", value)
        .send()
        .await
        .unwrap()
}

async fn cost_errors_can_be_problem_json_or_a_custom_reply(stack: Stack) {
    let clock = clock();
    let config = RateLimit::new(limiter(&clock, 10))
        .cost_header("x-cost")
        .format(ReplyFormat::ProblemJson);
    let server = start(stack, config).await;
    assert_problem(
        priced(server.addr, "-3").await,
        400,
        "Bad Request",
        "the x-cost header must be one decimal integer from 0 to 18446744073709551615; it is negative",
    )
    .await;

    let config = RateLimit::new(limiter(&clock, 10))
        .cost_header("x-cost")
        .on_cost_error(|rejected| {
            let key = String::from_utf8_lossy(rejected.key());
            Reply::text(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("{} for {key}", rejected.error().message()),
            )
        });
    let server = start(stack, config).await;
    let res = priced(server.addr, "lots").await;
    assert_eq!(res.status(), 422);
    assert_eq!(
        res.text().await.unwrap(),
        "the x-cost header must be one decimal integer from 0 to 18446744073709551615; it holds characters \
         other than the digits 0 to 9 for 127.0.0.1"
    );
}

on_both_stacks!(
    a_constant_cost_is_charged_for_every_request,
    a_constant_cost_per_route,
    a_cost_header_prices_each_request,
    every_malformed_cost_header_is_a_400_that_charges_nothing,
    a_limiter_that_must_be_awaited_is_charged_the_same,
    a_closure_prices_each_request,
    cost_errors_can_be_problem_json_or_a_custom_reply,
);
