//! [`Limits`]: the one trait every caller decides through, whatever the
//! limiter and its backend.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;

use crate::backend::Backend;
use crate::decision::Decision;
use crate::error::{BackendError, BackendErrorKind, Error};
use crate::limiter::{Limiter, Reservation};
use crate::live::LiveLimiter;
use crate::operation::Operation;
use crate::policy::Policy;
use crate::resources::ResourceLimiter;

/// The name [`Limits::policy`] gives a limiter's default policy: the only
/// policy of a [`Limiter`], and the policy of every resource of a
/// [`ResourceLimiter`] that has none of its own. The HTTP middleware names
/// policies with it in the IETF draft's structured headers
/// (`RateLimit-Policy: "default";q=100;w=60`).
pub const DEFAULT_POLICY_NAME: &str = "default";

/// What a caller asks of a limiter: decisions, the policy behind them and
/// per-key operations, awaited or, when the limiter can answer at once,
/// without waiting.
///
/// Implemented for [`Limiter`] (one policy; the resource is ignored),
/// [`ResourceLimiter`] (the resource selects the policy) and
/// [`LiveLimiter`] (a resource limiter whose policies are replaced at run
/// time), on any backend, and for an [`Arc`] of any of them, so that code
/// written against `Limits` (the `tollgate-http` middleware, a service of
/// your own) runs in memory or on Redis alike, and can share a limiter it
/// also uses elsewhere.
///
/// # One method per operation
///
/// A caller meets the same methods everywhere: `allow` and `allow_n`
/// (awaited; a cost of 0 is a peek), `check` and `check_n` (without
/// waiting), `operate` and `operate_now` (per-key operations). On a
/// [`Limiter`] they take the key; a [`ResourceLimiter`] or a
/// [`LiveLimiter`] selects a resource's limiter with `limiter(resource)`,
/// on which they are called; this trait gives them, with the resource
/// first, to code generic over the three, each forwarding to the selected
/// limiter's method of the same name.
///
/// An [`Arc`] of a limiter implements this trait too, so with the trait in
/// scope `arc.allow_n(…)` names the trait's method (resource first): call
/// a shared [`Limiter`]'s own methods through a reference to it
/// (`Limiter::allow_n(&arc, key, cost)` or `(*arc).allow_n(key, cost)`).
///
/// A limiter whose backend [decides now](Backend::decides_now) (the
/// in-memory backend, or a backend chosen at run time whose choice is in
/// memory) also decides without waiting: [`Limits::can_check`] is then
/// true and [`Limits::check_n`] gives exactly the decision
/// [`Limits::allow_n`] would have given, with the same effects on the
/// key's state, the deny cache, the circuit breaker and the metrics.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limiter, Limits, Policy, Strategy};
///
/// fn admit(limits: &impl Limits, key: &str) -> Option<bool> {
///     Some(limits.check("", key.as_bytes())?.allowed)
/// }
///
/// let policy = Policy::new(Strategy::FixedWindow, 1, Duration::from_secs(60))?;
/// let limiter = Limiter::builder().policy(policy).build()?;
/// assert!(limiter.can_check());
/// assert_eq!(admit(&limiter, "k"), Some(true));
/// assert_eq!(admit(&limiter, "k"), Some(false));
/// assert_eq!(Limits::policy(&limiter, "any").0, tollgate::DEFAULT_POLICY_NAME);
/// # Ok::<(), tollgate::Error>(())
/// ```
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

    /// Reserves `cost` units for `key` under `resource`'s policy, waiting
    /// at most `max_delay` ([`Limiter::reserve_n`]).
    ///
    /// The default reserves only what a decision admits now
    /// ([`Limits::allow_n`], no delay): right for a limiter that cannot
    /// reserve ahead; the crate's limiters reserve as
    /// [`Limiter::reserve_n`] does.
    ///
    /// # Errors
    ///
    /// As for [`Limits::allow_n`].
    fn reserve_n(
        &self,
        resource: &str,
        key: &[u8],
        cost: u64,
        max_delay: std::time::Duration,
    ) -> impl Future<Output = Result<Reservation, Error>> + Send {
        let _ = max_delay;
        async move {
            let decision = self.allow_n(resource, key, cost).await?;
            Ok(Reservation::decided(key, decision))
        }
    }

    /// The policy applied to `resource` and its name: the resource name for
    /// a resource with its own policy, [`DEFAULT_POLICY_NAME`] (`default`)
    /// otherwise, and always for a [`Limiter`].
    ///
    /// Borrowed from the limiter where it can be; a [`LiveLimiter`], whose
    /// policies may be replaced at any moment, gives a copy of the policy
    /// serving now (which a replacement between a decision and this call
    /// makes another than the decision's).
    fn policy<'a>(&'a self, resource: &'a str) -> (&'a str, Cow<'a, Policy>);

    /// Whether the resource selects the policy; when not, a caller need not
    /// take one from its requests. The default is `true`.
    fn uses_resources(&self) -> bool {
        true
    }

    /// Whether [`Limits::check_n`] decides requests without waiting (the
    /// limiter's backend [decides now](Backend::decides_now), as in
    /// memory). The `tollgate-http` tower service then calls the inner
    /// service from `call` itself, with no boxed future. The default is
    /// `false`.
    fn can_check(&self) -> bool {
        false
    }

    /// Decides one request of `cost` units at once, counting it exactly as
    /// [`Limits::allow_n`] would; `None`, with nothing done, when the
    /// decision must be awaited.
    ///
    /// Must give a decision whenever [`Limits::can_check`] is true, except
    /// for an error [`Limits::allow_n`] would return (a backend that
    /// decides now but failed, under fail-closed; never in memory): that
    /// gives `None`, and the caller then awaits `allow_n`, which reports
    /// it. The default is `None`.
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
    /// cost is known only from its response), as [`Limiter::operate`]
    /// does.
    ///
    /// The default refuses with [`BackendErrorKind::Unsupported`]: an
    /// implementation outside this crate supports operations by overriding
    /// it.
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
    /// would; `None`, with nothing done, when it must be awaited. Must give
    /// a result whenever [`Limits::can_check`] is true and
    /// [`Limits::operate`] is supported. The default is `None`.
    fn operate_now(&self, resource: &str, key: &[u8], op: Operation) -> Option<Result<(), Error>> {
        let _ = (resource, key, op);
        None
    }
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

    fn reserve_n(
        &self,
        _resource: &str,
        key: &[u8],
        cost: u64,
        max_delay: std::time::Duration,
    ) -> impl Future<Output = Result<Reservation, Error>> + Send {
        Limiter::reserve_n(self, key, cost, max_delay)
    }

    fn policy<'a>(&'a self, _resource: &'a str) -> (&'a str, Cow<'a, Policy>) {
        (DEFAULT_POLICY_NAME, Cow::Borrowed(Limiter::policy(self)))
    }

    fn uses_resources(&self) -> bool {
        false
    }

    fn can_check(&self) -> bool {
        self.decides_now()
    }

    #[inline]
    fn check_n(&self, _resource: &str, key: &[u8], cost: u64) -> Option<Decision> {
        self.decide_now(key, cost)?.ok()
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
        self.operate_at_once(key, op)
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

    fn reserve_n(
        &self,
        resource: &str,
        key: &[u8],
        cost: u64,
        max_delay: std::time::Duration,
    ) -> impl Future<Output = Result<Reservation, Error>> + Send {
        self.limiter(resource).reserve_n(key, cost, max_delay)
    }

    fn policy<'a>(&'a self, resource: &'a str) -> (&'a str, Cow<'a, Policy>) {
        (policy_name(self, resource), Cow::Borrowed(self.policy(resource)))
    }

    /// Every policy is bound on the same backend: the default limiter's
    /// answer is every limiter's.
    fn can_check(&self) -> bool {
        self.default_limiter().decides_now()
    }

    #[inline]
    fn check_n(&self, resource: &str, key: &[u8], cost: u64) -> Option<Decision> {
        self.limiter(resource).decide_now(key, cost)?.ok()
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
        self.limiter(resource).operate_at_once(key, op)
    }
}

