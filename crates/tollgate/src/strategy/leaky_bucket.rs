//! Leaky bucket as an admission meter: a bucket of capacity `L` that drains
//! continuously at `L / W`; a request is admitted while the bucket has room
//! for its cost. Nothing is queued or delayed.
//!
//! With the same capacity and rate this admits exactly the same requests as
//! [`super::TokenBucket`] (the two are the same GCRA seen from opposite sides:
//! occupancy versus tokens left). It exists as its own strategy because users
//! reach for it by name and describe its state as occupancy.

/// The leaky-bucket meter (capacity `L`, drain rate `L / W`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LeakyBucket;

super::gcra::gcra_algorithm!(LeakyBucket);
