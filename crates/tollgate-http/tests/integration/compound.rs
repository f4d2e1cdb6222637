//! Compound policies (several limits on one request) through real
//! listeners: every header mode describes the limit that bound each
//! decision, checked against a twin limiter of the same policy on the same
//! clock, as the binding limit moves from the burst limit to the hourly one;
//! a cost above one limit is never admitted; fail-open sends no headers.

use crate::on_both_stacks;
use crate::support;

use std::sync::Arc;
use std::time::Duration;

use support::apps::{start, Stack};
use support::{client, clock, count_fields, header, params, parse_list, present, secs_up, url, Item};
use tollgate::backend::store::StoreBackend;
use tollgate::clock::ManualClock;
use tollgate::testing::{FlakyStore, MapStore};
use tollgate::{Decision, Limit, Limiter, Limiters, Policy, Strategy};
use tollgate_http::{HeaderMode, RateLimit};

/// A burst limit of 2 per second and an hourly limit of 5.
fn burst_and_hour() -> Policy {
    Policy::compound([
        Limit::new(Strategy::TokenBucket, 2, Duration::from_secs(1)).unwrap(),
        Limit::new(Strategy::FixedWindow, 5, Duration::from_secs(3600)).unwrap(),
    ])
    .unwrap()
}

/// `/` under [`burst_and_hour`], every other route under one limit.
fn limiters(clock: &ManualClock) -> Limiters {
    Limiters::builder()
        .clock(clock.clone())
        .default_policy(Policy::new(Strategy::FixedWindow, 100, Duration::from_secs(10)).unwrap())
        .resource("/", burst_and_hour())
        .build()
        .unwrap()
}

/// A limiter of [`burst_and_hour`] alone on `clock`: the reference.
fn twin(clock: &ManualClock) -> Limiter {
    Limiter::builder()
        .clock(clock.clone())
        .policy(burst_and_hour())
        .build()
        .unwrap()
}

/// What `RateLimit-Policy` lists for `policy` named `name`: each limit as
/// `name[i]` with its quota and its window in seconds.
fn listed(name: &str, policy: &Policy) -> Vec<Item> {
    policy
        .limits()
        .iter()
        .enumerate()
        .map(|(i, limit)| {
            let window = secs_up(limit.window()).parse().unwrap();
            (
                format!("{name}[{i}]"),
                params(&[("q", limit.limit() as i64), ("w", window)]),
            )
        })
        .collect()
}

/// What `RateLimit` holds for `d` under a compound policy named `name`: the
/// binding limit, with what remains and the seconds until reset.
fn binding(name: &str, d: &Decision) -> Vec<Item> {
    let t = secs_up(d.reset).parse().unwrap();
    vec![(
        format!("{name}[{}]", d.bound_by),
        params(&[("r", d.remaining as i64), ("t", t)]),
    )]
}

/// Checks the IETF draft's fields of `res`, decided as `d`.
fn assert_ietf(res: &reqwest::Response, d: &Decision) {
    let mut names = vec!["ratelimit-policy", "ratelimit"];
    if let Some(retry) = d.retry_after {
        assert_eq!(header(res, "retry-after"), Some(secs_up(retry)));
        names.push("retry-after");
    }
    assert_eq!(
        present(res).into_iter().map(|(n, _)| n).collect::<Vec<_>>(),
        names
    );
    let policy = parse_list(&header(res, "ratelimit-policy").unwrap());
    assert_eq!(policy, listed("/", &burst_and_hour()));
    let named = parse_list(&header(res, "ratelimit").unwrap());
    assert_eq!(named, binding("/", d));
    // The binding limit is one of those listed.
    assert!(policy.iter().any(|(name, _)| *name == named[0].0), "{named:?}");
}

