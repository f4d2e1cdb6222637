//! The tower [`Layer`](tower_layer::Layer), for hyper 1, axum 0.8 and tonic.
//!
//! ```
//! # #[cfg(feature = "axum")] {
//! use std::net::SocketAddr;
//! use std::time::Duration;
//! use axum::{routing::get, Router};
//! use tollgate::Limiter;
//! use tollgate_http::RateLimit;
//!
//! let limiter = Limiter::builder().limit(10).window(Duration::from_secs(1)).build()?;
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimit::new(limiter).layer());
//! // Serve with the peer address recorded, so requests can be keyed by it:
//! let make_service = app.into_make_service_with_connect_info::<SocketAddr>();
//! # let _ = make_service;
//! # }
//! # Ok::<(), tollgate::Error>(())
//! ```
//!
//! For a plain hyper server, insert a [`PeerAddr`] into each request's
//! extensions (axum's `ConnectInfo<SocketAddr>` and tonic's
//! `TcpConnectInfo` are read too, with features `axum` and `tonic`).

mod body;
mod layer;
mod service;

use std::net::SocketAddr;

pub use body::RateLimitBody;
pub use layer::RateLimitLayer;
pub use service::{RateLimitService, ResponseFuture};

/// The address of a request's peer, as a request extension, for servers
/// that do not record one themselves (such as a hand-written hyper accept
/// loop).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

/// The peer address recorded in `ext`.
pub(crate) fn peer_addr(ext: &http::Extensions) -> Option<SocketAddr> {
    if let Some(PeerAddr(addr)) = ext.get::<PeerAddr>() {
        return Some(*addr);
    }
    #[cfg(feature = "axum")]
    if let Some(info) = ext.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(info.0);
    }
    #[cfg(feature = "tonic")]
    if let Some(info) = ext.get::<tonic::transport::server::TcpConnectInfo>() {
        return info.remote_addr();
    }
    None
}

/// The route template recorded in `ext` by a router.
#[allow(unused_variables)]
pub(crate) fn matched_path(ext: &http::Extensions) -> Option<&str> {
    #[cfg(feature = "axum")]
    if let Some(path) = ext.get::<axum::extract::MatchedPath>() {
        return Some(path.as_str());
    }
    None
}
