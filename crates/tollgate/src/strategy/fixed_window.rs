//! Fixed window: a counter per clock-aligned bucket of length `W`.

use super::{unit_cost, Algorithm, Outcome, Rate};
use crate::policy::Strategy;

/// Fixed-window state: the bucket index `floor(now / W)` and the units
/// charged in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedWindowState {
    /// The bucket the count belongs to.
    pub bucket: u64,
    /// Units charged in that bucket.
    pub count: u64,
}

/// The fixed-window strategy.
#[derive(Clone, Copy, Debug, Default)]
pub struct FixedWindow;

impl Algorithm for FixedWindow {
    type State = FixedWindowState;
    const STRATEGY: Strategy = Strategy::FixedWindow;

    fn decide(
        rate: &Rate,
        state: Option<FixedWindowState>,
        now: u64,
        cost: u64,
    ) -> (Outcome, Option<FixedWindowState>) {
        let (limit, window) = (rate.limit, rate.window);
        let mut now = now;
        let mut bucket = now / window;
        let mut count = 0;
        if let Some(s) = state {
            if s.bucket > bucket {
                // The clock went backwards: stay in the stored bucket, at its start.
                bucket = s.bucket;
                now = s.bucket.saturating_mul(window);
            }
            if s.bucket == bucket {
                count = s.count;
            }
        }
        let end = bucket.saturating_add(1).saturating_mul(window);
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
        let next = (count > 0).then_some(FixedWindowState { bucket, count });
        (outcome, next)
    }

    fn expires_at(rate: &Rate, state: &FixedWindowState) -> u64 {
        state.bucket.saturating_add(1).saturating_mul(rate.window)
    }
}
