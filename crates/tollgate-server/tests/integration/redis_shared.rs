//! Two service instances on one Redis share a limit exactly.

use crate::support::redis::RedisServer;
use crate::support::{self, decide, start};

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
