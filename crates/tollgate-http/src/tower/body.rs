//! Response bodies: [`ReplyBody`], the body types a reply can be written
//! in, and [`RateLimitBody`], a wrapper that gives any body that ability.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::in_flight::HeldPermit;

/// A response body type that can also carry the body of a reply (a 429,
/// a 503, a gRPC status), so that [`RateLimitService`](super::RateLimitService)
/// answers with the inner service's own body type, and the response body
/// passes through the layer untouched: no wrapper, no boxing by a router
/// that expects its own body type (axum's `Router::layer` boxes any other).
///
/// Implemented for axum's and tonic's bodies (features `axum`, `tonic`),
/// for `http_body_util`'s `Full<Bytes>`, `BoxBody<Bytes, E>` and
/// `UnsyncBoxBody<Bytes, E>`, and for [`RateLimitBody`]. A service whose
/// body type has no implementation can have one written for it:
///
/// ```
/// use bytes::Bytes;
/// use tollgate_http::tower::ReplyBody;
///
/// /// A service's own body type.
/// struct MyBody(Bytes);
///
/// impl ReplyBody for MyBody {
///     fn from_reply(bytes: Bytes) -> Self {
///         MyBody(bytes)
///     }
/// }
/// ```
///
/// or, for a body type from another crate, map the service's responses to
/// a [`RateLimitBody`] before the layer, with
/// `ServiceBuilder::new().layer(rate_limit).map_response(|res: http::Response<B>| res.map(RateLimitBody::new))`.
pub trait ReplyBody: Sized {
    /// A body holding the bytes of a reply (empty for a gRPC status).
    fn from_reply(bytes: Bytes) -> Self;

    /// This body, keeping `permit` (a slot of a concurrency policy, see
    /// [`RateLimit`](crate::RateLimit)) until its last frame has been
    /// polled, an error, or its drop, so that a streamed response holds
    /// its slot until it ends.
    ///
    /// The default drops `permit` at once: for a body type that cannot
    /// carry it, the slot is freed when the inner service's response is
    /// returned, before its body is sent (right for a body already in
    /// memory, such as `Full<Bytes>`). axum's, tonic's, the boxed bodies
    /// and [`RateLimitBody`] keep it.
    fn hold_permit(self, permit: HeldPermit) -> Self {
        drop(permit);
        self
    }
}

#[cfg(feature = "axum")]
impl ReplyBody for axum::body::Body {
    fn from_reply(bytes: Bytes) -> Self {
        axum::body::Body::from(bytes)
    }

    fn hold_permit(self, permit: HeldPermit) -> Self {
        axum::body::Body::new(HoldingBody::new(self, permit))
    }
}

#[cfg(feature = "tonic")]
impl ReplyBody for tonic::body::Body {
    fn from_reply(bytes: Bytes) -> Self {
        if bytes.is_empty() {
            tonic::body::Body::empty()
        } else {
            tonic::body::Body::new(http_body_util::Full::new(bytes))
        }
    }

    fn hold_permit(self, permit: HeldPermit) -> Self {
        tonic::body::Body::new(HoldingBody::new(self, permit))
    }
}

impl ReplyBody for http_body_util::Full<Bytes> {
    fn from_reply(bytes: Bytes) -> Self {
        http_body_util::Full::new(bytes)
    }
}

impl<E: 'static> ReplyBody for http_body_util::combinators::BoxBody<Bytes, E> {
    fn from_reply(bytes: Bytes) -> Self {
        http_body_util::combinators::BoxBody::new(ReplyBytes::new(bytes))
    }

    fn hold_permit(self, permit: HeldPermit) -> Self {
        http_body_util::combinators::BoxBody::new(HoldingBody::new(self, permit))
    }
}

impl<E: 'static> ReplyBody for http_body_util::combinators::UnsyncBoxBody<Bytes, E> {
    fn from_reply(bytes: Bytes) -> Self {
        http_body_util::combinators::UnsyncBoxBody::new(ReplyBytes::new(bytes))
    }

    fn hold_permit(self, permit: HeldPermit) -> Self {
        http_body_util::combinators::UnsyncBoxBody::new(HoldingBody::new(self, permit))
    }
}

