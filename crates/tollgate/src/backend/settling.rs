//! What a store answers to a [`Call::Settle`](super::Call::Settle).

use crate::decision::Decision;

/// A store's answer to the settle of a hold
/// ([`Call::Settle`](super::Call::Settle)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Settled {
    /// Whether the hold was settled now: `false` when it was settled
    /// before, its time to be settled is up, or it was never made
    /// (nothing then changed).
    pub settled: bool,
    /// The key's state after it, as a peek reads it: `remaining`, `reset`
    /// and, when nothing is left, `retry_after` (`allowed` is whether a
    /// unit would be admitted now).
    pub decision: Decision,
}

impl Settled {
    /// The answer to a settle: whether it `settled`, and the key's state
    /// after it as `decision`.
    pub fn new(settled: bool, decision: Decision) -> Self {
        Self { settled, decision }
    }
}
