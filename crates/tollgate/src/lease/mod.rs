//! Leased quotas: a process takes several units of a key from a shared
//! store in one call and spends them on its own requests without asking
//! the store again, within exact bounds ([leased
//! quotas](crate::_documentation::semantics#leased-quotas)).

mod table;

use std::time::Duration;

pub(crate) use table::{LeaseCall, LeaseTable, Take};

use crate::error::ConfigError;

/// Settings of a limiter's leases on a shared store (off unless set with
/// [`LimiterBuilder::lease`](crate::LimiterBuilder::lease)).
///
/// A request that finds no lease of its key asks the store for up to
/// [`max_units`](Self::max_units) units at once: its own cost, plus what
/// this process spent on the key during the last
/// [`max_age`](Self::max_age) (a key seen once takes nothing more), never
/// more than half of what the limit has left divided by the processes
/// leasing the key. The units beyond its cost are the lease: the key's next
/// requests in this process are admitted from it at in-memory speed until
/// it runs out, reaches `max_age`, or (windows) its window ends. Unspent
/// units are given back when a lease ends early or by its age.
///
/// What it bounds, for `N` processes on one store:
///
/// - fixed and sliding windows: no request beyond the limit is ever
///   admitted;
/// - token and leaky buckets: at most `L + floor((d + max_age) / T)` units
///   in any interval of length `d`, against `L + floor(d / T)` without
///   leases;
/// - under-admission: at most `(N − 1) × (max_units − 1)` units held
///   unspent by other processes at any instant.
///
/// Leases apply to backends that keep state in a shared store and lease
/// (the Redis and PostgreSQL backends, the
/// [`StoreBackend`](crate::backend::store::StoreBackend));
/// a backend that decides in memory already decides locally, and one that
/// does not lease decides every request as without the setting. Decisions
/// made from a lease are counted in `tollgate_lease_decisions_total`, units
/// given back in `tollgate_lease_returned_units_total`.
///
/// A process keeps leases for at most [`Lease::MAX_KEYS`] keys per
/// limiter; beyond that, further keys are decided one request at a time
/// until leases end, so a flood of distinct keys costs round trips, never
/// memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    max_units: u64,
    max_age: Duration,
}

impl Lease {
    /// The most keys one limiter holds leases of (or tracks the spending
    /// of, to size the next lease).
    pub const MAX_KEYS: usize = 65_536;

    /// The largest [`Lease::max_units`].
    pub const MAX_UNITS: u64 = 1 << 20;

    /// The longest [`Lease::max_age`].
    pub const MAX_AGE: Duration = Duration::from_secs(60);
}

impl Default for Lease {
    /// 64 units for at most 100 ms.
    fn default() -> Self {
        Self {
            max_units: 64,
            max_age: Duration::from_millis(100),
        }
    }
}

impl Lease {
    /// Leases of at most `max_units` units (a request's own cost included)
    /// that live at most `max_age`.
    pub fn new(max_units: u64, max_age: Duration) -> Self {
        Self { max_units, max_age }
    }

    /// The most units one lease takes, the request's own cost included:
    /// from 1 (no lease: every request asks the store) to
    /// [`Self::MAX_UNITS`].
    pub fn max_units(&self) -> u64 {
        self.max_units
    }

    /// How long a lease lives at most, counted from when the request for it
    /// was sent: from 1 ms to [`Self::MAX_AGE`]. Operations on a key in
    /// another process take effect here within this time.
    pub fn max_age(&self) -> Duration {
        self.max_age
    }

    /// Checks the settings' ranges, naming the field that is out of range.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=Self::MAX_UNITS).contains(&self.max_units) {
            return Err(ConfigError::new(
                "lease.max_units",
                format!("must be from 1 to {}, not {}", Self::MAX_UNITS, self.max_units),
            ));
        }
        if self.max_age < Duration::from_millis(1) || self.max_age > Self::MAX_AGE {
            return Err(ConfigError::new(
                "lease.max_age",
                format!(
                    "must be from 1ms to {}s, not {:?}",
                    Self::MAX_AGE.as_secs(),
                    self.max_age
                ),
            ));
        }
        Ok(())
    }
}
