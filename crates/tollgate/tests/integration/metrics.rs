//! Metrics through the `metrics` facade: counts match the decisions made,
//! labels are resource and strategy, never the key.

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use tollgate::backend::store::StoreBackend;
use tollgate::clock::ManualClock;
use tollgate::testing::{FlakyStore, MapStore};
use tollgate::{Limiter, Limiters, Policy, Strategy};

/// Label (name, value) pairs, sorted.
type Labels = Vec<(String, String)>;

/// One metric: name, labels, and its count (samples for a histogram).
type Metric = (String, Labels, u64);

/// Every counter with its value, and every histogram with its sample count.
fn counters(snapshotter: &Snapshotter) -> Vec<Metric> {
    let mut out = Vec::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let (kind, key) = key.into_parts();
        let mut labels: Vec<_> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        let value = match (kind, value) {
            (MetricKind::Counter, DebugValue::Counter(v)) => v,
            (MetricKind::Histogram, DebugValue::Histogram(samples)) => samples.len() as u64,
            _ => continue,
        };
        out.push((key.name().to_owned(), labels, value));
    }
    out.sort();
    out
}

fn labels(resource: &str, strategy: &str) -> Labels {
    vec![
        ("resource".into(), resource.into()),
        ("strategy".into(), strategy.into()),
    ]
}

fn value(all: &[Metric], name: &str, labels: &[(String, String)]) -> u64 {
    all.iter()
        .find(|(n, l, _)| n == name && l == labels)
        .map_or(0, |(_, _, v)| *v)
}

#[test]
fn counts_follow_decisions_per_resource_and_strategy() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new(Duration::from_secs(1_000));
    let limiter = metrics::with_local_recorder(&recorder, || {
        Limiters::builder()
            .clock(clock.clone())
            .default_policy(Policy::new(Strategy::SlidingWindow, 3, Duration::from_secs(60)).unwrap())
            .resource(
                "login",
                Policy::new(Strategy::FixedWindow, 2, Duration::from_secs(60)).unwrap(),
            )
            .build()
            .unwrap()
    });
    let (mut allowed, mut denied) = ([0u64; 2], [0u64; 2]);
    for i in 0..40 {
        for (r, resource) in ["login", "search"].into_iter().enumerate() {
            // Many distinct keys: none may appear as a label.
            let d = limiter.limiter(resource).check(format!("client-{}", i % 7));
            if d.allowed {
                allowed[r] += 1;
            } else {
                denied[r] += 1;
            }
        }
    }
    let all = counters(&snapshotter);
    let login = labels("login", "fixed_window");
    let default = labels("default", "sliding_window");
    assert_eq!(value(&all, "tollgate_allowed_total", &login), allowed[0]);
    assert_eq!(value(&all, "tollgate_denied_total", &login), denied[0]);
    assert_eq!(value(&all, "tollgate_allowed_total", &default), allowed[1]);
    assert_eq!(value(&all, "tollgate_denied_total", &default), denied[1]);
    assert_eq!(allowed, [14, 21]);
    for (name, labels, _) in &all {
        let keys: Vec<_> = labels.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["resource", "strategy"], "{name} has labels {labels:?}");
    }
    // Latency is sampled: one decision in LATENCY_SAMPLE per thread.
    let sampled: u64 = all
        .iter()
        .filter(|(n, ..)| n == "tollgate_decision_seconds")
        .map(|(.., v)| v)
        .sum();
    assert_eq!(sampled, 80 / u64::from(tollgate::metrics::LATENCY_SAMPLE));
}

