//! Every header mode on real responses; the IETF draft's structured fields
//! are parsed back with `sfv`.

use crate::on_both_stacks;
use crate::support;

use std::time::Duration;

use support::apps::{start, Stack};
use support::{assert_problem, client, clock, header, params, parse_list, present, url, Item};
use tollgate::{Limiter, Limiters, Policy, Strategy};
use tollgate_http::{HeaderMode, RateLimit, ReplyFormat};

fn fixed(limit: u64) -> Policy {
    Policy::new(Strategy::FixedWindow, limit, Duration::from_secs(10)).unwrap()
}

fn limiter(limit: u64) -> Limiter {
    Limiter::builder()
        .clock(clock())
        .policy(fixed(limit))
        .build()
        .unwrap()
}

/// A structured field holding one list member: its string and its integer
/// parameters.
fn parse_member(value: &str) -> Item {
    let mut list = parse_list(value);
    assert_eq!(list.len(), 1, "{value}");
    list.remove(0)
}

async fn rate_limit_fields_by_default(stack: Stack) {
    let server = start(stack, RateLimit::new(limiter(2))).await;
    let c = client();
    let res = c.get(url(server.addr, "/")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(
        present(&res),
        [
            ("ratelimit-limit", "2".into()),
            ("ratelimit-remaining", "1".into()),
            ("ratelimit-reset", "8".into())
        ]
    );
    c.get(url(server.addr, "/")).send().await.unwrap();
    let res = c.get(url(server.addr, "/")).send().await.unwrap();
    assert_eq!(res.status(), 429);
    assert_eq!(
        present(&res),
        [
            ("ratelimit-limit", "2".into()),
            ("ratelimit-remaining", "0".into()),
            ("ratelimit-reset", "8".into()),
            ("retry-after", "8".into())
        ]
    );
    assert_eq!(
        header(&res, "content-type").as_deref(),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(
        res.text().await.unwrap(),
        "rate limit exceeded; retry after 8 s\n"
    );
}

async fn ietf_draft_structured_fields(stack: Stack) {
    let limiters = Limiters::builder()
        .clock(clock())
        .default_policy(fixed(100))
        .resource("/users/{id}", fixed(2))
        .build()
        .unwrap();
    let server = start(stack, RateLimit::new(limiters).headers(HeaderMode::IetfDraft)).await;
    let c = client();

    let res = c.get(url(server.addr, "/users/7")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let names: Vec<_> = present(&res).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["ratelimit-policy", "ratelimit"]);
    assert_eq!(
        parse_member(&header(&res, "ratelimit-policy").unwrap()),
        ("/users/{id}".into(), params(&[("q", 2), ("w", 10)]))
    );
    assert_eq!(
        parse_member(&header(&res, "ratelimit").unwrap()),
        ("/users/{id}".into(), params(&[("r", 1), ("t", 8)]))
    );

    let res = c.get(url(server.addr, "/")).send().await.unwrap();
    assert_eq!(
        parse_member(&header(&res, "ratelimit-policy").unwrap()),
        ("default".into(), params(&[("q", 100), ("w", 10)]))
    );
    assert_eq!(
        parse_member(&header(&res, "ratelimit").unwrap()),
        ("default".into(), params(&[("r", 99), ("t", 8)]))
    );

    c.get(url(server.addr, "/users/8")).send().await.unwrap();
    let res = c.get(url(server.addr, "/users/9")).send().await.unwrap();
    assert_eq!(res.status(), 429);
    assert_eq!(
        parse_member(&header(&res, "ratelimit").unwrap()),
        ("/users/{id}".into(), params(&[("r", 0), ("t", 8)]))
    );
    assert_eq!(header(&res, "retry-after").as_deref(), Some("8"));
}

async fn legacy_fields(stack: Stack) {
    let server = start(stack, RateLimit::new(limiter(1)).headers(HeaderMode::Legacy)).await;
    let c = client();
    let res = c.get(url(server.addr, "/")).send().await.unwrap();
    assert_eq!(
        present(&res),
        [
            ("x-ratelimit-limit", "1".into()),
            ("x-ratelimit-remaining", "0".into()),
            ("x-ratelimit-reset", "8".into())
        ]
    );
    let res = c.get(url(server.addr, "/")).send().await.unwrap();
    assert_eq!(res.status(), 429);
    assert_eq!(present(&res).last(), Some(&("retry-after", "8".into())));
}

async fn no_fields_but_retry_after_on_429(stack: Stack) {
    let server = start(stack, RateLimit::new(limiter(1)).headers(HeaderMode::Off)).await;
    let c = client();
    let res = c.get(url(server.addr, "/")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(present(&res), []);
    let res = c.get(url(server.addr, "/")).send().await.unwrap();
    assert_eq!(res.status(), 429);
    assert_eq!(present(&res), [("retry-after", "8".into())]);
}

async fn problem_json_denials(stack: Stack) {
    let server = start(stack, RateLimit::new(limiter(1)).format(ReplyFormat::ProblemJson)).await;
    let c = client();
    c.get(url(server.addr, "/")).send().await.unwrap();
    let res = c.get(url(server.addr, "/")).send().await.unwrap();
    assert_eq!(header(&res, "retry-after").as_deref(), Some("8"));
    assert_problem(
        res,
        429,
        "Too Many Requests",
        "rate limit exceeded; retry after 8 s",
    )
    .await;
}

on_both_stacks!(
    rate_limit_fields_by_default,
    ietf_draft_structured_fields,
    legacy_fields,
    no_fields_but_retry_after_on_429,
    problem_json_denials,
);
