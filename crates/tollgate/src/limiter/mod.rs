//! The limiter: one policy on one backend.

mod builder;
mod options;
mod setters;
pub mod together;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use builder::LimiterBuilder;
pub use options::FailPolicy;
pub(crate) use options::Options;
pub(crate) use setters::{option_setters, summary};

use crate::backend::memory::{MemoryBackend, MemoryBinding};
use crate::backend::{Backend, Binding, Scope};
use crate::decision::{Decision, Listed};
use crate::error::{BackendError, BackendErrorKind, ConfigError, Error};
use crate::keylist::Probe;
use crate::metrics::LimiterMetrics;
use crate::operation::Operation;
use crate::policy::Policy;
use crate::protection::{Breaker, Claim, Gate, Lookup, ProbeGuard, Protection, Settled};

/// The key prefix used unless configured otherwise.
pub const DEFAULT_KEY_PREFIX: &str = "tollgate";

/// Enforces one policy. Build it with [`Limiter::builder`].
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limiter, Strategy};
///
/// let limiter = Limiter::builder()
///     .strategy(Strategy::TokenBucket)
///     .limit(2)
///     .window(Duration::from_secs(1))
///     .build()?;
/// assert!(limiter.check("client-1").allowed);
/// assert!(limiter.check("client-1").allowed);
/// assert!(!limiter.check("client-1").allowed);
/// # Ok::<(), tollgate::Error>(())
/// ```
pub struct Limiter<B: Backend = MemoryBackend> {
    binding: B::Binding,
    policy: Policy,
    fail: FailPolicy,
    fail_open_events: AtomicU64,
    /// Shared with the limiters that count on the same handles.
    metrics: Arc<LimiterMetrics>,
    protection: Option<Box<Protection>>,
    lists: Option<Box<options::Lists>>,
    shadow: bool,
    /// The options it was built with, to tell a changed limiter from an
    /// unchanged one when policies are replaced at run time; `None` for the
    /// defaults (boxed, and left out when default: never read by a
    /// decision, and a service may hold tens of thousands of limiters).
    options: Option<Box<Options>>,
}

impl<B: Backend> std::fmt::Debug for Limiter<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("policy", &self.policy)
            .field("fail", &self.fail)
            .finish_non_exhaustive()
    }
}

impl Limiter {
    /// A builder for an in-memory limiter; switch stores with
    /// [`LimiterBuilder::backend`].
    pub fn builder() -> LimiterBuilder<MemoryBackend> {
        LimiterBuilder::default()
    }
}

impl<B: Backend> Limiter<B> {
    /// Binds in place of `previous`, when there is one, keeping the state
    /// [`Backend::rebind`] keeps.
    ///
    /// The metrics are labelled with `metrics_resource`, or the scope's
    /// resource without one; the handles of `shared_metrics`, or else of
    /// `previous`, are reused when their labels are the same.
    pub(crate) fn bind_after(
        backend: &B,
        scope: &Scope<'_>,
        options: &Options,
        previous: Option<&Limiter<B>>,
        (metrics_resource, shared_metrics): (Option<&str>, Option<&Arc<LimiterMetrics>>),
    ) -> Result<Self, Error> {
        options.validate()?;
        let binding = match previous {
            Some(previous) => backend.rebind(scope, &previous.binding, &previous.policy)?,
            None => backend.bind(scope)?,
        };
        Ok(Self {
            options: (*options != Options::default()).then(|| Box::new(options.clone())),
            binding,
            policy: *scope.policy,
            fail: options.fail,
            fail_open_events: AtomicU64::new(0),
            metrics: LimiterMetrics::for_limiter(
                shared_metrics.or(previous.map(|p| &p.metrics)),
                metrics_resource.unwrap_or(scope.resource),
                scope.policy,
            ),
            protection: options.protection()?,
            lists: options.lists(),
            shadow: options.shadow,
        })
    }

    /// The decision of the exempt and deny lists, when the key is on one;
    /// the deny list wins.
    #[inline]
    fn listed(&self, key: &[u8]) -> Option<Decision> {
        let lists = self.lists.as_deref()?;
        let limit = self.policy.limits()[0].limit();
        // The key is read as an address once for both lists.
        let mut probe = Probe::new(key);
        if lists.deny.holds(&mut probe) {
            Some(Decision::listed(Listed::Denied, limit))
        } else if lists.exempt.holds(&mut probe) {
            Some(Decision::listed(Listed::Exempt, limit))
        } else {
            None
        }
    }

    /// Applies shadow mode to a decision and counts it.
    #[inline]
    fn conclude(&self, mut decision: Decision) -> Decision {
        if self.shadow && !decision.allowed {
            decision.allowed = true;
            decision.shadow_denied = true;
            self.metrics.shadow_denied();
        }
        if !decision.fail_open {
            self.metrics.decided(decision.allowed);
        }
        decision
    }

