//! `POST /v1/acquire` on a resource that combines a rate with a
//! concurrency limit, through a real HTTP client: a request needs both; a
//! full set of slots denies without charging the rate, and a rate denial
//! releases the permit at once, so a denied request holds nothing. On
//! Redis too, the permit holding across two instances of one file.

use std::time::Duration;

use serde_json::{json, Value};
use tollgate::clock::ManualClock;
use tollgate_test_support::redis::RedisServer;

use crate::support::{self, start};

/// Two a minute, one at a time. The permits last an hour, so that a permit
/// left held would outlive the minute the test waits.
const POLICIES: &str = "\
tollgate:
  default: { limit: 100, window: 1m }
  resources:
    api:
      limits:
        - { limit: 2, window: 1m, strategy: fixed_window }
        - { strategy: concurrency, limit: 1, ttl: 1h }
";

/// `POST {path}` with `body`.
async fn post(client: &reqwest::Client, server: &support::Running, path: &str, body: &str) -> (u16, Value) {
    let response = client
        .post(server.url(path))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    support::json(response).await
}

fn permit_body(answer: &Value) -> String {
    json!({ "permit": answer["permit"] }).to_string()
}

const ACQUIRE: &str = r#"{"resource": "api", "key": "k"}"#;

#[tokio::test]
async fn a_request_needs_a_slot_and_the_rate_and_a_denied_one_holds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    // At the start of a minute, so that the rate's window is whole.
    let clock = ManualClock::new(Duration::from_secs(1_700_000_040));
    let server = start(support::builder(&[&file]).clock(clock.clone())).await;
    let client = reqwest::Client::new();

    let (status, first) = post(&client, &server, "/v1/acquire", ACQUIRE).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(
        (&first["allowed"], &first["in_flight"]),
        (&json!(true), &json!(1))
    );
    assert_eq!(first["expires_ms"], 3_600_000);
    assert_eq!(
        (
            &first["rate"]["allowed"],
            &first["rate"]["limit"],
            &first["rate"]["remaining"]
        ),
        (&json!(true), &json!(2), &json!(1)),
        "{first}"
    );

    // The slot is taken: denied by the concurrency limit, the rate not
    // asked (and not charged).
    let (_, full) = post(&client, &server, "/v1/acquire", ACQUIRE).await;
    assert_eq!(
        (&full["allowed"], &full["permit"], &full["rate"]),
        (&json!(false), &Value::Null, &Value::Null),
        "{full}"
    );
    assert_eq!(full["retry_after_ms"], 3_600_000);

    let (_, released) = post(&client, &server, "/v1/release", &permit_body(&first)).await;
    assert_eq!(released, json!({ "released": true, "in_flight": 0 }));
    // The second unit of the rate is still there: the denial charged nothing.
    let (_, second) = post(&client, &server, "/v1/acquire", ACQUIRE).await;
    assert_eq!(
        (&second["allowed"], &second["rate"]["remaining"]),
        (&json!(true), &json!(0)),
        "{second}"
    );
    let (_, extended) = post(&client, &server, "/v1/extend", &permit_body(&second)).await;
    assert_eq!(extended, json!({ "extended": true, "expires_ms": 3_600_000 }));
    let (_, released) = post(&client, &server, "/v1/release", &permit_body(&second)).await;
    assert_eq!(released["released"], true);

    // The rate is spent: denied by it, its permit released at once.
    let (_, spent) = post(&client, &server, "/v1/acquire", ACQUIRE).await;
    assert_eq!(
        (&spent["allowed"], &spent["permit"], &spent["in_flight"]),
        (&json!(false), &Value::Null, &json!(0)),
        "{spent}"
    );
    assert_eq!(
        (&spent["rate"]["allowed"], &spent["retry_after_ms"]),
        (&json!(false), &json!(60_000))
    );

    // A minute on, the rate admits again and the slot is free: the denied
    // request held none of it.
    clock.advance(Duration::from_secs(60));
    let (_, next) = post(&client, &server, "/v1/acquire", ACQUIRE).await;
    assert_eq!(
        (&next["allowed"], &next["in_flight"]),
        (&json!(true), &json!(1)),
        "{next}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_decision_on_a_combined_resource_is_refused_naming_acquire() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let server = start(support::builder(&[&file])).await;
    let client = reqwest::Client::new();
    let (status, refused) = post(&client, &server, "/v1/decide", ACQUIRE).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["field"], "strategy");
    let error = refused["error"].as_str().unwrap();
    assert!(
        error.contains("POST /v1/acquire") && error.contains("combines"),
        "{error}"
    );
    // Nothing was charged or held: the first acquire is admitted whole.
    let (_, first) = post(&client, &server, "/v1/acquire", ACQUIRE).await;
    assert_eq!(
        (&first["allowed"], &first["rate"]["remaining"]),
        (&json!(true), &json!(1))
    );
    server.stop().await;
}

