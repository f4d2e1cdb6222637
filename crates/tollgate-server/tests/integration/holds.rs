//! Estimates settled over JSON: `POST /v1/decide` with `"settle": true`
//! answers a `hold`, `POST /v1/settle` settles it once with the usage;
//! every mistake a 400 naming its field.

use std::time::Duration;

use serde_json::{json, Value};
use tollgate::clock::ManualClock;

use crate::support::{self, decide, start};

const POLICIES: &str = "\
tollgate:
  default: { limit: 100, window: 1m }
  resources:
    tokens: { limit: 1000, window: 1h, strategy: fixed_window }
    exports: { strategy: concurrency, limit: 2 }
";

/// `POST /v1/settle` with `body`.
async fn settle(client: &reqwest::Client, server: &support::Running, body: Value) -> (u16, Value) {
    let response = client
        .post(server.url("/v1/settle"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    support::json(response).await
}

#[tokio::test]
async fn a_hold_is_charged_its_estimate_and_settled_once_with_its_usage() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    // At the start of an hour: the bucket lasts the whole test.
    let clock = ManualClock::new(Duration::from_secs(1_700_002_800));
    let server = start(support::builder(&[&file]).clock(clock.clone())).await;
    let client = reqwest::Client::new();
    let hold_body = r#"{"resource": "tokens", "key": "tenant", "cost": 400, "settle": true}"#;
    let (status, held) = decide(&client, &server, hold_body).await;
    assert_eq!(status, 200, "{held}");
    assert_eq!(
        (&held["allowed"], &held["remaining"]),
        (&json!(true), &json!(600))
    );
    let hold = held["hold"].clone();
    assert!(hold.is_string(), "{held}");
    let (_, under) = settle(&client, &server, json!({ "hold": hold, "used": 150 })).await;
    assert_eq!(
        (&under["settled"], &under["charged"], &under["remaining"]),
        (&json!(true), &json!(150), &json!(850))
    );
    let (_, twice) = settle(&client, &server, json!({ "hold": hold, "used": 150 })).await;
    assert_eq!(
        (&twice["settled"], &twice["charged"], &twice["remaining"]),
        (&json!(false), &Value::Null, &json!(850))
    );
    let (_, second) = decide(&client, &server, hold_body).await;
    let (_, over) = settle(&client, &server, json!({ "hold": second["hold"], "used": 1_000 })).await;
    assert_eq!(
        (&over["settled"], &over["remaining"]),
        (&json!(true), &json!(0)),
        "150 + 1,000 used: over"
    );
    let (_, denied) = decide(&client, &server, hold_body).await;
    assert_eq!(
        (&denied["allowed"], &denied["hold"]),
        (&json!(false), &Value::Null)
    );
    server.stop().await;
}

#[tokio::test]
async fn hold_mistakes_are_a_400_naming_their_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let server = start(support::builder(&[&file])).await;
    let client = reqwest::Client::new();
    let (_, held) = decide(
        &client,
        &server,
        r#"{"resource": "tokens", "key": "k", "settle": true}"#,
    )
    .await;
    let hold = held["hold"].as_str().unwrap().to_owned();
    for (body, field) in [
        (r#"{"key": "k", "settle": "yes"}"#, "settle"),
        (r#"{"key": "k", "settle": true, "max_delay_ms": 10}"#, "settle"),
        (r#"{"key": "k", "settle": true, "charge": "always"}"#, "settle"),
        (
            r#"{"resource": "exports", "key": "k", "settle": true}"#,
            "strategy",
        ),
    ] {
        let (status, answer) = decide(&client, &server, body).await;
        assert_eq!(
            (status, &answer["field"]),
            (400, &json!(field)),
            "{body}: {answer}"
        );
    }
    let acquired = client
        .post(server.url("/v1/acquire"))
        .header("content-type", "application/json")
        .body(r#"{"resource": "exports", "key": "k"}"#)
        .send()
        .await
        .unwrap();
    let (_, permit) = support::json(acquired).await;
    for (body, field) in [
        (json!({ "used": 1 }), "hold"),
        (json!({ "hold": hold }), "used"),
        (json!({ "hold": hold, "used": -1 }), "used"),
        (json!({ "hold": "beef", "used": 1 }), "hold"),
        (json!({ "hold": permit["permit"], "used": 1 }), "hold"),
        (json!({ "hold": hold, "used": 1, "extra": 1 }), "extra"),
    ] {
        let (status, answer) = settle(&client, &server, body.clone()).await;
        assert_eq!(
            (status, &answer["field"]),
            (400, &json!(field)),
            "{body}: {answer}"
        );
    }
    server.stop().await;
}
