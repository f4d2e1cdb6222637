//! Permits over JSON: `POST /v1/acquire`, `/v1/release` and `/v1/extend`
//! on a concurrency resource of a policy file, through a real HTTP client;
//! every mistake a 400 naming its field; tokens signed with the permit key,
//! shared by replicas given the same `--permit-key-file`.

use std::time::Duration;

use serde_json::{json, Value};
use tollgate::clock::ManualClock;

use crate::support::{self, decide, start};

const POLICIES: &str = "\
tollgate:
  default: { limit: 100, window: 1m }
  resources:
    exports: { strategy: concurrency, limit: 2, ttl: 10s }
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

fn permit_body(permit: &Value) -> String {
    json!({ "permit": permit }).to_string()
}

#[tokio::test]
async fn permits_are_acquired_released_once_and_extended_until_they_expire() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let server = start(support::builder(&[&file]).clock(clock.clone())).await;
    let client = reqwest::Client::new();
    let acquire = r#"{"resource": "exports", "key": "tenant-1"}"#;
    let (status, first) = post(&client, &server, "/v1/acquire", acquire).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(
        (&first["allowed"], &first["in_flight"], &first["limit"]),
        (&json!(true), &json!(1), &json!(2))
    );
    assert_eq!(first["expires_ms"], 10_000);
    let (_, second) = post(&client, &server, "/v1/acquire", acquire).await;
    let (_, third) = post(&client, &server, "/v1/acquire", acquire).await;
    assert_eq!(
        (&second["allowed"], &third["allowed"]),
        (&json!(true), &json!(false))
    );
    assert_eq!(
        (&third["permit"], &third["retry_after_ms"]),
        (&Value::Null, &json!(10_000))
    );

    let (status, released) = post(&client, &server, "/v1/release", &permit_body(&first["permit"])).await;
    assert_eq!(status, 200, "{released}");
    assert_eq!(released, json!({ "released": true, "in_flight": 1 }));
    let (_, again) = post(&client, &server, "/v1/release", &permit_body(&first["permit"])).await;
    assert_eq!(again, json!({ "released": false, "in_flight": 1 }));

    clock.advance(Duration::from_secs(6));
    let (_, extended) = post(&client, &server, "/v1/extend", &permit_body(&second["permit"])).await;
    assert_eq!(extended, json!({ "extended": true, "expires_ms": 10_000 }));
    clock.advance(Duration::from_secs(10));
    let (_, lost) = post(&client, &server, "/v1/extend", &permit_body(&second["permit"])).await;
    assert_eq!(lost, json!({ "extended": false, "expires_ms": null }));
    let (_, peek) = post(
        &client,
        &server,
        "/v1/acquire",
        r#"{"resource": "exports", "key": "tenant-1", "cost": 0}"#,
    )
    .await;
    assert_eq!(
        (&peek["allowed"], &peek["in_flight"], &peek["permit"]),
        (&json!(true), &json!(0), &Value::Null)
    );
    server.stop().await;
}

#[tokio::test]
async fn every_mistake_is_a_400_naming_its_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let server = start(support::builder(&[&file])).await;
    let client = reqwest::Client::new();
    let (_, held) = post(
        &client,
        &server,
        "/v1/acquire",
        r#"{"resource": "exports", "key": "k"}"#,
    )
    .await;
    let token = held["permit"].as_str().unwrap().to_owned();
    // The same token naming another key, its signature kept.
    let hex = |s: &str| s.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    let forged = token.replacen(
        &format!("00000001{}", hex("k")),
        &format!("00000001{}", hex("j")),
        1,
    );
    assert_ne!(forged, token);
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "/v1/decide",
            r#"{"resource": "exports", "key": "k"}"#.into(),
            "strategy",
        ),
        ("/v1/acquire", r#"{"key": "k"}"#.into(), "resource"),
        ("/v1/acquire", r#"{"resource": "exports"}"#.into(), "key"),
        (
            "/v1/acquire",
            r#"{"resource": "exports", "key": "k", "ttl": 5}"#.into(),
            "ttl",
        ),
        ("/v1/release", "{}".into(), "permit"),
        ("/v1/release", r#"{"permit": 7}"#.into(), "permit"),
        ("/v1/release", r#"{"permit": "not a permit"}"#.into(), "permit"),
        ("/v1/release", permit_body(&json!(forged)), "permit"),
        (
            "/v1/extend",
            permit_body(&json!(&token[..token.len() - 2])),
            "permit",
        ),
    ];
    for (path, body, field) in cases {
        let (status, answer) = post(&client, &server, path, &body).await;
        assert_eq!(
            (status, &answer["field"]),
            (400, &json!(field)),
            "{path} {body}: {answer}"
        );
    }
    let (_, decided) = decide(&client, &server, r#"{"resource": "exports", "key": "k"}"#).await;
    assert!(
        decided["error"].as_str().unwrap().contains("/v1/acquire"),
        "{decided}"
    );
    let (_, released) = post(&client, &server, "/v1/release", &permit_body(&json!(token))).await;
    assert_eq!(
        released["released"], true,
        "the forgeries freed nothing: {released}"
    );
    server.stop().await;
}

#[tokio::test]
async fn replicas_sharing_a_permit_key_read_each_others_permits() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let key = support::write(dir.path(), "permit-key", "0123456789abcdef0123456789abcdef\n");
    let other = support::write(dir.path(), "other-key", "fedcba9876543210fedcba9876543210\n");
    let short = support::write(dir.path(), "short-key", "secret\n");
    let a = start(support::builder(&[&file]).permit_key_file(&key)).await;
    let b = start(support::builder(&[&file]).permit_key_file(&key)).await;
    let c = start(support::builder(&[&file]).permit_key_file(&other)).await;
    let client = reqwest::Client::new();
    let (_, held) = post(
        &client,
        &a,
        "/v1/acquire",
        r#"{"resource": "exports", "key": "k"}"#,
    )
    .await;
    let body = permit_body(&held["permit"]);
    // B reads the token (its own memory holds no such permit).
    let (status, at_b) = post(&client, &b, "/v1/release", &body).await;
    assert_eq!((status, &at_b["released"]), (200, &json!(false)), "{at_b}");
    let (status, at_c) = post(&client, &c, "/v1/release", &body).await;
    assert_eq!((status, &at_c["field"]), (400, &json!("permit")), "{at_c}");
    let (_, at_a) = post(&client, &a, "/v1/release", &body).await;
    assert_eq!(at_a["released"], true, "{at_a}");
    let Err(err) = support::builder(&[&file]).permit_key_file(&short).bind().await else {
        panic!("a 6-byte permit key was taken");
    };
    assert!(
        err.to_string().contains("--permit-key-file") && err.to_string().contains("at least 16"),
        "{err}"
    );
    for server in [a, b, c] {
        server.stop().await;
    }
}