    /// Applies the fail policy to a backend's answer and counts it.
    #[inline]
    fn finish(
        &self,
        result: Result<Decision, BackendError>,
        started: Option<u64>,
        key: &[u8],
        cost: u64,
    ) -> Result<Decision, Error> {
        self.metrics.finish_sample(started);
        match result {
            Ok(decision) => Ok(decision),
            Err(err) => {
                self.metrics.backend_error();
                self.on_failure(err, key, cost)
            }
        }
    }

    /// What the fail policy makes of a request the store did not decide.
    fn on_failure(&self, err: BackendError, key: &[u8], cost: u64) -> Result<Decision, Error> {
        match self.fail {
            FailPolicy::Closed => Err(Error::Backend(err)),
            FailPolicy::Open => {
                self.fail_open_events.fetch_add(1, Ordering::Relaxed);
                self.metrics.failed_open();
                Ok(Decision::failed_open(self.policy.limits()[0].limit()))
            }
            FailPolicy::Fallback => {
                let fallback = self.protection.as_ref().and_then(|p| p.fallback.as_ref());
                // `Options::validate` guarantees a fallback under this policy.
                let Some(fallback) = fallback else {
                    return Err(Error::Backend(err));
                };
                let Ok(mut decision) = fallback.check(key, cost) else {
                    return Err(Error::Backend(err));
                };
                decision.fallback = true;
                self.metrics.fell_back();
                Ok(decision)
            }
        }
    }

    /// A decision with the deny cache in front of the store and the circuit
    /// breaker around it.
    async fn allow_protected(&self, p: &Protection, key: &[u8], cost: u64) -> Result<Decision, Error> {
        let mut now = p.clock.now_nanos();
        let mut claim = None;
        if let (true, Some(cache)) = (cost > 0, &p.deny) {
            loop {
                match cache.lookup(key, now) {
                    Lookup::Denied(decision) => {
                        self.metrics.deny_cache_hit();
                        return Ok(decision);
                    }
                    Lookup::Ask { claimed } => {
                        claim = claimed.then(|| Claim::new(cache, key));
                        break;
                    }
                    Lookup::Wait(answered) => {
                        answered.await;
                        now = p.clock.now_nanos();
                    }
                }
            }
        }
        let gate = p.breaker.as_ref().map_or(Gate::Closed, |b| b.gate(now));
        if let Gate::Open(wait) = gate {
            // The waiters on the key meet the open breaker too, at once.
            if let Some(claim) = claim {
                claim.settle(Settled::Failed);
            }
            self.metrics.circuit_open();
            let failures = p.breaker.as_ref().map_or(0, Breaker::failures);
            let err = BackendError::new(
                BackendErrorKind::Unavailable,
                format!(
                    "not asking the store: its circuit breaker is open after {failures} consecutive \
                     failures, and the next probe is due in {} ms",
                    wait.as_millis()
                ),
            );
            return self.on_failure(err, key, cost);
        }
        let probe = ProbeGuard::arm(gate, p.breaker.as_ref());
        if gate == Gate::Probe {
            if let Err(err) = self.binding.reconnect().await {
                probe.disarm();
                if let Some(breaker) = &p.breaker {
                    breaker.record(gate, false, p.clock.now_nanos());
                }
                if let Some(claim) = claim {
                    claim.settle(Settled::Failed);
                }
                return self.on_failure(err, key, cost);
            }
        }
        let started = self.start();
        let result = self.binding.apply(key, cost).await;
        probe.disarm();
        if let Some(breaker) = &p.breaker {
            breaker.record(gate, result.is_ok(), p.clock.now_nanos());
        }
        if let Some(cache) = &p.deny {
            // Only a unit request's denial says when every request is denied.
            let settled = match &result {
                Ok(decision) if cost == 1 && cache.insert(key, now, decision) => Settled::Cached,
                Ok(_) => Settled::Decided,
                Err(_) => Settled::Failed,
            };
            if let Some(claim) = claim {
                claim.settle(settled);
            }
        }
        self.finish(result, started, key, cost)
    }

    /// The start time of this decision when it is one to time.
    #[inline]
    fn start(&self) -> Option<u64> {
        self.metrics.start_sample()
    }

    /// Decides one request of cost 1 for `key`.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] when the backend failed and the limiter fails
    /// closed; the request must then be treated as denied.
    pub async fn allow(&self, key: impl AsRef<[u8]>) -> Result<Decision, Error> {
        self.allow_n(key, 1).await
    }

    /// Decides one request of `cost` units for `key` (`cost = 0` is a peek).
    ///
    /// # Errors
    ///
    /// As for [`Limiter::allow`].
    pub async fn allow_n(&self, key: impl AsRef<[u8]>, cost: u64) -> Result<Decision, Error> {
        let key = key.as_ref();
        if let Some(decision) = self.listed(key) {
            return Ok(self.conclude(decision));
        }
        let result = match &self.protection {
            Some(protection) => self.allow_protected(protection, key, cost).await,
            None => {
                let started = self.start();
                let result = self.binding.apply(key, cost).await;
                self.finish(result, started, key, cost)
            }
        };
        result.map(|decision| self.conclude(decision))
    }

