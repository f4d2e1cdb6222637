//! The result of a rate-limiting decision.

use std::time::Duration;

use crate::strategy::{CompoundOutcome, LimitRate, Outcome, Tick};

/// What the limiter decided for one request.
///
/// Fields may be added in later versions; build decisions with
/// [`Decision::new`] outside this crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decision {
    /// Whether the request may proceed.
    pub allowed: bool,
    /// `L` of the limit that bound the decision (the policy's only limit
    /// unless the policy is compound).
    pub limit: u64,
    /// How many further unit requests would be admitted at this same instant.
    pub remaining: u64,
    /// Time until the key's state is fresh again if no more requests arrive
    /// (zero when already fresh).
    pub reset: Duration,
    /// Only when denied: the smallest delay after which this same request
    /// would be admitted if nothing else happens; `None` when allowed or when
    /// the request can never be admitted (its cost exceeds the limit).
    pub retry_after: Option<Duration>,
    /// Whether this is not a real decision but the admission a
    /// [`FailPolicy::Open`](crate::FailPolicy::Open) limiter grants when its
    /// backend failed: no state was read or charged, so `allowed` says
    /// nothing about the key's usage and `remaining` is 0. Always `false` for
    /// decisions a backend made.
    pub fail_open: bool,
    /// The index, in [`Policy::limits`](crate::Policy::limits), of the limit
    /// that bound the decision: when denied, the denying limit with the
    /// longest `retry_after`; when allowed, the limit with the least
    /// `remaining` (ties: the first listed). Always 0 for a single-limit
    /// policy.
    pub bound_by: usize,
    /// Whether the store failed (or its [circuit
    /// breaker](crate::protection::CircuitBreaker) was open) and the
    /// decision was made by the limiter's in-memory fallback policy under
    /// [`FailPolicy::Fallback`](crate::FailPolicy::Fallback): `limit`,
    /// `remaining` and the times are the fallback policy's, for this process
    /// alone.
    pub fallback: bool,
    /// Whether the policy is in shadow mode and enforcement would have
    /// denied this request: `allowed` is then `true` and the other fields
    /// are what enforcement computed ([shadow
    /// mode](crate::_documentation::semantics#shadow-mode)).
    pub shadow_denied: bool,
    /// Whether the key is on the policy's exempt list or deny list, which
    /// decided without the limits.
    pub listed: Option<Listed>,
    /// Whether this is not a decision but a part of a request of several
    /// parts ([`together`](crate::together)) that was never asked about: a
    /// decisive part was denied before the store was asked (by a denial
    /// its limiter's deny cache holds), so the request was denied with
    /// nothing read or charged for this part. `allowed` is then `true` (it
    /// denies nothing), `remaining` 0 and the times zero: they say nothing
    /// about the key. Always `false` for a request of one part.
    pub not_asked: bool,
}

/// The list that decided a request ([exemptions and deny
/// lists](crate::_documentation::semantics#exemptions-and-deny-lists)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Listed {
    /// The key is exempt: allowed, neither charged nor stored.
    Exempt,
    /// The key is on the deny list: denied, with no `retry_after`.
    Denied,
}

impl Listed {
    /// `exempt` or `deny`.
    pub const fn name(self) -> &'static str {
        match self {
            Listed::Exempt => "exempt",
            Listed::Denied => "deny",
        }
    }
}

impl Decision {
    /// A decision made by a backend (`fail_open` is `false`), for backends
    /// outside this crate and for tests of code that consumes decisions.
    pub fn new(
        allowed: bool,
        limit: u64,
        remaining: u64,
        reset: Duration,
        retry_after: Option<Duration>,
    ) -> Self {
        Self {
            allowed,
            limit,
            remaining,
            reset,
            retry_after,
            fail_open: false,
            bound_by: 0,
            fallback: false,
            shadow_denied: false,
            listed: None,
            not_asked: false,
        }
    }

    /// Converts a compound outcome in ticks of `tick` length into a
    /// decision, taking `limit` from the limit that bound it.
    pub fn from_compound(compound: CompoundOutcome, limits: &[LimitRate], tick: Tick) -> Self {
        Self {
            bound_by: compound.bound_by,
            ..Self::from_outcome(compound.outcome, limits[compound.bound_by].rate.limit, tick)
        }
    }

    /// Converts a strategy outcome in ticks of `tick` length into a decision.
    pub fn from_outcome(outcome: Outcome, limit: u64, tick: Tick) -> Self {
        Self::new(
            outcome.allowed,
            limit,
            outcome.remaining,
            tick.duration(outcome.reset),
            outcome.retry_after.map(|t| tick.duration(t)),
        )
    }

    /// The decision for a key an operator blocked, `left` ticks before the
    /// block ends, whose state resets in `reset` ticks: denied, nothing
    /// remaining, `retry_after` when the block ends, `limit` that of the
    /// policy's first limit.
    pub fn blocked(left: u64, reset: u64, limit: u64, tick: Tick) -> Self {
        Self::new(
            false,
            limit,
            0,
            tick.duration(reset.max(left)),
            Some(tick.duration(left)),
        )
    }

    /// The decision for a key on a list: exempt keys are allowed with the
    /// whole `limit` remaining, denied ones denied with nothing remaining
    /// and no `retry_after`.
    pub fn listed(listed: Listed, limit: u64) -> Self {
        let allowed = listed == Listed::Exempt;
        Self {
            listed: Some(listed),
            ..Self::new(
                allowed,
                limit,
                if allowed { limit } else { 0 },
                Duration::ZERO,
                None,
            )
        }
    }

    /// The decision returned under fail-open when the backend failed:
    /// allowed, nothing remaining, no reset, no retry delay, and
    /// [`fail_open`](Decision::fail_open) set. `limit` is that of the
    /// policy's first limit.
    pub fn failed_open(limit: u64) -> Self {
        Self {
            fail_open: true,
            ..Self::new(true, limit, 0, Duration::ZERO, None)
        }
    }

    /// A part of a request of several parts that was never asked about
    /// ([`not_asked`](Decision::not_asked)); `limit` is that of its
    /// policy's first limit.
    pub(crate) fn unasked(limit: u64) -> Self {
        Self {
            not_asked: true,
            ..Self::new(true, limit, 0, Duration::ZERO, None)
        }
    }
}
