//! A plain hyper 1 server (no framework): the accept loop records each
//! connection's peer as a `PeerAddr` extension and serves the layered
//! tower service through hyper-util.

mod support;

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
use tollgate_http::{PeerAddr, RateLimit, RateLimitLayer};
use tower::ServiceBuilder;

async fn serve(layer: RateLimitLayer<Limiter>) -> SocketAddr {
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
                .service_fn(|_req| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("hello"))))
                });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hyper_service_is_limited_per_peer() {
    let policy = Policy::new(Strategy::FixedWindow, 3, Duration::from_secs(10)).unwrap();
    let limiter = Limiter::builder().clock(clock()).policy(policy).build().unwrap();
    let addr = serve(RateLimit::new(limiter).layer()).await;
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
