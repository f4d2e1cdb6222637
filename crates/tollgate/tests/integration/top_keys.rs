//! Top keys through the public API: each limiter type records its own,
//! shadow mode and the lists count as the decisions they make, a
//! resource can turn them off, a rebuilt limiter keeps them, and the
//! minutes follow the local clock.

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::top::TopKeys;
use tollgate::top::TopMetric;
use tollgate::{KeyList, Limit, Limiter, Limiters, Policy, Resource, Strategy};

fn clock() -> ManualClock {
    ManualClock::new(Duration::from_secs(1_000_000))
}

/// `(key, count)` of a list, in order.
fn ranked(list: &tollgate::top::TopList) -> Vec<(String, u64)> {
    list.keys
        .iter()
        .map(|k| (String::from_utf8(k.key.clone()).unwrap(), k.count(list.metric)))
        .collect()
}

#[test]
fn a_limiter_ranks_keys_by_each_metric_with_what_they_have_left() {
    let clock = clock();
    let limiter = Limiter::builder()
        .strategy(Strategy::FixedWindow)
        .limit(3)
        .window(Duration::from_secs(3600))
        .clock(clock.clone())
        .local_clock(clock.clone())
        .deny(KeyList::parse("deny", ["banned"]).unwrap())
        .top_keys(TopKeys::new().capacity(8))
        .build()
        .unwrap();
    for (key, times) in [("abuser", 9), ("alice", 2), ("banned", 4), ("bob", 1)] {
        for _ in 0..times {
            limiter.check(key);
        }
    }
    // Peeks count nothing.
    limiter.check_n("alice", 0);
    let denied = limiter.top_keys(TopMetric::Denied, 10).unwrap();
    assert_eq!(
        ranked(&denied),
        [("abuser".to_owned(), 6), ("banned".to_owned(), 4)]
    );
    assert_eq!(denied.keys[0].remaining, Some(0));
    assert_eq!(denied.keys[0].admitted, 3);
    assert_eq!(
        (denied.error_bound, denied.capacity, denied.window),
        (0, 8, Duration::from_secs(60))
    );
    let admitted = limiter.top_keys(TopMetric::Admitted, 2).unwrap();
    assert_eq!(
        ranked(&admitted),
        [("abuser".to_owned(), 3), ("alice".to_owned(), 2)]
    );
    assert_eq!(admitted.keys[1].remaining, Some(1));
    // Costs are admitted units.
    limiter.check_n("bob", 2);
    assert_eq!(
        limiter
            .top_keys(TopMetric::Admitted, 10)
            .unwrap()
            .keys
            .iter()
            .find(|k| k.key == b"bob")
            .unwrap()
            .admitted,
        3
    );
    // Two minutes later the counts are gone, the state is not.
    clock.advance(Duration::from_secs(120));
    assert!(limiter.top_keys(TopMetric::Denied, 10).unwrap().keys.is_empty());
    assert!(!limiter.check("abuser").allowed);
}

#[test]
fn without_top_keys_a_limiter_has_none() {
    let limiter = Limiter::builder()
        .limit(1)
        .window(Duration::from_secs(1))
        .build()
        .unwrap();
    limiter.check("k");
    assert!(limiter.top_keys(TopMetric::Denied, 10).is_none());
    let err = Limiter::builder()
        .limit(1)
        .window(Duration::from_secs(1))
        .top_keys(TopKeys::new().capacity(0))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("top_keys.capacity"), "{err}");
}

#[test]
fn shadow_mode_counts_what_enforcement_would_deny_apart() {
    let limiter = Limiter::builder()
        .limit(2)
        .window(Duration::from_secs(3600))
        .shadow(true)
        .top_keys(TopKeys::new())
        .build()
        .unwrap();
    for _ in 0..5 {
        assert!(limiter.check("scraper").allowed);
    }
    let list = limiter.top_keys(TopMetric::ShadowDenied, 10).unwrap();
    assert_eq!(ranked(&list), [("scraper".to_owned(), 3)]);
    assert_eq!((list.keys[0].admitted, list.keys[0].denied), (2, 0));
    assert!(limiter.top_keys(TopMetric::Denied, 10).unwrap().keys.is_empty());
}

#[test]
fn each_resource_keeps_its_own_and_one_may_turn_them_off() {
    let hour = Duration::from_secs(3600);
    let limits = Limiters::builder()
        .default_policy(Policy::new(Strategy::FixedWindow, 1, hour).unwrap())
        .resource("login", Policy::new(Strategy::FixedWindow, 1, hour).unwrap())
        .resource(
            "quiet",
            Resource::new(Policy::new(Strategy::FixedWindow, 1, hour).unwrap()).top_keys(None),
        )
        .top_keys(TopKeys::new())
        .build()
        .unwrap();
    for _ in 0..3 {
        limits.limiter("login").check("a");
        limits.limiter("other").check("b");
        limits.limiter("quiet").check("c");
    }
    let login = limits.limiter("login").top_keys(TopMetric::Denied, 10).unwrap();
    assert_eq!(ranked(&login), [("a".to_owned(), 2)]);
    let default = limits.limiter("").top_keys(TopMetric::Denied, 10).unwrap();
    assert_eq!(ranked(&default), [("b".to_owned(), 2)]);
    assert!(limits.limiter("quiet").top_keys(TopMetric::Denied, 10).is_none());
    // A rebuild with a changed policy keeps the counts; turned off, they go.
    let rebuilt = Limiters::builder()
        .default_policy(Policy::new(Strategy::FixedWindow, 1, hour).unwrap())
        .resource("login", Policy::new(Strategy::FixedWindow, 2, hour).unwrap())
        .top_keys(TopKeys::new())
        .build_from(&limits)
        .unwrap();
    assert_eq!(
        ranked(&rebuilt.limiter("login").top_keys(TopMetric::Denied, 10).unwrap()),
        [("a".to_owned(), 2)]
    );
    let off = Limiters::builder()
        .default_policy(Policy::new(Strategy::FixedWindow, 1, hour).unwrap())
        .resource("login", Policy::new(Strategy::FixedWindow, 2, hour).unwrap())
        .build_from(&rebuilt)
        .unwrap();
    assert!(off.limiter("login").top_keys(TopMetric::Denied, 10).is_none());
}

#[tokio::test]
async fn a_compound_policy_counts_each_decision_once() {
    let policy = Policy::compound(vec![
        Limit::new(Strategy::FixedWindow, 2, Duration::from_secs(1)).unwrap(),
        Limit::new(Strategy::FixedWindow, 3, Duration::from_secs(3600)).unwrap(),
    ])
    .unwrap();
    let limiter = Limiter::builder()
        .policy(policy)
        .top_keys(TopKeys::new())
        .build()
        .unwrap();
    for _ in 0..5 {
        limiter.allow("k").await.unwrap();
    }
    let list = limiter
        .top_keys_with_remaining(TopMetric::Denied, 10)
        .await
        .unwrap();
    assert_eq!(ranked(&list), [("k".to_owned(), 3)]);
    assert_eq!(list.keys[0].admitted, 2);
    assert_eq!(list.keys[0].remaining, Some(0));
}
