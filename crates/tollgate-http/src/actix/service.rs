//! The service: decide, then call the inner service or reply.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use actix_web::body::{BoxBody, EitherBody, MessageBody};
use actix_web::dev::{forward_ready, Service, ServiceRequest, ServiceResponse};
use actix_web::Error;

use super::body::HoldingBody;
use super::response::{settle, to_response, write_headers};
use crate::engine::Verdict;
use crate::rate_limit::RateLimit;
use crate::request::RequestInfo;
use tollgate::backend::Backend;
use tollgate::MemoryBackend;

/// A service that rate-limits requests before passing them to `S`; made by
/// [`RateLimitMiddleware`](super::RateLimitMiddleware).
pub struct RateLimitService<S, B: Backend = MemoryBackend> {
    service: Rc<S>,
    config: RateLimit<B>,
}

impl<S, B: Backend> RateLimitService<S, B> {
    /// `service`, limited as `config` says.
    pub fn new(service: S, config: RateLimit<B>) -> Self {
        Self {
            service: Rc::new(service),
            config,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.service
    }

    /// The configuration.
    pub fn config(&self) -> &RateLimit<B> {
        &self.config
    }
}

impl<S, B: Backend> std::fmt::Debug for RateLimitService<S, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitService")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The future of [`RateLimitService`].
pub type ResponseFuture<B> = Pin<Box<dyn Future<Output = Result<ServiceResponse<EitherBody<B>>, Error>>>>;

impl<S, Body, B> Service<ServiceRequest> for RateLimitService<S, B>
where
    S: Service<ServiceRequest, Response = ServiceResponse<Body>, Error = Error> + 'static,
    Body: MessageBody + 'static,
    B: Backend,
{
    type Response = ServiceResponse<EitherBody<Body>>;
    type Error = Error;
    type Future = ResponseFuture<Body>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let service = Rc::clone(&self.service);
        let config = self.config.clone();
        Box::pin(async move {
            let engine = config.engine();
            if engine.skips(&RequestInfo::from_actix(&req)) {
                return Ok(service.call(req).await?.map_into_left_body());
            }
            let verdict = match engine.prepare(&RequestInfo::from_actix(&req)) {
                Ok(prepared) => {
                    engine
                        .verdict(&prepared, || RequestInfo::from_actix(&req).is_grpc())
                        .await
                }
                Err(reply) => Verdict::Reply(*reply),
            };
            match verdict {
                Verdict::Allow(headers, charge, held) => {
                    // A permit is held through the service's call (dropped
                    // with this future) and then by the response body.
                    let mut response = service.call(req).await?;
                    if engine.reads_response(charge.as_deref()) {
                        settle(engine, charge.as_deref(), &mut response).await;
                    }
                    write_headers(headers, response.headers_mut());
                    Ok(match held {
                        Some(permit) => response.map_body(|_, body| {
                            EitherBody::right(BoxBody::new(HoldingBody::new(body, permit)))
                        }),
                        None => response.map_into_left_body(),
                    })
                }
                Verdict::Reply(reply) => Ok(req.into_response(to_response(reply)).map_into_right_body()),
            }
        })
    }
}
