//! The middleware factory: wraps a service in a [`RateLimitService`].

use std::future::{ready, Ready};

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::Error;

use super::service::RateLimitService;
use crate::rate_limit::RateLimit;
use tollgate::Limits;

/// An actix-web middleware that rate-limits requests; made with
/// [`RateLimitMiddleware::new`] or [`RateLimit::actix`], added with
/// `App::wrap` or `Scope::wrap`.
pub struct RateLimitMiddleware<L> {
    config: RateLimit<L>,
}

impl<L> RateLimitMiddleware<L> {
    /// A middleware limiting requests as `config` says.
    pub fn new(config: RateLimit<L>) -> Self {
        Self { config }
    }
}

impl<L> Clone for RateLimitMiddleware<L> {
    fn clone(&self) -> Self {
        Self {
            config: self.config.clone(),
        }
    }
}

impl<L> std::fmt::Debug for RateLimitMiddleware<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RateLimitMiddleware").field(&self.config).finish()
    }
}

impl<L: Limits> RateLimit<L> {
    /// This configuration as an actix-web middleware:
    /// [`RateLimitMiddleware::new`].
    pub fn actix(self) -> RateLimitMiddleware<L> {
        RateLimitMiddleware::new(self)
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
        ready(Ok(RateLimitService::new(service, self.config.clone())))
    }
}
