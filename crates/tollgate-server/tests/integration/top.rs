//! `GET /v1/top`: who is limited right now, per policy, through a running
//! service: the counts of each metric against the requests sent, the
//! remaining budget a charge-free decision gives, Envoy limits, reloads
//! that keep the counts, and the mistakes a caller can make.

use crate::envoy_grpc::envoy;
use crate::support::{self, decide, json, start, Running};

const POLICIES: &str = "tollgate:
  default: { limit: 100, window: 1h }
  resources:
    login: { limit: 3, window: 1h }
    search: { limit: 5, window: 1h, shadow: true }
    quiet: { limit: 5, window: 1h, top_keys: false }
";

async fn top(server: &Running, query: &str) -> (u16, serde_json::Value) {
    json(
        reqwest::get(server.url(&format!("/v1/top{query}")))
            .await
            .unwrap(),
    )
    .await
}

async fn send(server: &Running, resource: &str, key: &str, times: usize) {
    let client = reqwest::Client::new();
    for _ in 0..times {
        let (status, answer) = decide(
            &client,
            server,
            &format!(r#"{{"resource": "{resource}", "key": "{key}"}}"#),
        )
        .await;
        assert_eq!(status, 200, "{answer}");
    }
}

/// The `(key, field)` figures of an answer's keys, in order.
fn column(answer: &serde_json::Value, field: &str) -> Vec<(String, u64)> {
    answer["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["key"].as_str().unwrap().to_owned(), k[field].as_u64().unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heaviest_keys_are_listed_with_their_counts_and_what_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let server = start(support::builder(&[&file])).await;
    send(&server, "login", "abuser", 10).await;
    send(&server, "login", "alice", 2).await;
    send(&server, "login", "bob", 1).await;
    send(&server, "search", "scraper", 8).await;

    let (status, answer) = top(&server, "?resource=login").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["resource"], "login");
    assert_eq!(answer["by"], "denied");
    assert_eq!(answer["window_s"], 60);
    assert_eq!(answer["capacity"], 1000);
    assert_eq!(answer["error_bound"], 0);
    assert_eq!(column(&answer, "denied"), [("abuser".to_owned(), 7)]);
    let abuser = &answer["keys"][0];
    assert_eq!(
        (abuser["admitted"].as_u64(), abuser["shadow_denied"].as_u64()),
        (Some(3), Some(0))
    );
    assert_eq!(abuser["remaining"], 0);
    assert_eq!(abuser["error"], 0);
    assert_eq!(abuser["cut"], false);

    let (_, answer) = top(&server, "?resource=login&by=admitted&n=2").await;
    assert_eq!(
        column(&answer, "admitted"),
        [("abuser".to_owned(), 3), ("alice".to_owned(), 2)]
    );
    assert_eq!(answer["keys"][1]["remaining"], 1);

    // Shadow mode admits every request: the ones it would deny are counted
    // apart from the admitted ones.
    let (_, answer) = top(&server, "?resource=search&by=shadow_denied").await;
    assert_eq!(column(&answer, "shadow_denied"), [("scraper".to_owned(), 3)]);
    assert_eq!(answer["keys"][0]["admitted"], 5);
    assert_eq!(answer["keys"][0]["remaining"], 0);

    // Listing charged nothing: bob still has 2 left.
    let (_, answer) = top(&server, "?resource=login&by=admitted").await;
    let bob = answer["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key"] == "bob")
        .unwrap();
    assert_eq!(bob["remaining"], 2);
    // No resource: the default policy, which saw nothing.
    let (status, answer) = top(&server, "").await;
    assert_eq!(status, 200);
    assert_eq!(
        (
            answer["resource"].as_str(),
            answer["keys"].as_array().map(Vec::len)
        ),
        (Some("default"), Some(0))
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_mistake_is_refused_with_what_was_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let server = start(support::builder(&[&file])).await;
    for (query, status, field) in [
        ("?resource=login&by=most", 400, Some("by")),
        ("?resource=login&n=0", 400, Some("n")),
        ("?resource=login&n=1001", 400, Some("n")),
        ("?resource=login&n=ten", 400, Some("n")),
        ("?resource=login&limit=3", 400, Some("limit")),
        ("?resource=login&resource=search", 400, Some("resource")),
        ("?resource=nowhere", 404, None),
        ("?resource=quiet", 409, None),
    ] {
        let (got, answer) = top(&server, query).await;
        assert_eq!(got, status, "{query}: {answer}");
        assert_eq!(answer["field"].as_str(), field, "{query}: {answer}");
        assert!(
            answer["error"].as_str().is_some_and(|e| e.len() > 20),
            "{query}: {answer}"
        );
    }
    // An admin route: a web page may not read it.
    let response = reqwest::Client::new()
        .get(server.url("/v1/top?resource=login"))
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_counts_of_a_changed_policy() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let server = start(support::builder(&[&file])).await;
    send(&server, "login", "abuser", 5).await;
    std::fs::write(&file, POLICIES.replace("login: { limit: 3", "login: { limit: 4")).unwrap();
    server.reloader.reload().await.unwrap();
    send(&server, "login", "abuser", 1).await;
    let (_, answer) = top(&server, "?resource=login").await;
    // 2 denied under the old limit of 3, then 1 more under the new one of 4
    // (the state is kept: 3 spent, so the sixth request is the fourth admitted).
    assert_eq!(column(&answer, "denied"), [("abuser".to_owned(), 2)]);
    assert_eq!(answer["keys"][0]["admitted"], 4);
    // Turning them off drops them.
    std::fs::write(
        &file,
        POLICIES.replace(
            "login: { limit: 3, window: 1h }",
            "login: { limit: 4, window: 1h, top_keys: false }",
        ),
    )
    .unwrap();
    server.reloader.reload().await.unwrap();
    let (status, _) = top(&server, "?resource=login").await;
    assert_eq!(status, 409);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envoy_limit_lists_its_descriptor_values() {
    let mut envoy = envoy(std::time::Duration::ZERO).await;
    for _ in 0..4 {
        envoy.one(&[("user", "heavy")], 1).await;
    }
    envoy.one(&[("user", "light")], 1).await;
    let (status, policies) = json(reqwest::get(envoy.server.url("/v1/policies")).await.unwrap()).await;
    assert_eq!(status, 200);
    let resource = policies["envoy"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["resource"].as_str().unwrap().to_owned())
        .find(|r| r.contains("user"))
        .expect("a rule on the user descriptor");
    let (status, answer) = top(&envoy.server, &format!("?resource={resource}&by=admitted")).await;
    assert_eq!(status, 200, "{answer}");
    let keys = column(&answer, "admitted");
    assert_eq!(keys.len(), 2, "{answer}");
    assert_eq!(keys[0].1, 4, "{answer}");
    assert!(keys[0].0.contains("heavy"), "{answer}");
    assert!(keys[1].0.contains("light") && keys[1].1 == 1, "{answer}");
}
