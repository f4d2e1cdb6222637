//! Estimates settled by actual usage, as pure functions ([estimates
//! settled](crate::_documentation::semantics#estimates-settled)): a hold
//! is a request of its estimate's cost, decided as any other, whose record
//! a key keeps until it is settled or its time is up; settling gives back
//! what the usage left of the estimate, or charges what it went over.
//!
//! A key's unsettled holds are a `HoldSet`; `settle_all` changes the
//! key's rate states for one hold taken out of it. No I/O, no clock: the
//! in-memory backend, the store adapter and the Redis script run these same
//! steps.

use super::{
    decide_all, penalty, refund, CompoundOutcome, FixedWindow, LimitRate, SlidingWindow, State, Strategy,
};
use crate::policy::MAX_LIMITS;

/// A hold's identifier: unique within its key, never reused (made as a
/// permit's are).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HoldId(pub u128);

impl std::fmt::Display for HoldId {
    /// 32 lowercase hexadecimal digits.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// One unsettled hold of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HoldRecord {
    /// The hold's identifier.
    pub id: HoldId,
    /// The estimate it was charged, `E`.
    pub estimate: u64,
    /// The tick it was charged at.
    pub taken: u64,
    /// The tick from which it can no longer be settled: `taken` plus the
    /// policy's longest window.
    pub expires: u64,
}

impl HoldRecord {
    /// The hold `id` of `estimate` units charged at `now` under `limits`:
    /// settleable until the longest of their windows has passed.
    pub(crate) fn taken(id: HoldId, estimate: u64, now: u64, limits: &[LimitRate]) -> Self {
        Self {
            id,
            estimate,
            taken: now,
            expires: now.saturating_add(settleable_for(limits)),
        }
    }
}

/// How long, in ticks, a hold of a policy of `limits` can be settled: the
/// longest of their windows, a calendar window counting as its longest
/// period (its `W` is a mark, not a length).
pub fn settleable_for(limits: &[LimitRate]) -> u64 {
    let span = |l: &LimitRate| match l.rate.calendar() {
        Some(c) => c.tick.from_nanos(c.calendar.period().longest().as_nanos() as u64),
        None => l.rate.window,
    };
    limits.iter().map(span).max().unwrap_or(0)
}

/// The unsettled holds of one key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct HoldSet {
    /// The holds not yet settled, expired ones included until an operation
    /// drops them.
    pub holds: Vec<HoldRecord>,
}

impl HoldSet {
    /// Whether no hold is recorded (the absent state).
    pub(crate) fn is_empty(&self) -> bool {
        self.holds.is_empty()
    }

    /// The tick from which every hold has expired.
    pub(crate) fn expires_at(&self) -> u64 {
        self.holds.iter().map(|h| h.expires).max().unwrap_or(0)
    }

    /// Records `hold`, dropping the holds expired at `now`.
    pub(crate) fn record(&mut self, hold: HoldRecord, now: u64) {
        self.holds.retain(|h| h.expires > now);
        self.holds.push(hold);
    }

    /// Takes the hold `id` out, when it is recorded and has not expired at
    /// `now` (an expired one is dropped and `None` answered).
    pub(crate) fn take(&mut self, id: HoldId, now: u64) -> Option<HoldRecord> {
        let at = self.holds.iter().position(|h| h.id == id)?;
        let hold = self.holds.swap_remove(at);
        self.holds.retain(|h| h.expires > now);
        (hold.expires > now).then_some(hold)
    }
}