#[tokio::test]
async fn backend_errors_and_fail_open_admissions_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new(Duration::from_secs(1_000));
    let build = |open: bool| {
        let backend =
            StoreBackend::new(FlakyStore::new(MapStore::with_manual_clock(&clock))).clock(clock.clone());
        let store = backend.store().clone();
        let limiter = metrics::with_local_recorder(&recorder, || {
            Limiter::builder()
                .strategy(Strategy::TokenBucket)
                .limit(5)
                .window(Duration::from_secs(1))
                .resource(if open { "open" } else { "closed" })
                .fail_policy(if open {
                    tollgate::FailPolicy::Open
                } else {
                    tollgate::FailPolicy::Closed
                })
                .backend(backend)
                .build()
                .unwrap()
        });
        (limiter, store)
    };
    let (open, closed) = (build(true), build(false));
    for (limiter, store) in [&open, &closed] {
        assert!(limiter.allow("k").await.unwrap().allowed);
        store.set_failing(true);
        for _ in 0..3 {
            let _ = limiter.allow("k").await;
        }
    }
    let all = counters(&snapshotter);
    let open_labels = labels("open", "token_bucket");
    let closed_labels = labels("closed", "token_bucket");
    assert_eq!(value(&all, "tollgate_backend_errors_total", &open_labels), 3);
    assert_eq!(value(&all, "tollgate_fail_open_total", &open_labels), 3);
    assert_eq!(value(&all, "tollgate_backend_errors_total", &closed_labels), 3);
    assert_eq!(value(&all, "tollgate_fail_open_total", &closed_labels), 0);
    assert_eq!(
        value(&all, "tollgate_allowed_total", &open_labels),
        1,
        "fail-open admissions are counted apart"
    );
}

#[test]
fn limiters_sharing_metrics_count_under_their_own_labels() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new(Duration::from_secs(1_000));
    let build = |resource: &str, strategy: Strategy, share: Option<&Limiter>| {
        metrics::with_local_recorder(&recorder, || {
            let mut builder = Limiter::builder()
                .clock(clock.clone())
                .strategy(strategy)
                .limit(2)
                .window(Duration::from_secs(60))
                .resource(resource)
                .metrics_resource("envoy:d");
            if let Some(other) = share {
                builder = builder.share_metrics(other);
            }
            builder.build().unwrap()
        })
    };
    let first = build("d.a", Strategy::FixedWindow, None);
    // Same labels: counted as one with the first.
    let same = build("d.b", Strategy::FixedWindow, Some(&first));
    // Another strategy: its own series, whatever it was told to share.
    let other = build("d.c", Strategy::TokenBucket, Some(&first));
    for limiter in [&first, &same, &other] {
        for _ in 0..3 {
            limiter.check("k");
        }
    }
    let all = counters(&snapshotter);
    let fixed = labels("envoy:d", "fixed_window");
    let bucket = labels("envoy:d", "token_bucket");
    assert_eq!(value(&all, "tollgate_allowed_total", &fixed), 4);
    assert_eq!(value(&all, "tollgate_denied_total", &fixed), 2);
    assert_eq!(value(&all, "tollgate_allowed_total", &bucket), 2);
    assert_eq!(value(&all, "tollgate_denied_total", &bucket), 1);
}

#[test]
fn lease_decisions_and_returned_units_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new(Duration::from_secs(1_000));
    let store = std::sync::Arc::new(MapStore::with_manual_clock(&clock));
    let limiter = metrics::with_local_recorder(&recorder, || {
        Limiter::builder()
            .backend(StoreBackend::new(store.clone()).clock(clock.clone()))
            .policy(Policy::new(Strategy::FixedWindow, 100, Duration::from_secs(60)).unwrap())
            .local_clock(clock.clone())
            .lease(tollgate::protection::Lease::new(8, Duration::from_secs(1)))
            .build()
            .unwrap()
    });
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    for _ in 0..20 {
        assert!(rt.block_on(limiter.allow("k")).unwrap().allowed);
    }
    let given = rt.block_on(limiter.end_leases()).unwrap();
    let all = counters(&snapshotter);
    let labels = labels("default", "fixed_window");
    let from_leases = value(&all, "tollgate_lease_decisions_total", &labels);
    assert!(
        from_leases > 0 && from_leases < 20,
        "{from_leases} of 20 from leases"
    );
    assert_eq!(
        value(&all, "tollgate_allowed_total", &labels),
        20,
        "every decision counted once"
    );
    assert!(given > 0);
    assert_eq!(value(&all, "tollgate_lease_returned_units_total", &labels), given);
}
