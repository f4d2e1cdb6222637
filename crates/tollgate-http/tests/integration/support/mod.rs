//! Real listeners on 127.0.0.1 and real HTTP clients for the tests.
#![allow(dead_code)]

pub mod redis;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tollgate::ManualClock;

/// A manual clock 2.5 s into a 10-second fixed-window bucket, so the
/// bucket ends 7.5 s later (`Retry-After: 8`).
pub fn clock() -> ManualClock {
    ManualClock::new(Duration::from_millis(1_700_000_002_500))
}

/// An HTTP client whose connections come from `source` (any 127.0.0.0/8
/// address is local on Linux), so a server sees distinct peers.
pub fn client_from(source: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::from(source))
        .no_proxy()
        .build()
        .expect("HTTP client")
}

/// Sends a request twice under a limit of one and returns the key the
/// second was denied under (echoed by a [`echo_key`] denial handler), or
/// the status and body of a first request that was not admitted.
pub async fn key_of(request: impl Fn() -> reqwest::RequestBuilder) -> Result<String, (u16, String)> {
    let first = request().send().await.expect("response");
    if first.status() != 200 {
        return Err((first.status().as_u16(), first.text().await.expect("body")));
    }
    let second = request().send().await.expect("response");
    assert_eq!(
        second.status(),
        429,
        "the key was admitted twice under a limit of one"
    );
    Ok(second.text().await.expect("body"))
}

/// A denial handler whose body is the key.
pub fn echo_key(denied: &tollgate_http::Denied<'_>) -> tollgate_http::Reply {
    tollgate_http::Reply::text(
        tollgate_http::http::StatusCode::TOO_MANY_REQUESTS,
        denied.key().to_vec(),
    )
}

/// A client from 127.0.0.1.
pub fn client() -> reqwest::Client {
    client_from([127, 0, 0, 1])
}

/// `http://addr/path`.
pub fn url(addr: SocketAddr, path: &str) -> String {
    format!("http://{addr}{path}")
}

/// A header of a response as text.
pub fn header(res: &reqwest::Response, name: &str) -> Option<String> {
    res.headers()
        .get(name)
        .map(|v| v.to_str().expect("visible ASCII").to_owned())
}

/// Sends `n` requests made by `request` at once and returns each status
/// with the response's `Retry-After` and `RateLimit-Remaining`.
pub async fn burst(
    request: impl Fn() -> reqwest::RequestBuilder,
    n: usize,
) -> Vec<(u16, Option<String>, Option<String>)> {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let request = request();
        tasks.spawn(async move {
            let res = request.send().await.expect("response");
            (
                res.status().as_u16(),
                header(&res, "retry-after"),
                header(&res, "ratelimit-remaining"),
            )
        });
    }
    let mut out = Vec::with_capacity(n);
    while let Some(result) = tasks.join_next().await {
        out.push(result.expect("request task"));
    }
    out
}

/// Checks a burst against a limit of `limit` per window: exactly `limit`
/// requests got 200 with remaining counts `limit-1 ..= 0`, and the rest got
/// 429 with `Retry-After: retry_after`.
pub fn assert_exactly(results: &[(u16, Option<String>, Option<String>)], limit: u64, retry_after: &str) {
    let mut remaining: Vec<u64> = results
        .iter()
        .filter(|(status, ..)| *status == 200)
        .map(|(_, _, r)| r.as_deref().expect("RateLimit-Remaining on 200").parse().unwrap())
        .collect();
    remaining.sort_unstable();
    assert_eq!(remaining, (0..limit).collect::<Vec<_>>(), "{results:?}");
    for (status, retry, _) in results.iter().filter(|(status, ..)| *status != 200) {
        assert_eq!(*status, 429, "{results:?}");
        assert_eq!(retry.as_deref(), Some(retry_after), "{results:?}");
    }
    assert_eq!(
        results.len() as u64 - limit,
        results.iter().filter(|r| r.0 == 429).count() as u64
    );
}

pub mod apps;
