//! How a limiter is built beyond its policy: the fail policy, the lists,
//! shadow mode and what protects a remote store.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::memory::MemoryBackend;
use crate::clock::{ClockHandle, SharedClock, SystemClock};
use crate::error::{ConfigError, Error};
use crate::keylist::KeyList;
use crate::lease::{Lease, LeaseTable};
use crate::metrics::LimiterMetrics;
use crate::policy::Policy;
use crate::protection::{Breaker, CircuitBreaker, DenyCache, DenyTable, Fallback, Protection};
use crate::top::TopKeys;

/// What a limiter does when its backend fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FailPolicy {
    /// Deny: the call returns the backend error (the default).
    #[default]
    Closed,
    /// Admit: the call returns an allowed decision with nothing remaining and
    /// [`Decision::fail_open`](crate::Decision::fail_open) set, and counts the event (see
    /// [`Limiter::fail_open_events`](crate::Limiter::fail_open_events)).
    Open,
    /// Decide on an in-memory limiter of its own policy, given with
    /// [`LimiterBuilder::fallback`](crate::LimiterBuilder::fallback) (typically the shared limit divided by
    /// the number of instances): the decision has [`Decision::fallback`](crate::Decision::fallback)
    /// set. A circuit breaker comes with it (the default
    /// [`CircuitBreaker`] unless another is given), so an outage costs one
    /// timeout per cool-down instead of one per request.
    Fallback,
}

/// What a request is charged: only when admitted (the default), or
/// whether admitted or not, for usage reported after the fact
/// ([`charge: always`](crate::_documentation::semantics#usage-reported-after-the-fact-charge-always)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Charge {
    /// A denied request is charged nothing: the rule of every strategy.
    #[default]
    Admitted,
    /// Every request of cost 1 or more is charged its cost: decided by the
    /// strategy's own test (`allowed` says whether it fitted), then
    /// charged as a penalty charges, admitted or not. A request of cost 0
    /// stays a peek. For usage known only after the work: a check of cost
    /// 0 before it, a report of what it used after.
    Always,
}

impl Charge {
    /// The setting's name in policy files, Envoy files and the decision
    /// service: `admitted` or `always`.
    pub fn name(self) -> &'static str {
        match self {
            Charge::Admitted => "admitted",
            Charge::Always => "always",
        }
    }
}

impl std::str::FromStr for Charge {
    type Err = ConfigError;

    /// Reads `admitted` or `always`.
    fn from_str(text: &str) -> Result<Self, ConfigError> {
        match text {
            "admitted" => Ok(Charge::Admitted),
            "always" => Ok(Charge::Always),
            other => Err(ConfigError::new(
                "charge",
                format!("unknown value {other:?}; expected \"admitted\" (the default) or \"always\""),
            )),
        }
    }
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
    pub(crate) shadow: bool,
    pub(crate) exempt: KeyList,
    pub(crate) deny: KeyList,
    pub(crate) top_keys: Option<TopKeys>,
    pub(crate) lease: Option<Lease>,
    /// The longest random extra added to an awaited admission's retry
    /// after a refusal (zero: none).
    pub(crate) jitter: Duration,
    /// What a request is charged.
    pub(crate) charge: Charge,
}

/// The longest jitter a limiter accepts
/// ([`LimiterBuilder::acquire_jitter`](crate::LimiterBuilder::acquire_jitter)).
pub(crate) const MAX_JITTER: Duration = Duration::from_secs(3_600);

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("fail", &self.fail)
            .field("deny_cache", &self.deny_cache)
            .field("breaker", &self.breaker)
            .field("fallback", &self.fallback)
            .field("local_clock", &self.clock.is_some())
            .field("shadow", &self.shadow)
            .field("exempt", &self.exempt)
            .field("deny", &self.deny)
            .field("top_keys", &self.top_keys)
            .field("lease", &self.lease)
            .field("jitter", &self.jitter)
            .field("charge", &self.charge)
            .finish()
    }
}

