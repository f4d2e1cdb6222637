//! The last minute of one metric: a Space-Saving summary of the current
//! period and one of the period before, weighed as the sliding window
//! strategy weighs its two windows.
//!
//! Time is cut into periods of [`PERIOD`]. A key's count over the last
//! period is estimated as `previous × (PERIOD − elapsed) / PERIOD +
//! current`, where `elapsed` is the time since the current period began:
//! the previous period's weight is assumed spread evenly over it. Against
//! the same estimate made from exact counts, each figure is high by at
//! most the weighted errors of its two summaries, so by at most the
//! weighted totals over the capacity ([`Window::bound`]), and never low.

use std::time::Duration;

use super::space_saving::{Entry, SpaceSaving};

/// The length of a period, and of the window the counts cover.
pub(crate) const PERIOD: Duration = Duration::from_secs(60);

/// [`PERIOD`] in nanoseconds.
const PERIOD_NANOS: u64 = 60_000_000_000;

/// Two periods of one metric.
pub(crate) struct Window {
    /// The number of the current period (`now / PERIOD`).
    period: u64,
    current: SpaceSaving,
    previous: SpaceSaving,
    capacity: usize,
}

/// A key's estimate in a [`Window`]: never below the estimate from exact
/// counts, and at most `error` above it. A key not held in a full summary
/// counts as that summary's smallest count, the most it may have had.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Estimate {
    /// The weighted count, rounded down.
    pub(crate) count: u64,
    /// How far `count` may exceed the estimate from exact counts, rounded up.
    pub(crate) error: u64,
}

impl Window {
    /// An empty window of summaries of `capacity` keys each.
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            period: 0,
            current: SpaceSaving::new(capacity),
            previous: SpaceSaving::new(capacity),
            capacity,
        }
    }

    /// Moves the window to `now` (nanoseconds): a new period starts an
    /// empty summary, and a gap of more than one period empties both.
    pub(crate) fn advance(&mut self, now: u64) {
        let period = now / PERIOD_NANOS;
        if period <= self.period {
            return;
        }
        let empty = || SpaceSaving::new(self.capacity);
        self.previous = if period == self.period + 1 {
            std::mem::replace(&mut self.current, empty())
        } else {
            self.current = empty();
            empty()
        };
        self.period = period;
    }

    /// Adds `weight` to `key` at the window's current time.
    pub(crate) fn add(&mut self, hash: u64, key: &[u8], cut: bool, weight: u64) {
        self.current.add(hash, key, cut, weight);
    }

    /// The weight of the previous period at `now`, as parts of
    /// [`PERIOD_NANOS`].
    fn previous_weight(&self, now: u64) -> u64 {
        PERIOD_NANOS - now.saturating_sub(self.period * PERIOD_NANOS).min(PERIOD_NANOS)
    }

    /// The estimate of `key` at `now` (after [`Window::advance`]).
    pub(crate) fn estimate(&self, now: u64, hash: u64, key: &[u8], cut: bool) -> Estimate {
        self.combine(
            now,
            self.previous.count(hash, key, cut),
            self.current.count(hash, key, cut),
        )
    }

    /// `previous` and `current` (each a count and its error) weighed at `now`.
    fn combine(&self, now: u64, previous: (u64, u64), current: (u64, u64)) -> Estimate {
        let weight = u128::from(self.previous_weight(now));
        let scale = u128::from(PERIOD_NANOS);
        let weighed = |n: u64, up: bool| {
            let product = u128::from(n) * weight;
            let part = if up {
                product.div_ceil(scale)
            } else {
                product / scale
            };
            u64::try_from(part).unwrap_or(u64::MAX)
        };
        Estimate {
            count: weighed(previous.0, false).saturating_add(current.0),
            error: weighed(previous.1, true).saturating_add(current.1),
        }
    }

    /// The error bound of every estimate at `now`: the smallest counts of
    /// the two summaries ([`SpaceSaving::floor`], 0 until a summary is
    /// full), the previous weighed and rounded up. A held key's error is
    /// the smallest count when it came in, and counts only grow, so it is
    /// at most the floor; a key not held counts as the floor. A floor is at
    /// most its summary's total over the capacity.
    pub(crate) fn bound(&self, now: u64) -> u64 {
        let weight = u128::from(self.previous_weight(now));
        let previous = (u128::from(self.previous.floor()) * weight).div_ceil(u128::from(PERIOD_NANOS));
        u64::try_from(previous)
            .unwrap_or(u64::MAX)
            .saturating_add(self.current.floor())
    }

    /// Every key held in either period, with its estimate at `now`.
    pub(crate) fn estimates(&self, now: u64) -> Vec<(&Entry, Estimate)> {
        let mut out = Vec::with_capacity(self.current.entries().len() + self.previous.entries().len());
        for entry in self.current.entries() {
            let before = self.previous.count(entry.hash(), &entry.key, entry.cut);
            out.push((entry, self.combine(now, before, (entry.count, entry.error))));
        }
        for entry in self.previous.entries() {
            if self.current.get(entry.hash(), &entry.key, entry.cut).is_none() {
                let after = (self.current.floor(), self.current.floor());
                out.push((entry, self.combine(now, (entry.count, entry.error), after)));
            }
        }
        out
    }
}
