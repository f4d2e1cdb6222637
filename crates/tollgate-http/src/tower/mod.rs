//! The tower middleware, for hyper 1, axum 0.8 and tonic: a
//! [`RateLimitLayer`] that wraps services in a [`RateLimitService`], whose
//! [`ResponseFuture`] answers with the inner service's own body type: one
//! that can also carry a reply ([`ReplyBody`]), or the inner body wrapped
//! in a [`RateLimitBody`].
//!
//! ```
//! # #[cfg(feature = "axum")] {
//! use std::net::SocketAddr;
//! use std::time::Duration;
//! use axum::{routing::get, Router};
//! use tollgate::Limiter;
//! use tollgate_http::{RateLimit, RateLimitLayer};
//!
//! let limiter = Limiter::builder().limit(10).window(Duration::from_secs(1)).build()?;
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::new(RateLimit::new(limiter)));
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
mod future;
mod layer;
mod request;
mod service;
mod settle;

pub use crate::in_flight::HeldPermit;
pub use body::{RateLimitBody, ReplyBody};
pub use future::ResponseFuture;
pub use layer::RateLimitLayer;
pub use request::PeerAddr;
pub use service::RateLimitService;
