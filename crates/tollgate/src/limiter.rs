//! The limiter: one policy on one backend.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use std::sync::Arc;

use crate::backend::memory::{MemoryBackend, MemoryBinding};
use crate::backend::{Backend, Binding, Scope};
use crate::clock::{Clock, SharedClock, SystemClock};
use crate::decision::Decision;
use crate::error::{BackendError, BackendErrorKind, ConfigError, Error};
use crate::metrics::LimiterMetrics;
use crate::policy::Policy;
use crate::protection::{Breaker, CircuitBreaker, DenyCache, DenyTable, Gate, ProbeGuard, Protection};
use crate::strategy::Strategy;

/// The key prefix used unless configured otherwise.
pub const DEFAULT_KEY_PREFIX: &str = "tollgate";

/// What a limiter does when its backend fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FailPolicy {
    /// Deny: the call returns the backend error (the default).
    #[default]
    Closed,
    /// Admit: the call returns an allowed decision with nothing remaining and
    /// [`Decision::fail_open`] set, and counts the event (see
    /// [`Limiter::fail_open_events`]).
    Open,
    /// Decide on an in-memory limiter of its own policy, given with
    /// [`LimiterBuilder::fallback`] (typically the shared limit divided by
    /// the number of instances): the decision has [`Decision::fallback`]
    /// set. A circuit breaker comes with it (the default
    /// [`CircuitBreaker`] unless another is given), so an outage costs one
    /// timeout per cool-down instead of one per request.
    Fallback,
}

/// How a limiter is built beyond its policy: the fail policy and what
/// protects a remote store.
#[derive(Clone, Default)]
pub(crate) struct Options {
    pub(crate) fail: FailPolicy,
    pub(crate) deny_cache: Option<DenyCache>,
    pub(crate) breaker: Option<CircuitBreaker>,
    pub(crate) fallback: Option<Policy>,
    pub(crate) clock: Option<SharedClock>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("fail", &self.fail)
            .field("deny_cache", &self.deny_cache)
            .field("breaker", &self.breaker)
            .field("fallback", &self.fallback)
            .field("local_clock", &self.clock.is_some())
            .finish()
    }
}