async fn every_header_mode_follows_the_binding_limit(stack: Stack) {
    let clock = clock();
    let mut servers = Vec::new();
    for mode in [HeaderMode::RateLimit, HeaderMode::Legacy, HeaderMode::IetfDraft] {
        let config = RateLimit::new(limiters(&clock)).headers(mode);
        servers.push((mode, start(stack, config).await.addr));
    }
    let reference = twin(&clock);
    let c = client();
    // Three requests at once exhaust the burst; after a second two more
    // fit; after another, the hour's fifth request leaves the hourly limit
    // with nothing, and it binds from then on.
    let steps = [0, 0, 0, 1, 0, 1, 0, 1];
    let mut bound = Vec::new();
    for advance in steps {
        clock.advance(Duration::from_secs(advance));
        let d = reference.check("client");
        bound.push((d.allowed, d.bound_by));
        for &(mode, addr) in &servers {
            let res = c.get(url(addr, "/")).send().await.unwrap();
            assert_eq!(res.status() == 200, d.allowed, "{mode:?} {d:?}");
            match mode {
                HeaderMode::RateLimit => assert_eq!(present(&res), count_fields(&d, false), "{d:?}"),
                HeaderMode::Legacy => assert_eq!(present(&res), count_fields(&d, true), "{d:?}"),
                _ => assert_ietf(&res, &d),
            }
            if !d.allowed {
                assert_eq!(res.status(), 429);
            }
        }
    }
    // The scenario went from burst-bound (with a burst denial) to
    // hour-bound (with hourly denials).
    assert_eq!(
        bound,
        [
            (true, 0),
            (true, 0),
            (false, 0),
            (true, 0),
            (true, 0),
            (true, 1),
            (false, 1),
            (false, 1)
        ]
    );
}

async fn a_single_limit_resource_keeps_its_plain_name(stack: Stack) {
    let clock = clock();
    let config = RateLimit::new(limiters(&clock)).headers(HeaderMode::IetfDraft);
    let server = start(stack, config).await;
    let res = client().get(url(server.addr, "/users/1")).send().await.unwrap();
    assert_eq!(
        parse_list(&header(&res, "ratelimit-policy").unwrap()),
        [("default".to_owned(), params(&[("q", 100), ("w", 10)]))]
    );
    assert_eq!(
        parse_list(&header(&res, "ratelimit").unwrap()),
        [("default".to_owned(), params(&[("r", 99), ("t", 8)]))]
    );
}

async fn a_cost_above_one_limit_is_denied_without_retry_after(stack: Stack) {
    let clock = clock();
    let shared = Arc::new(limiters(&clock));
    let costly = start(stack, RateLimit::new(shared.clone()).cost(3)).await;
    let affordable = start(stack, RateLimit::new(shared).cost(2)).await;
    let reference = twin(&clock);
    let c = client();

    let res = c.get(url(costly.addr, "/")).send().await.unwrap();
    let d = reference.check_n("client", 3);
    // The hourly limit would admit 3, the burst limit of 2 never can.
    assert_eq!((d.allowed, d.retry_after), (false, None));
    assert_eq!(res.status(), 429);
    assert_eq!(present(&res), count_fields(&d, false));
    assert_eq!(header(&res, "retry-after"), None);
    assert_eq!(
        res.text().await.unwrap(),
        "rate limit exceeded; the request costs more than the limit allows and can never be admitted\n"
    );
    // Nothing was charged, on either limit: a request of cost 2 fits, and
    // leaves what the reference leaves.
    let res = c.get(url(affordable.addr, "/")).send().await.unwrap();
    let d = reference.check_n("client", 2);
    assert!(d.allowed);
    assert_eq!(res.status(), 200);
    assert_eq!(present(&res), count_fields(&d, false));
}

async fn fail_open_sends_no_headers(stack: Stack) {
    let clock = clock();
    for mode in [HeaderMode::RateLimit, HeaderMode::IetfDraft] {
        let backend =
            StoreBackend::new(FlakyStore::new(MapStore::with_manual_clock(&clock))).clock(clock.clone());
        let store = backend.store().clone();
        let limiter = Limiter::builder()
            .backend(backend)
            .policy(burst_and_hour())
            .fail_policy(tollgate::FailPolicy::Open)
            .build()
            .unwrap();
        let config = RateLimit::new(limiter).headers(mode);
        let server = start(stack, config).await;
        let c = client();

        let res = c.get(url(server.addr, "/")).send().await.unwrap();
        assert_eq!(res.status(), 200);
        assert_ne!(present(&res), [], "{mode:?}");

        store.set_failing(true);
        for _ in 0..3 {
            let res = c.get(url(server.addr, "/")).send().await.unwrap();
            assert_eq!(res.status(), 200, "{mode:?}");
            assert_eq!(present(&res), [], "{mode:?}");
        }
        assert!(store.failures() > 0);
    }
}

on_both_stacks!(
    every_header_mode_follows_the_binding_limit,
    a_single_limit_resource_keeps_its_plain_name,
    a_cost_above_one_limit_is_denied_without_retry_after,
    fail_open_sends_no_headers,
);
