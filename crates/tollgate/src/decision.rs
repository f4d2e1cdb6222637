//! The result of a rate-limiting decision.

use std::time::Duration;

use crate::strategy::Outcome;

/// What the limiter decided for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request may proceed.
    pub allowed: bool,
    /// `L`, the policy's limit.
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
}

impl Decision {
    /// Converts a strategy outcome in ticks of `tick` length into a decision.
    pub fn from_outcome(outcome: Outcome, limit: u64, tick: Tick) -> Self {
        Self {
            allowed: outcome.allowed,
            limit,
            remaining: outcome.remaining,
            reset: tick.duration(outcome.reset),
            retry_after: outcome.retry_after.map(|t| tick.duration(t)),
        }
    }

    /// The decision returned under fail-open when the backend failed:
    /// allowed, nothing remaining, no reset and no retry delay.
    pub fn fail_open(limit: u64) -> Self {
        Self {
            allowed: true,
            limit,
            remaining: 0,
            reset: Duration::ZERO,
            retry_after: None,
        }
    }
}

/// The length of one clock tick of a backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tick {
    /// Nanosecond ticks (the in-memory backend).
    Nanos,
    /// Microsecond ticks (stores whose arithmetic is exact only to 2^53).
    Micros,
}

impl Tick {
    /// The duration of `ticks` ticks.
    pub fn duration(self, ticks: u64) -> Duration {
        match self {
            Tick::Nanos => Duration::from_nanos(ticks),
            Tick::Micros => Duration::from_micros(ticks),
        }
    }

    /// Converts nanoseconds since the epoch into ticks (rounding down).
    pub fn from_nanos(self, nanos: u64) -> u64 {
        match self {
            Tick::Nanos => nanos,
            Tick::Micros => nanos / 1_000,
        }
    }
}
