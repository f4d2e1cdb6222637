//! The generic cell rate algorithm (GCRA) shared by the token bucket and the
//! leaky-bucket meter: both keep one timestamp, the theoretical arrival time.

use super::{unit_cost, Outcome, Rate};

/// GCRA state: `tat`, the tick at which the bucket is back to fresh (full of
/// tokens for a token bucket, empty for a leaky bucket).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcraState {
    /// The theoretical arrival time, in ticks.
    pub tat: u64,
}

/// Decides one request under GCRA with burst `L * T` and interval `T`.
pub(crate) fn decide(
    rate: &Rate,
    state: Option<GcraState>,
    now: u64,
    cost: u64,
) -> (Outcome, Option<GcraState>) {
    let interval = u128::from(rate.interval);
    let burst = u128::from(rate.limit) * interval;
    let now128 = u128::from(now);
    let t = state.map_or(now, |s| s.tat.max(now));
    let unit = unit_cost(cost);
    // Ticks the bucket is "ahead" of now once this request is charged.
    let needed = u128::from(t) - now128 + u128::from(unit) * interval;
    let allowed = unit <= rate.limit && needed <= burst;
    let tat = if allowed {
        clamp(u128::from(t) + u128::from(cost) * interval)
    } else {
        t
    };
    let ahead = u128::from(tat) - now128;
    let outcome = Outcome {
        allowed,
        remaining: clamp(burst.saturating_sub(ahead) / interval),
        reset: clamp(ahead),
        retry_after: (!allowed && unit <= rate.limit).then(|| clamp(needed - burst)),
    };
    (outcome, (tat > now).then_some(GcraState { tat }))
}

/// The tick from which a GCRA state equals absent state.
pub(crate) fn expires_at(state: &GcraState) -> u64 {
    state.tat
}

fn clamp(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}
