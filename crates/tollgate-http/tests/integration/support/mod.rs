//! Real listeners on 127.0.0.1 and real HTTP clients for the tests.
#![allow(dead_code)]

pub mod redis;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::Decision;

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

/// Checks that `res` is an RFC 9457 problem (`application/problem+json`)
/// with `status`, its reason phrase `title`, and `detail`.
pub async fn assert_problem(res: reqwest::Response, status: u16, title: &str, detail: &str) {
    assert_eq!(res.status(), status);
    assert_eq!(
        header(&res, "content-type").as_deref(),
        Some("application/problem+json")
    );
    assert_eq!(
        res.text().await.expect("body"),
        format!(r#"{{"type":"about:blank","title":"{title}","status":{status},"detail":"{detail}"}}"#)
    );
}

/// Every rate-limit header the middleware may set, in a fixed order.
pub const RATE_LIMIT_HEADERS: [&str; 9] = [
    "ratelimit-limit",
    "ratelimit-remaining",
    "ratelimit-reset",
    "ratelimit-policy",
    "ratelimit",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "retry-after",
];

/// The rate-limit headers present on `res`, with their values, in the
/// order of [`RATE_LIMIT_HEADERS`].
pub fn present(res: &reqwest::Response) -> Vec<(&'static str, String)> {
    RATE_LIMIT_HEADERS
        .iter()
        .filter_map(|name| header(res, name).map(|v| (*name, v)))
        .collect()
}

/// Whole seconds, rounded up: how the middleware writes a delay.
pub fn secs_up(d: Duration) -> String {
    d.as_nanos().div_ceil(1_000_000_000).to_string()
}

/// The limit, remaining and reset fields (`RateLimit-*`, or `X-RateLimit-*`
/// when `legacy`) and `Retry-After` that a response decided by `d` must
/// carry, as [`present`] lists them.
pub fn count_fields(d: &Decision, legacy: bool) -> Vec<(&'static str, String)> {
    let names = if legacy {
        ["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"]
    } else {
        ["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"]
    };
    let mut fields = vec![
        (names[0], d.limit.to_string()),
        (names[1], d.remaining.to_string()),
        (names[2], secs_up(d.reset)),
    ];
    if let Some(retry) = d.retry_after.filter(|_| !d.allowed) {
        fields.push(("retry-after", secs_up(retry)));
    }
    fields
}

/// An item of a structured-field list: its string and its integer
/// parameters.
pub type Item = (String, Vec<(String, i64)>);

/// A structured-field list of strings with integer parameters (the IETF
/// draft's fields), parsed by `sfv`.
pub fn parse_list(value: &str) -> Vec<Item> {
    let list: sfv::List = sfv::Parser::new(value).parse().expect("a structured list");
    list.iter()
        .map(|entry| {
            let sfv::ListEntry::Item(item) = entry else {
                panic!("an item, not an inner list: {value}")
            };
            let sfv::BareItem::String(name) = &item.bare_item else {
                panic!("a string: {value}")
            };
            let params = item
                .params
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_owned(),
                        i64::from(v.as_integer().expect("an integer")),
                    )
                })
                .collect();
            (name.as_str().to_owned(), params)
        })
        .collect()
}

/// Integer parameters, as [`parse_list`] gives them.
pub fn params(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
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