impl<B> ReplyBody for RateLimitBody<B> {
    fn from_reply(bytes: Bytes) -> Self {
        Self {
            kind: Kind::Reply {
                reply: ReplyBytes::new(bytes),
            },
        }
    }

    fn hold_permit(self, permit: HeldPermit) -> Self {
        let kind = match self.kind {
            Kind::Inner { body } => Kind::Held {
                body: HoldingBody::new(body, permit),
            },
            // A second middleware's permit, held with the first.
            Kind::Held { mut body } => {
                body.permit = Some(match body.permit.take() {
                    Some(first) => first.join(permit),
                    None => permit,
                });
                Kind::Held { body }
            }
            // A reply is in memory: nothing is left to hold the slot for.
            reply @ Kind::Reply { .. } => reply,
        };
        Self { kind }
    }
}

pin_project! {
    /// A body that keeps a permit of requests in flight until its last
    /// frame, an error, or its drop.
    struct HoldingBody<B> {
        #[pin]
        body: B,
        permit: Option<HeldPermit>,
    }
}

impl<B> HoldingBody<B> {
    fn new(body: B, permit: HeldPermit) -> Self {
        Self {
            body,
            permit: Some(permit),
        }
    }
}

impl<B: Body> Body for HoldingBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let frame = ready!(this.body.as_mut().poll_frame(cx));
        // The end, an error, or the last frame: the request is over, and
        // its slot is freed before the server writes that frame.
        if !matches!(frame, Some(Ok(_))) || this.body.is_end_stream() {
            this.permit.take();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The bytes of a reply as a body of one frame, with whatever error type
/// the body it stands in for has (it never fails).
struct ReplyBytes<E> {
    data: Option<Bytes>,
    error: std::marker::PhantomData<fn() -> E>,
}

impl<E> ReplyBytes<E> {
    fn new(data: Bytes) -> Self {
        Self {
            data: (!data.is_empty()).then_some(data),
            error: std::marker::PhantomData,
        }
    }

    fn take_frame<D: From<Bytes>>(&mut self) -> Option<Frame<D>> {
        self.data.take().map(|d| Frame::data(d.into()))
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
}

impl<E> Body for ReplyBytes<E> {
    type Data = Bytes;
    type Error = E;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, E>>> {
        Poll::Ready(self.take_frame().map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        ReplyBytes::size_hint(self)
    }
}

pin_project! {
    /// A response body of any type `B` or the bytes of a reply: for a
    /// service whose body type does not implement [`ReplyBody`]. Map its
    /// responses with [`RateLimitBody::new`] before the layer; the inner
    /// body is passed through frame by frame.
    pub struct RateLimitBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Held { #[pin] body: HoldingBody<B> },
        Reply { reply: ReplyBytes<()> },
    }
}

impl<B> RateLimitBody<B> {
    /// `body`, to be passed through unchanged.
    pub fn new(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
        }
    }
}

impl<B> std::fmt::Debug for RateLimitBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Inner { .. } => f.write_str("RateLimitBody::Inner"),
            Kind::Held { .. } => f.write_str("RateLimitBody::Held"),
            Kind::Reply { reply } => f.debug_tuple("RateLimitBody::Reply").field(&reply.data).finish(),
        }
    }
}

impl<B> Body for RateLimitBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Held { body } => body.poll_frame(cx),
            KindProj::Reply { reply } => Poll::Ready(reply.take_frame().map(Ok)),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Held { body } => body.is_end_stream(),
            Kind::Reply { reply } => reply.data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Held { body } => body.size_hint(),
            Kind::Reply { reply } => reply.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::panic::{RefUnwindSafe, UnwindSafe};

    use super::*;

    fn auto_traits<T: Send + Sync + Unpin + UnwindSafe + RefUnwindSafe>() {}

    #[test]
    fn a_body_that_can_hold_a_permit_keeps_its_automatic_traits() {
        auto_traits::<RateLimitBody<http_body_util::Full<Bytes>>>();
        auto_traits::<HeldPermit>();
    }
}
