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

/// The backend's binding for `policy` of `resource` under `prefix`: the
/// one a limiter built on `backend` with them decides through, bound anew
/// for its key names, function name and script digest.
pub fn bound(
    backend: &tollgate_redis::RedisBackend,
    prefix: &str,
    resource: &str,
    policy: &tollgate::Policy,
) -> tollgate_redis::RedisBinding {
    use tollgate::backend::{Backend, Scope};
    backend
        .bind(&Scope {
            prefix,
            resource,
            policy,
        })
        .unwrap_or_else(|err| panic!("binding {resource:?}: {err}"))
}

/// [`bound`] for a limiter's default policy under the default prefix.
pub fn bound_default(
    backend: &tollgate_redis::RedisBackend,
    policy: &tollgate::Policy,
) -> tollgate_redis::RedisBinding {
    bound(backend, tollgate::Limiter::DEFAULT_KEY_PREFIX, "", policy)
}
