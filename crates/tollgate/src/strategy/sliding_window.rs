//! Approximate sliding window: two counters, the current and the previous
//! window, weighted by how far into the current window `now` is.

use super::{clamp_time, unit_cost, Algorithm, Outcome, Rate};

/// Sliding-window state: the start of the current window (anchored at the
/// key's first request) and the units charged in it and in the one before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingWindowState {
    /// `ws`: start of the current window, in ticks.
    pub start: u64,
    /// Units charged in the current window.
    pub curr: u64,
    /// Units charged in the previous window.
    pub prev: u64,
}

/// The approximate sliding-window strategy.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SlidingWindow;

impl SlidingWindow {
    /// Rolls a stored state forward to `now`. Returns the state (all zero
    /// counts become a fresh window anchored at `now`) and the effective now.
    #[inline]
    fn roll(rate: &Rate, state: Option<SlidingWindowState>, now: u64) -> (SlidingWindowState, u64) {
        let w = rate.window;
        let now = clamp_time(now);
        let fresh = |now| SlidingWindowState {
            start: now,
            curr: 0,
            prev: 0,
        };
        let Some(s) = state else {
            return (fresh(now), now);
        };
        let now = now.max(s.start);
        // k = floor((now - start) / W), needed only as 0, 1 or more.
        let elapsed = now - s.start;
        let rolled = if elapsed < w {
            s
        } else if elapsed - w < w {
            SlidingWindowState {
                start: s.start + w,
                curr: 0,
                prev: s.curr,
            }
        } else {
            fresh(now)
        };
        if rolled.curr == 0 && rolled.prev == 0 {
            (fresh(now), now)
        } else {
            (rolled, now)
        }
    }

    /// Gives back up to `cost` units of a charge made at `taken`, at
    /// `now`: from the current window's count while `taken` is in it, from
    /// the previous window's while `taken` is in that one, and nothing once
    /// that window has passed too (its count no longer weighs).
    pub(crate) fn refund_since(
        rate: &Rate,
        state: Option<SlidingWindowState>,
        now: u64,
        taken: u64,
        cost: u64,
    ) -> Option<SlidingWindowState> {
        let (mut s, _) = Self::roll(rate, state, now);
        if taken >= s.start {
            s.curr -= cost.min(s.curr);
        } else if taken >= s.start.saturating_sub(rate.window) {
            s.prev -= cost.min(s.prev);
        }
        (s.curr > 0 || s.prev > 0).then_some(s)
    }

    /// The scaled estimate `S = prev * (W - e) + curr * W`.
    fn estimate(w: u64, e: u64, curr: u64, prev: u64) -> u128 {
        u128::from(prev) * u128::from(w - e) + u128::from(curr) * u128::from(w)
    }

    /// The smallest `d >= 1` at which a request of `unit` units would be
    /// admitted, given the rolled state at elapsed time `e` (it was denied
    /// at `d = 0`, and `unit <= L`).
    fn retry_after(rate: &Rate, s: &SlidingWindowState, e: u64, unit: u64) -> u64 {
        let (l, w) = (u128::from(rate.limit), u128::from(rate.window));
        let (curr, prev, e, unit) = (
            u128::from(s.curr),
            u128::from(s.prev),
            u128::from(e),
            u128::from(unit),
        );
        // Still inside the current window: the previous window's weight decays.
        // Admitted at d iff prev * (W - e - d) < (L + 1 - unit - curr) * W.
        let headroom = (l + 1).saturating_sub(unit + curr);
        if headroom > 0 && prev > 0 {
            let q = div_floor(headroom * w - 1, prev);
            let d = (w - e).saturating_sub(q).max(1);
            if d < w - e {
                return d as u64;
            }
        }
        // In the next window the current count becomes the previous one.
        // Admitted at d iff curr * (2W - e - d) < (L + 1 - unit) * W.
        if curr == 0 {
            return (w - e) as u64;
        }
        let q = div_floor((l + 1 - unit) * w - 1, curr);
        (w - e).max((2 * w - e).saturating_sub(q)) as u64
    }
}