/// Settles `hold` with the usage `used` at `now` on every limit's state in
/// `states`, filling `next` with the states after, and answers what a peek
/// at `next` answers (`remaining`, `reset`, `retry_after`). A usage below
/// the estimate gives back `estimate − used` of what still counts of the
/// hold (a fixed window within the bucket it was charged in, a sliding
/// window from the window it was charged in while that window weighs, a
/// bucket as its refund does); a usage above it charges `used − estimate`
/// as a penalty does, over the limit if need be; an equal usage changes
/// nothing.
pub(crate) fn settle_all(
    limits: &[LimitRate],
    states: &[Option<State>],
    next: &mut [Option<State>],
    now: u64,
    hold: &HoldRecord,
    used: u64,
) -> CompoundOutcome {
    let n = limits.len();
    for (i, limit) in limits.iter().enumerate() {
        let (strategy, rate, state) = (limit.strategy, &limit.rate, states[i]);
        next[i] = if used < hold.estimate {
            let units = hold.estimate - used;
            match (strategy, state) {
                (Strategy::FixedWindow, Some(State::FixedWindow(s))) => {
                    FixedWindow::refund_since(rate, Some(s), now, hold.taken, units).map(State::FixedWindow)
                }
                (Strategy::SlidingWindow, Some(State::SlidingWindow(s))) => {
                    SlidingWindow::refund_since(rate, Some(s), now, hold.taken, units)
                        .map(State::SlidingWindow)
                }
                (Strategy::FixedWindow | Strategy::SlidingWindow, _) => state,
                _ => refund(strategy, rate, state, now, units),
            }
        } else if used > hold.estimate {
            penalty(strategy, rate, state, now, used - hold.estimate)
        } else {
            state
        };
    }
    let mut ignored = [None; MAX_LIMITS];
    decide_all(limits, &next[..n], &mut ignored[..n], now, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategy::Rate;

    fn hold(estimate: u64, taken: u64) -> HoldRecord {
        HoldRecord {
            id: HoldId(1),
            estimate,
            taken,
            expires: taken + 100,
        }
    }

    fn fixed(limit: u64, window: u64) -> [LimitRate; 1] {
        [LimitRate {
            strategy: Strategy::FixedWindow,
            rate: Rate::new(limit, window),
        }]
    }

    #[test]
    fn a_fixed_window_gives_back_only_within_the_bucket_charged() {
        let limits = fixed(10, 100);
        let mut states = [None];
        decide_all(&limits, &[None], &mut states, 10, 8);
        let mut next = [None];
        let after = settle_all(&limits, &states, &mut next, 50, &hold(8, 10), 3);
        assert_eq!(after.outcome.remaining, 7, "8 charged, 3 used: 5 given back");
        let later = settle_all(&limits, &states, &mut next, 150, &hold(8, 10), 3);
        assert_eq!(later.outcome.remaining, 10, "a new bucket: nothing to give back");
        let over = settle_all(&limits, &states, &mut next, 50, &hold(8, 10), 15);
        assert_eq!(
            (over.outcome.allowed, over.outcome.remaining),
            (false, 0),
            "15 used: over by 5"
        );
    }

    #[test]
    fn a_calendar_hold_is_settleable_for_its_longest_period() {
        use crate::calendar::{Calendar, Period};
        use crate::strategy::{CalendarTicks, Tick};
        let calendar = Calendar::new(Period::Day, "UTC", None).unwrap();
        let day = 25 * 3_600 * 1_000_000_000u64;
        let ticks = CalendarTicks {
            calendar,
            tick: Tick::Nanos,
        };
        let limits = [LimitRate {
            strategy: Strategy::FixedWindow,
            rate: Rate::per_calendar(10, ticks, day),
        }];
        let hold = HoldRecord::taken(HoldId(1), 3, 1_000, &limits);
        assert_eq!(
            hold.expires,
            1_000 + calendar.period().longest().as_nanos() as u64
        );
    }

    #[test]
    fn a_hold_is_taken_once_and_not_after_it_expires() {
        let mut set = HoldSet::default();
        set.record(hold(5, 0), 0);
        assert_eq!(set.take(HoldId(1), 50), Some(hold(5, 0)));
        assert_eq!(set.take(HoldId(1), 50), None);
        set.record(hold(5, 0), 0);
        assert_eq!(set.take(HoldId(1), 100), None, "expired at 100");
        assert!(set.is_empty());
    }
}
