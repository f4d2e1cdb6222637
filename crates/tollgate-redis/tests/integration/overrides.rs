//! Limits chosen per request (`tollgate::Overrides`) on Redis: the same
//! decisions as in memory, one script call per decision as without an
//! override, and a window of its own under a key of its own.

use std::time::Duration;

use tollgate::clock::Clock;
use tollgate::{Limiter, Overrides, Policy, Strategy};

use crate::differential::{Harness, START};

#[test]
fn overrides_on_redis_decide_as_in_memory_with_one_call_each() {
    let h = Harness::new();
    for strategy in Strategy::ALL {
        h.clock.set_nanos(START);
        // Windows whose emission intervals are whole microseconds for
        // every limit named below.
        let base = Policy::new(strategy, 10, Duration::from_secs(60)).unwrap();
        let prefix = format!("overrides-{}", strategy.name());
        let redis = Overrides::new(
            Limiter::builder()
                .backend(h.backend().clone())
                .policy(base)
                .key_prefix(&prefix)
                // A limit of 0 decides on the local clock.
                .local_clock(h.clock.clone()),
        )
        .unwrap();
        let memory = Overrides::new(
            Limiter::builder()
                .policy(base)
                .clock(h.clock.clone())
                .local_clock(h.clock.clone()),
        )
        .unwrap();
        // The first call of a backend loads the function library.
        h.rt.block_on(redis.base().allow_n("warm-up", 0)).unwrap();
        let mut calls = 0;
        for (i, (limit, window_s, cost)) in [
            (10, 60, 3),
            (100, 60, 5),
            (4, 60, 1),
            (1_000, 60, 20),
            (20, 3_600, 2),
            (10, 60, 0),
            (50, 3_600, 30),
            (0, 60, 0),
        ]
        .into_iter()
        .enumerate()
        {
            h.clock.set_nanos(h.clock.now_nanos() + 1_250_000_000);
            let window = Some(Duration::from_secs(window_s));
            let mut expected = memory.limiter(limit, window).unwrap().check_n("tenant", cost);
            if strategy == Strategy::SlidingWindow && !expected.allowed {
                // The first microsecond at which the estimate falls far
                // enough: the nanosecond answer rounded up.
                expected.retry_after = expected
                    .retry_after
                    .map(|d| Duration::from_micros(u64::try_from(d.as_nanos().div_ceil(1_000)).unwrap()));
            }
            let before = h.script_calls();
            let got =
                h.rt.block_on(redis.limiter(limit, window).unwrap().allow_n("tenant", cost))
                    .unwrap();
            let used = h.script_calls() - before;
            if limit > 0 {
                calls += 1;
                assert_eq!(used, 1, "{strategy} step {i}: one call per decision");
            }
            assert_eq!(
                got, expected,
                "{strategy} step {i} (limit {limit} per {window_s}s, cost {cost})"
            );
        }
        assert!(calls > 0);
        // The hour's state lives under a key of its own.
        let keys: Vec<String> =
            h.rt.block_on(async {
                let client = redis::Client::open(h.url()).unwrap();
                let mut conn = client.get_multiplexed_async_connection().await.unwrap();
                redis::cmd("KEYS")
                    .arg(format!("{prefix}*"))
                    .query_async::<Vec<String>>(&mut conn)
                    .await
            })
            .unwrap();
        assert_eq!(keys.len(), 2, "{strategy}: {keys:?}");
        assert!(keys.iter().any(|k| k.contains("@3600000ms")), "{keys:?}");
    }
}
