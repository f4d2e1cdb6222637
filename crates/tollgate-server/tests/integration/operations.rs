//! The per-key operation routes (`/v1/reset`, `/v1/block`, `/v1/refund`,
//! `/v1/penalty`) through a real HTTP client, against a limiter of the same
//! policy on the same clock.

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::{Decision, Limiter, Operation, Policy, Strategy};

use crate::support::{self, decide, json, start, Running};

const POLICIES: &str = "tollgate:
  default: { limit: 10, window: 10s, strategy: sliding_window }
  resources:
    login: { limit: 5, window: 1m, strategy: fixed_window }
";

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap()
}

/// `POST path` with `body`, optionally with a bearer token: the status and
/// the text.
async fn post(
    client: &reqwest::Client,
    server: &Running,
    path: &str,
    body: &str,
    token: Option<&str>,
) -> (u16, String) {
    let mut request = client
        .post(server.url(path))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(token) = token {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// The route and body of `op` on `key` of `resource` (none: the default
/// policy).
fn request(resource: Option<&str>, key: &str, op: Operation) -> (String, String) {
    let resource = resource.map_or_else(String::new, |r| format!(r#""resource": "{r}", "#));
    let arg = match op {
        Operation::Reset => String::new(),
        Operation::Block(d) => format!(r#", "duration_ms": {}"#, d.as_millis()),
        Operation::Refund(n) | Operation::Penalty(n) => format!(r#", "cost": {n}"#),
        _ => unreachable!("every operation is listed"),
    };
    (
        format!("/v1/{}", op.name()),
        format!(r#"{{{resource}"key": "{key}"{arg}}}"#),
    )
}

fn assert_same(got: &serde_json::Value, want: &Decision, step: &str) {
    assert_eq!(got["allowed"], want.allowed, "{step}: {got}");
    assert_eq!(got["limit"], want.limit, "{step}: {got}");
    assert_eq!(got["remaining"], want.remaining, "{step}: {got}");
    assert_eq!(got["reset_ms"], ms(want.reset), "{step}: {got}");
    assert_eq!(
        got["retry_after_ms"],
        serde_json::to_value(want.retry_after.map(ms)).unwrap(),
        "{step}: {got}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_change_decisions_as_on_a_limiter() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let clock = ManualClock::new(Duration::from_millis(1_700_000_017_500));
    let server = start(support::builder(&[&file]).clock(clock.clone())).await;
    let client = reqwest::Client::new();
    let policies = [
        (
            Some("login"),
            Policy::new(Strategy::FixedWindow, 5, Duration::from_secs(60)).unwrap(),
        ),
        (
            None,
            Policy::new(Strategy::SlidingWindow, 10, Duration::from_secs(10)).unwrap(),
        ),
    ];
    // Decisions (a cost) and operations, with the milliseconds before each.
    enum Step {
        Decide(u64),
        Op(Operation),
    }
    use Step::{Decide, Op};
    let steps = [
        Decide(3),
        Decide(2),
        Decide(1),
        Op(Operation::Refund(2)),
        Decide(1),
        Decide(2),
        Op(Operation::Block(Duration::from_millis(1_500))),
        Decide(0),
        Decide(1),
        Decide(1),
        Op(Operation::Refund(100)),
        Decide(1),
        Op(Operation::Penalty(4)),
        Decide(1),
        Op(Operation::Block(Duration::from_secs(30))),
        Decide(1),
        Op(Operation::Block(Duration::ZERO)),
        Decide(1),
        Op(Operation::Reset),
        Decide(2),
        Op(Operation::Penalty(0)),
        Decide(1),
    ];
    for (resource, policy) in policies {
        let reference = Limiter::builder()
            .policy(policy)
            .clock(clock.clone())
            .build()
            .unwrap();
        for (i, step) in steps.iter().enumerate() {
            clock.advance(Duration::from_millis(700));
            let label = format!("{resource:?} step {i}");
            match step {
                Decide(cost) => {
                    let resource = resource.map_or_else(String::new, |r| format!(r#""resource": "{r}", "#));
                    let body = format!(r#"{{{resource}"key": "user-1", "cost": {cost}}}"#);
                    let (status, got) = decide(&client, &server, &body).await;
                    assert_eq!(status, 200, "{label}: {got}");
                    assert_same(&got, &reference.check_n("user-1", *cost), &label);
                }
                Op(op) => {
                    let (path, body) = request(resource, "user-1", *op);
                    assert_eq!(
                        post(&client, &server, &path, &body, None).await,
                        (204, String::new()),
                        "{label}"
                    );
                    reference.operate("user-1", *op).await.unwrap();
                }
            }
        }
    }
    // Another key is untouched by all of that.
    let (_, other) = decide(&client, &server, r#"{"resource": "login", "key": "user-2"}"#).await;
    assert_eq!(other["remaining"], 4);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_operations_get_the_status_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let server = start(support::builder(&[&file])).await;
    let client = reqwest::Client::new();
    let cases: &[(&str, &str, Option<&str>)] = &[
        ("/v1/reset", "{", None),
        ("/v1/reset", "[]", None),
        ("/v1/reset", "{}", Some("key")),
        ("/v1/reset", r#"{"key": ""}"#, Some("key")),
        ("/v1/reset", r#"{"key": 1}"#, Some("key")),
        ("/v1/reset", r#"{"key": "k", "resource": 1}"#, Some("resource")),
        ("/v1/reset", r#"{"key": "k", "cost": 1}"#, Some("cost")),
        ("/v1/block", r#"{"key": "k"}"#, Some("duration_ms")),
        (
            "/v1/block",
            r#"{"key": "k", "duration_ms": null}"#,
            Some("duration_ms"),
        ),
        (
            "/v1/block",
            r#"{"key": "k", "duration_ms": -1}"#,
            Some("duration_ms"),
        ),
        (
            "/v1/block",
            r#"{"key": "k", "duration_ms": 1.5}"#,
            Some("duration_ms"),
        ),
        (
            "/v1/block",
            r#"{"key": "k", "duration_ms": "1"}"#,
            Some("duration_ms"),
        ),
        (
            "/v1/block",
            r#"{"key": "k", "duration_ms": 1, "cost": 1}"#,
            Some("cost"),
        ),
        ("/v1/refund", r#"{"key": "k", "cost": -1}"#, Some("cost")),
        (
            "/v1/refund",
            r#"{"key": "k", "cost": 4611686018427387905}"#,
            Some("cost"),
        ),
        (
            "/v1/refund",
            r#"{"key": "k", "cost": 99999999999999999999}"#,
            Some("cost"),
        ),
        (
            "/v1/refund",
            r#"{"key": "k", "duration_ms": 1}"#,
            Some("duration_ms"),
        ),
        ("/v1/penalty", r#"{"key": "k", "cost": true}"#, Some("cost")),
        ("/v1/penalty", r#"{"cost": 1}"#, Some("key")),
    ];
    let max_ms = tollgate::Policy::MAX_WINDOW.as_millis();
    let over = format!(r#"{{"key": "k", "duration_ms": {}}}"#, max_ms + 1);
    let longest = format!(r#"{{"key": "k", "duration_ms": {max_ms}}}"#);
    let cases = [cases, &[("/v1/block", over.as_str(), Some("duration_ms"))]].concat();
    for (path, body, field) in &cases {
        let (status, text) = post(&client, &server, path, body, None).await;
        assert_eq!(status, 400, "{path} {body}: {text}");
        let got: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            got["field"],
            serde_json::to_value(field).unwrap(),
            "{path} {body}: {got}"
        );
        assert!(
            got["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{path} {body}: {got}"
        );
    }
    // The limits of the edges are accepted.
    for (path, body) in [
        ("/v1/block", longest.as_str()),
        ("/v1/refund", r#"{"key": "k", "cost": 4611686018427387904}"#),
    ] {
        assert_eq!(
            post(&client, &server, path, body, None).await.0,
            204,
            "{path} {body}"
        );
    }
    // Too large a body.
    let big = format!(r#"{{"key": "{}"}}"#, "k".repeat(tollgate_server::MAX_BODY_BYTES));
    assert_eq!(post(&client, &server, "/v1/reset", &big, None).await.0, 413);
    // Only POST.
    let response = client.get(server.url("/v1/reset")).send().await.unwrap();
    assert_eq!(response.status(), 405);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_need_the_admin_token_when_one_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let token = support::write(dir.path(), "token", "op-token\n");
    let server = start(support::builder(&[&file]).admin_token_file(&token)).await;
    let client = reqwest::Client::new();
    let login = |key: &'static str| format!(r#"{{"resource": "login", "key": "{key}"}}"#);
    decide(&client, &server, &login("k")).await;
    for op in [
        Operation::Reset,
        Operation::Block(Duration::from_secs(1)),
        Operation::Refund(1),
        Operation::Penalty(1),
    ] {
        let (path, body) = request(Some("login"), "k", op);
        for wrong in [None, Some("nope")] {
            let (status, text) = post(&client, &server, &path, &body, wrong).await;
            assert_eq!(status, 401, "{path} {wrong:?}: {text}");
        }
        assert_eq!(
            post(&client, &server, &path, &body, Some("op-token")).await.0,
            204,
            "{path}"
        );
    }
    // The refused requests changed nothing: reset, block 1 s lifted by
    // nothing, refund 1, penalty 1 leave 4 - 1 = 3 after the block ends.
    let (status, got) = json(
        client
            .post(server.url("/v1/decide"))
            .header("content-type", "application/json")
            .body(r#"{"resource": "login", "key": "k", "cost": 0}"#)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(got["allowed"], false, "still blocked: {got}");
    server.stop().await;
}
