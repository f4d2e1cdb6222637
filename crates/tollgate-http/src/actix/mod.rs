//! The actix-web 4 middleware: a [`RateLimitMiddleware`] that wraps
//! services in a [`RateLimitService`].
//!
//! ```
//! use std::time::Duration;
//! use actix_web::{web, App, HttpResponse};
//! use tollgate::Limiter;
//! use tollgate_http::actix::RateLimitMiddleware;
//! use tollgate_http::RateLimit;
//!
//! let limiter = Limiter::builder().limit(10).window(Duration::from_secs(1)).build()?;
//! let middleware = RateLimitMiddleware::new(RateLimit::new(limiter));
//! let app = App::new()
//!     .wrap(middleware)
//!     .route("/", web::get().to(HttpResponse::Ok));
//! # let _ = app;
//! # Ok::<(), tollgate::Error>(())
//! ```
//!
//! actix-web records the peer address of every connection, and resolves the
//! route template (`match_pattern()`) even in an `App`-wide middleware.

mod body;
mod middleware;
mod request;
mod response;
mod service;

pub use middleware::RateLimitMiddleware;
pub use service::{RateLimitService, ResponseFuture};
