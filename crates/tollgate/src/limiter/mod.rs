//! The limiter: one policy on one backend.

mod builder;
mod options;
mod setters;
pub mod together;

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use builder::LimiterBuilder;
pub use options::FailPolicy;
pub(crate) use options::Options;
pub(crate) use setters::{option_setters, summary};

use crate::backend::memory::MemoryBackend;
use crate::backend::{Backend, Binding, Scope};
use crate::decision::{Decision, Listed};
use crate::error::{BackendError, BackendErrorKind, ConfigError, Error};
use crate::keylist::Probe;
use crate::metrics::LimiterMetrics;
use crate::operation::Operation;
use crate::policy::Policy;
use crate::protection::{Breaker, Claim, DenyTable, Gate, Lookup, ProbeGuard, Protection, Settled};
use crate::top::{self, TopList, TopMetric, TopSlot};

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
    /// Whether the options hold an exempt or a deny list (read from
    /// `options`, which are then not the defaults).
    has_lists: bool,
    /// The top keys' capacity, when they are kept.
    top_capacity: Option<NonZeroU32>,
    /// The top keys' table, made at the first decision counted.
    top: TopSlot,
    shadow: bool,
    /// Whether the backend answers every call at once
    /// ([`Backend::decides_now`]), read when the policy was bound.
    decides_now: bool,
    /// The options it was built with, to tell a changed limiter from an
    /// unchanged one when policies are replaced at run time (its top keys
    /// compared through `top_capacity`), and the exempt and deny lists a
    /// decision reads when `has_lists`; `None` when every setting but the
    /// top keys is the default (boxed, and left out then: a service may
    /// hold tens of thousands of limiters).
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
        let top_capacity = top::capacity_of(options.top_keys);
        Ok(Self {
            top_capacity,
            top: TopSlot::new(top_capacity, previous.map(|p| (&p.top, p.top_capacity))),
            options: (!options.same_besides_top_keys(&Options::default())).then(|| Box::new(options.clone())),
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
            has_lists: options.has_lists(),
            shadow: options.shadow,
            decides_now: backend.decides_now(),
        })
    }

    /// The decision of the exempt and deny lists, when the key is on one;
    /// the deny list wins.
    #[inline]
    fn listed(&self, key: &[u8]) -> Option<Decision> {
        if !self.has_lists {
            return None;
        }
        let lists = self.options.as_deref()?;
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

    /// Applies shadow mode to a decision of `cost` units for `key` and
    /// counts it.
    #[inline]
    fn conclude(&self, mut decision: Decision, key: &[u8], cost: u64) -> Decision {
        if self.shadow && !decision.allowed {
            decision.allowed = true;
            decision.shadow_denied = true;
            self.metrics.shadow_denied();
        }
        if !decision.fail_open {
            self.metrics.decided(decision.allowed);
        }
        if let Some(capacity) = self.top_capacity {
            self.record_top(capacity, key, &decision, cost);
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
                match self.look_up(cache, key, now) {
                    Looked::Denied(decision) => return Ok(decision),
                    Looked::Ask(claimed) => {
                        claim = claimed;
                        break;
                    }
                    Looked::Wait(answered) => {
                        answered.await;
                        now = p.clock.now_nanos();
                    }
                }
            }
        }
        let passage = match self.pass_breaker(p, now, claim, key, cost) {
            Ok(passage) => passage,
            Err(answer) => return answer,
        };
        if passage.gate == Gate::Probe {
            if let Err(err) = self.binding.reconnect().await {
                return self.probe_unreachable(p, passage, err, key, cost);
            }
        }
        let started = self.start();
        let result = self.binding.apply(key, cost).await;
        self.record_store(p, passage, result, started, key, cost)
    }

    /// [`Limiter::allow_protected`] on a backend that decides now, without
    /// waiting: the same steps, except that a request finding another one
    /// of its key asking the store (the deny cache's single flight) asks
    /// the store itself, which answers at once, and that a probe of the
    /// circuit breaker does not reconnect first (such a backend keeps no
    /// connection). `None`, with nothing charged, when the binding does not
    /// answer at once after all.
    fn allow_protected_now(&self, p: &Protection, key: &[u8], cost: u64) -> Option<Result<Decision, Error>> {
        let now = p.clock.now_nanos();
        let mut claim = None;
        if let (true, Some(cache)) = (cost > 0, &p.deny) {
            match self.look_up(cache, key, now) {
                Looked::Denied(decision) => return Some(Ok(decision)),
                Looked::Ask(claimed) => claim = claimed,
                Looked::Wait(_) => {}
            }
        }
        let passage = match self.pass_breaker(p, now, claim, key, cost) {
            Ok(passage) => passage,
            Err(answer) => return Some(answer),
        };
        let started = self.start();
        // Returning early drops the passage: its probe is given back and
        // its claim released.
        let result = self.binding.apply_now(key, cost)?;
        Some(self.record_store(p, passage, result, started, key, cost))
    }

    /// What the deny cache says of a request of cost 1 or more for `key` at
    /// `now`, a cached denial counted as a hit.
    #[inline]
    fn look_up<'c>(&self, cache: &'c DenyTable, key: &'c [u8], now: u64) -> Looked<'c> {
        match cache.lookup(key, now) {
            Lookup::Denied(decision) => {
                self.metrics.deny_cache_hit();
                Looked::Denied(decision)
            }
            Lookup::Ask { claimed } => Looked::Ask(claimed.then(|| Claim::new(cache, key))),
            Lookup::Wait(answered) => Looked::Wait(answered),
        }
    }

    /// Takes a request that the deny cache sends to the store (holding
    /// `claim`, when it asks for its key's waiters) through the circuit
    /// breaker: the passage to the store, or the fail policy's answer when
    /// the breaker is open.
    fn pass_breaker<'p>(
        &self,
        p: &'p Protection,
        now: u64,
        claim: Option<Claim<'p>>,
        key: &[u8],
        cost: u64,
    ) -> Result<Passage<'p>, Result<Decision, Error>> {
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
            return Err(self.on_failure(err, key, cost));
        }
        Ok(Passage {
            now,
            gate,
            probe: ProbeGuard::arm(gate, p.breaker.as_ref()),
            claim,
        })
    }

    /// A probe whose store could not be reached again: counted as failed
    /// without a decision being sent, and answered by the fail policy.
    #[cold]
    fn probe_unreachable(
        &self,
        p: &Protection,
        passage: Passage<'_>,
        err: BackendError,
        key: &[u8],
        cost: u64,
    ) -> Result<Decision, Error> {
        passage.probe.disarm();
        if let Some(breaker) = &p.breaker {
            breaker.record(passage.gate, false, p.clock.now_nanos());
        }
        if let Some(claim) = passage.claim {
            claim.settle(Settled::Failed);
        }
        self.on_failure(err, key, cost)
    }

    /// Records the store's answer to a request that went through `passage`
    /// (in the circuit breaker, and in the deny cache when it is a denial
    /// of a unit request), then applies the fail policy to it and counts it.
    fn record_store(
        &self,
        p: &Protection,
        passage: Passage<'_>,
        result: Result<Decision, BackendError>,
        started: Option<u64>,
        key: &[u8],
        cost: u64,
    ) -> Result<Decision, Error> {
        passage.probe.disarm();
        if let Some(breaker) = &p.breaker {
            breaker.record(passage.gate, result.is_ok(), p.clock.now_nanos());
        }
        if let Some(cache) = &p.deny {
            // Only a unit request's denial says when every request is denied.
            let settled = match &result {
                Ok(decision) if cost == 1 && cache.insert(key, passage.now, decision) => Settled::Cached,
                Ok(_) => Settled::Decided,
                Err(_) => Settled::Failed,
            };
            if let Some(claim) = passage.claim {
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
            return Ok(self.conclude(decision, key, cost));
        }
        let result = match &self.protection {
            Some(protection) => self.allow_protected(protection, key, cost).await,
            None => {
                let started = self.start();
                let result = self.binding.apply(key, cost).await;
                self.finish(result, started, key, cost)
            }
        };
        result.map(|decision| self.conclude(decision, key, cost))
    }

    /// Whether the backend answers every decision at once
    /// ([`Backend::decides_now`]), so that [`Limits::check_n`] decides
    /// without waiting.
    ///
    /// [`Limits::check_n`]: crate::Limits::check_n
    pub fn decides_now(&self) -> bool {
        self.decides_now
    }

    /// [`Limiter::allow_n`] without waiting, step for step (the lists, the
    /// deny cache, the circuit breaker, the fail policy, shadow mode and
    /// the metrics), when the backend [decides now](Backend::decides_now);
    /// `None`, with nothing done, otherwise.
    pub(crate) fn decide_now(&self, key: &[u8], cost: u64) -> Option<Result<Decision, Error>> {
        if !self.decides_now {
            return None;
        }
        if let Some(decision) = self.listed(key) {
            return Some(Ok(self.conclude(decision, key, cost)));
        }
        let result = match &self.protection {
            Some(protection) => self.allow_protected_now(protection, key, cost)?,
            None => {
                let started = self.start();
                let result = self.binding.apply_now(key, cost)?;
                self.finish(result, started, key, cost)
            }
        };
        Some(result.map(|decision| self.conclude(decision, key, cost)))
    }

    /// [`Limiter::operate`] without waiting, when the backend [decides
    /// now](Backend::decides_now); `None`, with nothing done, otherwise.
    pub(crate) fn operate_at_once(&self, key: &[u8], op: Operation) -> Option<Result<(), Error>> {
        if !self.decides_now {
            return None;
        }
        if let Err(err) = op.validate() {
            return Some(Err(err.into()));
        }
        self.forget_denial(key);
        Some(self.binding.operate_now(key, op)?.map_err(Error::Backend))
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
        let same_rest = match &self.options {
            Some(built) => built.same_besides_top_keys(options),
            None => options.same_besides_top_keys(&Options::default()),
        };
        same_rest && top::settings_of(self.top_capacity) == options.top_keys
    }

    /// The `n` keys with the highest counts of `metric` over the last
    /// minute, highest first; `None` unless the limiter keeps top keys
    /// ([`LimiterBuilder::top_keys`]). The counts and their bounds are
    /// described at [`TopKeys`](crate::TopKeys). Each key's
    /// [`remaining`](crate::TopKey::remaining) is filled when the backend
    /// [decides now](Self::decides_now) (in memory); on a remote store use
    /// [`top_keys_with_remaining`](Self::top_keys_with_remaining).
    pub fn top_keys(&self, metric: TopMetric, n: usize) -> Option<TopList> {
        let mut list = self.top.list(self.top_capacity?, || self.top_clock(), metric, n);
        if self.decides_now {
            for top in &mut list.keys {
                top.remaining = self.remaining_of(top).and_then(|key| match self.listed(key) {
                    Some(listed) => Some(listed.remaining),
                    None => Some(self.binding.apply_now(key, 0)?.ok()?.remaining),
                });
            }
        }
        Some(list)
    }

    /// [`top_keys`](Self::top_keys) with every key's
    /// [`remaining`](crate::TopKey::remaining) asked of the store, one
    /// charge-free call per key (`None` where it failed).
    pub async fn top_keys_with_remaining(&self, metric: TopMetric, n: usize) -> Option<TopList> {
        let mut list = self.top.list(self.top_capacity?, || self.top_clock(), metric, n);
        for top in &mut list.keys {
            let Some(key) = self.remaining_of(top) else {
                continue;
            };
            top.remaining = match self.listed(key) {
                Some(listed) => Some(listed.remaining),
                None => self.binding.apply(key, 0).await.ok().map(|d| d.remaining),
            };
        }
        Some(list)
    }

    /// Counts a decision in the top keys, out of the decision's line: a
    /// limiter without them pays one test.
    #[inline(never)]
    fn record_top(&self, capacity: NonZeroU32, key: &[u8], decision: &Decision, cost: u64) {
        self.top
            .record(capacity, || self.top_clock(), key, decision, cost);
    }

    /// The clock of the top keys: the local clock the limiter was built
    /// with (kept in its options, which a set clock makes non-default).
    #[cold]
    fn top_clock(&self) -> crate::clock::ClockHandle {
        self.options
            .as_deref()
            .map_or(crate::clock::ClockHandle::System, Options::top_clock)
    }

    /// The key whose remaining budget a top key shows: none for a cut key.
    /// The answer is a peek's, through the lists, but neither counted in
    /// the metrics and the top keys nor sent through the deny cache and
    /// the circuit breaker.
    fn remaining_of<'k>(&self, top: &'k crate::TopKey) -> Option<&'k [u8]> {
        (!top.cut).then_some(&top.key[..])
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

    /// Decides one request of `cost` units synchronously (in-memory only),
    /// exactly as [`Limiter::allow_n`] does: through the lists, the deny
    /// cache and the circuit breaker when there are any, shadow mode and the
    /// metrics. [`Limits::check_n`](crate::Limits::check_n) is the same for
    /// any backend that decides now.
    #[inline]
    pub fn check_n(&self, key: impl AsRef<[u8]>, cost: u64) -> Decision {
        let key = key.as_ref();
        // The path is chosen by what the limiter was built with: a policy
        // without a deny cache, a breaker or a fallback (`protection`)
        // takes the steps of `decide_now` that apply to it, written out so
        // that it pays for nothing else.
        if self.protection.is_some() {
            return self.check_protected(key, cost);
        }
        if let Some(decision) = self.listed(key) {
            return self.conclude(decision, key, cost);
        }
        let started = self.start();
        let decision = self.binding.check(key, cost);
        self.metrics.finish_sample(started);
        self.conclude(decision, key, cost)
    }

    /// [`Self::check_n`] through the deny cache, the circuit breaker and the
    /// fail policy: the steps [`Limiter::allow_n`] takes.
    #[inline(never)]
    fn check_protected(&self, key: &[u8], cost: u64) -> Decision {
        match self.decide_now(key, cost) {
            Some(Ok(decision)) => decision,
            // The in-memory store answers every call and never fails, so
            // neither its breaker opens nor its fail policy applies.
            Some(Err(_)) | None => unreachable!("the in-memory backend decides at once and cannot fail"),
        }
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
        match self.operate_at_once(key.as_ref(), op) {
            Some(result) => result,
            None => unreachable!("the in-memory backend applies operations at once"),
        }
    }
}

/// A protected request on its way to the store, past the deny cache and
/// the circuit breaker.
struct Passage<'p> {
    /// When the request was looked up in the deny cache.
    now: u64,
    /// What the circuit breaker let it through as.
    gate: Gate,
    /// Gives the probe back unless the store's answer is recorded.
    probe: ProbeGuard<'p>,
    /// The deny cache's single flight of the key, when this request asks
    /// for its waiters.
    claim: Option<Claim<'p>>,
}

/// What the deny cache says of a request (a [`Lookup`] with the claim made
/// and a hit counted).
enum Looked<'c> {
    /// Denied from the cache.
    Denied(Decision),
    /// Asks the store, for the key's waiters too when claimed.
    Ask(Option<Claim<'c>>),
    /// Another request asks the store: wait for its answer, then look again.
    Wait(tokio::sync::futures::OwnedNotified),
}

pub(crate) fn validate_prefix(prefix: &str) -> Result<(), ConfigError> {
    if prefix.is_empty() {
        return Err(ConfigError::new("key_prefix", "must not be empty"));
    }
    Ok(())
}