    /// Applies a per-key operation to `key` on every limit of the policy
    /// ([per-key operations](crate::_documentation::semantics#per-key-operations)),
    /// and forgets any denial of the key in the deny cache.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming `cost` or `duration` when the argument is
    /// out of range ([`Operation::validate`]); [`Error::Backend`] when the
    /// backend failed or does not support operations. The fail policy does
    /// not apply: an operation is never silently dropped.
    pub async fn operate(&self, key: impl AsRef<[u8]>, op: Operation) -> Result<(), Error> {
        op.validate()?;
        let key = key.as_ref();
        self.forget_denial(key);
        self.binding.operate(key, op).await.map_err(Error::Backend)
    }

    /// Forgets a denial of `key` in the deny cache, before an operation
    /// changes its state.
    fn forget_denial(&self, key: &[u8]) {
        if let Some(cache) = self.protection.as_ref().and_then(|p| p.deny.as_ref()) {
            cache.remove(key);
        }
    }

    /// Brings `key` back to fresh state and ends a block on it.
    ///
    /// # Errors
    ///
    /// As for [`Limiter::operate`].
    pub async fn reset(&self, key: impl AsRef<[u8]>) -> Result<(), Error> {
        self.operate(key, Operation::Reset).await
    }

    /// Denies every request for `key` for `duration` from now (replacing a
    /// block it had; zero lifts it), without changing its state.
    ///
    /// # Errors
    ///
    /// As for [`Limiter::operate`].
    pub async fn block(&self, key: impl AsRef<[u8]>, duration: Duration) -> Result<(), Error> {
        self.operate(key, Operation::Block(duration)).await
    }

    /// Gives back up to `cost` units `key` was charged (a failed request,
    /// a cost known only after the response).
    ///
    /// # Errors
    ///
    /// As for [`Limiter::operate`].
    pub async fn refund(&self, key: impl AsRef<[u8]>, cost: u64) -> Result<(), Error> {
        self.operate(key, Operation::Refund(cost)).await
    }

    /// Charges `key` `cost` units without an admission test (an abuse
    /// signal, a cost known only after the response).
    ///
    /// # Errors
    ///
    /// As for [`Limiter::operate`].
    pub async fn penalty(&self, key: impl AsRef<[u8]>, cost: u64) -> Result<(), Error> {
        self.operate(key, Operation::Penalty(cost)).await
    }

    /// Whether `options` are the ones this limiter was built with.
    pub(crate) fn built_with(&self, options: &Options) -> bool {
        match &self.options {
            Some(built) => **built == *options,
            None => *options == Options::default(),
        }
    }

    /// Whether the limiter is in shadow mode.
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// Reports whether a unit request would be admitted now, charging nothing.
    ///
    /// # Errors
    ///
    /// As for [`Limiter::allow`].
    pub async fn peek(&self, key: impl AsRef<[u8]>) -> Result<Decision, Error> {
        self.allow_n(key, 0).await
    }

    /// The policy this limiter enforces.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The fail policy.
    pub fn fail_policy(&self) -> FailPolicy {
        self.fail
    }

    /// How many requests were admitted because the backend failed under
    /// [`FailPolicy::Open`].
    pub fn fail_open_events(&self) -> u64 {
        self.fail_open_events.load(Ordering::Relaxed)
    }

    /// The backend's binding for this policy.
    pub fn binding(&self) -> &B::Binding {
        &self.binding
    }
}

impl Limiter<MemoryBackend> {
    /// Decides one request of cost 1 synchronously (in-memory only; cannot fail).
    #[inline]
    pub fn check(&self, key: impl AsRef<[u8]>) -> Decision {
        self.check_n(key, 1)
    }

    /// Decides one request of `cost` units synchronously (in-memory only).
    #[inline]
    pub fn check_n(&self, key: impl AsRef<[u8]>, cost: u64) -> Decision {
        let key = key.as_ref();
        if let Some(decision) = self.listed(key) {
            return self.conclude(decision);
        }
        let started = self.start();
        let decision = MemoryBinding::check(&self.binding, key, cost);
        self.metrics.finish_sample(started);
        self.conclude(decision)
    }

    /// Applies a per-key operation synchronously (in-memory only), exactly
    /// as [`Limiter::operate`] does.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming `cost` or `duration` when the argument is
    /// out of range ([`Operation::validate`]); the in-memory store itself
    /// cannot fail.
    pub fn operate_now(&self, key: impl AsRef<[u8]>, op: Operation) -> Result<(), Error> {
        op.validate()?;
        let key = key.as_ref();
        self.forget_denial(key);
        self.binding.operate_now(key, op);
        Ok(())
    }
}

pub(crate) fn validate_prefix(prefix: &str) -> Result<(), ConfigError> {
    if prefix.is_empty() {
        return Err(ConfigError::new("key_prefix", "must not be empty"));
    }
    Ok(())
}
