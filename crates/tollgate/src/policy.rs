//! Validated policies: a strategy, a limit and a window.

use std::fmt;
use std::time::Duration;

use crate::error::ConfigError;
use crate::strategy::{Rate, Strategy, MAX_LIMIT};

/// The longest window a policy accepts: 100 years of 365 days.
///
/// It keeps the window in nanoseconds below
/// [`MAX_WINDOW_TICKS`](crate::strategy::MAX_WINDOW_TICKS), within which all
/// decision arithmetic is exact; longer windows serve no real use.
pub const MAX_WINDOW: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A validated policy: a strategy, a limit `L` and a window `W`.
///
/// Build one with [`Policy::new`]; every instance is known to be valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Policy {
    strategy: Strategy,
    limit: u64,
    window: Duration,
}

impl Policy {
    /// Validates and builds a policy.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming `limit` when it is 0 or above [`MAX_LIMIT`]
    /// (2^62), or `window` when it is zero, shorter than one microsecond, or
    /// longer than [`MAX_WINDOW`].
    pub fn new(strategy: Strategy, limit: u64, window: Duration) -> Result<Self, ConfigError> {
        if limit == 0 {
            return Err(ConfigError::new("limit", "must be at least 1"));
        }
        if limit > MAX_LIMIT {
            return Err(ConfigError::new(
                "limit",
                format!(
                    "{limit} exceeds 2^62 = {MAX_LIMIT}, the maximum limit, within which every \
                     time and product the strategies compute is exact"
                ),
            ));
        }
        if window.is_zero() {
            return Err(ConfigError::new("window", "must be longer than zero"));
        }
        if window < Duration::from_micros(1) {
            return Err(ConfigError::new(
                "window",
                format!("{window:?} is shorter than the 1µs resolution shared by all backends"),
            ));
        }
        if window > MAX_WINDOW {
            return Err(ConfigError::new(
                "window",
                format!(
                    "{}s exceeds the maximum of {}s (100 years)",
                    window.as_secs(),
                    MAX_WINDOW.as_secs()
                ),
            ));
        }
        Ok(Self {
            strategy,
            limit,
            window,
        })
    }

    /// The strategy.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// `L`, the units admitted per window.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// `W`, the window.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The rate in nanosecond ticks (the in-memory clock unit).
    pub fn rate_nanos(&self) -> Rate {
        // MAX_WINDOW in nanoseconds is below MAX_WINDOW_TICKS.
        Rate::new(self.limit, self.window.as_nanos() as u64)
    }

    /// The rate in microsecond ticks, rounding the window down to whole
    /// microseconds (used by backends whose clock counts microseconds).
    pub fn rate_micros(&self) -> Rate {
        Rate::new(self.limit, self.window.as_micros() as u64)
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} per {:?}", self.strategy, self.limit, self.window)
    }
}
