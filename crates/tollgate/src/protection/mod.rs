//! Protecting a shared store: a local deny cache in front of it, leases of
//! a hot key's units, and a circuit breaker with an in-memory fallback
//! limiter behind it.
//!
//! Both are per limiter and matter for remote backends (Redis, a custom
//! [`Store`](crate::backend::store::Store)), where every decision is a round trip:
//!
//! - The [`DenyCache`] remembers, for a key the store denied a unit request,
//!   until when it stays denied (`retry_after` is exact), and answers that
//!   key's requests locally until then. It never changes an admission: state
//!   only relaxes with time, and other processes can only spend more, so the
//!   store would deny them too.
//! - The [`CircuitBreaker`] stops calling a store that keeps failing for a
//!   short, growing cool-down, then lets one probe through and closes again
//!   when the store answers. While it is open, requests meet the limiter's
//!   [fail policy](crate::FailPolicy) at once instead of waiting for a
//!   timeout each: with [`FailPolicy::Fallback`](crate::FailPolicy::Fallback)
//!   they are decided by an in-memory limiter of their own policy.
//!
//! - A [`Lease`] takes a hot key's units from the store a batch at a time
//!   and spends them locally, so a key decided thousands of times a second
//!   costs a store call per batch.
//!
//! [Protecting the store](crate::_documentation::protecting_the_store)
//! explains when to use which.

mod circuit_breaker;
mod deny_cache;
mod fallback;

pub use crate::lease::Lease;
pub use circuit_breaker::CircuitBreaker;
pub(crate) use circuit_breaker::{Breaker, Gate};
pub use deny_cache::DenyCache;
pub(crate) use deny_cache::{Claim, DenyTable, Lookup, Settled};
pub(crate) use fallback::Fallback;

use crate::clock::SharedClock;
use crate::lease::LeaseTable;

/// What protects one limiter's store, built from the settings.
pub(crate) struct Protection {
    /// The clock of the cache, the breaker and the fallback.
    pub(crate) clock: SharedClock,
    pub(crate) deny: Option<DenyTable>,
    pub(crate) breaker: Option<Breaker>,
    /// The in-memory limiter of [`FailPolicy::Fallback`](crate::FailPolicy::Fallback).
    pub(crate) fallback: Option<Box<Fallback>>,
    /// The leases of a limiter on a shared store.
    pub(crate) lease: Option<LeaseTable>,
}

/// Gives up a probe whose store call never finished: dropped with the
/// request's future unless [`ProbeGuard::disarm`] ran first.
pub(crate) struct ProbeGuard<'a> {
    breaker: Option<&'a Breaker>,
}

impl<'a> ProbeGuard<'a> {
    /// Guards the probe `gate` let through, if it is one.
    pub(crate) fn arm(gate: Gate, breaker: Option<&'a Breaker>) -> Self {
        Self {
            breaker: breaker.filter(|_| gate == Gate::Probe),
        }
    }

    /// The call finished: its result is recorded instead.
    pub(crate) fn disarm(mut self) {
        self.breaker = None;
    }
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if let Some(breaker) = self.breaker {
            breaker.abandon_probe();
        }
    }
}
