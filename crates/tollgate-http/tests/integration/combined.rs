//! A resource that combines a rate with a concurrency limit, through real
//! listeners and real clients: an admitted request decides the rate and
//! holds its slot until its streamed body ends; a full set of slots is
//! refused without charging the rate, and a rate denial frees the slot at
//! once. Every `GET` is one resource (`ResourceExtractor::method`), so
//! `/stream` and `/` share the slot.

use crate::on_both_stacks;
use crate::support;

use std::time::Duration;

use support::apps::{start, Stack};
use support::{client, clock, header, url};
use tollgate::clock::ManualClock;
use tollgate::{Limiters, Policy, Resource, Strategy};
use tollgate_http::{RateLimit, ResourceExtractor};

/// `GET`: 3 a minute, one at a time, the permit lasting an hour (so that a
/// slot left held would outlive the minute the test waits).
fn combined(clock: &ManualClock) -> RateLimit {
    let rate = Policy::new(Strategy::FixedWindow, 3, Duration::from_secs(60)).unwrap();
    let slots = Policy::new(Strategy::Concurrency, 1, Duration::from_secs(3600)).unwrap();
    let limiters = Limiters::builder()
        .clock(clock.clone())
        .default_policy(Policy::new(Strategy::FixedWindow, 100, Duration::from_secs(60)).unwrap())
        .resource("GET", Resource::new(rate).in_flight(slots))
        .build()
        .unwrap();
    RateLimit::new(limiters).resource(ResourceExtractor::method())
}

/// `GET /`'s status, `Retry-After` and `RateLimit-Remaining`.
async fn get(c: &reqwest::Client, addr: std::net::SocketAddr) -> (u16, Option<String>, Option<String>) {
    let res = c.get(url(addr, "/")).send().await.unwrap();
    let status = res.status().as_u16();
    (
        status,
        header(&res, "retry-after"),
        header(&res, "ratelimit-remaining"),
    )
}

async fn a_streamed_response_holds_its_slot_and_a_rate_denial_holds_none(stack: Stack) {
    let clock = clock();
    let server = start(stack, combined(&clock)).await;
    let c = client();
    let mut stream = c.get(url(server.addr, "/stream")).send().await.unwrap();
    assert_eq!(stream.status(), 200);
    assert_eq!(header(&stream, "ratelimit-remaining").as_deref(), Some("2"));
    assert_eq!(stream.chunk().await.unwrap().as_deref(), Some(&b"first;"[..]));
    // The slot is held while the body streams: refused by the concurrency
    // limit, Retry-After its permit's hour.
    let (status, retry, _) = get(&c, server.addr).await;
    assert_eq!((status, retry.as_deref()), (429, Some("3600")));
    server.gate.add_permits(1);
    assert_eq!(stream.text().await.unwrap(), "second");
    // The refusal charged the rate nothing: two of three left after the
    // stream, one after this request.
    assert_eq!(get(&c, server.addr).await, (200, None, Some("1".to_owned())));
    assert_eq!(get(&c, server.addr).await, (200, None, Some("0".to_owned())));
    // The rate is spent: refused by it, Retry-After its window's end.
    let (status, retry, _) = get(&c, server.addr).await;
    assert_eq!(status, 429);
    let retry: u64 = retry.expect("Retry-After").parse().unwrap();
    assert!((1..=60).contains(&retry), "Retry-After: {retry}");
    // A minute on, the rate admits again and the slot is free: the
    // refused request held none of it.
    clock.advance(Duration::from_secs(60));
    assert_eq!(get(&c, server.addr).await.0, 200);
}

on_both_stacks!(a_streamed_response_holds_its_slot_and_a_rate_denial_holds_none);
