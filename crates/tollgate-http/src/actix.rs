//! The actix-web 4 middleware.
//!
//! ```
//! use std::time::Duration;
//! use actix_web::{web, App, HttpResponse};
//! use tollgate::Limiter;
//! use tollgate_http::RateLimit;
//!
//! let limiter = Limiter::builder().limit(10).window(Duration::from_secs(1)).build()?;
//! let middleware = RateLimit::new(limiter).actix();
//! let app = App::new()
//!     .wrap(middleware)
//!     .route("/", web::get().to(HttpResponse::Ok));
//! # let _ = app;
//! # Ok::<(), tollgate::Error>(())
//! ```
//!
//! actix-web records the peer address of every connection, and resolves the
//! route template (`match_pattern()`) even in an `App`-wide middleware.

use std::future::{ready, Future, Ready};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{forward_ready, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{Error, HttpResponse};

use crate::config::RateLimit;
use crate::core::{Core, Verdict};
use crate::headers::{FieldValue, RateHeaders};
use crate::limits::Limits;
use crate::reply::Reply;
use crate::request::RequestInfo;

/// An actix-web middleware that rate-limits requests; build it with
/// [`RateLimit::actix`] and add it with `App::wrap` or `Scope::wrap`.
pub struct RateLimitMiddleware<L> {
    core: Arc<Core<L>>,
}

impl<L> Clone for RateLimitMiddleware<L> {
    fn clone(&self) -> Self {
        Self {
            core: self.core.clone(),
        }
    }
}

impl<L> std::fmt::Debug for RateLimitMiddleware<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RateLimitMiddleware").field(&self.core).finish()
    }
}

impl<L: Limits> RateLimit<L> {
    /// This configuration as an actix-web middleware.
    pub fn actix(self) -> RateLimitMiddleware<L> {
        RateLimitMiddleware {
            core: self.into_core(),
        }
    }
}

impl<S, B, L> Transform<S, ServiceRequest> for RateLimitMiddleware<L>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
    L: Limits,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = Error;
    type Transform = RateLimitService<S, L>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RateLimitService {
            service: Rc::new(service),
            core: self.core.clone(),
        }))
    }
}

/// The service built by [`RateLimitMiddleware`].
pub struct RateLimitService<S, L> {
    service: Rc<S>,
    core: Arc<Core<L>>,
}

impl<S, L> std::fmt::Debug for RateLimitService<S, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitService")
            .field("config", &self.core)
            .finish_non_exhaustive()
    }
}

/// The future of [`RateLimitService`].
pub type ResponseFuture<B> = Pin<Box<dyn Future<Output = Result<ServiceResponse<EitherBody<B>>, Error>>>>;

impl<S, B, L> Service<ServiceRequest> for RateLimitService<S, L>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: MessageBody + 'static,
    L: Limits,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = Error;
    type Future = ResponseFuture<B>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let service = Rc::clone(&self.service);
        let core = self.core.clone();
        Box::pin(async move {
            let verdict = match core.prepare(&RequestInfo::from_actix(&req)) {
                Ok(prepared) => core.decide(&prepared).await,
                Err(reply) => Verdict::Reply(*reply),
            };
            match verdict {
                Verdict::Allow(headers) => {
                    let mut response = service.call(req).await?;
                    write_headers(headers, response.headers_mut());
                    Ok(response.map_into_left_body())
                }
                Verdict::Reply(reply) => Ok(req.into_response(to_response(reply)).map_into_right_body()),
            }
        })
    }
}

/// Sets the rate-limit headers on an actix-web header map.
fn write_headers(headers: RateHeaders, map: &mut HeaderMap) {
    for (field, value) in headers.into_fields() {
        let value = match value {
            FieldValue::Int(n) => HeaderValue::from(n),
            FieldValue::Text(text) => match HeaderValue::from_str(&text) {
                Ok(value) => value,
                Err(_) => continue,
            },
        };
        map.insert(HeaderName::from_static(field.name()), value);
    }
}

/// An actix-web response for a reply (actix-web uses its own `http` types).
fn to_response(reply: Reply) -> HttpResponse {
    let (status, headers, body) = reply.into_parts();
    let status = StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::with_body(status, body);
    let map = response.headers_mut();
    for (name, value) in &headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_str().as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) {
            map.append(name, value);
        }
    }
    response.map_into_boxed_body()
}
