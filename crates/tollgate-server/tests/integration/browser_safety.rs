//! Web pages cannot drive the admin routes or `/v1/decide`: the requests a
//! browser sends for a cross-site page (a "simple" `text/plain` POST, a
//! foreign `Origin`, `Sec-Fetch-Site: cross-site`) and for a DNS-rebound
//! name (`Host: evil.example`) are refused before they do anything, while
//! `/v1/auth` serves whatever `Host` and `Origin` a proxy forwards.

use crate::support::{self, json, start, Running};

const POLICIES: &str = "tollgate:
  default: { limit: 3, window: 1h }
";

/// A request to `path` (POST with `body`, GET without) with extra headers:
/// the status and the body text.
async fn send(server: &Running, path: &str, body: Option<&str>, headers: &[(&str, &str)]) -> (u16, String) {
    let client = reqwest::Client::new();
    let mut request = match body {
        Some(body) => client.post(server.url(path)).body(body.to_owned()),
        None => client.get(server.url(path)),
    };
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

const JSON: (&str, &str) = ("content-type", "application/json");

/// The key's remaining budget, asked without charging.
async fn remaining(server: &Running, key: &str) -> u64 {
    let body = format!(r#"{{"key": "{key}", "cost": 0}}"#);
    let (status, answer) = support::decide(&reqwest::Client::new(), server, &body).await;
    assert_eq!(status, 200, "{answer}");
    answer["remaining"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_site_requests_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let server = start(support::builder(&[&file])).await;
    let block = r#"{"key": "victim", "duration_ms": 3153600000000}"#;
    let own = format!("http://{}", server.http);
    let refused: &[(&[(&str, &str)], u16)] = &[
        // The form a page can send without a preflight.
        (
            &[("content-type", "text/plain"), ("origin", "http://evil.example")],
            403,
        ),
        (&[("content-type", "text/plain")], 415),
        (&[("content-type", "application/x-www-form-urlencoded")], 415),
        (&[("content-type", "multipart/form-data; boundary=x")], 415),
        (&[], 415),
        // JSON from a foreign page (after a preflight nobody answered).
        (&[JSON, ("origin", "http://evil.example")], 403),
        (&[JSON, ("origin", "null")], 403),
        // Same site, other port: another origin.
        (&[JSON, ("origin", "http://127.0.0.1:1")], 403),
        // No Origin, but the browser says where it comes from.
        (&[JSON, ("sec-fetch-site", "cross-site")], 403),
        (&[JSON, ("sec-fetch-site", "same-site")], 403),
    ];
    for (headers, want) in refused {
        for path in ["/v1/block", "/v1/penalty"] {
            let body = if path == "/v1/block" {
                block
            } else {
                r#"{"key": "victim", "cost": 1}"#
            };
            let (status, text) = send(&server, path, Some(body), headers).await;
            assert_eq!(status, *want, "{path} {headers:?}: {text}");
            let error: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert!(error["error"].as_str().is_some_and(|e| !e.is_empty()), "{text}");
        }
        assert_eq!(
            remaining(&server, "victim").await,
            3,
            "{headers:?} changed the key"
        );
        let (status, text) = send(&server, "/v1/decide", Some(r#"{"key": "victim"}"#), headers).await;
        assert_eq!(status, *want, "/v1/decide {headers:?}: {text}");
        assert_eq!(
            remaining(&server, "victim").await,
            3,
            "{headers:?} charged the key"
        );
    }
    // A page may not read the configuration either.
    let (status, _) = send(
        &server,
        "/v1/policies",
        None,
        &[("origin", "http://evil.example")],
    )
    .await;
    assert_eq!(status, 403);
    let (status, _) = send(&server, "/v1/policies", None, &[("sec-fetch-site", "cross-site")]).await;
    assert_eq!(status, 403);
    // The service's own origin, and clients that are not browsers, are served.
    let (status, text) = send(
        &server,
        "/v1/penalty",
        Some(r#"{"key": "victim", "cost": 1}"#),
        &[JSON, ("origin", &own)],
    )
    .await;
    assert_eq!(status, 204, "{text}");
    let (status, _) = send(
        &server,
        "/v1/penalty",
        Some(r#"{"key": "victim", "cost": 1}"#),
        &[
            ("content-type", "Application/JSON; charset=utf-8"),
            ("sec-fetch-site", "same-origin"),
        ],
    )
    .await;
    assert_eq!(status, 204);
    let (status, _) = send(&server, "/v1/policies", None, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(remaining(&server, "victim").await, 1);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebound_host_is_refused_on_a_tokenless_loopback_listener() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let server = start(support::builder(&[&file])).await;
    let port = server.http.port();
    for host in [
        "evil.example",
        "evil.example:8080",
        "localhost.evil.example",
        "10.0.0.1",
        "[::2]:80",
    ] {
        let host_header = [("host", host)];
        let (status, text) = send(&server, "/v1/policies", None, &host_header).await;
        assert_eq!(status, 421, "{host}: {text}");
        assert!(!text.contains("limit"), "{host} read the configuration: {text}");
        for (path, body) in [
            ("/v1/reset", r#"{"key": "victim"}"#),
            ("/v1/penalty", r#"{"key": "victim", "cost": 2}"#),
            ("/v1/decide", r#"{"key": "victim"}"#),
        ] {
            // Same-origin to the browser: the rebound page's own Origin.
            let origin = format!("http://{host}");
            let headers = [JSON, ("host", host), ("origin", origin.as_str())];
            let (status, text) = send(&server, path, Some(body), &headers).await;
            assert_eq!(status, 421, "{host} {path}: {text}");
        }
        assert_eq!(remaining(&server, "victim").await, 3);
    }
    for host in [
        format!("localhost:{port}"),
        "LOCALHOST".to_owned(),
        format!("127.0.0.1:{port}"),
        "127.0.0.2".to_owned(),
    ] {
        let (status, text) = send(&server, "/v1/policies", None, &[("host", &host)]).await;
        assert_eq!(status, 200, "{host}: {text}");
    }
    // The auth endpoint serves whatever Host and Origin the proxy forwards.
    let auth = [
        ("host", "app.example"),
        ("origin", "https://app.example"),
        ("x-tollgate-key", "victim"),
    ];
    let (status, _) = send(&server, "/v1/auth", None, &auth).await;
    assert_eq!(status, 204);
    assert_eq!(remaining(&server, "victim").await, 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_any_host_is_served_and_the_scheme_has_any_case() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let token = support::write(dir.path(), "token", "s3cret\n");
    let server = start(support::builder(&[&file]).admin_token_file(&token)).await;
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let authorization = format!("{scheme} s3cret");
        let headers = [
            ("host", "tollgate.internal:8080"),
            ("authorization", authorization.as_str()),
        ];
        let (status, text) = send(&server, "/v1/policies", None, &headers).await;
        assert_eq!(status, 200, "{scheme}: {text}");
    }
    for authorization in ["Bearer wrong", "Basic s3cret", "Bearers3cret", "s3cret"] {
        let (status, _) = send(&server, "/v1/policies", None, &[("authorization", authorization)]).await;
        assert_eq!(status, 401, "{authorization}");
    }
    // The token does not let a page in: Origin and content type still count.
    let headers = [("authorization", "Bearer s3cret"), ("content-type", "text/plain")];
    let (status, _) = send(&server, "/v1/reset", Some(r#"{"key": "k"}"#), &headers).await;
    assert_eq!(status, 415);
    let headers = [
        ("authorization", "Bearer s3cret"),
        JSON,
        ("origin", "http://evil.example"),
    ];
    let (status, _) = send(&server, "/v1/reset", Some(r#"{"key": "k"}"#), &headers).await;
    assert_eq!(status, 403);
    // /v1/decide needs no token, and any Host is served with a token set.
    let (status, answer) = json(
        reqwest::Client::new()
            .post(server.url("/v1/decide"))
            .header("content-type", "application/json")
            .header("host", "tollgate.internal")
            .body(r#"{"key": "k"}"#)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, &answer["allowed"]),
        (200, &serde_json::Value::Bool(true))
    );
    server.stop().await;
}
