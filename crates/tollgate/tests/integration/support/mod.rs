//! Generators the property tests share.

use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::Strategy as _;
use tollgate::{Limit, Policy, Strategy};

/// A limit of any strategy with a limit from `limits` and a window in
/// milliseconds from `windows_ms`.
pub fn limit(
    limits: std::ops::Range<u64>,
    windows_ms: std::ops::Range<u64>,
) -> impl proptest::strategy::Strategy<Value = Limit> {
    (0usize..4, limits, windows_ms).prop_map(|(s, limit, window_ms)| {
        Limit::new(Strategy::ALL[s], limit, Duration::from_millis(window_ms)).expect("valid limit")
    })
}

/// A policy of `count` limits drawn from `limit` (fewer when duplicates of
/// strategy and window are dropped; always at least one).
pub fn policy(
    limit: impl proptest::strategy::Strategy<Value = Limit>,
    count: std::ops::Range<usize>,
) -> impl proptest::strategy::Strategy<Value = Policy> {
    prop::collection::vec(limit, count).prop_map(|limits| {
        let mut unique: Vec<Limit> = Vec::new();
        for l in limits {
            if !unique
                .iter()
                .any(|u| u.strategy() == l.strategy() && u.window() == l.window())
            {
                unique.push(l);
            }
        }
        Policy::compound(unique).expect("valid policy")
    })
}
