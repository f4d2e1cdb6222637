//! What a reply handler is told about the request it answers instead of
//! the service, and the format of the default replies.

use tollgate::Decision;

use crate::cost_error::CostError;
use crate::key_error::KeyError;

/// How default replies describe themselves to HTTP clients.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReplyFormat {
    /// A one-line `text/plain` body (the default).
    #[default]
    PlainText,
    /// An RFC 9457 `application/problem+json` body.
    ProblemJson,
}

/// A request answered by a reply instead of the service, as seen by the
/// handler that makes the reply: why it is answered (`W`: the denying
/// [`Decision`], the limiter's error, the [`KeyError`] or the
/// [`CostError`]), its key and resource, and how to answer.
///
/// The handlers of [`RateLimit`](crate::RateLimit) take one of its four
/// forms, [`Denied`], [`Failure`], [`KeyRejected`] and [`CostRejected`].
#[derive(Clone, Copy, Debug)]
pub struct ReplyContext<'a, W> {
    pub(crate) why: W,
    pub(crate) key: &'a [u8],
    pub(crate) resource: &'a str,
    pub(crate) format: ReplyFormat,
    pub(crate) grpc: bool,
}

/// A denied request, as seen by a denial handler.
pub type Denied<'a> = ReplyContext<'a, &'a Decision>;

/// A request that could not be decided because the backend failed under
/// fail-closed, as seen by a failure handler.
pub type Failure<'a> = ReplyContext<'a, &'a tollgate::Error>;

/// A request without a key under [`MissingKey::Reject`](crate::MissingKey),
/// as seen by a key-error handler.
pub type KeyRejected<'a> = ReplyContext<'a, &'a KeyError>;

/// A request whose cost could not be taken from it (an invalid cost
/// header, an error from the cost closure), as seen by a cost-error
/// handler.
pub type CostRejected<'a> = ReplyContext<'a, &'a CostError>;

impl<'a, W: Copy> ReplyContext<'a, W> {
    pub(crate) fn new(why: W, key: &'a [u8], resource: &'a str, format: ReplyFormat, grpc: bool) -> Self {
        Self {
            why,
            key,
            resource,
            format,
            grpc,
        }
    }

    /// Why the request is answered with a reply: the denying decision, the
    /// limiter's error, the key error or the cost error.
    pub fn why(&self) -> W {
        self.why
    }

    /// The key the request was limited under; empty when no key could be
    /// taken from it.
    pub fn key(&self) -> &'a [u8] {
        self.key
    }

    /// The resource taken from the request; empty when the limiters name
    /// no resource (every request is then the default policy's). A
    /// resource without a policy of its own was decided under the default
    /// policy.
    pub fn resource(&self) -> &'a str {
        self.resource
    }

    /// The configured format of the default replies.
    pub fn format(&self) -> ReplyFormat {
        self.format
    }

    /// Whether the request is answered the gRPC way.
    pub fn is_grpc(&self) -> bool {
        self.grpc
    }
}

impl<'a> Denied<'a> {
    /// The decision (`allowed` is false).
    pub fn decision(&self) -> &'a Decision {
        self.why
    }
}

impl<'a> Failure<'a> {
    /// The limiter's error.
    pub fn error(&self) -> &'a tollgate::Error {
        self.why
    }
}

impl<'a> KeyRejected<'a> {
    /// Why there is no key.
    pub fn error(&self) -> &'a KeyError {
        self.why
    }
}

impl<'a> CostRejected<'a> {
    /// Why there is no cost.
    pub fn error(&self) -> &'a CostError {
        self.why
    }
}
