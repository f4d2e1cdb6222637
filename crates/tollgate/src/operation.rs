//! Per-key operations: the changes an operator makes to one key's state.

use std::time::Duration;

use crate::error::ConfigError;
use crate::policy::MAX_WINDOW;
use crate::strategy::MAX_LIMIT;

/// A change to one key's state, applied atomically with respect to decisions
/// on the key, exactly as [per-key
/// operations](crate::_documentation::semantics#per-key-operations) defines
/// it, on every limit of the policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Back to fresh state; a block ends.
    Reset,
    /// Denied until this long from now (replacing any block; zero lifts it).
    Block(Duration),
    /// Gives back up to this many units the key was charged.
    Refund(u64),
    /// Charges this many units without an admission test.
    Penalty(u64),
}

/// Refuses a cost above [`MAX_LIMIT`], which no strategy charges exactly:
/// an operation's, or a report's ([`Limiter::charge`](crate::Limiter::charge)).
pub(crate) fn check_cost(cost: u64) -> Result<(), ConfigError> {
    if cost > MAX_LIMIT {
        return Err(ConfigError::new(
            "cost",
            format!("{cost} exceeds 2^62 = {MAX_LIMIT}, the largest cost"),
        ));
    }
    Ok(())
}

impl Operation {
    /// Checks the operation's argument: a cost of at most
    /// [`MAX_LIMIT`](crate::Policy::MAX_LIMIT), a block of at most
    /// [`MAX_WINDOW`](crate::Policy::MAX_WINDOW).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming `cost` or `duration`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match *self {
            Operation::Refund(cost) | Operation::Penalty(cost) => check_cost(cost),
            Operation::Block(duration) if duration > MAX_WINDOW => Err(ConfigError::new(
                "duration",
                format!(
                    "{}s exceeds the longest block, {}s (100 years)",
                    duration.as_secs(),
                    MAX_WINDOW.as_secs()
                ),
            )),
            Operation::Block(_) | Operation::Reset => Ok(()),
        }
    }

    /// The operation's name, as logs and the decision service show it.
    pub fn name(&self) -> &'static str {
        match self {
            Operation::Reset => "reset",
            Operation::Block(_) => "block",
            Operation::Refund(_) => "refund",
            Operation::Penalty(_) => "penalty",
        }
    }
}
