//! The top keys against exact counts: the counts and their error bound on
//! skewed random streams over several periods, with a manual clock.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::clock::{Clock, ManualClock};
use crate::decision::Listed;

const PERIOD_NANOS: u64 = 60_000_000_000;

fn admitted() -> Decision {
    Decision::failed_open(10)
}

fn denied() -> Decision {
    Decision::listed(Listed::Denied, 10)
}

fn shadow_denied() -> Decision {
    let mut d = Decision::listed(Listed::Denied, 10);
    d.allowed = true;
    d.shadow_denied = true;
    d
}

fn table(capacity: usize) -> (TopTable, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(Duration::from_secs(1_000 * 60)));
    (
        TopTable::new(
            TopKeys::new().capacity(capacity),
            crate::clock::ClockHandle::Shared(clock.clone()),
        ),
        clock,
    )
}

#[test]
fn each_decision_counts_under_its_metric() {
    let (top, _clock) = table(10);
    top.record(b"a", &admitted(), 3);
    top.record(b"a", &denied(), 1);
    top.record(b"a", &denied(), 5);
    top.record(b"b", &shadow_denied(), 1);
    top.record(b"b", &admitted(), 0);
    let list = top.list(TopMetric::Denied, 10);
    assert_eq!(list.keys.len(), 1);
    let a = &list.keys[0];
    assert_eq!(
        (&a.key[..], a.denied, a.admitted, a.shadow_denied),
        (&b"a"[..], 2, 3, 0)
    );
    let list = top.list(TopMetric::ShadowDenied, 10);
    assert_eq!(list.keys[0].key, b"b");
    assert_eq!(list.keys[0].shadow_denied, 1);
    // The peek of b counted nothing.
    assert_eq!(list.keys[0].admitted, 0);
    assert_eq!(list.window, PERIOD);
}

#[test]
fn the_previous_minute_fades_out_and_older_ones_are_gone() {
    let (top, clock) = table(10);
    for _ in 0..100 {
        top.record(b"k", &denied(), 1);
    }
    clock.advance(PERIOD);
    assert_eq!(top.list(TopMetric::Denied, 1).keys[0].denied, 100);
    clock.advance(PERIOD / 4);
    assert_eq!(top.list(TopMetric::Denied, 1).keys[0].denied, 75);
    clock.advance(PERIOD / 2);
    assert_eq!(top.list(TopMetric::Denied, 1).keys[0].denied, 25);
    clock.advance(PERIOD / 4);
    assert!(top.list(TopMetric::Denied, 1).keys.is_empty());
    top.record(b"k", &denied(), 1);
    clock.advance(PERIOD * 3);
    assert!(top.list(TopMetric::Denied, 1).keys.is_empty());
}

#[test]
fn a_key_evicted_last_minute_is_not_counted_low() {
    let (top, clock) = table(2);
    for _ in 0..10 {
        top.record(b"a", &admitted(), 1);
        top.record(b"b", &admitted(), 1);
    }
    // c takes the place of a or b, which then holds 10 units unseen.
    top.record(b"c", &admitted(), 1);
    let evicted = if top
        .list(TopMetric::Admitted, 3)
        .keys
        .iter()
        .any(|k| k.key == b"a")
    {
        "b"
    } else {
        "a"
    };
    clock.advance(PERIOD + PERIOD / 2);
    top.record(evicted.as_bytes(), &admitted(), 1);
    let list = top.list(TopMetric::Admitted, 3);
    let entry = list
        .keys
        .iter()
        .find(|k| k.key == evicted.as_bytes())
        .expect("held now");
    // Truly 10 × 1/2 + 1 = 6 over the last minute.
    assert!(entry.admitted >= 6, "{} counted for a true 6", entry.admitted);
    assert!(entry.admitted <= 6 + entry.error);
}

#[test]
fn memory_is_bounded_by_the_capacity_whatever_the_keys() {
    let (top, _clock) = table(16);
    for i in 0..10_000u32 {
        top.record(format!("key-{i}").as_bytes(), &denied(), 1);
    }
    let list = top.list(TopMetric::Denied, usize::MAX);
    assert_eq!(list.keys.len(), 16);
    // Full: the bound is the smallest count, at most the total over the
    // capacity.
    assert!(
        list.error_bound > 0 && list.error_bound <= 10_000 / 16,
        "{}",
        list.error_bound
    );
}

#[test]
fn long_keys_are_recorded_by_their_start_and_counted_together() {
    let (top, _clock) = table(4);
    let long_a = format!("{}a", "x".repeat(TopKeys::MAX_KEY_BYTES));
    let long_b = format!("{}b", "x".repeat(TopKeys::MAX_KEY_BYTES));
    top.record(long_a.as_bytes(), &denied(), 1);
    top.record(long_b.as_bytes(), &denied(), 1);
    top.record("x".repeat(TopKeys::MAX_KEY_BYTES).as_bytes(), &denied(), 1);
    let list = top.list(TopMetric::Denied, 10);
    assert_eq!(list.keys.len(), 2);
    let cut = list.keys.iter().find(|k| k.cut).expect("a cut key");
    assert_eq!((cut.key.len(), cut.denied), (TopKeys::MAX_KEY_BYTES, 2));
    let whole = list.keys.iter().find(|k| !k.cut).expect("the whole key");
    assert_eq!(whole.denied, 1);
}

