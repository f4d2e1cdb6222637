//! Client addresses behind trusted proxies, seen through real listeners:
//! the test client on 127.0.0.1 plays the proxy, and a denial handler
//! echoes the key each request was limited under.

use crate::on_both_stacks;
use crate::support;

use std::time::Duration;

use support::apps::{start, Server, Stack};
use support::{assert_exactly, burst, client, clock, echo_key, header, key_of, url};
use tollgate::{Limiter, Policy, Strategy};
use tollgate_http::{ClientIp, ForwardedHeader, KeyExtractor, MissingKey, RateLimit};

fn limiter(limit: u64) -> Limiter {
    let policy = Policy::new(Strategy::FixedWindow, limit, Duration::from_secs(10)).unwrap();
    Limiter::builder().clock(clock()).policy(policy).build().unwrap()
}

async fn server(stack: Stack, client_ip: ClientIp, missing: MissingKey) -> Server {
    let config = RateLimit::new(limiter(1))
        .key(KeyExtractor::client_ip(client_ip))
        .missing_key(missing)
        .on_denied(echo_key);
    start(stack, config).await
}

fn loopback_proxies() -> ClientIp {
    ClientIp::new().trust("127.0.0.0/8".parse().unwrap())
}

async fn headers_from_an_untrusted_peer_are_ignored(stack: Stack) {
    let s = server(
        stack,
        ClientIp::new().trust("10.0.0.0/8".parse().unwrap()),
        MissingKey::Reject,
    )
    .await;
    let c = client();
    let spoofed = || c.get(url(s.addr, "/")).header("x-forwarded-for", "203.0.113.50");
    assert_eq!(key_of(spoofed).await, Ok("127.0.0.1".into()));
    // Another spoofed address does not buy a fresh budget.
    let res = c
        .get(url(s.addr, "/"))
        .header("x-forwarded-for", "203.0.113.51")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 429);
    // Nor does garbage get the request rejected: the header is not read.
    let res = c
        .get(url(s.addr, "/"))
        .header("x-forwarded-for", "bogus")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 429);
}

async fn a_trusted_peer_passes_on_the_client_address(stack: Stack) {
    let s = server(stack, loopback_proxies(), MissingKey::Reject).await;
    let c = client();
    let get = |xff: &'static [&'static str]| {
        let c = c.clone();
        move || {
            xff.iter().fold(c.get(url(s.addr, "/")), |req, line| {
                req.header("x-forwarded-for", *line)
            })
        }
    };
    assert_eq!(key_of(get(&["203.0.113.9"])).await, Ok("203.0.113.9".into()));
    // Walked from the right: trusted proxies skipped, the spoofed leftmost
    // entry never reached.
    assert_eq!(
        key_of(get(&["6.6.6.6, 203.0.113.10, 127.0.0.5"])).await,
        Ok("203.0.113.10".into())
    );
    assert_eq!(
        key_of(get(&["6.6.6.7, 203.0.113.11", "127.0.0.9"])).await,
        Ok("203.0.113.11".into())
    );
    // IPv6 clients are grouped by /64: a neighbour shares the budget.
    assert_eq!(
        key_of(get(&["2001:db8:1:2::99"])).await,
        Ok("2001:db8:1:2::/64".into())
    );
    let neighbour = get(&["[2001:db8:1:2::aa]:4711"])().send().await.unwrap();
    assert_eq!(neighbour.status(), 429);
    assert_eq!(neighbour.text().await.unwrap(), "2001:db8:1:2::/64");
    // No header: the proxy itself is the client.
    assert_eq!(key_of(get(&[])).await, Ok("127.0.0.1".into()));
}

async fn malformed_values_are_rejected_or_fall_back_to_the_peer(stack: Stack) {
    let s = server(stack, loopback_proxies(), MissingKey::Reject).await;
    let c = client();
    for bad in [
        "203.0.113.12, bogus",
        "",
        "203.0.113.13,,127.0.0.2",
        "unknown",
        "1.2.3.4.5",
    ] {
        let res = key_of(|| c.get(url(s.addr, "/")).header("x-forwarded-for", bad)).await;
        assert_eq!(
            res,
            Err((
                400,
                "the x-forwarded-for header from a trusted proxy is malformed\n".into()
            )),
            "{bad:?}"
        );
    }

    let s = server(stack, loopback_proxies(), MissingKey::PeerIp).await;
    let res = key_of(|| {
        c.get(url(s.addr, "/"))
            .header("x-forwarded-for", "203.0.113.12, bogus")
    })
    .await;
    assert_eq!(res, Ok("127.0.0.1".into()));
}

async fn forwarded_and_x_real_ip(stack: Stack) {
    let c = client();
    let s = server(
        stack,
        loopback_proxies().header(ForwardedHeader::Forwarded),
        MissingKey::Reject,
    )
    .await;
    let forwarded = r#"for=198.51.100.1;proto=http, for="127.0.0.3:8080";by=127.0.0.1"#;
    let res = key_of(|| c.get(url(s.addr, "/")).header("forwarded", forwarded)).await;
    assert_eq!(res, Ok("198.51.100.1".into()));
    let res = key_of(|| c.get(url(s.addr, "/")).header("forwarded", "for=_hidden")).await;
    assert_eq!(res.map_err(|(status, _)| status), Err(400));

    let s = server(
        stack,
        loopback_proxies().header(ForwardedHeader::XRealIp),
        MissingKey::Reject,
    )
    .await;
    let res = key_of(|| c.get(url(s.addr, "/")).header("x-real-ip", "198.51.100.2")).await;
    assert_eq!(res, Ok("198.51.100.2".into()));
}

async fn clients_behind_a_proxy_have_their_own_budgets(stack: Stack) {
    let config = RateLimit::new(limiter(5)).key(KeyExtractor::client_ip(loopback_proxies()));
    let s = start(stack, config).await;
    let c = client();
    let results = burst(
        || c.get(url(s.addr, "/")).header("x-forwarded-for", "198.51.100.1"),
        12,
    )
    .await;
    assert_exactly(&results, 5, "8");
    let res = c
        .get(url(s.addr, "/"))
        .header("x-forwarded-for", "198.51.100.2")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(header(&res, "ratelimit-remaining").as_deref(), Some("4"));
}

on_both_stacks!(
    headers_from_an_untrusted_peer_are_ignored,
    a_trusted_peer_passes_on_the_client_address,
    malformed_values_are_rejected_or_fall_back_to_the_peer,
    forwarded_and_x_real_ip,
    clients_behind_a_proxy_have_their_own_budgets,
);