/// The name of the policy `limiter` applies to `resource`: the resource's
/// own name, or [`DEFAULT_POLICY_NAME`] when the default policy applies.
fn policy_name<'a, B: Backend>(limiter: &ResourceLimiter<B>, resource: &'a str) -> &'a str {
    if std::ptr::eq(limiter.limiter(resource), limiter.default_limiter()) {
        DEFAULT_POLICY_NAME
    } else {
        resource
    }
}

/// Each call is made wholly on the limiter serving when it starts
/// ([`LiveLimiter::current`]).
impl<B: Backend> Limits for LiveLimiter<B> {
    #[inline]
    fn allow_n(
        &self,
        resource: &str,
        key: &[u8],
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send {
        let current = self.held();
        async move { current.limiter(resource).allow_n(key, cost).await }
    }

    fn reserve_n(
        &self,
        resource: &str,
        key: &[u8],
        cost: u64,
        max_delay: std::time::Duration,
    ) -> impl Future<Output = Result<Reservation, Error>> + Send {
        let current = self.held();
        async move { current.limiter(resource).reserve_n(key, cost, max_delay).await }
    }

    fn policy<'a>(&'a self, resource: &'a str) -> (&'a str, Cow<'a, Policy>) {
        self.with_current(|current| {
            (
                policy_name(current, resource),
                Cow::Owned(*current.policy(resource)),
            )
        })
    }

