//! # tollgate-http
//!
//! HTTP middleware for [`tollgate`]: a tower `Layer` for hyper 1, axum 0.8
//! and tonic services (feature `tower`, on by default through `axum`), and
//! an actix-web 4 middleware (feature `actix`). Both are built from one
//! [`RateLimit`] configuration and share everything that is not specific to
//! a framework: how a key and a resource are taken from a request, how a
//! decision becomes headers and how a denial, a backend error or a missing
//! key becomes a response.
//!
//! ```
//! # #[cfg(feature = "axum")] {
//! use std::time::Duration;
//! use axum::{routing::get, Router};
//! use tollgate::{Policy, ResourceLimiter, Strategy};
//! use tollgate_http::{HeaderMode, KeyExtractor, RateLimit};
//!
//! let limiter = ResourceLimiter::builder()
//!     .default_policy(Policy::new(Strategy::SlidingWindow, 100, Duration::from_secs(60))?)
//!     .resource("/", Policy::new(Strategy::FixedWindow, 5, Duration::from_secs(10))?)
//!     .build()?;
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .route("/users/{id}", get(|| async { "a user" }))
//!     // `Router::layer` runs the limiter after routing, so it sees the
//!     // matched route template (`/users/{id}`), not the raw path.
//!     .layer(
//!         RateLimit::new(limiter)
//!             .key(KeyExtractor::peer_ip())
//!             .headers(HeaderMode::RateLimit)
//!             .layer(),
//!     );
//! # }
//! # Ok::<(), tollgate::Error>(())
//! ```
//!
//! ## Keys, resources, headers, responses
//!
//! - [`KeyExtractor`]: whom a limit applies to: the peer address, the client
//!   address behind trusted proxies ([`ClientIp`]), a request header (an API
//!   key), the path, or any closure. IPv6 addresses are grouped by prefix
//!   ([`IpGrouping`], /64 by default). When no key can be taken,
//!   [`MissingKey`] says whether to reject the request or fall back to the
//!   peer address.
//! - [`ResourceExtractor`]: which policy of a
//!   [`ResourceLimiter`](tollgate::ResourceLimiter) applies: the matched route
//!   template (axum's `MatchedPath`, actix-web's `match_pattern()`), the
//!   method, or any closure.
//! - [`HeaderMode`]: `RateLimit-Limit/Remaining/Reset` (the default), the
//!   IETF draft's structured `RateLimit-Policy`/`RateLimit` fields, the legacy
//!   `X-RateLimit-*` fields, or none. `Retry-After` is always set on 429.
//! - [`Reply`]: the response sent instead of calling the service. Denials are
//!   429 (plain text, or `application/problem+json` with
//!   [`ReplyFormat::ProblemJson`]); a backend error under fail-closed is 503
//!   without rate-limit headers, and under fail-open the request passes,
//!   also without them (the decision is marked `fail_open`); a gRPC request gets a gRPC status instead
//!   (`RESOURCE_EXHAUSTED` for a denial). Each can be replaced with a handler.
//!
//! Allowed requests reach the inner service unchanged and its response body
//! is passed through as a stream.
//!
//! ## The middleware types
//!
//! In the shape of `tower-http`'s middleware: [`RateLimitLayer::new`] takes
//! a [`RateLimit`] and wraps services in a
//! [`tower::RateLimitService`] (with `new`, `get_ref`, `get_mut` and
//! `into_inner`), whose [`tower::ResponseFuture`] is pin-projected, not
//! boxed, for an in-memory limiter. Its responses keep the inner service's
//! body type, which writes replies through [`tower::ReplyBody`]; any other
//! body type can be wrapped in a [`tower::RateLimitBody`].
//! [`actix::RateLimitMiddleware`] is the
//! same for actix-web. Each framework lives in its own module; what they
//! share (the request view [`RequestInfo`], keys, resources, headers and
//! replies) knows no framework.
//!
//! ## `RateLimit` and `tower::limit::RateLimit`
//!
//! tower's own `tower::limit::RateLimit` is a different tool: it caps how
//! often the wrapped service is called as a whole (one budget for all
//! callers) by making `poll_ready` wait, so excess requests queue instead
//! of being answered. [`RateLimit`] here is a configuration, not a service:
//! it gives each client (each key) its own budget from a tollgate limiter,
//! in memory or shared through Redis, and answers requests over it at once
//! with a 429 (or a gRPC status) and rate-limit headers, without calling
//! the service. The two can be stacked: tower's to protect a backend's
//! total capacity, this one for fairness between clients.

#[cfg(not(any(feature = "tower", feature = "actix")))]
compile_error!("tollgate-http needs feature `tower` (hyper, axum, tonic), `axum`, `tonic` or `actix`");

mod client_ip;
mod decision_headers;
mod engine;
mod forwarded;
mod headers;
mod ip;
mod key;
mod key_error;
mod limits;
mod rate_limit;
mod reply;
mod reply_context;
mod request;
mod resource;

#[cfg(feature = "actix")]
pub mod actix;
#[cfg(feature = "tower")]
pub mod tower;

pub use client_ip::{ClientIp, ForwardedHeader, InvalidNetwork};
pub use decision_headers::write_decision_headers;
pub use headers::HeaderMode;
/// The `http` crate (version 1) whose types [`Reply`] is made of.
pub use http;
pub use ip::{IpGrouping, IpKey};
/// The network type of [`ClientIp::trust`], from the `ipnet` crate.
pub use ipnet::IpNet;
pub use key::{Key, KeyExtractor, MissingKey};
pub use key_error::{KeyError, KeyErrorKind};
pub use limits::Limits;
pub use rate_limit::RateLimit;
pub use reply::{GrpcMode, InvalidHeader, Reply};
pub use reply_context::{Denied, Failure, KeyRejected, ReplyContext, ReplyFormat};
pub use request::{HeaderValues, RequestInfo};
pub use resource::ResourceExtractor;

#[cfg(feature = "actix")]
pub use crate::actix::RateLimitMiddleware;
#[cfg(feature = "tower")]
pub use crate::tower::{PeerAddr, RateLimitLayer};
