//! What the Redis backend's own tests share beyond the redis-server
//! processes (those are `tollgate_test_support::redis`'s): limiters on
//! many connections, and the format of its window states.
#![allow(dead_code)]

pub mod limiters;

/// The units a window state charges in its current window: `count` of a
/// fixed window's `start:count`, `curr` of a sliding window's
/// `start:curr:prev`.
pub fn window_count(state: &str) -> u64 {
    let fields: Vec<u64> = state
        .split(':')
        .map(|f| {
            f.parse()
                .unwrap_or_else(|_| panic!("a window state, got {state:?}"))
        })
        .collect();
    match fields[..] {
        [_, count] | [_, count, _] => count,
        _ => panic!("a window state, got {state:?}"),
    }
}
