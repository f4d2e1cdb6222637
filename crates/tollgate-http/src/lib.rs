//! # tollgate-http
//!
//! HTTP middleware for [`tollgate`]: a tower `Layer` for hyper 1, axum 0.8
//! and tonic services (feature `tower`, on by default through `axum`), and
//! an actix-web 4 middleware (feature `actix`). Both are built from one
//! [`RateLimit`] configuration and share everything that is not specific to
//! a framework: how a key, a resource and a cost are taken from a request,
//! how a decision becomes headers and how a denial, a backend error, a
//! missing key or a malformed cost becomes a response.
//!
//! ```
//! # #[cfg(feature = "axum")] {
//! use std::time::Duration;
//! use axum::{routing::get, Router};
//! use tollgate::{Limiters, Policy, Strategy};
//! use tollgate_http::{HeaderMode, KeyExtractor, RateLimit};
//!
//! let limiters = Limiters::builder()
//!     .default_policy(Policy::new(Strategy::SlidingWindow, 100, Duration::from_secs(60))?)
//!     .resource("/", Policy::new(Strategy::FixedWindow, 5, Duration::from_secs(10))?)
//!     .build()?;
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .route("/users/{id}", get(|| async { "a user" }))
//!     // `Router::layer` runs the limiter after routing, so it sees the
//!     // matched route template (`/users/{id}`), not the raw path.
//!     .layer(
//!         RateLimit::new(limiters)
//!             .key(KeyExtractor::peer_ip())
//!             .headers(HeaderMode::RateLimit)
//!             .layer(),
//!     );
//! # }
//! # Ok::<(), tollgate::Error>(())
//! ```
//!
//! ## Keys, resources, costs, headers, responses
//!
//! - [`KeyExtractor`]: whom a limit applies to: the peer address, the client
//!   address behind trusted proxies ([`ClientIp`]), a request header (an API
//!   key), the path, or any closure. IPv6 addresses are grouped by prefix
//!   ([`IpGrouping`], /64 by default). When no key can be taken,
//!   [`MissingKey`] says whether to reject the request or fall back to the
//!   peer address.
//! - [`ResourceExtractor`]: which policy of a [`Limiters`](tollgate::Limiters)
//!   set applies: the matched route template (axum's `MatchedPath`, actix-web's `match_pattern()`), the
//!   method, or any closure. A policy may hold several limits (a burst
//!   limit and an hourly one, see [`tollgate::Policy::compound`]): a
//!   request passes only if every limit admits it.
//! - The cost of a request, in units of the limits (1 unless set): a
//!   constant ([`RateLimit::cost`], per route by giving a route a
//!   configuration of its own), a number from a request header
//!   ([`RateLimit::cost_header`]) or any closure over the request
//!   ([`RateLimit::cost_fn`]: an upload's size, a query's complexity). A
//!   malformed cost header or a closure's [`CostError`] is answered 400,
//!   never charged. A cost of 0 is a peek (decided, charged nothing); a cost
//!   above a limit is denied with 429 and no `Retry-After`.
//! - A cost known only from the response: [`RateLimit::no_charge_when`]
//!   refunds a request whose response status a predicate picks (5xx with
//!   [`RateLimit::no_charge_on_server_errors`]);
//!   [`RateLimit::cost_from_response_header`] settles the up-front charge
//!   against the actual cost the service reports, with a penalty or a
//!   refund. What was settled, failed or could not be read is counted in
//!   [`RateLimit::adjustments`].
//! - A concurrency policy ([`Strategy::Concurrency`](tollgate::Strategy::Concurrency),
//!   requests in flight): an admitted request holds a permit of its cost
//!   ([`Limiter::acquire_permit`](tollgate::Limiter::acquire_permit)) from
//!   its admission until its response body ends, so that a streamed
//!   response holds its slot until its last chunk; a request dropped
//!   before its response (a client gone, a panic, a timeout) frees it too.
//!   A request finding no slot is denied with 429 and `Retry-After`, or
//!   waits for one with [`RateLimit::delay`]. With the tower layer, the
//!   response body type keeps the permit ([`tower::ReplyBody::hold_permit`]).
//!   A resource that combines rates with a concurrency limit
//!   ([`Resource::in_flight`](tollgate::Resource::in_flight)) needs both:
//!   the permit is acquired first (a request finding no slot charges the
//!   rates nothing), then the rates decide at once, and their denial
//!   releases the permit before the 429; `Retry-After` is that of the part
//!   that denied, the `RateLimit` headers the rates'.
//! - [`Skip`]: requests that bypass the limiter (health checks), with no
//!   decision, no charge and no headers ([`RateLimit::skip`],
//!   [`RateLimit::skip_if`]).
//! - [`HeaderMode`]: `RateLimit-Limit/Remaining/Reset` (the default), the
//!   IETF draft's structured `RateLimit-Policy`/`RateLimit` fields, the legacy
//!   `X-RateLimit-*` fields, or none. They describe the limit that bound the
//!   decision; `RateLimit-Policy` lists every limit of a compound policy
//!   (`"api[0]";q=10;w=1, "api[1]";q=1000;w=3600`) and `RateLimit` names the
//!   binding one (`"api[1]";r=0;t=3`). A 429 carries `Retry-After`, unless
//!   no delay can admit the request (its cost exceeds a limit).
//! - [`Reply`]: the response sent instead of calling the service. Denials are
//!   429 (plain text, or `application/problem+json` with
//!   [`ReplyFormat::ProblemJson`]); a backend error under fail-closed is 503
//!   without rate-limit headers, and under fail-open the request passes,
//!   also without them (the decision is marked `fail_open`); a gRPC request
//!   gets a gRPC status instead (`RESOURCE_EXHAUSTED` for a denial,
//!   `INVALID_ARGUMENT` for a missing key or a malformed cost). Each can be
//!   replaced with a handler.
//!
//! A burst limit and an hourly limit on every client, and a route whose
//! requests cost 5 from the same budget (a configuration of its own, on
//! that route alone):
//!
//! ```
//! # #[cfg(feature = "axum")] {
//! use std::time::Duration;
//! use axum::{routing::{get, post}, Router};
//! use tollgate::{Limit, Limiter, Policy, Strategy};
//! use tollgate_http::{HeaderMode, RateLimit};
//!
//! let policy = Policy::compound([
//!     Limit::new(Strategy::TokenBucket, 10, Duration::from_secs(1))?,
//!     Limit::new(Strategy::SlidingWindow, 1_000, Duration::from_secs(3_600))?,
//! ])?;
//! let rate_limit = RateLimit::new(Limiter::builder().policy(policy).build()?)
//!     .headers(HeaderMode::IetfDraft);
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }).layer(rate_limit.clone().layer()))
//!     .route("/reports", post(|| async { "a report" }).layer(rate_limit.cost(5).layer()));
//! // RateLimit-Policy: "default[0]";q=10;w=1, "default[1]";q=1000;w=3600
//! # }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
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
//! boxed, for a backend that decides at once
//! ([`Limiter::decides_now`](tollgate::Limiter::decides_now): in memory,
//! whatever its type). Its responses keep the inner service's
//! body type, which writes replies through [`tower::ReplyBody`]; any other
//! body type can be wrapped in a [`tower::RateLimitBody`].
//! [`actix::RateLimitMiddleware`] is the
//! same for actix-web. Each framework lives in its own module; what they
//! share (the request view [`RequestInfo`], keys, resources, costs, headers
//! and replies) knows no framework.
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

