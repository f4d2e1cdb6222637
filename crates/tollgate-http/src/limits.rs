//! The limiter behind the middleware: a [`Limiter`] or a [`ResourceLimiter`]
//! on any backend.

use std::any::Any;
use std::future::Future;

use tollgate::{
    Backend, BackendError, BackendErrorKind, Decision, Error, Limiter, MemoryBackend, Operation, Policy,
    ResourceLimiter,
};

/// The name of a limiter's default policy in the structured headers.
pub(crate) const DEFAULT_POLICY_NAME: &str = "default";

/// What the middleware asks of a limiter.
///
/// Implemented for [`Limiter`] (one policy; the resource is ignored) and
/// [`ResourceLimiter`] (the resource selects the policy), on any backend, so
/// the middleware runs in memory or on Redis alike.
pub trait Limits: Send + Sync + 'static {
    /// Decides one request of `cost` units for `key` under `resource`'s
    /// policy (`cost = 0` is a peek: decided, charged nothing).
    ///
    /// # Errors
    ///
    /// A backend error under fail-closed: the request must be treated as
    /// denied.
    fn allow_n(
        &self,
        resource: &str,
        key: &[u8],
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send;

    /// Decides one request of cost 1: [`Limits::allow_n`] with cost 1.
    ///
    /// # Errors
    ///
    /// As for [`Limits::allow_n`].
    fn allow(&self, resource: &str, key: &[u8]) -> impl Future<Output = Result<Decision, Error>> + Send {
        self.allow_n(resource, key, 1)
    }

    /// The policy applied to `resource` and its name (the resource name for
    /// a resource with its own policy, `default` otherwise).
    fn policy<'a>(&'a self, resource: &'a str) -> (&'a str, &'a Policy);

    /// Whether the resource selects the policy; when not, the middleware
    /// does not take it from requests.
    fn uses_resources(&self) -> bool {
        true
    }

    /// Whether [`Limits::check`] decides every request (the limiter
    /// answers without waiting, as in memory). The tower service then calls
    /// the inner service from `call` itself, with no boxed future. The
    /// default is `false`.
    fn can_check(&self) -> bool {
        false
    }

    /// Decides one request of `cost` units at once, counting it exactly as
    /// [`Limits::allow_n`] would; `None` when the decision must be awaited.
    /// Must give a decision whenever [`Limits::can_check`] is true.
    fn check_n(&self, resource: &str, key: &[u8], cost: u64) -> Option<Decision> {
        let _ = (resource, key, cost);
        None
    }

    /// Decides one request of cost 1 at once: [`Limits::check_n`] with
    /// cost 1.
    fn check(&self, resource: &str, key: &[u8]) -> Option<Decision> {
        self.check_n(resource, key, 1)
    }

    /// Applies a per-key operation to `key` under `resource`'s policy, on
    /// every limit of the policy (a refund or a penalty when a request's
    /// cost is known only from its response).
    ///
    /// The default refuses with [`BackendErrorKind::Unsupported`]: a
    /// limiter outside this crate supports operations by overriding it.
    ///
    /// # Errors
    ///
    /// As for [`Limiter::operate`].
    fn operate(
        &self,
        resource: &str,
        key: &[u8],
        op: Operation,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        let _ = (resource, key);
        std::future::ready(Err(Error::Backend(BackendError::new(
            BackendErrorKind::Unsupported,
            format!("this limiter has no per-key operations ({} was asked)", op.name()),
        ))))
    }

    /// Applies a per-key operation at once, exactly as [`Limits::operate`]
    /// would; `None` when it must be awaited. Must give a result whenever
    /// [`Limits::can_check`] is true and [`Limits::operate`] is supported.
    fn operate_now(&self, resource: &str, key: &[u8], op: Operation) -> Option<Result<(), Error>> {
        let _ = (resource, key, op);
        None
    }
}

/// `limiter` as an in-memory limiter, when it is one (which the compiler
/// knows for each backend type).
fn in_memory<B: Backend>(limiter: &Limiter<B>) -> Option<&Limiter<MemoryBackend>> {
    (limiter as &dyn Any).downcast_ref()
}

impl<B: Backend> Limits for Limiter<B> {
    #[inline]
    fn allow_n(
        &self,
        _resource: &str,
        key: &[u8],
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send {
        Limiter::allow_n(self, key, cost)
    }

    fn policy<'a>(&'a self, _resource: &'a str) -> (&'a str, &'a Policy) {
        (DEFAULT_POLICY_NAME, Limiter::policy(self))
    }

    fn uses_resources(&self) -> bool {
        false
    }

    fn can_check(&self) -> bool {
        in_memory(self).is_some()
    }

    #[inline]
    fn check_n(&self, _resource: &str, key: &[u8], cost: u64) -> Option<Decision> {
        in_memory(self).map(|limiter| limiter.check_n(key, cost))
    }

    fn operate(
        &self,
        _resource: &str,
        key: &[u8],
        op: Operation,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        Limiter::operate(self, key, op)
    }

    fn operate_now(&self, _resource: &str, key: &[u8], op: Operation) -> Option<Result<(), Error>> {
        in_memory(self).map(|limiter| limiter.operate_now(key, op))
    }
}

impl<B: Backend> Limits for ResourceLimiter<B> {
    #[inline]
    fn allow_n(
        &self,
        resource: &str,
        key: &[u8],
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send {
        self.limiter(resource).allow_n(key, cost)
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

    fn can_check(&self) -> bool {
        in_memory(self.default_limiter()).is_some()
    }

    #[inline]
    fn check_n(&self, resource: &str, key: &[u8], cost: u64) -> Option<Decision> {
        in_memory(self.limiter(resource)).map(|limiter| limiter.check_n(key, cost))
    }

    fn operate(
        &self,
        resource: &str,
        key: &[u8],
        op: Operation,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        self.limiter(resource).operate(key, op)
    }

    fn operate_now(&self, resource: &str, key: &[u8], op: Operation) -> Option<Result<(), Error>> {
        in_memory(self.limiter(resource)).map(|limiter| limiter.operate_now(key, op))
    }
}
