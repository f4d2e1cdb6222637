//! Requests in flight as the service reports them, over real HTTP: the
//! gauge `tollgate_server_in_flight_units` of `/metrics` (the units this
//! replica's permits hold, through acquires, releases, extends and
//! expiries on a manual clock), and `/v1/top?by=in_flight` ranking the
//! keys holding most.
//!
//! The tests' processes share one metrics recorder, so each test names
//! resources no other test uses.

use std::time::Duration;

use serde_json::{json, Value};
use tollgate::clock::ManualClock;

use crate::support::{self, start, Running};

/// `POST {path}` with `body`.
async fn post(client: &reqwest::Client, server: &Running, path: &str, body: Value) -> Value {
    let response = client
        .post(server.url(path))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let (status, answer) = support::json(response).await;
    assert_eq!(status, 200, "{path} {body}: {answer}");
    answer
}

/// Acquires `cost` units for `key` of `resource`: the answer.
async fn acquire(client: &reqwest::Client, server: &Running, resource: &str, key: &str, cost: u64) -> Value {
    let body = json!({ "resource": resource, "key": key, "cost": cost });
    post(client, server, "/v1/acquire", body).await
}

/// The gauge's value for `resource` in `/metrics`, `None` when absent.
async fn gauge(server: &Running, resource: &str) -> Option<f64> {
    let text = reqwest::get(server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let series = format!("tollgate_server_in_flight_units{{resource=\"{resource}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&series))
        .map(|value| value.parse().unwrap())
}

#[tokio::test]
async fn the_gauge_counts_units_until_released_or_expired() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(
        dir.path(),
        "p.yaml",
        "tollgate:\n  default: { limit: 100, window: 1m }\n  resources:\n    \
         gauged: { strategy: concurrency, limit: 10, ttl: 10s }\n",
    );
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let server = start(support::builder(&[&file]).clock(clock.clone())).await;
    let client = reqwest::Client::new();
    assert_eq!(
        gauge(&server, "gauged").await,
        Some(0.0),
        "exported before any permit"
    );

    let first = acquire(&client, &server, "gauged", "a", 2).await;
    let second = acquire(&client, &server, "gauged", "b", 3).await;
    clock.advance(Duration::from_secs(5));
    let third = acquire(&client, &server, "gauged", "a", 1).await;
    let denied = acquire(&client, &server, "gauged", "a", 8).await;
    assert_eq!(denied["allowed"], false, "{denied}");
    let peek = acquire(&client, &server, "gauged", "c", 0).await;
    assert_eq!(peek["permit"], Value::Null);
    assert_eq!(
        gauge(&server, "gauged").await,
        Some(6.0),
        "2 + 3 + 1; a denial and a peek hold nothing"
    );

    let release = json!({ "permit": second["permit"] });
    assert_eq!(
        post(&client, &server, "/v1/release", release.clone()).await["released"],
        true
    );
    assert_eq!(gauge(&server, "gauged").await, Some(3.0));
    assert_eq!(
        post(&client, &server, "/v1/release", release).await["released"],
        false
    );
    assert_eq!(
        gauge(&server, "gauged").await,
        Some(3.0),
        "a second release frees nothing"
    );

    // At 11 s the first permit (2 units, acquired at 0) has expired; the
    // third (acquired at 5 s) is extended to 21 s.
    clock.advance(Duration::from_secs(6));
    assert_eq!(
        gauge(&server, "gauged").await,
        Some(1.0),
        "the first permit expired"
    );
    let extend = json!({ "permit": third["permit"] });
    assert_eq!(
        post(&client, &server, "/v1/extend", extend.clone()).await["extended"],
        true
    );
    clock.advance(Duration::from_secs(5));
    assert_eq!(
        gauge(&server, "gauged").await,
        Some(1.0),
        "extended past its first expiry"
    );
    clock.advance(Duration::from_secs(6));
    assert_eq!(
        gauge(&server, "gauged").await,
        Some(0.0),
        "expired after its extension"
    );
    assert_eq!(
        post(&client, &server, "/v1/extend", extend).await["extended"],
        false
    );
    let release = json!({ "permit": first["permit"] });
    assert_eq!(
        post(&client, &server, "/v1/release", release).await["released"],
        false
    );
    assert_eq!(gauge(&server, "gauged").await, Some(0.0));
    server.stop().await;
}

/// `/v1/top` of `resource` by `in_flight`: each key and its units.
async fn holding(client: &reqwest::Client, server: &Running, resource: &str) -> Vec<(String, u64)> {
    let url = server.url(&format!("/v1/top?resource={resource}&by=in_flight&n=10"));
    let (status, body) = support::json(client.get(url).send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (&body["resource"], &body["by"]),
        (&json!(resource), &json!("in_flight"))
    );
    body["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["key"].as_str().unwrap().to_owned(),
                k["in_flight"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn top_ranks_the_keys_holding_most_first() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(
        dir.path(),
        "p.yaml",
        "tollgate:\n  default: { limit: 100, window: 1m }\n  resources:\n    \
         ranked: { strategy: concurrency, limit: 10, ttl: 10s }\n    \
         rated: { limit: 10, window: 1m }\n",
    );
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let server = start(support::builder(&[&file]).clock(clock.clone())).await;
    let client = reqwest::Client::new();
    assert_eq!(holding(&client, &server, "ranked").await, vec![]);
    acquire(&client, &server, "ranked", "light", 1).await;
    let heavy = acquire(&client, &server, "ranked", "heavy", 3).await;
    acquire(&client, &server, "ranked", "middle", 2).await;
    clock.advance(Duration::from_secs(5));
    acquire(&client, &server, "ranked", "heavy", 1).await;
    let pairs = |list: &[(&str, u64)]| -> Vec<(String, u64)> {
        list.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect()
    };
    assert_eq!(
        holding(&client, &server, "ranked").await,
        pairs(&[("heavy", 4), ("middle", 2), ("light", 1)])
    );

    post(
        &client,
        &server,
        "/v1/release",
        json!({ "permit": heavy["permit"] }),
    )
    .await;
    assert_eq!(
        holding(&client, &server, "ranked").await,
        pairs(&[("middle", 2), ("heavy", 1), ("light", 1)])
    );
    // At 11 s the permits of light and middle have expired; heavy's last
    // one (acquired at 5 s) holds on until 15 s.
    clock.advance(Duration::from_secs(6));
    assert_eq!(holding(&client, &server, "ranked").await, pairs(&[("heavy", 1)]));
    clock.advance(Duration::from_secs(5));
    assert_eq!(holding(&client, &server, "ranked").await, vec![]);

    let url = server.url("/v1/top?resource=rated&by=in_flight");
    let (status, body) = support::json(client.get(url).send().await.unwrap()).await;
    assert_eq!((status, &body["field"]), (400, &json!("by")), "{body}");
    server.stop().await;
}