// `pub` means reachable from outside the crate: an item that is not says
// `pub(crate)`.
#![warn(unreachable_pub)]

#[cfg(not(any(feature = "tower", feature = "actix")))]
compile_error!("tollgate-http needs feature `tower` (hyper, axum, tonic), `axum`, `tonic` or `actix`");

mod client_ip;
mod cost;
mod cost_error;
mod decision_headers;
mod engine;
mod forwarded;
mod headers;
mod in_flight;
mod ip;
mod key;
mod key_error;
mod rate_limit;
mod reply;
mod reply_context;
mod request;
mod resource;
mod response_cost;
mod skip;

#[cfg(feature = "actix")]
pub mod actix;
#[cfg(feature = "tower")]
pub mod tower;

pub use client_ip::{ClientIp, ForwardedHeader, InvalidNetwork};
pub use cost::parse_cost;
pub use cost_error::CostError;
pub use decision_headers::write_decision_headers;
pub use headers::HeaderMode;
/// The `http` crate (version 1) whose types [`Reply`] is made of.
pub use http;
pub use ip::{IpGrouping, IpKey};
/// The network type of [`ClientIp::trust`], from the `ipnet` crate.
pub use ipnet::IpNet;
pub use key::{Key, KeyExtractor, MissingKey};
pub use key_error::{KeyError, KeyErrorKind};
pub use rate_limit::RateLimit;
pub use reply::{GrpcMode, InvalidHeader, Reply};
pub use reply_context::{CostRejected, Denied, Failure, KeyRejected, ReplyContext, ReplyFormat};
pub use request::{HeaderValues, RequestInfo};
pub use resource::ResourceExtractor;
pub use response_cost::Adjustments;
pub use skip::Skip;

#[cfg(feature = "actix")]
pub use crate::actix::RateLimitMiddleware;
#[cfg(feature = "tower")]
pub use crate::tower::{PeerAddr, RateLimitLayer};