/// The combined resource on Redis, served by two instances of one file
/// (sharing the permits' signing key, as replicas of one store do): a
/// permit acquired through one holds the slot for the other, which can
/// release it; a rate denial releases its request's permit at once, in
/// Redis too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_a_permit_holds_across_instances_and_a_rate_denial_releases_it() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let text = POLICIES.replace(
        "tollgate:\n",
        &format!(
            "tollgate:\n  redis_url: {}\n  key_prefix: combined\n",
            redis.url()
        ),
    );
    let file = support::write(dir.path(), "p.yaml", &text);
    let key = support::write(dir.path(), "permit.key", "a shared signing key of the replicas");
    let a = start(support::builder(&[&file]).permit_key_file(&key)).await;
    let b = start(support::builder(&[&file]).permit_key_file(&key)).await;
    let client = reqwest::Client::new();
    // The Redis keys of the slot's permits (a sorted set and a hash).
    let permit_keys = || redis.cli(&["KEYS", "*combined*permit*"]);

    let (status, first) = post(&client, &a, "/v1/acquire", ACQUIRE).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(
        (
            &first["allowed"],
            &first["in_flight"],
            &first["rate"]["remaining"]
        ),
        (&json!(true), &json!(1), &json!(1)),
        "{first}"
    );
    assert_eq!(permit_keys().lines().count(), 2, "{}", permit_keys());
    // The other instance finds the slot taken, and charges no rate.
    let (_, full) = post(&client, &b, "/v1/acquire", ACQUIRE).await;
    assert_eq!(
        (
            &full["allowed"],
            &full["permit"],
            &full["rate"],
            &full["in_flight"]
        ),
        (&json!(false), &Value::Null, &Value::Null, &json!(1)),
        "{full}"
    );
    let (_, released) = post(&client, &b, "/v1/release", &permit_body(&first)).await;
    assert_eq!(released, json!({ "released": true, "in_flight": 0 }));
    assert_eq!(permit_keys(), "", "the last permit's keys leave Redis");

    let (_, second) = post(&client, &b, "/v1/acquire", ACQUIRE).await;
    assert_eq!(
        (&second["allowed"], &second["rate"]["remaining"]),
        (&json!(true), &json!(0)),
        "{second}"
    );
    let (_, released) = post(&client, &a, "/v1/release", &permit_body(&second)).await;
    assert_eq!(released["released"], true, "{released}");

    // The rate is spent: denied by it, the slot's permit released at once.
    let (_, spent) = post(&client, &a, "/v1/acquire", ACQUIRE).await;
    assert_eq!(
        (&spent["allowed"], &spent["permit"], &spent["in_flight"]),
        (&json!(false), &Value::Null, &json!(0)),
        "{spent}"
    );
    assert_eq!(spent["rate"]["allowed"], false, "{spent}");
    assert_eq!(permit_keys(), "", "the denied request holds nothing in Redis");
    // So the other instance finds the slot free (the rate still denies,
    // and releases its permit again).
    let (_, again) = post(&client, &b, "/v1/acquire", ACQUIRE).await;
    assert_eq!(
        (&again["allowed"], &again["in_flight"], &again["rate"]["allowed"]),
        (&json!(false), &json!(0), &json!(false)),
        "{again}"
    );
    a.stop().await;
    b.stop().await;
}

/// `GET /v1/policies` shows the combined resource's concurrency limit
/// beside its rates; `POST /v1/reset` starts its rates afresh and frees
/// the key's permits, and `POST /v1/block` refuses its acquires before the
/// rates are asked.
#[tokio::test]
async fn the_admin_routes_see_and_reach_the_concurrency_limit_too() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let clock = ManualClock::new(Duration::from_secs(1_700_000_040));
    let server = start(support::builder(&[&file]).clock(clock)).await;
    let client = reqwest::Client::new();

    let (status, policies) =
        support::json(client.get(server.url("/v1/policies")).send().await.unwrap()).await;
    assert_eq!(status, 200, "{policies}");
    assert_eq!(
        policies["resources"]["api"],
        json!({
            "limits": [{ "strategy": "fixed_window", "limit": 2, "window_ms": 60_000 }],
            "in_flight": { "limit": 1, "ttl_ms": 3_600_000 },
        })
    );
    assert_eq!(policies["default"].get("in_flight"), None, "{policies}");

    let (_, held) = post(&client, &server, "/v1/acquire", ACQUIRE).await;
    assert_eq!(held["allowed"], true, "{held}");
    let (_, full) = post(&client, &server, "/v1/acquire", ACQUIRE).await;
    assert_eq!(full["allowed"], false, "{full}");
    let response = client
        .post(server.url("/v1/reset"))
        .header("content-type", "application/json")
        .body(ACQUIRE)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    // The slot is free and the rate whole again: the first of two.
    let (_, after) = post(&client, &server, "/v1/acquire", ACQUIRE).await;
    assert_eq!(
        (
            &after["allowed"],
            &after["in_flight"],
            &after["rate"]["remaining"]
        ),
        (&json!(true), &json!(1), &json!(1)),
        "{after}"
    );
    let (_, released) = post(&client, &server, "/v1/release", &permit_body(&after)).await;
    assert_eq!(released["released"], true, "{released}");

    let block = r#"{"resource": "api", "key": "k", "duration_ms": 60000}"#;
    let response = client
        .post(server.url("/v1/block"))
        .header("content-type", "application/json")
        .body(block)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    // Refused by the blocked concurrency limit: the rates not asked.
    let (_, blocked) = post(&client, &server, "/v1/acquire", ACQUIRE).await;
    assert_eq!(
        (&blocked["allowed"], &blocked["permit"], &blocked["rate"]),
        (&json!(false), &Value::Null, &Value::Null),
        "{blocked}"
    );
    server.stop().await;
}
