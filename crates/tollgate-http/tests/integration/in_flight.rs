//! Concurrency policies (requests in flight): an admitted request holds a
//! permit until its response body ends, through real listeners and real
//! clients. `GET /stream` sends `first;`, then `second` when the test opens
//! its gate, so the test decides when a streamed response ends.

use crate::on_both_stacks;
use crate::support;

use std::time::{Duration, Instant};

use support::apps::{start, Server, Stack};
use support::{client, header, url};
use tollgate::{Limiter, Policy, Strategy};
use tollgate_http::RateLimit;

/// One request in flight per client at a time, for 30 s at most.
fn one_at_a_time() -> RateLimit {
    let policy = Policy::new(Strategy::Concurrency, 1, Duration::from_secs(30)).unwrap();
    RateLimit::new(Limiter::builder().policy(policy).build().unwrap())
}

/// Starts `GET /stream` and reads its first chunk: the response is under
/// way, and its body not over.
async fn streaming(c: &reqwest::Client, server: &Server) -> reqwest::Response {
    let mut res = c.get(url(server.addr, "/stream")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.chunk().await.unwrap().as_deref(), Some(&b"first;"[..]));
    res
}

/// Asks `GET /` every 20 ms until it is admitted, for 5 s at most.
async fn admitted_within_5_s(c: &reqwest::Client, server: &Server) {
    let started = Instant::now();
    loop {
        let res = c.get(url(server.addr, "/")).send().await.unwrap();
        if res.status() == 200 {
            return;
        }
        assert_eq!(res.status(), 429);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the slot was never freed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Checks that `GET /` is refused now, with a `Retry-After` of at most
/// the permits' 30 s.
async fn assert_refused(c: &reqwest::Client, server: &Server) {
    let res = c.get(url(server.addr, "/")).send().await.unwrap();
    assert_eq!(res.status(), 429);
    let retry: u64 = header(&res, "retry-after").expect("Retry-After").parse().unwrap();
    assert!((1..=30).contains(&retry), "Retry-After: {retry}");
    assert_eq!(header(&res, "ratelimit-limit").as_deref(), Some("1"));
    assert_eq!(header(&res, "ratelimit-remaining").as_deref(), Some("0"));
}

async fn a_streamed_response_holds_its_slot_until_its_last_chunk(stack: Stack) {
    let server = start(stack, one_at_a_time()).await;
    let c = client();
    let stream = streaming(&c, &server).await;
    assert_refused(&c, &server).await;
    server.gate.add_permits(1);
    assert_eq!(stream.text().await.unwrap(), "second");
    // Released before the end of the body was written: admitted at once.
    let res = c.get(url(server.addr, "/")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(header(&res, "ratelimit-remaining").as_deref(), Some("0"));
    assert_eq!(res.text().await.unwrap(), "ok");
    // A response in memory frees its slot once sent, too.
    assert_eq!(c.get(url(server.addr, "/")).send().await.unwrap().status(), 200);
}

async fn a_client_that_leaves_mid_stream_frees_the_slot(stack: Stack) {
    let server = start(stack, one_at_a_time()).await;
    // A client of its own, so that its connection closes with it.
    let leaving = client();
    let stream = streaming(&leaving, &server).await;
    let c = client();
    assert_refused(&c, &server).await;
    drop(stream);
    drop(leaving);
    admitted_within_5_s(&c, &server).await;
}

async fn a_handler_that_panics_frees_the_slot(stack: Stack) {
    let server = start(stack, one_at_a_time()).await;
    let c = client();
    // The stack drops the request (a closed connection) or answers 500.
    if let Ok(res) = c.get(url(server.addr, "/panic")).send().await {
        assert_eq!(res.status(), 500);
    }
    admitted_within_5_s(&c, &server).await;
}

async fn a_held_request_is_admitted_when_the_slot_is_freed(stack: Stack) {
    let server = start(stack, one_at_a_time().delay(Duration::from_secs(20))).await;
    let c = client();
    let stream = streaming(&c, &server).await;
    let mut second = tokio::spawn({
        let (c, u) = (c.clone(), url(server.addr, "/"));
        async move {
            let res = c.get(u).send().await.unwrap();
            (res.status().as_u16(), res.text().await.unwrap())
        }
    });
    let pending = tokio::time::timeout(Duration::from_millis(300), &mut second).await;
    assert!(pending.is_err(), "held while the stream runs: {pending:?}");
    server.gate.add_permits(1);
    assert_eq!(stream.text().await.unwrap(), "second");
    let answered = tokio::time::timeout(Duration::from_secs(5), second).await;
    assert_eq!(
        answered.expect("admitted long before the 20 s hold").unwrap(),
        (200, "ok".to_owned())
    );
}

async fn a_request_held_past_the_longest_hold_is_refused(stack: Stack) {
    let server = start(stack, one_at_a_time().delay(Duration::from_millis(300))).await;
    let c = client();
    let stream = streaming(&c, &server).await;
    let started = Instant::now();
    assert_refused(&c, &server).await;
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "refused after the hold, not at once: {:?}",
        started.elapsed()
    );
    server.gate.add_permits(1);
    assert_eq!(stream.text().await.unwrap(), "second");
    assert_eq!(c.get(url(server.addr, "/")).send().await.unwrap().status(), 200);
}

on_both_stacks!(
    a_streamed_response_holds_its_slot_until_its_last_chunk,
    a_client_that_leaves_mid_stream_frees_the_slot,
    a_handler_that_panics_frees_the_slot,
    a_held_request_is_admitted_when_the_slot_is_freed,
    a_request_held_past_the_longest_hold_is_refused,
);
