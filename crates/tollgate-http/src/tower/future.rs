//! The response future of [`RateLimitService`](super::RateLimitService).

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http::Response;
use pin_project_lite::pin_project;

use super::body::ReplyBody;
use super::settle::AfterResponse;
use crate::headers::RateHeaders;
use crate::reply::Reply;

/// A boxed future, for requests whose decision must be awaited.
type Awaited<B, E> = Pin<Box<dyn Future<Output = Result<Response<B>, E>> + Send>>;

pin_project! {
    /// The future of [`RateLimitService`](super::RateLimitService): the
    /// inner service's future with the rate-limit headers to add, a reply
    /// sent instead, or (for a limiter that must be waited for, such as one
    /// on Redis) a boxed future that decides, then calls the service.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: Kind<F, B, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B, E> {
        Allowed { #[pin] future: F, headers: RateHeaders, after: Option<Box<dyn AfterResponse>> },
        Replied { reply: Option<Reply> },
        Awaited { future: Awaited<B, E> },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    /// The inner service's response, with `headers` added, after `after`
    /// has run on it.
    pub(crate) fn allowed(future: F, headers: RateHeaders, after: Option<Box<dyn AfterResponse>>) -> Self {
        Self {
            kind: Kind::Allowed {
                future,
                headers,
                after,
            },
        }
    }

    /// `reply`, without calling the inner service.
    pub(crate) fn replied(reply: Reply) -> Self {
        Self {
            kind: Kind::Replied { reply: Some(reply) },
        }
    }

    /// Whatever `future` answers.
    pub(crate) fn awaited(future: Awaited<B, E>) -> Self {
        Self {
            kind: Kind::Awaited { future },
        }
    }
}

impl<F, B, E> std::fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match &self.kind {
            Kind::Allowed { .. } => "ResponseFuture::Allowed",
            Kind::Replied { .. } => "ResponseFuture::Replied",
            Kind::Awaited { .. } => "ResponseFuture::Awaited",
        })
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: ReplyBody,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Allowed {
                future,
                headers,
                after,
            } => {
                let mut response = ready!(future.poll(cx))?;
                if let Some(after) = after.take() {
                    after.run(response.status(), response.headers_mut());
                }
                std::mem::take(headers).write_to(response.headers_mut());
                Poll::Ready(Ok(response))
            }
            KindProj::Replied { reply } => {
                let reply = reply.take().expect("ResponseFuture polled after completion");
                Poll::Ready(Ok(reply_response(reply)))
            }
            KindProj::Awaited { future } => future.as_mut().poll(cx),
        }
    }
}

/// The response for a reply.
pub(crate) fn reply_response<B: ReplyBody>(reply: Reply) -> Response<B> {
    let (status, headers, body) = reply.into_parts();
    let mut response = Response::new(B::from_reply(body));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}