impl Options {
    /// Checks that the fail policy and the fallback agree.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        match (self.fail, &self.fallback) {
            (FailPolicy::Fallback, None) => Err(ConfigError::new(
                "fallback",
                "the fail policy is fallback but no fallback policy is given",
            )),
            (FailPolicy::Closed | FailPolicy::Open, Some(_)) => Err(ConfigError::new(
                "fallback",
                "a fallback policy is given but the fail policy is not fallback; a fallback \
                 replaces failing open or closed",
            )),
            _ => Ok(()),
        }
    }

    /// The protection these options ask for, bound for `scope`.
    fn protection(&self, scope: &Scope<'_>) -> Result<Option<Box<Protection>>, Error> {
        let breaker = match (self.breaker, self.fail) {
            (Some(settings), _) => Some(settings),
            (None, FailPolicy::Fallback) => Some(CircuitBreaker::default()),
            (None, _) => None,
        };
        if self.deny_cache.is_none() && breaker.is_none() && self.fallback.is_none() {
            return Ok(None);
        }
        let clock: SharedClock = self.clock.clone().unwrap_or_else(|| Arc::new(SystemClock));
        let fallback = match &self.fallback {
            Some(policy) => {
                let scope = Scope { policy, ..*scope };
                let binding = MemoryBackend::new()
                    .shared_clock(clock.clone())
                    .bind(&scope)
                    .map_err(|e| match e {
                        Error::Config(e) => Error::Config(e.within("fallback")),
                        other => other,
                    })?;
                Some(binding)
            }
            None => None,
        };
        Ok(Some(Box::new(Protection {
            clock,
            deny: self.deny_cache.map(DenyTable::new),
            breaker: breaker.map(Breaker::new),
            fallback,
        })))
    }
}

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
    metrics: LimiterMetrics,
    protection: Option<Box<Protection>>,
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
    pub(crate) fn bind(backend: &B, scope: &Scope<'_>, options: &Options) -> Result<Self, Error> {
        options.validate()?;
        Ok(Self {
            binding: backend.bind(scope)?,
            policy: *scope.policy,
            fail: options.fail,
            fail_open_events: AtomicU64::new(0),
            metrics: LimiterMetrics::register(scope.resource, scope.policy),
            protection: options.protection(scope)?,
        })
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
            Ok(decision) => {
                self.metrics.decided(decision.allowed);
                Ok(decision)
            }
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
                let mut decision = fallback.check(key, cost);
                decision.fallback = true;
                self.metrics.fell_back();
                self.metrics.decided(decision.allowed);
                Ok(decision)
            }
        }
    }

    /// A decision with the deny cache in front of the store and the circuit
    /// breaker around it.
    async fn allow_protected(&self, p: &Protection, key: &[u8], cost: u64) -> Result<Decision, Error> {
        let now = p.clock.now_nanos();
        if cost > 0 {
            if let Some(decision) = p.deny.as_ref().and_then(|cache| cache.get(key, now)) {
                self.metrics.deny_cache_hit();
                self.metrics.decided(false);
                return Ok(decision);
            }
        }
        let gate = p.breaker.as_ref().map_or(Gate::Closed, |b| b.gate(now));
        if let Gate::Open(wait) = gate {
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
        let started = self.start();
        let result = self.binding.apply(key, cost).await;
        probe.disarm();
        if let Some(breaker) = &p.breaker {
            breaker.record(gate, result.is_ok(), p.clock.now_nanos());
        }
        if let (Ok(decision), Some(cache)) = (&result, &p.deny) {
            // Only a unit request's denial says when every request is denied.
            if cost == 1 {
                cache.insert(key, now, decision);
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
        if let Some(protection) = &self.protection {
            return self.allow_protected(protection, key, cost).await;
        }
        let started = self.start();
        let result = self.binding.apply(key, cost).await;
        self.finish(result, started, key, cost)
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
        let started = self.start();
        let decision = MemoryBinding::check(&self.binding, key.as_ref(), cost);
        self.metrics.finish_sample(started);
        self.metrics.decided(decision.allowed);
        decision
    }
}

/// Configures a [`Limiter`].
#[derive(Debug, Clone)]
pub struct LimiterBuilder<B> {
    backend: B,
    strategy: Strategy,
    limit: Option<u64>,
    window: Option<Duration>,
    policy: Option<Policy>,
    options: Options,
    prefix: String,
    resource: String,
}

impl Default for LimiterBuilder<MemoryBackend> {
    fn default() -> Self {
        Self {
            backend: MemoryBackend::new(),
            strategy: Strategy::SlidingWindow,
            limit: None,
            window: None,
            policy: None,
            options: Options::default(),
            prefix: DEFAULT_KEY_PREFIX.to_owned(),
            resource: String::new(),
        }
    }
}

impl LimiterBuilder<MemoryBackend> {
    /// Runs the in-memory backend on `clock` (e.g. a [`crate::ManualClock`]).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.backend = self.backend.clock(clock);
        self
    }
}

impl<B: Backend> LimiterBuilder<B> {
    /// The strategy (default: sliding window).
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// `L`, the units admitted per window (required).
    pub fn limit(mut self, limit: u64) -> Self {
        self.limit = Some(limit);
        self
    }

    /// `W`, the window (required).
    pub fn window(mut self, window: Duration) -> Self {
        self.window = Some(window);
        self
    }

    /// Enforces `policy`, one limit or several ([`Policy::compound`]),
    /// instead of the strategy, limit and window set one by one.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// What to do when the backend fails (default: fail closed).
    pub fn fail_policy(mut self, fail: FailPolicy) -> Self {
        self.options.fail = fail;
        self
    }

    /// Decides on an in-memory limiter of `policy` while the store fails:
    /// sets the fail policy to [`FailPolicy::Fallback`].
    pub fn fallback(mut self, policy: Policy) -> Self {
        self.options.fallback = Some(policy);
        self.options.fail = FailPolicy::Fallback;
        self
    }

    /// Answers keys the store denied from a local cache until their
    /// `retry_after` runs out (see [`DenyCache`]).
    pub fn deny_cache(mut self, cache: DenyCache) -> Self {
        self.options.deny_cache = Some(cache);
        self
    }

    /// Stops calling a failing store for a while (see [`CircuitBreaker`]);
    /// on by default under [`FailPolicy::Fallback`], off otherwise.
    pub fn circuit_breaker(mut self, breaker: CircuitBreaker) -> Self {
        self.options.breaker = Some(breaker);
        self
    }

    /// The clock of the deny cache, the circuit breaker and the fallback
    /// limiter (default: the system clock). It measures only durations on
    /// this host, so it need not agree with the store's clock.
    pub fn local_clock(mut self, clock: impl Clock) -> Self {
        self.options.clock = Some(Arc::new(clock));
        self
    }

    /// Shorthand for `fail_policy(FailPolicy::Open)` when `open` is true.
    pub fn fail_open(self, open: bool) -> Self {
        self.fail_policy(if open {
            FailPolicy::Open
        } else {
            FailPolicy::Closed
        })
    }

    /// The prefix of every state key in shared stores (default `tollgate`).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// A resource name that separates this limiter's state from others
    /// sharing the same store and prefix.
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = resource.into();
        self
    }

    /// Replaces the backend.
    pub fn backend<C: Backend>(self, backend: C) -> LimiterBuilder<C> {
        LimiterBuilder {
            backend,
            strategy: self.strategy,
            limit: self.limit,
            window: self.window,
            policy: self.policy,
            options: self.options,
            prefix: self.prefix,
            resource: self.resource,
        }
    }

    /// Validates the configuration and builds the limiter.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the field that is missing or invalid, or
    /// the one given twice (a [`policy`](Self::policy) and a limit or window).
    pub fn build(self) -> Result<Limiter<B>, Error> {
        let policy = match self.policy {
            Some(policy) => {
                if self.limit.is_some() || self.window.is_some() {
                    return Err(ConfigError::new(
                        "policy",
                        "is given together with a limit or window; give one or the other",
                    )
                    .into());
                }
                policy
            }
            None => {
                let limit = self
                    .limit
                    .ok_or_else(|| ConfigError::new("limit", "is required"))?;
                let window = self
                    .window
                    .ok_or_else(|| ConfigError::new("window", "is required"))?;
                Policy::new(self.strategy, limit, window)?
            }
        };
        validate_prefix(&self.prefix)?;
        let scope = Scope {
            prefix: &self.prefix,
            resource: &self.resource,
            policy: &policy,
        };
        Limiter::bind(&self.backend, &scope, &self.options)
    }
}

pub(crate) fn validate_prefix(prefix: &str) -> Result<(), ConfigError> {
    if prefix.is_empty() {
        return Err(ConfigError::new("key_prefix", "must not be empty"));
    }
    Ok(())
}
