//! Token bucket: `L` tokens, refilled continuously at `L / W`; a request
//! takes `cost` tokens. Implemented with GCRA (one timestamp per key).

use super::{gcra, Algorithm, GcraState, Outcome, Rate};

/// The token-bucket strategy (capacity `L`, refill rate `L / W`).
#[derive(Clone, Copy, Debug, Default)]
pub struct TokenBucket;

impl Algorithm for TokenBucket {
    type State = GcraState;

    fn decide(rate: &Rate, state: Option<GcraState>, now: u64, cost: u64) -> (Outcome, Option<GcraState>) {
        gcra::decide(rate, state, now, cost)
    }

    fn expires_at(_rate: &Rate, state: &GcraState) -> u64 {
        gcra::expires_at(state)
    }

    fn refund(rate: &Rate, state: Option<GcraState>, now: u64, cost: u64) -> Option<GcraState> {
        gcra::refund(rate, state, now, cost)
    }

    fn penalty(rate: &Rate, state: Option<GcraState>, now: u64, cost: u64) -> Option<GcraState> {
        gcra::penalty(rate, state, now, cost)
    }
}
