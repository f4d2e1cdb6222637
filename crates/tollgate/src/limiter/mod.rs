//! The limiter: one policy on one backend.

mod acquire;
mod builder;
mod drive;
mod hold;
mod machine;
mod options;
mod permit;
mod reserve;
mod setters;
pub mod together;

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use builder::LimiterBuilder;
pub use hold::Hold;
pub(crate) use options::Options;
pub use options::{Charge, FailPolicy};
pub use permit::Permit;
pub use reserve::Reservation;
pub(crate) use setters::{option_setters, summary};

use crate::backend::memory::MemoryBackend;
use crate::backend::{Answer, Answers, Backend, Binding, Call, Scope};
use crate::decision::Decision;
use crate::error::{ConfigError, Error};
use crate::metrics::LimiterMetrics;
use crate::policy::Policy;
use crate::protection::Protection;
use crate::top::{self, TopList, TopMetric, TopSlot};

/// The key prefix used unless configured otherwise
/// ([`Limiter::DEFAULT_KEY_PREFIX`]).
pub(crate) const DEFAULT_KEY_PREFIX: &str = "tollgate";

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
    /// Whether a request leaves the short path to the store for the
    /// machine's steps before it: a step that may decide first (an exempt
    /// or a deny list, read from `options`, which are then not the
    /// defaults; a policy that admits nothing, [`Policy::zero`]), or
    /// requests charged whether admitted or not (`options.charge`). One
    /// flag, so that the short path reads one byte and a limiter stays the
    /// size it was (a service may hold tens of thousands).
    decides_first: bool,
    /// The top keys' capacity, when they are kept.
    top_capacity: Option<NonZeroU32>,
    /// The top keys' table, made at the first decision counted.
    top: TopSlot,
    shadow: bool,
    /// What the store answers ([`Backend::capabilities`]), read when the
    /// policy was bound.
    answers: Answers,
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
    /// The prefix of every key a limiter keeps state under, unless its
    /// builder's `key_prefix` gives another.
    pub const DEFAULT_KEY_PREFIX: &str = DEFAULT_KEY_PREFIX;

    /// The longest random extra an awaited admission adds to its retry
    /// after a refusal ([`LimiterBuilder::acquire_jitter`]).
    pub const MAX_JITTER: std::time::Duration = options::MAX_JITTER;

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
        if scope.policy.limits()[0].strategy().is_concurrency() {
            options.validate_for_concurrency()?;
        }
        let binding = match previous {
            Some(previous) => backend.rebind(scope, &previous.binding, &previous.policy)?,
            None => backend.bind(scope)?,
        };
        let top_capacity = top::capacity_of(options.top_keys);
        let capabilities = backend.capabilities();
        let metrics = LimiterMetrics::for_limiter(
            shared_metrics.or(previous.map(|p| &p.metrics)),
            metrics_resource.unwrap_or(scope.resource),
            scope.policy,
        );
        let protection = options.protection(capabilities.leases, &metrics)?;
        let decides_first =
            options.has_lists() || scope.policy.admits_nothing() || options.charge == Charge::Always;
        Ok(Self {
            top_capacity,
            top: TopSlot::new(top_capacity, previous.map(|p| (&p.top, p.top_capacity))),
            options: (!options.same_besides_top_keys(&Options::default())).then(|| Box::new(options.clone())),
            binding,
            policy: *scope.policy,
            fail: options.fail,
            fail_open_events: AtomicU64::new(0),
            metrics,
            protection,
            decides_first,
            shadow: options.shadow,
            answers: Answers::of(capabilities),
        })
    }

    /// Whether this limiter keeps leases: it was built to
    /// [lease](LimiterBuilder::lease) on a backend that leases
    /// ([`Capabilities::leases`](crate::backend::Capabilities::leases)).
    pub fn leases(&self) -> bool {
        self.protection.as_ref().is_some_and(|p| p.lease.is_some())
    }

    /// Ends every lease this limiter holds and gives the unspent units back
    /// to the store (see [`LimiterBuilder::lease`]): call it before the
    /// process exits, and after a policy is replaced, so that other
    /// processes can spend what this one leased. Decisions go on as usual
    /// meanwhile, and take new leases. Returns the units given back.
    ///
    /// Every lease is ended, one store call per key with units left. A
    /// return that fails is not repeated (the store may have applied it):
    /// its units stay charged until they no longer count (the window ends,
    /// the bucket drains).
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] for the first return that failed, after every
    /// other was tried.
    pub async fn end_leases(&self) -> Result<u64, Error> {
        let Some(table) = self.protection.as_ref().and_then(|p| p.lease.as_ref()) else {
            return Ok(0);
        };
        let mut given = 0;
        let mut first_error = None;
        for (key, ask) in table.end_all() {
            match Answer::leased(self.ask_store(Call::Lease { key: &key, ask }).await) {
                Ok(_) => {
                    table.count_returned(ask.returning);
                    given += ask.returning;
                }
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        match first_error {
            Some(err) => Err(Error::Backend(err)),
            None => Ok(given),
        }
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
    /// described at [`TopKeys`](crate::top::TopKeys). Each key's
    /// [`remaining`](crate::top::TopKey::remaining) is filled when the backend
    /// [decides now](Self::decides_now) (in memory); on a remote store use
    /// [`top_keys_with_remaining`](Self::top_keys_with_remaining).
    pub fn top_keys(&self, metric: TopMetric, n: usize) -> Option<TopList> {
        let mut list = self
            .top
            .list(self.top_capacity?, || self.local_clock(), metric, n);
        if self.answers.decides_now() {
            for top in &mut list.keys {
                top.remaining = self
                    .remaining_of(top)
                    .and_then(|key| match self.decided_first(key) {
                        Some(first) => Some(first.remaining),
                        None => {
                            let peek = self.binding.call_now(Call::Decide { key, cost: 0 })?;
                            Some(Answer::decided(peek).ok()?.remaining)
                        }
                    });
            }
        }
        Some(list)
    }

    /// [`top_keys`](Self::top_keys) with every key's
    /// [`remaining`](crate::top::TopKey::remaining) asked of the store, one
    /// charge-free call per key (`None` where it failed).
    pub async fn top_keys_with_remaining(&self, metric: TopMetric, n: usize) -> Option<TopList> {
        let mut list = self
            .top
            .list(self.top_capacity?, || self.local_clock(), metric, n);
        for top in &mut list.keys {
            let Some(key) = self.remaining_of(top) else {
                continue;
            };
            top.remaining = match self.decided_first(key) {
                Some(first) => Some(first.remaining),
                None => {
                    let peek = self.binding.call(Call::Decide { key, cost: 0 }).await;
                    Answer::decided(peek).ok().map(|d| d.remaining)
                }
            };
        }
        Some(list)
    }

    /// Counts a decision in the top keys, out of the decision's line: a
    /// limiter without them pays one test.
    #[inline(never)]
    fn record_top(&self, capacity: NonZeroU32, key: &[u8], decision: &Decision, cost: u64) {
        self.top
            .record(capacity, || self.local_clock(), key, decision, cost);
    }

    /// The limiter's own clock, read by its top keys and by a policy that
    /// admits nothing: the local clock it was built with (kept in its
    /// options, which a set clock makes non-default), else the system
    /// clock.
    #[cold]
    pub(super) fn local_clock(&self) -> crate::clock::ClockHandle {
        self.options
            .as_deref()
            .map_or(crate::clock::ClockHandle::System, Options::top_clock)
    }

    /// The key whose remaining budget a top key shows: none for a cut key.
    /// The answer is a peek's, through the lists, but neither counted in
    /// the metrics and the top keys nor sent through the deny cache and
    /// the circuit breaker.
    fn remaining_of<'k>(&self, top: &'k crate::top::TopKey) -> Option<&'k [u8]> {
        (!top.cut).then_some(&top.key[..])
    }

    /// Whether the limiter is in shadow mode.
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// What a request is charged ([`LimiterBuilder::charge`]).
    pub fn charges(&self) -> Charge {
        // Any setting but the default keeps the options.
        self.options.as_deref().map_or(Charge::Admitted, |o| o.charge)
    }

    /// Whether every request is charged whether admitted or not: read
    /// from the options only when a request leaves the short path.
    #[inline]
    pub(super) fn charges_always(&self) -> bool {
        self.decides_first && self.charges() == Charge::Always
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
}

impl Limiter<MemoryBackend> {
    /// How many keys hold state in memory, summed over the policy's limits
    /// (expired state the janitor has not swept yet included): the figure
    /// a memory budget is planned from.
    pub fn stored_keys(&self) -> usize {
        self.binding.len()
    }

    /// Removes all expired state now; the janitor does so on its own every
    /// [`MemoryBackend::sweep_interval`].
    pub fn sweep(&self) {
        self.binding.sweep();
    }
}

pub(crate) fn validate_prefix(prefix: &str) -> Result<(), ConfigError> {
    if prefix.is_empty() {
        return Err(ConfigError::new("key_prefix", "must not be empty"));
    }
    Ok(())
}
