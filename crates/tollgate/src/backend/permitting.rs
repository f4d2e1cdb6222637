//! What a store answers to a [`Call::Permit`](super::Call::Permit).

use std::time::Duration;

use crate::decision::Decision;
use crate::strategy::permits::PermitOutcome;
use crate::strategy::Tick;

/// A store's answer to an operation on a key's permits
/// ([`Call::Permit`](super::Call::Permit)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Permitted {
    /// The operation's answer as a decision: `allowed` whether it was
    /// done (the permit acquired, released or extended), `limit` the
    /// concurrency limit `L`, `remaining` the units free after it
    /// (`L − in_flight`), `reset` the time until the key's last permit
    /// expires and, for a denied acquire, `retry_after` the time until
    /// enough permits expire for its cost to fit.
    pub decision: Decision,
    /// How long the permit acquired or extended lives from now.
    pub expires_in: Option<Duration>,
}

impl Permitted {
    /// The answer `outcome` (in ticks of `tick`) gives under limit `limit`.
    pub fn from_outcome(outcome: PermitOutcome, limit: u64, tick: Tick) -> Self {
        let decision = Decision::new(
            outcome.done,
            limit,
            limit.saturating_sub(outcome.in_flight),
            tick.duration(outcome.reset),
            outcome.retry_after.map(|t| tick.duration(t)),
        );
        Self {
            decision,
            expires_in: outcome.expires_in.map(|t| tick.duration(t)),
        }
    }

    /// The same answer with `decision` in place of its own (a blocked
    /// key's denial).
    pub(crate) fn with_decision(self, decision: Decision) -> Self {
        Self { decision, ..self }
    }

    /// The units held after the operation (`L − remaining`).
    pub fn in_flight(&self) -> u64 {
        self.decision.limit - self.decision.remaining
    }
}
