//! The names of the strategies, as users choose them: four rates and the
//! concurrency limit.

use std::fmt;
use std::str::FromStr;

/// A rate-limiting strategy; [choosing a
/// strategy](crate::_documentation::choosing_a_strategy) compares them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Strategy {
    /// A counter per clock-aligned window; allows up to `2L` across a boundary.
    FixedWindow,
    /// Two counters weighted by the position in the window; smooths boundaries.
    SlidingWindow,
    /// `L` tokens refilled continuously at `L / W`; allows bursts up to `L`.
    TokenBucket,
    /// A meter of capacity `L` draining at `L / W`; admits the same requests
    /// as the token bucket, described as occupancy.
    LeakyBucket,
    /// At most `L` units held at once by requests in flight, each holding a
    /// permit until it is released or its `ttl` (the limit's window)
    /// passes ([requests in
    /// flight](crate::_documentation::semantics#requests-in-flight)).
    /// Acquired with [`Limiter::acquire_permit`](crate::Limiter::acquire_permit);
    /// a plain decision on it holds nothing: it says whether a request
    /// of its cost would get a permit now.
    Concurrency,
}

impl Strategy {
    /// The four rate strategies, in documentation order (every strategy
    /// but [`Strategy::Concurrency`], which limits what requests hold
    /// rather than how many arrive).
    pub const ALL: [Strategy; 4] = [
        Strategy::FixedWindow,
        Strategy::SlidingWindow,
        Strategy::TokenBucket,
        Strategy::LeakyBucket,
    ];

    /// The snake_case name used in files, keys and the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Strategy::FixedWindow => "fixed_window",
            Strategy::SlidingWindow => "sliding_window",
            Strategy::TokenBucket => "token_bucket",
            Strategy::LeakyBucket => "leaky_bucket",
            Strategy::Concurrency => "concurrency",
        }
    }

    /// Whether this is [`Strategy::Concurrency`]: a limit on the units held
    /// at once, not on a rate.
    pub const fn is_concurrency(self) -> bool {
        matches!(self, Strategy::Concurrency)
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error returned when a strategy name is not recognised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown strategy {0:?}: expected one of fixed_window, sliding_window, token_bucket, leaky_bucket, concurrency")]
pub struct UnknownStrategy(pub String);

impl FromStr for Strategy {
    type Err = UnknownStrategy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let normalized = s.trim().to_ascii_lowercase().replace('-', "_");
        Strategy::ALL
            .into_iter()
            .chain([Strategy::Concurrency])
            .find(|st| st.name() == normalized)
            .ok_or_else(|| UnknownStrategy(s.to_owned()))
    }
}