impl Options {
    /// Whether every setting but the top keys is the same (clocks compare
    /// by identity): what tells a changed limiter from an unchanged one
    /// beside its top keys, which a limiter holds apart.
    pub(crate) fn same_besides_top_keys(&self, other: &Self) -> bool {
        let same_clock = match (&self.clock, &other.clock) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        };
        same_clock
            && self.fail == other.fail
            && self.deny_cache == other.deny_cache
            && self.breaker == other.breaker
            && self.fallback == other.fallback
            && self.shadow == other.shadow
            && self.exempt == other.exempt
            && self.deny == other.deny
            && self.lease == other.lease
            && self.jitter == other.jitter
            && self.charge == other.charge
    }

    /// These options as a set's limiter of `policy` inherits them: all of
    /// them, but a concurrency limit leaves out the deny cache, leases and
    /// `charge: always`, which are for rates.
    pub(crate) fn inherited_by(&self, policy: &Policy) -> Options {
        let mut options = self.clone();
        if policy.limits()[0].strategy().is_concurrency() {
            options.deny_cache = None;
            options.lease = None;
            options.charge = Charge::default();
        }
        options
    }

    /// Refuses what a concurrency limit cannot do: cache a denial (a
    /// release frees units at any time, so a cached denial would outlive
    /// its cause), lease units (a permit is held by one request, not a
    /// process), charge usage reported after the fact (nothing is held
    /// after a response).
    pub(crate) fn validate_for_concurrency(&self) -> Result<(), ConfigError> {
        let refused = if self.deny_cache.is_some() {
            Some((
                "deny_cache",
                "a release frees units at any time, so a cached denial would outlive it",
            ))
        } else if self.lease.is_some() {
            Some((
                "lease",
                "a permit is held by one request, not leased by a process",
            ))
        } else if self.charge == Charge::Always {
            Some((
                "charge",
                "a permit is acquired before a request runs; report usage with a rate limit",
            ))
        } else {
            None
        };
        match refused {
            Some((field, why)) => Err(ConfigError::new(
                field,
                format!("is not for a concurrency limit: {why}"),
            )),
            None => Ok(()),
        }
    }

    /// Checks that the fail policy and the fallback agree, and the top
    /// keys' capacity.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if let Some(top) = &self.top_keys {
            top.validate()?;
        }
        if let Some(lease) = &self.lease {
            lease.validate()?;
        }
        if self.jitter > MAX_JITTER {
            return Err(ConfigError::new(
                "acquire_jitter",
                format!(
                    "{:?} is longer than the longest jitter, {:?}",
                    self.jitter, MAX_JITTER
                ),
            ));
        }
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

    /// The clock the top keys' minutes are timed by: the local clock.
    pub(crate) fn top_clock(&self) -> ClockHandle {
        // The system clock is called directly: no allocation per limiter
        // (an Envoy file builds one limiter per descriptor).
        self.clock
            .clone()
            .map_or(ClockHandle::System, ClockHandle::Shared)
    }

    /// Whether there is an exempt or a deny list.
    pub(crate) fn has_lists(&self) -> bool {
        !self.exempt.is_empty() || !self.deny.is_empty()
    }

    /// The protection these options ask for (the fallback checked, and
    /// bound by its first decision), counting on `metrics`. Leases are
    /// left out unless the backend `leases` (one in memory does not: its
    /// decisions are local already).
    pub(crate) fn protection(
        &self,
        leases: bool,
        metrics: &LimiterMetrics,
    ) -> Result<Option<Box<Protection>>, Error> {
        let breaker = match (self.breaker, self.fail) {
            (Some(settings), _) => Some(settings),
            (None, FailPolicy::Fallback) => Some(CircuitBreaker::default()),
            (None, _) => None,
        };
        let lease = self.lease.filter(|_| leases);
        if self.deny_cache.is_none() && breaker.is_none() && self.fallback.is_none() && lease.is_none() {
            return Ok(None);
        }
        let clock: SharedClock = self.clock.clone().unwrap_or_else(|| Arc::new(SystemClock));
        let fallback = match self.fallback {
            Some(policy) => {
                let backend = MemoryBackend::new().shared_clock(clock.clone());
                let fallback = Fallback::new(backend, policy).map_err(|e| match e {
                    Error::Config(e) => Error::Config(e.within("fallback")),
                    other => other,
                })?;
                Some(Box::new(fallback))
            }
            None => None,
        };
        Ok(Some(Box::new(Protection {
            clock,
            deny: self.deny_cache.map(DenyTable::new),
            breaker: breaker.map(Breaker::new),
            fallback,
            lease: lease.map(|settings| {
                let (decisions, returned) = metrics.lease_counters();
                LeaseTable::new(settings, decisions, returned)
            }),
        })))
    }
}
