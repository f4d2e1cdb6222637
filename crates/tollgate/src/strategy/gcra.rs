//! The generic cell rate algorithm (GCRA) shared by the token bucket and the
//! leaky-bucket meter: both keep one timestamp, the theoretical arrival time.

use super::{clamp_time, unit_cost, Outcome, Rate};

/// GCRA state: `tat`, the tick at which the bucket is back to fresh (full of
/// tokens for a token bucket, empty for a leaky bucket).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcraState {
    /// The theoretical arrival time, in ticks.
    pub tat: u64,
}

/// Implements [`Algorithm`](super::Algorithm) for a strategy kept as one GCRA
/// timestamp ([`GcraState`]) by this module's functions: the token bucket
/// and the leaky-bucket meter, which differ only in how they are described.
macro_rules! gcra_algorithm {
    ($strategy:ty) => {
        impl $crate::strategy::Algorithm for $strategy {
            type State = $crate::strategy::GcraState;

            fn decide(
                rate: &$crate::strategy::Rate,
                state: Option<Self::State>,
                now: u64,
                cost: u64,
            ) -> ($crate::strategy::Outcome, Option<Self::State>) {
                $crate::strategy::gcra::decide(rate, state, now, cost)
            }

            fn expires_at(_rate: &$crate::strategy::Rate, state: &Self::State) -> u64 {
                $crate::strategy::gcra::expires_at(state)
            }

            fn refund(
                rate: &$crate::strategy::Rate,
                state: Option<Self::State>,
                now: u64,
                cost: u64,
            ) -> Option<Self::State> {
                $crate::strategy::gcra::refund(rate, state, now, cost)
            }

            fn penalty(
                rate: &$crate::strategy::Rate,
                state: Option<Self::State>,
                now: u64,
                cost: u64,
            ) -> Option<Self::State> {
                $crate::strategy::gcra::penalty(rate, state, now, cost)
            }
        }
    };
}
pub(super) use gcra_algorithm;

/// Decides one request under GCRA with burst `L * T` and interval `T`.
///
/// Everything is exact in 64 bits: `L * T <= max(W, L) <= 2^62` and `now <=
/// MAX_TICK < 2^63`, so `tat <= now + L * T < 2^64`. The additions saturate
/// only for a corrupted stored state (a `tat` far in the future), which is
/// then simply denied.
#[inline]
pub(crate) fn decide(
    rate: &Rate,
    state: Option<GcraState>,
    now: u64,
    cost: u64,
) -> (Outcome, Option<GcraState>) {
    let now = clamp_time(now);
    let interval = rate.interval;
    let burst = rate.limit * interval;
    let t = state.map_or(now, |s| s.tat.max(now));
    let unit = unit_cost(cost);
    let fits = unit <= rate.limit;
    // Ticks the bucket is "ahead" of now once this request is charged.
    let needed = (t - now).saturating_add(unit.min(rate.limit) * interval);
    let allowed = fits && needed <= burst;
    let tat = if allowed {
        t.saturating_add(cost * interval)
    } else {
        t
    };
    let ahead = tat - now;
    let outcome = Outcome {
        allowed,
        remaining: whole_intervals(burst.saturating_sub(ahead), interval),
        reset: ahead,
        retry_after: (!allowed && fits).then(|| needed - burst),
    };
    (outcome, (tat > now).then_some(GcraState { tat }))
}

/// `free / interval`, skipping the division when the answer is 0 (always
/// the case on the denied path).
#[inline]
fn whole_intervals(free: u64, interval: u64) -> u64 {
    if free < interval {
        0
    } else {
        free / interval
    }
}

/// Gives back up to `cost` intervals: `tat = max(now, t - cost * T)`.
pub(crate) fn refund(rate: &Rate, state: Option<GcraState>, now: u64, cost: u64) -> Option<GcraState> {
    let now = clamp_time(now);
    let t = state?.tat.max(now);
    let tat = t.saturating_sub(cost.saturating_mul(rate.interval)).max(now);
    (tat > now).then_some(GcraState { tat })
}

/// Charges `cost` intervals without an admission test:
/// `tat = max(tat, now) + cost * T`, saturating.
pub(crate) fn penalty(rate: &Rate, state: Option<GcraState>, now: u64, cost: u64) -> Option<GcraState> {
    let now = clamp_time(now);
    let t = state.map_or(now, |s| s.tat.max(now));
    let tat = t.saturating_add(cost.saturating_mul(rate.interval));
    (tat > now).then_some(GcraState { tat })
}

/// The tick from which a GCRA state equals absent state.
pub(crate) fn expires_at(state: &GcraState) -> u64 {
    state.tat
}
