//! Leaky bucket as an admission meter: a bucket of capacity `L` that drains
//! continuously at `L / W`; a request is admitted while the bucket has room
//! for its cost. Nothing is queued or delayed.
//!
//! With the same capacity and rate this admits exactly the same requests as
//! [`super::TokenBucket`] (the two are the same GCRA seen from opposite sides:
//! occupancy versus tokens left). It exists as its own strategy because users
//! reach for it by name and describe its state as occupancy.

use super::{gcra, Algorithm, GcraState, Outcome, Rate};

/// The leaky-bucket meter (capacity `L`, drain rate `L / W`).
#[derive(Clone, Copy, Debug, Default)]
pub struct LeakyBucket;

impl Algorithm for LeakyBucket {
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