#[test]
fn capacity_is_validated() {
    assert!(TopKeys::new().capacity(0).validate().is_err());
    assert!(TopKeys::new()
        .capacity(TopKeys::MAX_CAPACITY + 1)
        .validate()
        .is_err());
    assert!(TopKeys::new().capacity(1).validate().is_ok());
    assert_eq!(TopKeys::default().get_capacity(), TopKeys::DEFAULT_CAPACITY);
    for metric in TopMetric::ALL {
        assert_eq!(TopMetric::from_name(metric.name()), Some(metric));
    }
    assert_eq!(TopMetric::from_name("Denied"), None);
}

/// One step of a stream: a key drawn from a skewed distribution, the
/// decision, the cost, and how far the clock moves first.
#[derive(Clone, Debug)]
struct Step {
    key: u32,
    metric: TopMetric,
    cost: u64,
    advance_ms: u64,
}

fn step() -> impl Strategy<Value = Step> {
    // Zipf-like: small keys far more often than large ones.
    let key = (0u32..12).prop_flat_map(|bits| 0u32..(1 << bits));
    let metric = prop_oneof![
        3 => Just(TopMetric::Denied),
        3 => Just(TopMetric::Admitted),
        1 => Just(TopMetric::ShadowDenied),
    ];
    let advance = prop_oneof![8 => Just(0u64), 4 => 0u64..2_000, 1 => 0u64..90_000];
    (key, metric, 1u64..40, advance).prop_map(|(key, metric, cost, advance_ms)| Step {
        key,
        metric,
        cost,
        advance_ms,
    })
}

/// Exact counts per period and metric, weighed as the window weighs them.
#[derive(Default)]
struct Exact {
    /// (metric, period, key) → weight.
    counts: HashMap<(usize, u64, u32), u64>,
}

impl Exact {
    fn estimate(&self, metric: TopMetric, now: u64, key: u32) -> u64 {
        let period = now / PERIOD_NANOS;
        let get = |p: u64| self.counts.get(&(metric.index(), p, key)).copied().unwrap_or(0);
        let weight = PERIOD_NANOS - (now - period * PERIOD_NANOS);
        let previous = if period == 0 { 0 } else { get(period - 1) };
        let weighed =
            u64::try_from(u128::from(previous) * u128::from(weight) / u128::from(PERIOD_NANOS)).unwrap();
        weighed + get(period)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn counts_are_never_low_and_high_by_at_most_the_bound(
        steps in proptest::collection::vec(step(), 1..3_000),
        capacity in 1usize..64,
    ) {
        let (top, clock) = table(capacity);
        let mut exact = Exact::default();
        for step in &steps {
            clock.advance(Duration::from_millis(step.advance_ms));
            let decision = match step.metric {
                TopMetric::Denied => denied(),
                TopMetric::Admitted => admitted(),
                TopMetric::ShadowDenied => shadow_denied(),
            };
            top.record(format!("k{}", step.key).as_bytes(), &decision, step.cost);
            let weight = if step.metric == TopMetric::Admitted { step.cost } else { 1 };
            let now = clock.now_nanos();
            *exact.counts.entry((step.metric.index(), now / PERIOD_NANOS, step.key)).or_default() += weight;
        }
        let now = clock.now_nanos();
        let keys: std::collections::HashSet<u32> = steps.iter().map(|s| s.key).collect();
        for metric in TopMetric::ALL {
            let list = top.list(metric, usize::MAX);
            prop_assert!(list.keys.len() <= 2 * capacity);
            let listed: HashMap<u32, &TopKey> = list
                .keys
                .iter()
                .map(|k| (std::str::from_utf8(&k.key[1..]).unwrap().parse().unwrap(), k))
                .collect();
            for pair in list.keys.windows(2) {
                prop_assert!(pair[0].count(metric) >= pair[1].count(metric));
            }
            for &key in &keys {
                let truth = exact.estimate(metric, now, key);
                match listed.get(&key) {
                    Some(entry) => {
                        let count = entry.count(metric);
                        prop_assert!(count >= truth, "{metric:?} k{key}: {count} below the true {truth}");
                        prop_assert!(entry.error <= list.error_bound);
                        prop_assert!(
                            count <= truth + entry.error,
                            "{metric:?} k{key}: {count} above the true {truth} by more than {}",
                            entry.error
                        );
                    }
                    None => prop_assert!(
                        truth <= list.error_bound,
                        "{metric:?} k{key}: true count {truth} above the bound {} but not listed",
                        list.error_bound
                    ),
                }
            }
        }
    }
}
