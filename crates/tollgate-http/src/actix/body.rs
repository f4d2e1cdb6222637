//! A response body that keeps a permit of requests in flight until it
//! ends, for actix-web.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use actix_web::body::{BodySize, MessageBody};
use bytes::Bytes;
use pin_project_lite::pin_project;

use crate::in_flight::HeldPermit;

pin_project! {
    /// A response body that keeps `permit` until its last chunk has been
    /// polled, an error, or its drop, so that a streamed response holds its
    /// slot of a concurrency policy until it ends.
    pub(super) struct HoldingBody<B> {
        #[pin]
        body: B,
        permit: Option<HeldPermit>,
    }
}

impl<B> HoldingBody<B> {
    /// `body`, holding `permit`.
    pub(super) fn new(body: B, permit: HeldPermit) -> Self {
        Self {
            body,
            permit: Some(permit),
        }
    }
}

impl<B: MessageBody> MessageBody for HoldingBody<B> {
    type Error = B::Error;

    fn size(&self) -> BodySize {
        self.body.size()
    }

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, Self::Error>>> {
        let this = self.project();
        let chunk = ready!(this.body.poll_next(cx));
        // The end or an error: the request is over, its slot freed.
        if !matches!(chunk, Some(Ok(_))) {
            this.permit.take();
        }
        Poll::Ready(chunk)
    }
}
