//! Response bodies: [`ReplyBody`], the body types a reply can be written
//! in, and [`RateLimitBody`], a wrapper that gives any body that ability.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

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
}

#[cfg(feature = "axum")]
impl ReplyBody for axum::body::Body {
    fn from_reply(bytes: Bytes) -> Self {
        axum::body::Body::from(bytes)
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
}

impl<E: 'static> ReplyBody for http_body_util::combinators::UnsyncBoxBody<Bytes, E> {
    fn from_reply(bytes: Bytes) -> Self {
        http_body_util::combinators::UnsyncBoxBody::new(ReplyBytes::new(bytes))
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
            KindProj::Reply { reply } => Poll::Ready(reply.take_frame().map(Ok)),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Reply { reply } => reply.data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Reply { reply } => reply.size_hint(),
        }
    }
}
