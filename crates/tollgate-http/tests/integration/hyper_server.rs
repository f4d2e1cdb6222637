//! A plain hyper 1 server (no framework): the accept loop records each
//! connection's peer as a `PeerAddr` extension and serves the layered
//! tower service through hyper-util.

use crate::support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use support::{assert_exactly, burst, client, client_from, clock, url};
use tollgate::{Limiter, Policy, Strategy};
use tollgate_http::tower::{RateLimitBody, ReplyBody};
use tollgate_http::{PeerAddr, RateLimit, RateLimitLayer};
use tower::ServiceBuilder;

/// Serves `respond`'s response behind `layer` on 127.0.0.1, with each
/// connection's peer recorded as a `PeerAddr`.
async fn serve<B>(layer: RateLimitLayer, respond: fn() -> Response<B>) -> SocketAddr
where
    B: ReplyBody + hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            let service = ServiceBuilder::new()
                .map_request(move |mut req: Request<Incoming>| {
                    req.extensions_mut().insert(PeerAddr(peer));
                    req
                })
                .layer(layer.clone())
                .service_fn(move |_req| async move { Ok::<_, Infallible>(respond()) });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
                    .await;
            });
        }
    });
    addr
}

fn hello() -> Response<Full<Bytes>> {
    Response::new(Full::new(Bytes::from("hello")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hyper_service_is_limited_per_peer() {
    let policy = Policy::new(Strategy::FixedWindow, 3, Duration::from_secs(10)).unwrap();
    let limiter = Limiter::builder().clock(clock()).policy(policy).build().unwrap();
    let addr = serve(RateLimit::new(limiter).layer(), hello).await;
    let c = client();
    assert_exactly(&burst(|| c.get(url(addr, "/")), 10).await, 3, "8");
    let res = client_from([127, 0, 0, 3])
        .get(url(addr, "/"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.text().await.unwrap(), "hello");
}

/// A body type without `ReplyBody` (a `String`) is served through the
/// wrapper: the admitted response streams its own body, the denied one
/// gets the reply's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_type_without_reply_body_is_served_through_the_wrapper() {
    let policy = Policy::new(Strategy::FixedWindow, 1, Duration::from_secs(10)).unwrap();
    let limiter = Limiter::builder().clock(clock()).policy(policy).build().unwrap();
    let addr = serve(RateLimit::new(limiter).layer(), || {
        Response::new(RateLimitBody::new(String::from("a string body")))
    })
    .await;
    let c = client();
    let first = c.get(url(addr, "/")).send().await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(first.text().await.unwrap(), "a string body");
    let second = c.get(url(addr, "/")).send().await.unwrap();
    assert_eq!(second.status(), 429);
    assert_eq!(second.headers()["retry-after"], "8");
    assert_eq!(
        second.text().await.unwrap(),
        "rate limit exceeded; retry after 8 s\n"
    );
}

/// The environment parsing of the example servers, with its unit tests.
#[path = "../../examples/support/mod.rs"]
#[allow(dead_code)]
mod example_support;

/// The example servers refuse a bad setting at start: status 2 and a
/// message naming the variable, its value and what it must hold, before
/// anything listens. `cargo test` builds the examples beside the tests.
#[test]
fn the_example_servers_exit_on_a_bad_setting() {
    let examples = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples");
    let cases = [
        (
            "TOLLGATE_ADDR",
            "127.0.0.1:99999",
            "expected an IP address and a port",
        ),
        ("TOLLGATE_ADDR", "garbage", "expected an IP address and a port"),
        (
            "TOLLGATE_TRUSTED_PROXIES",
            "not-a-cidr",
            r#""not-a-cidr" is neither a network"#,
        ),
        (
            "TOLLGATE_HEADERS",
            "draft",
            "expected one of ratelimit, ietf, legacy, off",
        ),
    ];
    for example in ["axum_server", "actix_server"] {
        let path = examples.join(example);
        assert!(
            path.exists(),
            "{} is missing: run `cargo test -p tollgate-http`, which builds the examples",
            path.display()
        );
        for (name, value, expected) in cases {
            let mut command = std::process::Command::new(&path);
            command
                .env_remove("TOLLGATE_HEADERS")
                .env_remove("TOLLGATE_TRUSTED_PROXIES")
                // A free port, should the variable under test be ignored.
                .env("TOLLGATE_ADDR", "127.0.0.1:0")
                .env(name, value);
            let out = output_within(command, Duration::from_secs(30));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{example} {name}={value}: {stderr}");
            assert!(
                stderr.starts_with(&format!("error: {name}={value:?} is not usable: "))
                    && stderr.contains(expected),
                "{example} {name}={value}: {stderr}"
            );
            assert!(
                out.stdout.is_empty(),
                "{example} listened: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }
}

/// Runs `command` to its end, killing it (and failing) when it runs longer
/// than `limit`: a server that ignored a bad setting would run forever.
fn output_within(mut command: std::process::Command, limit: Duration) -> std::process::Output {
    use std::process::Stdio;
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after {limit:?}: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}
