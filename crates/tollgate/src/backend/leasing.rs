//! What a limiter asks a store that leases, and what the store answers
//! ([`Call::Lease`](super::Call::Lease)).

use std::time::Duration;

use crate::decision::Decision;

/// One call to a store that leases: a request of `cost` units that asks for
/// up to `want` more as a lease, after giving back the units of this
/// process's ended lease of the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseAsk {
    /// The request's own cost (0 for a call that only gives units back).
    pub cost: u64,
    /// The most units to lease beyond `cost`; the store grants
    /// [`lease_all`](crate::strategy::lease_all)'s `extra`.
    pub want: u64,
    /// Who asks: a number that names this process's leases of the key, so
    /// that the store can count the processes leasing it.
    pub lessee: u64,
    /// How long a lease lives at most: how long the store counts a
    /// lessee as leasing the key.
    pub max_age: Duration,
    /// Units of an ended lease to give back first
    /// (and only while its window or level has not moved on).
    pub returning: u64,
    /// The store time before which `returning` is given back: the
    /// [`Leased::return_before`] of the lease they came from.
    pub return_before: u64,
}

impl LeaseAsk {
    /// A call for a request of `cost` units asking for up to `want` more,
    /// as `lessee`, for leases living at most `max_age`, giving nothing
    /// back.
    pub fn new(cost: u64, want: u64, lessee: u64, max_age: Duration) -> Self {
        Self {
            cost,
            want,
            lessee,
            max_age,
            returning: 0,
            return_before: 0,
        }
    }

    /// Gives back `units` first, when the store's time is before `before`.
    pub fn returning(mut self, units: u64, before: u64) -> Self {
        self.returning = units;
        self.return_before = before;
        self
    }
}

/// A store's answer to a [`LeaseAsk`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leased {
    /// The decision of the request's own `cost` units, with `remaining`
    /// what the store has left after charging the lease too.
    pub decision: Decision,
    /// The units leased beyond the cost (0 for none).
    pub extra: u64,
    /// For a lease on a window, the time from the store's reading of the
    /// clock to the end of the earliest window it was charged in: the
    /// lease is not used after it. `None` for buckets and when no lease
    /// was granted.
    pub window_left: Option<Duration>,
    /// The store time before which the lease's unspent units may be given
    /// back ([`LeaseAsk::returning`]): the window's end, [`u64::MAX`] for
    /// buckets.
    pub return_before: u64,
}

impl Leased {
    /// The answer for `decision` with `extra` units leased; `window_left`
    /// and `return_before` as the fields say.
    pub fn new(decision: Decision, extra: u64, window_left: Option<Duration>, return_before: u64) -> Self {
        Self {
            decision,
            extra,
            window_left,
            return_before,
        }
    }
}
