//! The service: decide, then call the inner service or reply.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_service::Service;

use super::body::RateLimitBody;
use crate::core::{Core, Verdict};
use crate::limits::Limits;
use crate::request::RequestInfo;

/// The future of [`RateLimitService`].
pub type ResponseFuture<B, E> = Pin<Box<dyn Future<Output = Result<Response<RateLimitBody<B>>, E>> + Send>>;

/// A service that rate-limits requests before passing them to `S`.
pub struct RateLimitService<S, L> {
    inner: S,
    core: Arc<Core<L>>,
}

impl<S, L> RateLimitService<S, L> {
    pub(crate) fn new(inner: S, core: Arc<Core<L>>) -> Self {
        Self { inner, core }
    }
}

impl<S: Clone, L> Clone for RateLimitService<S, L> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            core: self.core.clone(),
        }
    }
}

impl<S: std::fmt::Debug, L> std::fmt::Debug for RateLimitService<S, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitService")
            .field("inner", &self.inner)
            .field("config", &self.core)
            .finish()
    }
}

impl<S, L, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimitService<S, L>
where
    L: Limits,
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<RateLimitBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // The instance that was polled ready serves this request.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let core = self.core.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            // The request view is dropped before the await: only the key
            // and resource, borrowed from `parts`, are held across it.
            let prepared = core.prepare(&RequestInfo::from_http(&parts));
            let verdict = match prepared {
                Ok(prepared) => core.decide(&prepared).await,
                Err(reply) => Verdict::Reply(*reply),
            };
            match verdict {
                Verdict::Allow(headers) => {
                    let mut response = inner.call(Request::from_parts(parts, body)).await?;
                    headers.write_to(response.headers_mut());
                    Ok(response.map(RateLimitBody::inner))
                }
                Verdict::Reply(reply) => {
                    let (status, headers, body) = reply.into_parts();
                    let mut response = Response::new(RateLimitBody::reply(body));
                    *response.status_mut() = status;
                    *response.headers_mut() = headers;
                    Ok(response)
                }
            }
        })
    }
}
