//! What a store answers to a reservation, and what it needs to give one
//! back ([`Call::Reserve`](super::Call::Reserve),
//! [`Call::Cancel`](super::Call::Cancel)).

use std::time::Duration;

use crate::decision::Decision;
use crate::policy::MAX_LIMITS;
use crate::strategy::State;

/// A store's answer to a reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reserved {
    /// The decision: `allowed` when reserved; when refused, nothing was
    /// charged and `retry_after` is the wait after which the same
    /// reservation would be made.
    pub decision: Decision,
    /// How long the caller waits before it proceeds (zero when refused).
    pub delay: Duration,
    /// What [`Call::Cancel`](super::Call::Cancel) needs to give the
    /// reservation back; `None` when nothing was charged or nothing can be
    /// given back.
    pub receipt: Option<Receipt>,
    /// Refused because the earliest slot lies beyond the longest wait
    /// asked for ([`ReserveOutcome::beyond_max_delay`](crate::strategy::ReserveOutcome::beyond_max_delay)):
    /// waiting `retry_after` does not bring it within that wait.
    pub beyond_max_delay: bool,
}

impl Reserved {
    /// The answer `decision`, proceeding after `delay`, with `receipt`.
    pub fn new(decision: Decision, delay: Duration, receipt: Option<Receipt>) -> Self {
        Self {
            decision,
            delay,
            receipt,
            beyond_max_delay: false,
        }
    }

    /// A refusal (`decision`, nothing charged) because the earliest slot
    /// lies beyond the longest wait asked for.
    pub fn beyond_max_delay(decision: Decision) -> Self {
        Self {
            beyond_max_delay: true,
            ..Self::new(decision, Duration::ZERO, None)
        }
    }
}

/// What a reservation charged, in the store's ticks: its cost, its proceed
/// time and the state of each limit it left, which a cancel finds
/// unchanged when nothing was charged since.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Receipt {
    cost: u64,
    proceed: u64,
    states: [Option<State>; MAX_LIMITS],
    limits: usize,
}

impl Receipt {
    /// A receipt for `cost` units proceeding at tick `proceed`, which left
    /// `states` (one per limit, at most [`Policy::MAX_LIMITS`](crate::Policy::MAX_LIMITS)).
    pub fn new(cost: u64, proceed: u64, states: &[Option<State>]) -> Self {
        let mut all = [None; MAX_LIMITS];
        let limits = states.len().min(MAX_LIMITS);
        all[..limits].copy_from_slice(&states[..limits]);
        Self {
            cost,
            proceed,
            states: all,
            limits,
        }
    }

    /// The units reserved.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The tick at which the reservation proceeds.
    pub fn proceed(&self) -> u64 {
        self.proceed
    }

    /// The state of each limit the reservation left.
    pub fn states(&self) -> &[Option<State>] {
        &self.states[..self.limits]
    }
}
