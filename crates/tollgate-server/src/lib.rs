//! # tollgate-server
//!
//! A rate-limit decision service for any language and any proxy, over
//! [`tollgate`] limiters: the service only speaks protocols, every decision
//! is a [`tollgate::Limiter`]'s. `tollgate serve` runs it.
//!
//! ## HTTP (HTTP/1.1 and h2c on one listener)
//!
//! - `POST /v1/decide` with `{"resource": "login", "key": "user-1", "cost": 1}`
//!   (`resource` optional: the default policy, also for a resource the
//!   policy file does not name, as [`tollgate::Limiters`] does;
//!   `cost` optional: 1; 0 asks without charging) answers 200 with
//!   `{"allowed": true, "limit": 5, "remaining": 4, "reset_ms": 12000,
//!   "retry_after_ms": null, "policy": "login", "bound_by": 0, "strategy":
//!   "fixed_window", "window_ms": 60000, "fail_open": false, "fallback":
//!   false, "shadow_denied": false, "listed": null}`. Times are whole
//!   milliseconds rounded up; `shadow_denied` is [`tollgate::Decision`]'s,
//!   `listed` is `"exempt"`, `"deny"` or null. Fields may be added.
//!   A malformed body or field is 400 with `{"error": "...", "field":
//!   "cost"}` (`field` null when no field is at fault); a body over
//!   [`MAX_BODY_BYTES`] is 413; a store that fails closed is 503.
//! - `GET /v1/auth` for proxies' subrequests: `X-Tollgate-Key` (required),
//!   `X-Tollgate-Resource`, `X-Tollgate-Cost`; 204 with `RateLimit-*`
//!   headers when allowed, the deny status (429, or e.g. 403 for nginx)
//!   with `Retry-After` when denied, 400 for a missing key or a bad cost.
//! - `GET /healthz`, `GET /readyz` (the store answers a peek within a
//!   second), `GET /metrics` (Prometheus text: the library's metrics and
//!   the service's, see [`metrics`]).
//! - Admin routes, `GET /v1/policies` (every policy with its limits, and
//!   the Envoy domains), `GET /v1/top` (who is limited right now: the keys
//!   of one policy with the most denied requests, admitted units or
//!   shadow-denied requests over the last minute, or with `by=in_flight`
//!   the keys of a concurrency policy holding the most units) and the per-key operations `POST /v1/reset`
//!   `{"resource", "key"}`, `POST /v1/block` `{"resource", "key",
//!   "duration_ms"}`, `POST /v1/refund` and (an extension) `POST
//!   /v1/penalty` `{"resource", "key", "cost"}` ([`tollgate::Operation`]
//!   on every limit of the policy; `resource` optional: the default policy;
//!   `cost` optional: 1): 204 when applied, 400 naming the field, 503 when
//!   the store failed, 501 when it has no operations. They are open on a
//!   loopback listener; with an admin token file they need
//!   `Authorization: Bearer <token>` (the scheme in any case); the server
//!   refuses to start with them open on another address.
//! - The admin routes and `/v1/decide` refuse what a web page could send
//!   them: a body that is not `application/json` (415), a request from
//!   another origin (`Origin`, or `Sec-Fetch-Site`; 403), and on a
//!   token-less loopback listener a `Host` that is not `localhost` or a
//!   loopback address (421, against DNS rebinding).
//!
//! ## gRPC: Envoy's rate-limit service
//!
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`,
//! configured with Envoy's own YAML files (`domain`, nested `descriptors`);
//! see the `envoy` module docs of the service implementation for exactly
//! what is guaranteed when a request carries several descriptors.
//!
//! ## Connections
//!
//! Both listeners, HTTP and gRPC, serve their connections the same way.
//! An HTTP/1.1 request head must arrive within
//! [`DEFAULT_HEADER_READ_TIMEOUT`] of its first byte; a connection with
//! nothing in flight closes after [`DEFAULT_IDLE_TIMEOUT`] (on HTTP/2,
//! counted from its last request: pings keep nothing open); at most
//! [`DEFAULT_MAX_CONNECTIONS`] are open over both listeners (each settable
//! on [`ServerBuilder`]). When [`Server::run`]'s shutdown future completes,
//! the service drains: the listeners close, every request already received
//! is answered (HTTP/1.1 with `Connection: close`, HTTP/2 after GOAWAY),
//! and connections still open after [`DEFAULT_DRAIN_TIMEOUT`] are closed.
//!
//! ## Reloads
//!
//! `SIGHUP`, a change to a configuration file, or [`Reloader::reload`]
//! load every file again; a valid set replaces the old one atomically,
//! keeping the state of limits whose resource, policy and store are
//! unchanged; an invalid one is logged and the old set keeps serving. The
//! files are read, built and watched by `tollgate-config`
//! ([`tollgate_config::PolicySet`], [`tollgate_config::PolicySetWatcher`]);
//! the service keeps only its protocols.

// `pub` means reachable from outside the crate: an item that is not says
// `pub(crate)`.
#![warn(unreachable_pub)]

/// The service's routes called without a socket, for the fuzz targets. Not
/// public API: anything here may change or go away in any release.
#[doc(hidden)]
#[path = "in_process.rs"]
pub mod __in_process;
mod connection;
mod envoy;
mod error;
mod holders;
mod http;
mod in_flight;
mod listener;
pub mod metrics;
mod pending;
mod permit_token;
mod reload;
mod server;
mod shared;
mod state_file;
mod threads;

pub use error::ServerError;
pub use http::auth::{COST_HEADER, KEY_HEADER, RESOURCE_HEADER};
pub use http::decide::MAX_BODY_BYTES;
pub use http::health::READY_TIMEOUT;
pub use http::request_calendars::MAX_REQUEST_CALENDARS;
pub use reload::Reloader;
pub use server::{
    Server, ServerBuilder, DEFAULT_DRAIN_TIMEOUT, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_LISTEN, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_LIMIT_OVERRIDE,
};
pub use state_file::DEFAULT_STATE_INTERVAL;
pub use tollgate_http::HeaderMode;
