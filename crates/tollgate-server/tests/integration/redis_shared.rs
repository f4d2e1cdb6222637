//! Two service instances on one Redis share a limit exactly.

use crate::support::{self, decide, start};
use tollgate_test_support::redis::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_share_a_limit_exactly() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(
        dir.path(),
        "p.yaml",
        &format!(
            "tollgate:
  redis_url: {}
  key_prefix: serve-test
  default: {{ limit: 1000, window: 1h }}
  resources:
    api: {{ limit: 37, window: 1h, strategy: fixed_window }}
",
            redis.url()
        ),
    );
    let a = start(support::builder(&[&file])).await;
    let b = start(support::builder(&[&file])).await;
    let client = reqwest::Client::new();
    let (status, ready) = support::json(client.get(a.url("/readyz")).send().await.unwrap()).await;
    assert_eq!(
        (status, &ready["ready"]),
        (200, &serde_json::Value::Bool(true)),
        "{ready}"
    );
    let mut tasks = Vec::new();
    for server in [&a, &b, &a, &b] {
        let client = client.clone();
        let url = server.url("/v1/decide");
        tasks.push(tokio::spawn(async move {
            let mut allowed = 0;
            for _ in 0..25 {
                let response = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(r#"{"resource": "api", "key": "shared"}"#)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), 200);
                let body: serde_json::Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
                allowed += u64::from(body["allowed"].as_bool().unwrap());
            }
            allowed
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    assert_eq!(total, 37);
    let (_, last) = decide(&client, &b, r#"{"resource": "api", "key": "shared", "cost": 0}"#).await;
    assert_eq!(last["remaining"], 0);
    // The store gone: not ready, and decisions fail closed with 503.
    drop(redis);
    let (status, ready) = support::json(client.get(a.url("/readyz")).send().await.unwrap()).await;
    assert_eq!(
        (status, &ready["ready"]),
        (503, &serde_json::Value::Bool(false)),
        "{ready}"
    );
    let (status, got) = decide(&client, &a, r#"{"resource": "api", "key": "fresh"}"#).await;
    assert_eq!(status, 503, "{got}");
    // A key the store denied is still answered by the deny cache (on by
    // default with Redis): the store would deny it too.
    let (status, got) = decide(&client, &a, r#"{"resource": "api", "key": "shared"}"#).await;
    assert_eq!(
        (status, &got["allowed"]),
        (200, &serde_json::Value::Bool(false)),
        "{got}"
    );
    a.stop().await;
    b.stop().await;
}

/// An Envoy request of two descriptors whose second is over its limit, sent
/// to one instance 32 at a time, never shows its first descriptor's charge
/// to the other instance: a request there for the one unit left on that
/// descriptor is admitted every time. Charged one by one and refunded, it
/// was denied whenever it arrived between a charge and its refund.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_envoy_request_never_shows_a_charge_to_another_instance() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let policies = support::write(
        dir.path(),
        "p.yaml",
        &format!(
            "tollgate:\n  redis_url: {}\n  key_prefix: envoy-shared\n  default: {{ limit: 1000, window: 1h }}\n",
            redis.url()
        ),
    );
    let envoy = support::write(
        dir.path(),
        "envoy.yaml",
        "domain: edge
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: route
    rate_limit: { unit: hour, requests_per_unit: 1 }
",
    );
    let serve = || support::builder(&[&policies, &envoy]).grpc_listen(support::any_port());
    let (a, b) = (start(serve()).await, start(serve()).await);
    let client = |server: &support::Running| {
        RateLimitServiceClient::connect(format!("http://{}", server.grpc.unwrap()))
    };
    let (flood_client, mut other) = (client(&a).await.unwrap(), client(&b).await.unwrap());
    let request = |entries: &[(&str, &str)]| RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: entries
            .iter()
            .map(|(key, value)| RateLimitDescriptor {
                entries: vec![Entry {
                    key: (*key).to_owned(),
                    value: (*value).to_owned(),
                }],
                ..Default::default()
            })
            .collect(),
        hits_addend: 1,
    };
    let ok = Code::Ok as i32;
    // The route's one unit is taken: every request naming it is denied.
    let first = other.should_rate_limit(request(&[("route", "r")])).await.unwrap();
    assert_eq!(first.into_inner().overall_code, ok);
    let mut admitted = 0;
    for round in 0..20 {
        let user = format!("u{round}");
        let stop = Arc::new(AtomicBool::new(false));
        let denials = Arc::new(AtomicU64::new(0));
        let flood: Vec<_> = (0..32)
            .map(|_| {
                let (mut client, user) = (flood_client.clone(), user.clone());
                let (stop, denials) = (stop.clone(), denials.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let response = client
                            .should_rate_limit(request(&[("user", &user), ("route", "r")]))
                            .await
                            .unwrap()
                            .into_inner();
                        assert_ne!(response.overall_code, ok, "{response:?}");
                        denials.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        while denials.load(Ordering::Relaxed) < 64 {
            tokio::task::yield_now().await;
        }
        let response = other
            .should_rate_limit(request(&[("user", &user)]))
            .await
            .unwrap();
        admitted += u32::from(response.into_inner().overall_code == ok);
        stop.store(true, Ordering::Relaxed);
        for task in flood {
            task.await.unwrap();
        }
    }
    assert_eq!(
        admitted, 20,
        "requests for a free unit denied by another request's passing charge"
    );
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leased_units_go_back_to_redis_when_the_service_stops() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(
        dir.path(),
        "p.yaml",
        &format!(
            "tollgate:
  redis_url: {}
  key_prefix: lease-test
  lease: {{ max_units: 16, max_age: 30s }}
  default: {{ limit: 1000, window: 1h, strategy: fixed_window }}
",
            redis.url()
        ),
    );
    let server = start(support::builder(&[&file])).await;
    let client = reqwest::Client::new();
    let mut remaining = Vec::new();
    for _ in 0..12 {
        let (status, got) = decide(&client, &server, r#"{"key": "hot"}"#).await;
        assert_eq!(status, 200, "{got}");
        remaining.push(got["remaining"].as_u64().unwrap());
    }
    assert_eq!(
        remaining,
        (988..1000).rev().collect::<Vec<_>>(),
        "exact in one process"
    );
    let count = |redis: &RedisServer| -> u64 {
        let state = redis.cli(&["GET", "lease-test::fixed_window:hot"]);
        state.split(':').nth(1).unwrap().parse().unwrap()
    };
    assert!(count(&redis) > 12, "units were leased");
    server.stop().await;
    assert_eq!(count(&redis), 12, "every unspent unit given back");
}

/// Reports (`"charge": "always"`) for 200 tenants from two instances on one
/// Redis, each tenant's reports split between them: none is lost. A tenant
/// under its budget has exactly the budget less its reports left, and both
/// instances say so; one over it is denied by both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_from_two_instances_on_one_redis_are_all_counted() {
    const TENANTS: usize = 200;
    const REPORTS: usize = 20;
    const BUDGET: u64 = 5_000;
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    // 50 years: the fixed window's buckets are aligned to the epoch, so
    // none ends during the test.
    let file = support::write(
        dir.path(),
        "p.yaml",
        &format!(
            "tollgate:
  redis_url: {}
  default: {{ limit: 1000, window: 1h }}
  resources:
    tokens: {{ limit: {BUDGET}, window: 438000h, strategy: fixed_window }}
",
            redis.url()
        ),
    );
    let a = start(support::builder(&[&file])).await;
    let b = start(support::builder(&[&file])).await;
    let client = reqwest::Client::new();
    let tokens = |tenant: usize, i: usize| ((tenant * 7_919 + i * 104_729) % 500) as u64;
    let mut tasks = Vec::new();
    for task in 0..8 {
        let client = client.clone();
        let urls = [a.url("/v1/decide"), b.url("/v1/decide")];
        tasks.push(tokio::spawn(async move {
            for tenant in (task..TENANTS).step_by(8) {
                for i in 0..REPORTS {
                    let url = &urls[i % 2];
                    let post = |body: String| {
                        client
                            .post(url)
                            .header("content-type", "application/json")
                            .body(body)
                            .send()
                    };
                    let check = post(format!(
                        r#"{{"resource": "tokens", "key": "t{tenant}", "cost": 0}}"#
                    ));
                    assert_eq!(check.await.unwrap().status(), 200);
                    let report = post(format!(
                        r#"{{"resource": "tokens", "key": "t{tenant}", "cost": {}, "charge": "always"}}"#,
                        tokens(tenant, i)
                    ));
                    assert_eq!(report.await.unwrap().status(), 200);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let (mut under, mut over) = (0, 0);
    for tenant in 0..TENANTS {
        let total: u64 = (0..REPORTS).map(|i| tokens(tenant, i)).sum();
        let body = format!(r#"{{"resource": "tokens", "key": "t{tenant}", "cost": 0}}"#);
        let (_, from_a) = decide(&client, &a, &body).await;
        let (_, from_b) = decide(&client, &b, &body).await;
        assert_eq!(from_a["remaining"], from_b["remaining"], "t{tenant}");
        if total < BUDGET {
            under += 1;
            assert_eq!(from_a["remaining"], BUDGET - total, "t{tenant}: {from_a}");
        } else {
            over += 1;
            assert_eq!(
                (&from_a["allowed"], &from_b["allowed"]),
                (&false.into(), &false.into()),
                "t{tenant}"
            );
        }
    }
    assert!(
        under > 20 && over > 20,
        "{under} tenants under the budget, {over} over"
    );
    a.stop().await;
    b.stop().await;
}
