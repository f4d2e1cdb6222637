//! The middleware factory: wraps a service in a [`RateLimitService`].

use std::future::{ready, Ready};

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::Error;

use super::service::RateLimitService;
use crate::rate_limit::RateLimit;
use tollgate::backend::Backend;
use tollgate::MemoryBackend;

/// An actix-web middleware that rate-limits requests; made with
/// [`RateLimitMiddleware::new`] or [`RateLimit::actix`], added with
/// `App::wrap` or `Scope::wrap`.
pub struct RateLimitMiddleware<B: Backend = MemoryBackend> {
    config: RateLimit<B>,
}

impl<B: Backend> RateLimitMiddleware<B> {
    /// A middleware limiting requests as `config` says.
    pub fn new(config: RateLimit<B>) -> Self {
        Self { config }
    }
}

impl<B: Backend> Clone for RateLimitMiddleware<B> {
    fn clone(&self) -> Self {
        Self {
            config: self.config.clone(),
        }
    }
}

impl<B: Backend> std::fmt::Debug for RateLimitMiddleware<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RateLimitMiddleware").field(&self.config).finish()
    }
}

impl<B: Backend> RateLimit<B> {
    /// This configuration as an actix-web middleware:
    /// [`RateLimitMiddleware::new`].
    pub fn actix(self) -> RateLimitMiddleware<B> {
        RateLimitMiddleware::new(self)
    }
}

impl<S, Body, B> Transform<S, ServiceRequest> for RateLimitMiddleware<B>
where
    S: Service<ServiceRequest, Response = ServiceResponse<Body>, Error = Error> + 'static,
    Body: MessageBody + 'static,
    B: Backend,
{
    type Response = ServiceResponse<EitherBody<Body>>;
    type Error = Error;
    type Transform = RateLimitService<S, B>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RateLimitService::new(service, self.config.clone())))
    }
}
