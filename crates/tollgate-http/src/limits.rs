//! The limiter behind the middleware: a [`Limiter`] or a [`ResourceLimiter`]
//! on any backend.

use std::future::Future;

use tollgate::{Backend, Decision, Error, Limiter, Policy, ResourceLimiter};

/// The name of a limiter's default policy in the structured headers.
pub(crate) const DEFAULT_POLICY_NAME: &str = "default";

/// What the middleware asks of a limiter.
///
/// Implemented for [`Limiter`] (one policy; the resource is ignored) and
/// [`ResourceLimiter`] (the resource selects the policy), on any backend, so
/// the middleware runs in memory or on Redis alike.
pub trait Limits: Send + Sync + 'static {
    /// Decides one request of cost 1 for `key` under `resource`'s policy.
    ///
    /// # Errors
    ///
    /// A backend error under fail-closed: the request must be treated as
    /// denied.
    fn decide(&self, resource: &str, key: &[u8]) -> impl Future<Output = Result<Decision, Error>> + Send;

    /// The policy applied to `resource` and its name (the resource name for
    /// a resource with its own policy, `default` otherwise).
    fn policy<'a>(&'a self, resource: &'a str) -> (&'a str, &'a Policy);

    /// Whether the resource selects the policy; when not, the middleware
    /// does not take it from requests.
    fn uses_resources(&self) -> bool {
        true
    }
}

impl<B: Backend> Limits for Limiter<B> {
    #[inline]
    fn decide(&self, _resource: &str, key: &[u8]) -> impl Future<Output = Result<Decision, Error>> + Send {
        self.allow(key)
    }

    fn policy<'a>(&'a self, _resource: &'a str) -> (&'a str, &'a Policy) {
        (DEFAULT_POLICY_NAME, Limiter::policy(self))
    }

    fn uses_resources(&self) -> bool {
        false
    }
}

impl<B: Backend> Limits for ResourceLimiter<B> {
    #[inline]
    fn decide(&self, resource: &str, key: &[u8]) -> impl Future<Output = Result<Decision, Error>> + Send {
        self.limiter(resource).allow(key)
    }

    fn policy<'a>(&'a self, resource: &'a str) -> (&'a str, &'a Policy) {
        let limiter = self.limiter(resource);
        let name = if std::ptr::eq(limiter, self.default_limiter()) {
            DEFAULT_POLICY_NAME
        } else {
            resource
        };
        (name, limiter.policy())
    }
}
