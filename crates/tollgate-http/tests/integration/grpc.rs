//! gRPC through tonic: the layer in front of tonic's health service (no
//! code generation needed); a denied call gets `RESOURCE_EXHAUSTED`.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use support::clock;
use support::redis::RedisServer;
use tollgate::backend::Backend;
use tollgate::{Limiter, Policy, Strategy};
use tollgate_http::{GrpcMode, RateLimit};
use tonic::transport::server::TcpIncoming;
use tonic::transport::Channel;
use tonic::Code;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// Serves tonic's health service behind `config` on 127.0.0.1.
async fn serve<B: Backend>(config: RateLimit<B>) -> SocketAddr {
    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .layer(config.layer())
            .add_service(health)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap();
    });
    addr
}

async fn connect(addr: SocketAddr) -> HealthClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

async fn check(client: &mut HealthClient<Channel>) -> Result<tonic::Response<()>, tonic::Status> {
    client
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .map(|res| tonic::Response::from_parts(res.metadata().clone(), (), res.extensions().clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denied_calls_get_resource_exhausted() {
    let policy = Policy::new(Strategy::FixedWindow, 2, Duration::from_secs(10)).unwrap();
    let limiter = Limiter::builder().clock(clock()).policy(policy).build().unwrap();
    let addr = serve(RateLimit::new(limiter)).await;
    let mut client = connect(addr).await;

    for remaining in ["1", "0"] {
        let res = check(&mut client).await.expect("admitted");
        assert_eq!(res.metadata().get("ratelimit-remaining").unwrap(), remaining);
    }
    let status = check(&mut client).await.expect_err("denied");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(status.message(), "rate limit exceeded; retry after 8 s");
    assert_eq!(status.metadata().get("retry-after").unwrap(), "8");
}

/// A cost taken from call metadata: a malformed one is `INVALID_ARGUMENT`,
/// a cost above the limit `RESOURCE_EXHAUSTED` without `retry-after`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn costs_come_from_metadata() {
    let policy = Policy::new(Strategy::FixedWindow, 5, Duration::from_secs(10)).unwrap();
    let limiter = Limiter::builder().clock(clock()).policy(policy).build().unwrap();
    let addr = serve(RateLimit::new(limiter).cost_header("x-cost")).await;
    let mut client = connect(addr).await;
    let priced = |cost: &'static str| {
        let mut request = tonic::Request::new(HealthCheckRequest {
            service: String::new(),
        });
        request.metadata_mut().insert("x-cost", cost.parse().unwrap());
        request
    };

    let res = client.check(priced("3")).await.expect("admitted");
    assert_eq!(res.metadata().get("ratelimit-remaining").unwrap(), "2");
    let status = client.check(priced("three")).await.expect_err("refused");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "the x-cost header must be one decimal integer from 0 to 18446744073709551615; it holds \
         characters other than the digits 0 to 9"
    );
    let status = client.check(priced("6")).await.expect_err("denied");
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert!(status.metadata().get("retry-after").is_none());
    let res = client.check(priced("2")).await.expect("admitted");
    assert_eq!(res.metadata().get("ratelimit-remaining").unwrap(), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_backend_is_unavailable() {
    let mut redis = RedisServer::start();
    let backend = support::redis::backend(&redis.url()).await;
    let limiter = Limiter::builder()
        .backend(backend)
        .limit(100)
        .window(Duration::from_secs(60))
        .build()
        .unwrap();
    let addr = serve(RateLimit::new(limiter)).await;
    let mut client = connect(addr).await;
    check(&mut client).await.expect("admitted while Redis is up");
    redis.kill();
    let status = check(&mut client).await.expect_err("fails closed");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(status.message(), "rate limiter unavailable");
    assert!(status.metadata().get("ratelimit-limit").is_none());
}

/// A service that only speaks gRPC can say so, whatever the content type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_replies_can_be_forced() {
    let policy = Policy::new(Strategy::FixedWindow, 1, Duration::from_secs(10)).unwrap();
    let limiter = Limiter::builder().clock(clock()).policy(policy).build().unwrap();
    let config = RateLimit::new(limiter).grpc(GrpcMode::Always);
    let server = support::apps::start(support::apps::Stack::Axum, config).await;
    let c = support::client();
    assert_eq!(
        c.get(support::url(server.addr, "/"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let res = c.get(support::url(server.addr, "/")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(
        support::header(&res, "content-type").as_deref(),
        Some("application/grpc")
    );
    assert_eq!(support::header(&res, "grpc-status").as_deref(), Some("8"));
    assert_eq!(support::header(&res, "retry-after").as_deref(), Some("8"));
}
