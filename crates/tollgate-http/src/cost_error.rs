//! Why a request's cost could not be taken from it.

use std::borrow::Cow;

/// Why a request's cost could not be taken from it: a cost header that is
/// not one decimal integer, or an error returned by a cost closure (see
/// [`RateLimit::cost_fn`](crate::RateLimit::cost_fn)).
///
/// The request is answered without being decided or charged: 400 (gRPC
/// `INVALID_ARGUMENT`) with the message as its body, unless
/// [`RateLimit::on_cost_error`](crate::RateLimit::on_cost_error) replaces
/// the reply.
///
/// ```
/// use tollgate_http::CostError;
///
/// let err = CostError::new("the query is too complex to be priced");
/// assert_eq!(err.message(), "the query is too complex to be priced");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CostError {
    message: Cow<'static, str>,
}

impl CostError {
    /// An error with a short message, which the default reply sends to the
    /// client.
    pub fn new(message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// The message, safe to show to the client.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for CostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CostError {}
