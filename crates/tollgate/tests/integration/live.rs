//! Policies replaced at run time: state kept where the policy allows it,
//! and no decision under contention ever admits more than the old or the
//! new policy allows.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tollgate::backend::store::StoreBackend;
use tollgate::clock::ManualClock;
use tollgate::testing::MapStore;
use tollgate::{Limit, Limiters, LimitersBuilder, Policy, Strategy};

fn hourly(strategy: Strategy, limit: u64) -> Policy {
    Policy::new(strategy, limit, Duration::from_secs(3_600)).unwrap()
}

fn builder(clock: &ManualClock, login: Policy) -> LimitersBuilder<tollgate::MemoryBackend> {
    Limiters::builder()
        .clock(clock.clone())
        .default_policy(hourly(Strategy::FixedWindow, 1_000))
        .resource("login", login)
}

#[test]
fn replacing_policies_under_load_keeps_state_and_never_exceeds_either_limit() {
    for strategy in Strategy::ALL {
        let clock = ManualClock::new(Duration::from_secs(1_000_000));
        let live = builder(&clock, hourly(strategy, 100)).build().unwrap();
        let admitted = AtomicU64::new(0);
        let spent_at_larger = AtomicBool::new(false);
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    while !done.load(Ordering::Relaxed) {
                        let decision = live.limiter("login").check("hot");
                        if decision.allowed {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        } else if decision.limit == 150 {
                            spent_at_larger.store(true, Ordering::Relaxed);
                        }
                    }
                });
            }
            // At least 200 replacements, and as many more as it takes the
            // deciding threads (which a busy machine may start late) to be
            // denied under the larger limit while the policies change.
            let started = std::time::Instant::now();
            let mut i = 0;
            while i < 200 || !spent_at_larger.load(Ordering::Relaxed) {
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "{strategy}: the deciding threads admitted {} in a minute, never denied at 150",
                    admitted.load(Ordering::Relaxed)
                );
                let limit = if i % 2 == 0 { 150 } else { 100 };
                live.replace(builder(&clock, hourly(strategy, limit))).unwrap();
                i += 1;
            }
            done.store(true, Ordering::Relaxed);
        });
        let during = admitted.load(Ordering::Relaxed);
        assert!(
            during <= 150,
            "{strategy}: {during} admitted, more than either limit"
        );
        // Had a replacement lost the key's state, the key would have
        // admitted more.
        live.replace(builder(&clock, hourly(strategy, 150))).unwrap();
        let mut more = 0;
        while live.limiter("login").check("hot").allowed {
            more += 1;
        }
        match strategy {
            // Counters keep the units spent: the larger limit admits the rest.
            Strategy::FixedWindow | Strategy::SlidingWindow => assert_eq!(during + more, 150, "{strategy}"),
            // A bucket keeps its level, in time: an empty one stays empty.
            _ => assert_eq!(
                (more, during >= 100),
                (0, true),
                "{strategy}: {during} then {more}"
            ),
        }
    }
}

#[test]
fn a_changed_window_or_strategy_starts_fresh_and_unchanged_resources_keep_everything() {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let live = builder(&clock, hourly(Strategy::TokenBucket, 3)).build().unwrap();
    for _ in 0..3 {
        live.limiter("login").check("k");
        live.limiter("other").check("k");
    }
    assert!(!live.limiter("login").check("k").allowed);
    let login_window = Policy::new(Strategy::TokenBucket, 3, Duration::from_secs(60)).unwrap();
    live.replace(builder(&clock, login_window)).unwrap();
    assert_eq!(live.limiter("login").check("k").remaining, 2, "new window: fresh");
    // The default policy did not change: its key kept its three units.
    assert_eq!(live.limiter("other").check("k").remaining, 1_000 - 4);
    live.replace(builder(
        &clock,
        Policy::new(Strategy::FixedWindow, 3, Duration::from_secs(60)).unwrap(),
    ))
    .unwrap();
    assert_eq!(
        live.limiter("login").check("k").remaining,
        2,
        "new strategy: fresh"
    );
}

#[test]
fn compound_limits_keep_their_state_when_reordered_or_joined() {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let burst = Limit::new(Strategy::TokenBucket, 5, Duration::from_secs(1)).unwrap();
    let hour = Limit::new(Strategy::SlidingWindow, 10, Duration::from_secs(3_600)).unwrap();
    let day = Limit::new(Strategy::FixedWindow, 100, Duration::from_secs(86_400)).unwrap();
    let live = builder(&clock, Policy::compound([burst, hour]).unwrap())
        .build()
        .unwrap();
    for _ in 0..4 {
        assert!(live.limiter("login").check("k").allowed);
    }
    // Reordered, with a third limit and the hourly one raised: the burst
    // and hourly states stay, the daily one starts.
    let hour = Limit::new(Strategy::SlidingWindow, 20, Duration::from_secs(3_600)).unwrap();
    live.replace(builder(&clock, Policy::compound([day, hour, burst]).unwrap()))
        .unwrap();
    let d = live.limiter("login").check("k");
    assert!(d.allowed);
    assert_eq!(
        (d.remaining, d.bound_by),
        (0, 2),
        "the burst cap kept its 4 spent units"
    );
}

#[test]
fn blocks_survive_a_replacement_and_an_invalid_one_changes_nothing() {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let live = builder(&clock, hourly(Strategy::FixedWindow, 3)).build().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(
        live.limiter("login")
            .operate("k", tollgate::Operation::Block(Duration::from_secs(60))),
    )
    .unwrap();
    live.replace(builder(&clock, hourly(Strategy::FixedWindow, 4)))
        .unwrap();
    assert!(!live.limiter("login").check("k").allowed, "still blocked");
    let before = live.limiter("login");
    let err = live
        .replace(
            Limiters::builder()
                .clock(clock.clone())
                .resource("login", hourly(Strategy::FixedWindow, 1)),
        )
        .unwrap_err();
    assert!(err.to_string().contains("default"), "{err}");
    assert!(std::sync::Arc::ptr_eq(&before, &live.limiter("login")));
}

#[test]
fn a_shared_store_keeps_state_across_a_changed_limit() {
    let clock = ManualClock::new(Duration::from_secs(1_000_000));
    let backend = StoreBackend::new(MapStore::with_manual_clock(&clock)).clock(clock.clone());
    let store_builder = |limit| {
        Limiters::builder()
            .backend(backend.clone())
            .default_policy(hourly(Strategy::SlidingWindow, limit))
    };
    let live = store_builder(2).build().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    for _ in 0..2 {
        assert!(rt.block_on(live.limiter("").allow("k")).unwrap().allowed);
    }
    live.replace(store_builder(3)).unwrap();
    assert!(rt.block_on(live.limiter("").allow("k")).unwrap().allowed);
    assert!(!rt.block_on(live.limiter("").allow("k")).unwrap().allowed);
}
