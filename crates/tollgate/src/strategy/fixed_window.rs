//! Fixed window: a counter per clock-aligned bucket of length `W`.

use super::{clamp_time, unit_cost, Algorithm, Outcome, Rate};

/// Fixed-window state: the start of the bucket (`floor(now / W) * W`) and the
/// units charged in it.
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

impl FixedWindow {
    /// The bucket `now` falls in, with the stored count when the state is of
    /// that bucket (a clock that went back stays in the stored bucket), and
    /// the effective now.
    #[inline]
    fn bucket(rate: &Rate, state: Option<FixedWindowState>, now: u64) -> (u64, u64, u64) {
        let now = clamp_time(now);
        match state {
            Some(s) if now < s.start => (s.start, s.count, s.start),
            Some(s) if now - s.start < rate.window => (s.start, s.count, now),
            _ => (now - now % rate.window, 0, now),
        }
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
        let (limit, window) = (rate.limit, rate.window);
        let (start, mut count, now) = Self::bucket(rate, state, now);
        // Exact for valid state (start + W <= MAX_TICK + 2^62); saturating
        // only for a corrupted stored start.
        let end = start.saturating_add(window);
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
        state.start.saturating_add(rate.window)
    }

    fn refund(rate: &Rate, state: Option<FixedWindowState>, now: u64, cost: u64) -> Option<FixedWindowState> {
        let (start, count, _) = Self::bucket(rate, state, now);
        let count = count - cost.min(count);
        (count > 0).then_some(FixedWindowState { start, count })
    }

    fn penalty(
        rate: &Rate,
        state: Option<FixedWindowState>,
        now: u64,
        cost: u64,
    ) -> Option<FixedWindowState> {
        let (start, count, _) = Self::bucket(rate, state, now);
        let count = count.saturating_add(cost);
        (count > 0).then_some(FixedWindowState { start, count })
    }
}