impl SlidingWindow {
    /// When a request of `cost` units reserved at `now` could proceed with
    /// its units counted in the current window: `(earliest, end)`, the
    /// earliest tick at which the estimate, with every unit charged so far
    /// counted, admits it (`now` when it admits at once), and the tick at
    /// which the current window ends. A reservation must proceed before
    /// `end`: within the window the estimate only falls, so a request
    /// admitted at `earliest` is still admitted later in it. `None` when
    /// the cost exceeds the limit.
    pub(crate) fn earliest(
        rate: &Rate,
        state: Option<SlidingWindowState>,
        now: u64,
        cost: u64,
    ) -> Option<(u64, u64)> {
        let now = clamp_time(now);
        // The decision at now, whose state after is the rolled one (counts
        // are never all zero: it admits a cost of at least 1, or denies).
        let (outcome, after) = Self::decide(rate, state, now, cost);
        let after = after?;
        let end = after.start.saturating_add(rate.window);
        if outcome.allowed {
            return Some((now, end));
        }
        // `retry_after` counts from the window's start when the clock is
        // behind it; `None` when the cost exceeds the limit.
        let retry = outcome.retry_after?;
        Some((now.max(after.start).saturating_add(retry), end))
    }
}

/// `floor(a / b)`, with a 64-bit division whenever both fit.
#[inline]
fn div_floor(a: u128, b: u128) -> u128 {
    match (u64::try_from(a), u64::try_from(b)) {
        (Ok(a), Ok(b)) => u128::from(a / b),
        _ => a / b,
    }
}

impl Algorithm for SlidingWindow {
    type State = SlidingWindowState;

    // Inlined into the table's update, the outcome stays in registers
    // instead of being copied through the stack.
    #[inline(always)]
    fn decide(
        rate: &Rate,
        state: Option<SlidingWindowState>,
        now: u64,
        cost: u64,
    ) -> (Outcome, Option<SlidingWindowState>) {
        let (limit, w) = (rate.limit, rate.window);
        let (mut s, now) = Self::roll(rate, state, now);
        let e = now - s.start;
        let unit = unit_cost(cost);
        let capacity = u128::from(limit) * u128::from(w);
        let before = Self::estimate(w, e, s.curr, s.prev);
        let allowed = unit <= limit && before + u128::from(unit - 1) * u128::from(w) < capacity;
        let retry_after = (!allowed && unit <= limit).then(|| Self::retry_after(rate, &s, e, unit));
        if allowed {
            s.curr += cost;
        }
        // ceil((L·W − prev·(W − e) − curr·W) / W), or 0 when not positive,
        // is (L − curr) − floor(prev·(W − e) / W): a division of the
        // previous window's weight alone, which fits 64 bits far more often
        // than L·W does.
        let weighted_prev = u128::from(s.prev) * u128::from(w - e);
        let remaining = limit
            .saturating_sub(s.curr)
            // At most prev: it fits.
            .saturating_sub(div_floor(weighted_prev, u128::from(w)) as u64);
        let reset = if s.curr > 0 {
            2 * w - e
        } else if s.prev > 0 {
            w - e
        } else {
            0
        };
        let outcome = Outcome {
            allowed,
            remaining,
            reset,
            retry_after,
        };
        let next = (s.curr > 0 || s.prev > 0).then_some(s);
        (outcome, next)
    }

    fn refund(
        rate: &Rate,
        state: Option<SlidingWindowState>,
        now: u64,
        cost: u64,
    ) -> Option<SlidingWindowState> {
        let (mut s, _) = Self::roll(rate, state, now);
        s.curr -= cost.min(s.curr);
        (s.curr > 0 || s.prev > 0).then_some(s)
    }

    fn penalty(
        rate: &Rate,
        state: Option<SlidingWindowState>,
        now: u64,
        cost: u64,
    ) -> Option<SlidingWindowState> {
        let (mut s, _) = Self::roll(rate, state, now);
        s.curr = s.curr.saturating_add(cost);
        (s.curr > 0 || s.prev > 0).then_some(s)
    }

    fn expires_at(rate: &Rate, state: &SlidingWindowState) -> u64 {
        let span = if state.curr > 0 {
            2 * rate.window
        } else {
            rate.window
        };
        state.start.saturating_add(span)
    }
}
