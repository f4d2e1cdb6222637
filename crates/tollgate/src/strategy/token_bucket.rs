//! Token bucket: `L` tokens, refilled continuously at `L / W`; a request
//! takes `cost` tokens. Implemented with GCRA (one timestamp per key).

/// The token-bucket strategy (capacity `L`, refill rate `L / W`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TokenBucket;

super::gcra::gcra_algorithm!(TokenBucket);
