//! Fixed window: a counter per clock-aligned bucket of length `W`, or per
//! period of a calendar.

use super::{clamp_time, unit_cost, Algorithm, Outcome, Rate};

/// Fixed-window state: the start of the bucket (`floor(now / W) * W`, or
/// the start of the calendar period) and the units charged in it.
///
/// Keeping the bucket's start rather than its index lets a decision inside
/// the same bucket skip the division by `W`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedWindowState {
    /// The start of the bucket the count belongs to, in ticks.
    pub start: u64,
    /// Units charged in that bucket.
    pub count: u64,
}

/// The fixed-window strategy.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FixedWindow;

/// The bucket a decision counts in.
struct Bucket {
    start: u64,
    /// The start of the next bucket.
    end: u64,
    /// Units charged in it so far.
    count: u64,
    /// The effective now: within `start..end`.
    now: u64,
}

impl FixedWindow {
    /// The bucket `now` falls in, with the stored count when the state is of
    /// that bucket (a clock that went back stays in the stored bucket), and
    /// the effective now.
    #[inline]
    fn bucket(rate: &Rate, state: Option<FixedWindowState>, now: u64) -> Bucket {
        if rate.is_calendar() {
            return Self::period(rate, state, clamp_time(now));
        }
        Self::window(rate, state, now)
    }

    /// [`bucket`](Self::bucket) of a window of fixed length.
    #[inline(always)]
    fn window(rate: &Rate, state: Option<FixedWindowState>, now: u64) -> Bucket {
        let now = clamp_time(now);
        // Exact for valid state (start + W <= MAX_TICK + 2^62); saturating
        // only for a corrupted stored start.
        let (start, count, now) = match state {
            Some(s) if now < s.start => (s.start, s.count, s.start),
            Some(s) if now - s.start < rate.window => (s.start, s.count, now),
            _ => (now - now % rate.window, 0, now),
        };
        Bucket {
            start,
            end: start.saturating_add(rate.window),
            count,
            now,
        }
    }

    /// [`bucket`](Self::bucket) over a calendar's periods: out of line,
    /// so that a fixed-length window's decision pays only the test.
    #[cold]
    #[inline(never)]
    fn period(rate: &Rate, state: Option<FixedWindowState>, now: u64) -> Bucket {
        let Some(calendar) = rate.calendar() else {
            return Self::window(rate, state, now);
        };
        let (start, end) = calendar.period_at(now);
        let (start, end, count, now) = match state {
            Some(s) if s.start == start => (start, end, s.count, now),
            Some(s) if now < s.start => {
                let (stored, stored_end) = calendar.period_at(s.start);
                (stored, stored_end, s.count, stored)
            }
            _ => (start, end, 0, now),
        };
        // Past the last second a period is found for, the clock stands
        // still at its end.
        Bucket {
            start,
            end,
            count,
            now: now.min(end - 1),
        }
    }

    /// Gives back up to `cost` units of a charge made at `taken`, at
    /// `now`: only while `now` is in the bucket `taken` was in (a later
    /// bucket never counted them); otherwise `state` is left as it is.
    pub(crate) fn refund_since(
        rate: &Rate,
        state: Option<FixedWindowState>,
        now: u64,
        taken: u64,
        cost: u64,
    ) -> Option<FixedWindowState> {
        if Self::bucket(rate, state, now).start != Self::bucket(rate, None, taken).start {
            return state;
        }
        <Self as Algorithm>::refund(rate, state, now, cost)
    }

    /// The start of the bucket after the one that began at `start`.
    pub(crate) fn end_of(rate: &Rate, start: u64) -> u64 {
        if rate.is_calendar() {
            if let Some(calendar) = rate.calendar() {
                return calendar.period_at(start).1;
            }
        }
        start.saturating_add(rate.window)
    }
}

impl Algorithm for FixedWindow {
    type State = FixedWindowState;

    #[inline]
    fn decide(
        rate: &Rate,
        state: Option<FixedWindowState>,
        now: u64,
        cost: u64,
    ) -> (Outcome, Option<FixedWindowState>) {
        let limit = rate.limit;
        let Bucket {
            start,
            end,
            mut count,
            now,
        } = Self::bucket(rate, state, now);
        let unit = unit_cost(cost);
        let allowed = unit <= limit && count <= limit - unit;
        if allowed {
            count += cost;
        }
        let outcome = Outcome {
            allowed,
            remaining: limit.saturating_sub(count),
            reset: if count > 0 { end - now } else { 0 },
            retry_after: (!allowed && unit <= limit).then_some(end - now),
        };
        let next = (count > 0).then_some(FixedWindowState { start, count });
        (outcome, next)
    }

    fn expires_at(rate: &Rate, state: &FixedWindowState) -> u64 {
        Self::end_of(rate, state.start)
    }

    fn refund(rate: &Rate, state: Option<FixedWindowState>, now: u64, cost: u64) -> Option<FixedWindowState> {
        let Bucket { start, count, .. } = Self::bucket(rate, state, now);
        let count = count - cost.min(count);
        (count > 0).then_some(FixedWindowState { start, count })
    }

    fn penalty(
        rate: &Rate,
        state: Option<FixedWindowState>,
        now: u64,
        cost: u64,
    ) -> Option<FixedWindowState> {
        let Bucket { start, count, .. } = Self::bucket(rate, state, now);
        let count = count.saturating_add(cost);
        (count > 0).then_some(FixedWindowState { start, count })
    }
}
