//! What a reply handler is told about the request it answers.

use tollgate::Decision;

use crate::key::KeyError;
use crate::reply::ReplyFormat;

/// A denied request, as seen by a denial handler.
#[derive(Clone, Copy, Debug)]
pub struct Denied<'a> {
    pub(crate) decision: &'a Decision,
    pub(crate) key: &'a [u8],
    pub(crate) resource: &'a str,
    pub(crate) format: ReplyFormat,
    pub(crate) grpc: bool,
}

impl<'a> Denied<'a> {
    /// The decision (`allowed` is false).
    pub fn decision(&self) -> &'a Decision {
        self.decision
    }

    /// The key that was limited.
    pub fn key(&self) -> &'a [u8] {
        self.key
    }

    /// The resource (empty for the default policy).
    pub fn resource(&self) -> &'a str {
        self.resource
    }

    /// The configured reply format.
    pub fn format(&self) -> ReplyFormat {
        self.format
    }

    /// Whether the request is answered the gRPC way.
    pub fn is_grpc(&self) -> bool {
        self.grpc
    }
}

/// A request that could not be decided because the backend failed under
/// fail-closed, as seen by a failure handler.
#[derive(Clone, Copy, Debug)]
pub struct Failure<'a> {
    pub(crate) error: &'a tollgate::Error,
    pub(crate) key: &'a [u8],
    pub(crate) resource: &'a str,
    pub(crate) format: ReplyFormat,
    pub(crate) grpc: bool,
}

impl<'a> Failure<'a> {
    /// The limiter's error.
    pub fn error(&self) -> &'a tollgate::Error {
        self.error
    }

    /// The key of the request.
    pub fn key(&self) -> &'a [u8] {
        self.key
    }

    /// The resource (empty for the default policy).
    pub fn resource(&self) -> &'a str {
        self.resource
    }

    /// The configured reply format.
    pub fn format(&self) -> ReplyFormat {
        self.format
    }

    /// Whether the request is answered the gRPC way.
    pub fn is_grpc(&self) -> bool {
        self.grpc
    }
}

/// A request without a key under [`MissingKey::Reject`](crate::MissingKey),
/// as seen by a key-error handler.
#[derive(Clone, Copy, Debug)]
pub struct KeyRejected<'a> {
    pub(crate) error: &'a KeyError,
    pub(crate) format: ReplyFormat,
    pub(crate) grpc: bool,
}

impl<'a> KeyRejected<'a> {
    /// Why there is no key.
    pub fn error(&self) -> &'a KeyError {
        self.error
    }

    /// The configured reply format.
    pub fn format(&self) -> ReplyFormat {
        self.format
    }

    /// Whether the request is answered the gRPC way.
    pub fn is_grpc(&self) -> bool {
        self.grpc
    }
}
