//! The service on PostgreSQL: it starts while the database is down (in
//! every fail policy), answers `/readyz` not ready and decides by the fail
//! policy until the database answers, then decides on it, exactly.

use std::time::{Duration, Instant};

use serde_json::Value;
use tollgate_test_support::fault_proxy::{FaultProxy, Faults};
use tollgate_test_support::postgres_databases::TestDatabase;
use tollgate_test_support::redis::free_port;

use crate::support::{self, decide, start, Running};

const API: &str = r#"{"resource": "api", "key": "k"}"#;

/// A policy file on `url` with `fail` (`fail_open: …` or a `fallback`)
/// and the resource `api`, 3 an hour.
fn policies(url: &str, fail: &str) -> String {
    format!(
        "tollgate:\n  postgres_url: {url}\n  postgres: {{ timeout: 300ms, connect_timeout: 200ms }}\n{fail}  default: {{ limit: 100, window: 1h }}\n  resources:\n    api: {{ limit: 3, window: 1h, strategy: fixed_window }}\n"
    )
}

/// `/readyz`: its status and body.
async fn ready(client: &reqwest::Client, server: &Running) -> (u16, Value) {
    support::json(client.get(server.url("/readyz")).send().await.unwrap()).await
}

/// A server on the file `text`.
async fn serve(dir: &std::path::Path, text: &str) -> Running {
    let file = support::write(dir, "p.yaml", text);
    start(support::builder(&[&file])).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_nothing_listening_it_starts_not_ready_and_decides_by_its_fail_policy() {
    let url = format!("postgres://app:s3cret@127.0.0.1:{}/app", free_port());
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    // Failing closed: decisions fail with 503.
    let server = serve(dir.path(), &policies(&url, "")).await;
    let (status, body) = ready(&client, &server).await;
    assert_eq!((status, &body["ready"]), (503, &Value::Bool(false)), "{body}");
    assert!(!body.to_string().contains("s3cret"), "{body}");
    let (status, body) = decide(&client, &server, API).await;
    assert_eq!(status, 503, "{body}");
    server.stop().await;
    // Failing open: admitted, marked.
    let server = serve(dir.path(), &policies(&url, "  fail_open: true\n")).await;
    assert_eq!(ready(&client, &server).await.0, 503);
    let (status, body) = decide(&client, &server, API).await;
    assert_eq!(
        (status, &body["allowed"], &body["fail_open"]),
        (200, &Value::Bool(true), &Value::Bool(true)),
        "{body}"
    );
    server.stop().await;
    // A fallback: its limit, in this process.
    let fallback = "  fallback: { limit: 1, window: 1h }\n";
    let server = serve(dir.path(), &policies(&url, fallback)).await;
    assert_eq!(ready(&client, &server).await.0, 503);
    let (_, first) = decide(&client, &server, API).await;
    let (_, second) = decide(&client, &server, API).await;
    assert_eq!(
        (&first["allowed"], &first["fallback"]),
        (&Value::Bool(true), &Value::Bool(true)),
        "{first}"
    );
    assert_eq!(second["allowed"], Value::Bool(false), "{second}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_live_database_it_is_ready_and_decides_exactly() {
    let db = TestDatabase::create();
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &policies(&db.url(), "")).await;
    let client = reqwest::Client::new();
    let (status, body) = ready(&client, &server).await;
    assert_eq!((status, &body["ready"]), (200, &Value::Bool(true)), "{body}");
    assert!(
        body["storage"].as_str().unwrap().starts_with("PostgreSQL at "),
        "{body}"
    );
    let mut remaining = Vec::new();
    for _ in 0..4 {
        let (status, body) = decide(&client, &server, API).await;
        assert_eq!(status, 200, "{body}");
        remaining.push((
            body["allowed"].as_bool().unwrap(),
            body["remaining"].as_u64().unwrap(),
        ));
    }
    assert_eq!(remaining, [(true, 2), (true, 1), (true, 0), (false, 0)]);
    assert_eq!(db.sql("SELECT count(*) FROM tollgate.state"), "1");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_database_comes_back_it_decides_on_it_within_a_second() {
    let db = TestDatabase::create();
    let upstream = "127.0.0.1:5432".parse().unwrap();
    let proxy = FaultProxy::start(upstream);
    proxy.set(Faults {
        black_hole: true,
        ..Faults::default()
    });
    let host = db.url().replace("127.0.0.1:5432", &proxy.addr().to_string());
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), &policies(&host, "")).await;
    let client = reqwest::Client::new();
    assert_eq!(ready(&client, &server).await.0, 503);
    assert_eq!(decide(&client, &server, API).await.0, 503);

    proxy.heal();
    let healed = Instant::now();
    while ready(&client, &server).await.0 != 200 {
        assert!(
            healed.elapsed() < Duration::from_secs(3),
            "not ready 3 s after the database came back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, body) = decide(&client, &server, API).await;
    assert_eq!(
        (status, &body["allowed"], &body["remaining"]),
        (200, &Value::Bool(true), &serde_json::json!(2)),
        "{body}"
    );
    server.stop().await;
}
