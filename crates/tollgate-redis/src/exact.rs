//! The bounds within which the scripts' arithmetic is exact: Lua numbers
//! are doubles, so every time and product must stay below 2^53.

use tollgate::strategy::Rate;
use tollgate::{ConfigError, Strategy};

/// The largest limit and the largest window (in microseconds) the scripts
/// accept: 2^51, so that every time and product they compute stays an exact
/// integer in Lua's doubles. Tighter than the core's bounds
/// ([`tollgate::Policy::MAX_LIMIT`], 2^62, and [`tollgate::Policy::MAX_WINDOW`], 100 years),
/// which every backend also applies.
pub const MAX_EXACT_OPERAND: u64 = 1 << 51;

/// The largest `limit × window` (window in microseconds) a sliding-window
/// policy may have: 2^52. Its weighted estimate reaches `2 × limit × window`,
/// which must stay exact below 2^53.
pub const MAX_SLIDING_PRODUCT: u64 = 1 << 52;

/// Rejects policies whose script arithmetic could leave the integers that a
/// double represents exactly. The messages follow the core's
/// ([`tollgate::Policy::new`]): the value, the bound, and why.
pub(crate) fn check_exact(strategy: Strategy, rate: &Rate) -> Result<(), ConfigError> {
    if rate.limit > MAX_EXACT_OPERAND {
        return Err(ConfigError::new(
            "limit",
            format!(
                "{} exceeds 2^51 = {MAX_EXACT_OPERAND}, the maximum limit on the Redis backend, \
                 within which every time and product its scripts compute is exact (Lua numbers \
                 are doubles)",
                rate.limit
            ),
        ));
    }
    // A calendar window's W names its calendar; the periods sent for it
    // are clock readings, checked as every clock reading is.
    if rate.window > MAX_EXACT_OPERAND && rate.calendar().is_none() {
        // A concurrency limit's window is its permits' ttl, named so.
        return Err(ConfigError::new(
            if strategy == Strategy::Concurrency {
                "ttl"
            } else {
                "window"
            },
            format!(
                "{}µs exceeds 2^51µs = {MAX_EXACT_OPERAND}µs (about 71 years), the maximum window \
                 on the Redis backend, within which every time and product its scripts compute is \
                 exact (Lua numbers are doubles)",
                rate.window
            ),
        ));
    }
    if strategy == Strategy::SlidingWindow
        && u128::from(rate.limit) * u128::from(rate.window) > u128::from(MAX_SLIDING_PRODUCT)
    {
        return Err(ConfigError::new(
            "limit",
            format!(
                "limit × window = {} × {}µs exceeds 2^52 = {MAX_SLIDING_PRODUCT}, the maximum for a \
                 sliding window on the Redis backend, within which its weighted estimate is exact \
                 (Lua numbers are doubles); lower the limit or shorten the window, or use another \
                 strategy",
                rate.limit, rate.window
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_beyond_exact_double_arithmetic_are_rejected() {
        let day = 86_400_000_000;
        assert!(check_exact(Strategy::SlidingWindow, &Rate::new(1_000, day)).is_ok());
        let err = check_exact(Strategy::SlidingWindow, &Rate::new(1_000_000, day)).unwrap_err();
        assert_eq!(err.field(), "limit");
        assert!(err.reason().contains("window"));
        assert!(check_exact(Strategy::TokenBucket, &Rate::new(1_000_000, day)).is_ok());
        let err = check_exact(Strategy::FixedWindow, &Rate::new(1, MAX_EXACT_OPERAND + 1)).unwrap_err();
        assert_eq!(err.field(), "window");
        let err = check_exact(Strategy::TokenBucket, &Rate::new(MAX_EXACT_OPERAND + 1, day)).unwrap_err();
        assert_eq!(err.field(), "limit");
        assert_eq!(
            err.to_string(),
            "invalid limit: 2251799813685249 exceeds 2^51 = 2251799813685248, the maximum limit on the \
             Redis backend, within which every time and product its scripts compute is exact (Lua \
             numbers are doubles)"
        );
    }
}
