//! The service's routes called without a socket. Not part of the API: the
//! fuzz targets drive `/v1/*` and Envoy's `ShouldRateLimit` through it, so
//! that what they meet is what a client over the network meets, every
//! guard, parser and handler included, at the speed of a function call.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Request};
use axum::Router;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use http_body_util::BodyExt;
use tower::ServiceExt;

use crate::envoy::service::EnvoyService;
use crate::Server;

/// The HTTP routes and the gRPC service of a bound [`Server`], callable
/// in-process.
#[derive(Clone, Debug)]
pub struct InProcess {
    http: Router,
    grpc: Router,
}

/// A response read to its end: its head, its body and its trailers (where
/// a gRPC status is, unless the response carries it in its head).
#[derive(Debug)]
pub struct Answer {
    /// The status line and the headers.
    pub head: axum::http::response::Parts,
    /// The whole body.
    pub body: Bytes,
    /// The trailers, when the body ended with some.
    pub trailers: Option<HeaderMap>,
}

impl InProcess {
    /// The routes `server` would serve on its HTTP and gRPC listeners
    /// (the gRPC service even when it has no gRPC listener).
    pub fn new(server: &Server) -> Self {
        let grpc = RateLimitServiceServer::new(EnvoyService {
            shared: server.shared.clone(),
        });
        Self {
            http: crate::http::router(server.shared.clone()),
            grpc: tonic::service::Routes::new(grpc).prepare().into_axum_router(),
        }
    }

    /// Answers `request` as the HTTP listener would.
    pub async fn http(&self, request: Request<Body>) -> Answer {
        answer(self.http.clone(), request).await
    }

    /// Answers `request` as the gRPC listener would.
    pub async fn grpc(&self, request: Request<Body>) -> Answer {
        answer(self.grpc.clone(), request).await
    }
}

async fn answer(router: Router, request: Request<Body>) -> Answer {
    let response = match router.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let (head, body) = response.into_parts();
    let collected = body.collect().await.expect("an in-memory body cannot fail");
    let trailers = collected.trailers().cloned();
    Answer {
        head,
        body: collected.to_bytes(),
        trailers,
    }
}