    fn can_check(&self) -> bool {
        self.with_current(Limits::can_check)
    }

    #[inline]
    fn check_n(&self, resource: &str, key: &[u8], cost: u64) -> Option<Decision> {
        self.with_current(|current| Limits::check_n(current, resource, key, cost))
    }

    fn operate(
        &self,
        resource: &str,
        key: &[u8],
        op: Operation,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        let current = self.held();
        async move { current.limiter(resource).operate(key, op).await }
    }

    fn operate_now(&self, resource: &str, key: &[u8], op: Operation) -> Option<Result<(), Error>> {
        self.with_current(|current| Limits::operate_now(current, resource, key, op))
    }
}

/// The limiter the [`Arc`] points to, so that a limiter shared with the
/// rest of an application (an `Arc<LiveLimiter<_>>` that a reload
/// replaces) can be used wherever a `Limits` is asked for.
impl<L: Limits> Limits for Arc<L> {
    #[inline]
    fn allow_n(
        &self,
        resource: &str,
        key: &[u8],
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + Send {
        (**self).allow_n(resource, key, cost)
    }

    fn reserve_n(
        &self,
        resource: &str,
        key: &[u8],
        cost: u64,
        max_delay: std::time::Duration,
    ) -> impl Future<Output = Result<Reservation, Error>> + Send {
        (**self).reserve_n(resource, key, cost, max_delay)
    }

    #[inline]
    fn allow(&self, resource: &str, key: &[u8]) -> impl Future<Output = Result<Decision, Error>> + Send {
        (**self).allow(resource, key)
    }

    fn policy<'a>(&'a self, resource: &'a str) -> (&'a str, Cow<'a, Policy>) {
        (**self).policy(resource)
    }

    fn uses_resources(&self) -> bool {
        (**self).uses_resources()
    }

    fn can_check(&self) -> bool {
        (**self).can_check()
    }

    #[inline]
    fn check_n(&self, resource: &str, key: &[u8], cost: u64) -> Option<Decision> {
        (**self).check_n(resource, key, cost)
    }

    #[inline]
    fn check(&self, resource: &str, key: &[u8]) -> Option<Decision> {
        (**self).check(resource, key)
    }

    fn operate(
        &self,
        resource: &str,
        key: &[u8],
        op: Operation,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        (**self).operate(resource, key, op)
    }

    fn operate_now(&self, resource: &str, key: &[u8], op: Operation) -> Option<Result<(), Error>> {
        (**self).operate_now(resource, key, op)
    }
}
