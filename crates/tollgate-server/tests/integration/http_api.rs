//! The JSON API, the auth endpoint, health, metrics and admin routes
//! through a real HTTP client.

use std::time::Duration;

use serde_json::Value;
use tollgate::clock::{Clock, ManualClock};
use tollgate::{Limiter, Policy, Strategy};

use crate::support::{self, decide, json, start};

const POLICIES: &str = "tollgate:
  default: { limit: 100, window: 1m }
  resources:
    login: { limit: 5, window: 1m, strategy: fixed_window }
";

/// A clock 37.5 s into a minute.
fn clock() -> ManualClock {
    ManualClock::new(Duration::from_millis(1_700_000_017_500))
}

/// A limiter deciding like the file's `login` policy, on `clock`.
fn login_reference(clock: &ManualClock) -> Limiter {
    Limiter::builder()
        .policy(Policy::new(Strategy::FixedWindow, 5, Duration::from_secs(60)).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap()
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_match_a_limiter_of_the_same_policy() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let clock = clock();
    let server = start(support::builder(&[&file]).clock(clock.clone())).await;
    let reference = login_reference(&clock);
    let client = reqwest::Client::new();
    for (i, cost) in [1u64, 2, 0, 1, 3, 1, 1].into_iter().enumerate() {
        clock.advance(Duration::from_millis(700));
        let body = format!(r#"{{"resource": "login", "key": "user-1", "cost": {cost}}}"#);
        let (status, got) = decide(&client, &server, &body).await;
        let want = reference.check_n("user-1", cost);
        assert_eq!(status, 200, "{got}");
        assert_eq!(got["allowed"], want.allowed, "request {i}: {got}");
        assert_eq!(got["limit"], want.limit);
        assert_eq!(got["remaining"], want.remaining, "request {i}: {got}");
        assert_eq!(got["reset_ms"], ms(want.reset));
        assert_eq!(
            got["retry_after_ms"],
            serde_json::to_value(want.retry_after.map(ms)).unwrap()
        );
        assert_eq!(got["policy"], "login");
        assert_eq!(got["bound_by"], 0);
        assert_eq!(got["strategy"], "fixed_window");
        assert_eq!(got["window_ms"], 60_000);
        assert_eq!(got["fail_open"], false);
        assert_eq!(got["fallback"], false);
        // Policy files cannot yet make a policy shadow or list keys: these
        // are the plain decision's.
        assert_eq!(got["shadow_denied"], want.shadow_denied);
        assert_eq!(got["listed"], Value::Null);
    }
    // An unknown resource and no resource both get the default policy.
    for body in [r#"{"resource": "nope", "key": "k"}"#, r#"{"key": "k"}"#] {
        let (status, got) = decide(&client, &server, body).await;
        assert_eq!(
            (status, &got["policy"], &got["limit"]),
            (200, &Value::from("default"), &Value::from(100))
        );
    }
    // h2c with prior knowledge on the same listener.
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let response = h2
        .post(server.url("/v1/decide"))
        .header("content-type", "application/json")
        .body(r#"{"key": "h2"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(json(response).await.1["remaining"], 99);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_the_status_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let server = start(support::builder(&[&file])).await;
    let client = reqwest::Client::new();
    let cases: &[(&str, Option<&str>)] = &[
        ("{", None),
        ("not json", None),
        ("[]", None),
        ("{}", Some("key")),
        (r#"{"key": null}"#, Some("key")),
        (r#"{"key": ""}"#, Some("key")),
        (r#"{"key": 12}"#, Some("key")),
        (r#"{"key": "k", "resource": ["a"]}"#, Some("resource")),
        (r#"{"key": "k", "cost": -1}"#, Some("cost")),
        (r#"{"key": "k", "cost": 2.5}"#, Some("cost")),
        (r#"{"key": "k", "cost": "1"}"#, Some("cost")),
        (r#"{"key": "k", "cost": 4611686018427387905}"#, Some("cost")),
        (r#"{"key": "k", "cost": 99999999999999999999999}"#, Some("cost")),
        (r#"{"key": "k", "costs": 1}"#, Some("costs")),
        // A field given twice: parsers disagree on which one counts.
        (r#"{"key": "a", "key": "b"}"#, Some("key")),
        (r#"{"key": "k", "cost": 0, "cost": 3}"#, Some("cost")),
        (
            r#"{"resource": "login", "key": "k", "resource": "other"}"#,
            Some("resource"),
        ),
    ];
    for (body, field) in cases {
        let (status, got) = decide(&client, &server, body).await;
        assert_eq!(status, 400, "{body}: {got}");
        assert_eq!(
            got["field"],
            serde_json::to_value(field).unwrap(),
            "{body}: {got}"
        );
        assert!(
            got["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{body}: {got}"
        );
    }
    // A number beyond 64 bits is named as too large, not printed rounded.
    for cost in ["18446744073709551616", "99999999999999999999999"] {
        let (_, got) = decide(&client, &server, &format!(r#"{{"key": "k", "cost": {cost}}}"#)).await;
        let error = got["error"].as_str().unwrap();
        assert!(error.contains("above 4611686018427387904"), "{cost}: {error}");
    }
    // The body cap: 64 KiB is read, one byte more is refused, whether the
    // length is declared or streamed.
    let big = format!(r#"{{"key": "{}"}}"#, "k".repeat(tollgate_server::MAX_BODY_BYTES));
    let (status, got) = decide(&client, &server, &big).await;
    assert_eq!(status, 413, "{got}");
    assert_eq!(got["field"], Value::Null);
    assert!(chunked_post(server.http, big.as_bytes())
        .await
        .starts_with("HTTP/1.1 413"));
    let fits = format!(
        r#"{{"key": "{}"}}"#,
        "k".repeat(tollgate_server::MAX_BODY_BYTES - 11)
    );
    assert_eq!(fits.len(), tollgate_server::MAX_BODY_BYTES);
    assert_eq!(decide(&client, &server, &fits).await.0, 200);
    // Wrong methods and paths.
    let response = client.get(server.url("/v1/decide")).send().await.unwrap();
    assert_eq!(response.status(), 405);
    server.stop().await;
}

/// Posts `body` to `/v1/decide` in one chunk of a chunked request (no
/// declared length) and returns the answer's status line and headers.
async fn chunked_post(addr: std::net::SocketAddr, body: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head =
        "POST /v1/decide HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
    let mut request = head.as_bytes().to_vec();
    request.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
    request.extend_from_slice(body);
    request.extend_from_slice(b"\r\n0\r\n\r\n");
    // The server may answer and close before reading it all.
    let _ = stream.write_all(&request).await;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_auth_endpoint_answers_proxies_with_headers() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let clock = clock();
    let server = start(
        support::builder(&[&file])
            .clock(clock.clone())
            .auth_deny_status(403),
    )
    .await;
    let reference = login_reference(&clock);
    let client = reqwest::Client::new();
    let auth = |cost: &'static str| {
        client
            .get(server.url("/v1/auth"))
            .header("X-Tollgate-Key", "10.0.0.1")
            .header("X-Tollgate-Resource", "login")
            .header("X-Tollgate-Cost", cost)
    };
    for cost in ["2", "2", "2", "1"] {
        let response = auth(cost).send().await.unwrap();
        let want = reference.check_n("10.0.0.1", cost.parse().unwrap());
        let headers = response.headers().clone();
        let header = |name: &str| headers.get(name).map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(response.status(), if want.allowed { 204 } else { 403 });
        assert_eq!(header("ratelimit-limit"), Some("5".to_owned()));
        assert_eq!(header("ratelimit-remaining"), Some(want.remaining.to_string()));
        let secs = |d: Duration| d.as_nanos().div_ceil(1_000_000_000).to_string();
        assert_eq!(header("ratelimit-reset"), Some(secs(want.reset)));
        let retry = want.retry_after.filter(|_| !want.allowed).map(secs);
        assert_eq!(header("retry-after"), retry);
    }
    // Mistakes.
    let missing = client.get(server.url("/v1/auth")).send().await.unwrap();
    let (status, got) = json(missing).await;
    assert_eq!(
        (status, &got["field"]),
        (400, &Value::from("X-Tollgate-Key")),
        "{got}"
    );
    assert!(
        got["error"].as_str().unwrap().contains("proxy_set_header"),
        "{got}"
    );
    // Digits only, as the middleware's cost header reads them.
    for (cost, problem) in [
        ("-1", "negative"),
        ("+5", "sign"),
        ("x", "other than the digits"),
        ("1 0", "other than the digits"),
        ("1.5", "other than the digits"),
        ("0x10", "other than the digits"),
        ("18446744073709551616", "too large"),
        ("4611686018427387905", "the largest limit"),
    ] {
        let (status, got) = json(auth(cost).send().await.unwrap()).await;
        assert_eq!(
            (status, &got["field"]),
            (400, &Value::from("X-Tollgate-Cost")),
            "{cost}: {got}"
        );
        assert!(got["error"].as_str().unwrap().contains(problem), "{cost}: {got}");
    }
    // Each header once: a proxy or log may read another copy than this
    // service would.
    for (name, first, second) in [
        ("X-Tollgate-Key", "a", "b"),
        ("X-Tollgate-Resource", "login", "other"),
        ("X-Tollgate-Cost", "0", "3"),
    ] {
        let mut request = client.get(server.url("/v1/auth"));
        if name != "X-Tollgate-Key" {
            request = request.header("X-Tollgate-Key", "k");
        }
        let request = request.header(name, first).header(name, second);
        let (status, got) = json(request.send().await.unwrap()).await;
        assert_eq!((status, &got["field"]), (400, &Value::from(name)), "{got}");
        assert!(got["error"].as_str().unwrap().contains("more than once"), "{got}");
    }
    let empty = client
        .get(server.url("/v1/auth"))
        .header("X-Tollgate-Key", "")
        .send()
        .await
        .unwrap();
    assert_eq!(empty.status(), 400);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let server = start(support::builder(&[&file])).await;
    let client = reqwest::Client::new();
    let get = |path: &str| client.get(server.url(path)).send();
    assert_eq!(
        json(get("/healthz").await.unwrap()).await,
        (200, serde_json::json!({"status": "ok"}))
    );
    let (status, ready) = json(get("/readyz").await.unwrap()).await;
    assert_eq!((status, &ready["ready"]), (200, &Value::Bool(true)));
    decide(&client, &server, r#"{"resource": "login", "key": "m"}"#).await;
    let text = get("/metrics").await.unwrap().text().await.unwrap();
    // The service's request counter and latency, and the library's metrics.
    assert!(
        text.lines()
            .any(|l| l.starts_with("tollgate_server_requests_total{")
                && l.contains("endpoint=\"/v1/decide\"")
                && l.contains("status=\"200\"")),
        "{text}"
    );
    assert!(
        text.contains("tollgate_server_request_duration_seconds_bucket{"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("tollgate_allowed_total{") && l.contains("resource=\"login\"")),
        "{text}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_routes_need_loopback_or_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let client = reqwest::Client::new();
    // Open on loopback.
    let server = start(support::builder(&[&file])).await;
    let (status, policies) = json(client.get(server.url("/v1/policies")).send().await.unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(
        policies["resources"]["login"]["limits"],
        serde_json::json!([{"strategy": "fixed_window", "limit": 5, "window_ms": 60000}])
    );
    assert_eq!(
        policies["default"]["limits"],
        serde_json::json!([{"strategy": "sliding_window", "limit": 100, "window_ms": 60000}])
    );
    server.stop().await;
    // With a token, also on loopback.
    let token = support::write(dir.path(), "token", "  s3cret-token\n");
    let server = start(support::builder(&[&file]).admin_token_file(&token)).await;
    let policies = |auth: Option<&'static str>| {
        let mut request = client.get(server.url("/v1/policies"));
        if let Some(auth) = auth {
            request = request.header("Authorization", auth);
        }
        request.send()
    };
    for wrong in [
        None,
        Some("Bearer wrong"),
        Some("Bearer s3cret-toke"),
        Some("s3cret-token"),
        Some("Bearer s3cret-token2"),
    ] {
        let response = policies(wrong).await.unwrap();
        assert_eq!(response.status(), 401, "{wrong:?}");
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
    }
    assert_eq!(policies(Some("Bearer s3cret-token")).await.unwrap().status(), 200);
    // The decision routes need no token.
    assert_eq!(decide(&client, &server, r#"{"key": "k"}"#).await.0, 200);
    server.stop().await;
    // Refused: admin routes open on a non-loopback address, an empty token.
    let err = support::builder(&[&file])
        .listen("0.0.0.0:0".parse().unwrap())
        .bind()
        .await
        .unwrap_err();
    assert!(
        err.to_string().starts_with(
            "refusing to serve the admin routes (GET /v1/policies, GET /v1/top, POST /v1/reset, POST /v1/block, \
                 POST /v1/refund, POST /v1/penalty) on 0.0.0.0:0"
        ),
        "{err}"
    );
    let empty = support::write(dir.path(), "empty", " \n");
    let err = support::builder(&[&file])
        .admin_token_file(&empty)
        .bind()
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("the file is empty; it must hold the token"),
        "{err}"
    );
    let err = support::builder(&[&file])
        .auth_deny_status(200)
        .bind()
        .await
        .unwrap_err();
    assert!(err.to_string().starts_with("--auth-deny-status 200"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_file_settings_reach_the_decisions() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(
        dir.path(),
        "p.yaml",
        "tollgate:
  exempt: [10.0.0.0/8]
  deny: [banned]
  default: { limit: 1, window: 1m }
  resources:
    beta: { limit: 1, window: 1m, shadow: true }
",
    );
    let server = start(support::builder(&[&file]).clock(clock())).await;
    let client = reqwest::Client::new();
    let (_, exempt) = decide(&client, &server, r#"{"key": "10.1.2.3"}"#).await;
    assert_eq!(
        (&exempt["allowed"], &exempt["listed"]),
        (&Value::Bool(true), &serde_json::json!("exempt"))
    );
    let (_, denied) = decide(&client, &server, r#"{"key": "banned"}"#).await;
    assert_eq!(
        (&denied["allowed"], &denied["listed"]),
        (&Value::Bool(false), &serde_json::json!("deny"))
    );
    for expected_shadow in [false, true] {
        let (_, got) = decide(&client, &server, r#"{"resource": "beta", "key": "k"}"#).await;
        assert_eq!(got["allowed"], true, "{got}");
        assert_eq!(got["shadow_denied"], expected_shadow, "{got}");
    }
}

/// `POST /v1/cancel` with `body`.
async fn cancel(client: &reqwest::Client, server: &support::Running, body: &str) -> (u16, Value) {
    let response = client
        .post(server.url("/v1/cancel"))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    json(response).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_may_wait_its_turn_and_give_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(
        dir.path(),
        "p.yaml",
        "tollgate:\n  default: { limit: 1, window: 1s, strategy: token_bucket }\n",
    );
    let clock = clock();
    let server = start(support::builder(&[&file]).clock(clock.clone())).await;
    let client = reqwest::Client::new();
    // Without max_delay_ms the answer is as before: no delay_ms.
    let (_, first) = decide(&client, &server, r#"{"key": "k"}"#).await;
    assert_eq!(
        (first["allowed"].clone(), first.get("delay_ms")),
        (Value::Bool(true), None)
    );
    // The next slot is a second away: reserved, waiting 1,000 ms.
    let (status, second) = decide(&client, &server, r#"{"key": "k", "max_delay_ms": 5000}"#).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(
        (second["allowed"].clone(), second["delay_ms"].clone()),
        (Value::Bool(true), Value::from(1_000))
    );
    let name = second["reservation"].as_str().unwrap().to_owned();
    assert_eq!(name.len(), 32, "128 random bits: {name}");
    // Beyond max_delay_ms: refused, nothing charged, told when to ask.
    let (_, refused) = decide(&client, &server, r#"{"key": "k", "max_delay_ms": 500}"#).await;
    assert_eq!(refused["allowed"], false, "{refused}");
    assert_eq!(
        refused["retry_after_ms"], 1_500,
        "the 2,000 ms wait less the 500 allowed"
    );
    assert_eq!(refused.get("delay_ms"), None);
    // Given back: the slot is free again, once.
    let (status, given) = cancel(&client, &server, &format!(r#"{{"reservation": "{name}"}}"#)).await;
    assert_eq!(
        (status, given["cancelled"].clone()),
        (200, Value::Bool(true)),
        "{given}"
    );
    let (status, again) = cancel(&client, &server, &format!(r#"{{"reservation": "{name}"}}"#)).await;
    assert_eq!(status, 404, "{again}");
    let (_, retaken) = decide(&client, &server, r#"{"key": "k", "max_delay_ms": 5000}"#).await;
    assert_eq!(retaken["delay_ms"], 1_000, "{retaken}");
    // Mistakes name their field.
    let (status, err) = decide(&client, &server, r#"{"key": "k", "max_delay_ms": 3600001}"#).await;
    assert_eq!(
        (status, err["field"].clone()),
        (400, Value::from("max_delay_ms")),
        "{err}"
    );
    let (status, err) = cancel(&client, &server, r#"{"reservation": 7}"#).await;
    assert_eq!(
        (status, err["field"].clone()),
        (400, Value::from("reservation")),
        "{err}"
    );
    server.stop().await;
}

/// `"charge": "always"`: a report charged whether admitted or not, answered
/// with the state after, as `Limiter::charge` on a limiter of the same
/// policy; a resource under `charge: always` charges every request, and
/// refuses `"charge": "admitted"` with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_are_charged_whether_admitted_or_not() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(
        dir.path(),
        "p.yaml",
        "tollgate:
  default: { limit: 100, window: 1m }
  resources:
    login: { limit: 5, window: 1m, strategy: fixed_window }
    tokens: { limit: 1000, window: 1m, strategy: fixed_window, charge: always }
",
    );
    let clock = clock();
    let server = start(support::builder(&[&file]).clock(clock.clone())).await;
    let reference = login_reference(&clock);
    let client = reqwest::Client::new();
    for (i, (cost, always)) in [(3, true), (0, false), (4, true), (1, false), (2, false)]
        .into_iter()
        .enumerate()
    {
        let charge = if always { r#", "charge": "always""# } else { "" };
        let body = format!(r#"{{"resource": "login", "key": "u", "cost": {cost}{charge}}}"#);
        let (status, got) = decide(&client, &server, &body).await;
        let want = if always {
            reference.charge("u", cost).await.unwrap()
        } else {
            reference.check_n("u", cost)
        };
        assert_eq!(status, 200, "{got}");
        assert_eq!(got["allowed"], want.allowed, "request {i}: {got}");
        assert_eq!(got["remaining"], want.remaining, "request {i}: {got}");
        assert_eq!(
            got["retry_after_ms"],
            serde_json::to_value(want.retry_after.map(ms)).unwrap(),
            "request {i}: {got}"
        );
    }
    // The resource that charges always: 700 fit, 600 more do not and are
    // charged, and the next check is denied until the minute ends.
    for (cost, allowed) in [(700, true), (600, false), (0, false)] {
        let body = format!(r#"{{"resource": "tokens", "key": "acme", "cost": {cost}}}"#);
        let (_, got) = decide(&client, &server, &body).await;
        assert_eq!(got["allowed"], allowed, "{cost}: {got}");
    }
    let (_, check) = decide(
        &client,
        &server,
        r#"{"resource": "tokens", "key": "acme", "cost": 0}"#,
    )
    .await;
    assert_eq!(
        check["retry_after_ms"],
        60_000 - 1_700_000_017_500u64 % 60_000,
        "{check}"
    );
    let (status, refused) = decide(
        &client,
        &server,
        r#"{"resource": "tokens", "key": "acme", "cost": 1, "charge": "admitted"}"#,
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(refused["field"], "charge", "{refused}");
    assert!(
        refused["error"].as_str().unwrap().contains("charge: always"),
        "{refused}"
    );
    server.stop().await;
}

/// Each `(body, field, message)` is answered 400 naming `field`, with
/// `message` in the error.
async fn refused(client: &reqwest::Client, server: &support::Running, cases: &[(&str, &str, &str)]) {
    for &(body, field, message) in cases {
        let (status, got) = decide(client, server, body).await;
        assert_eq!(
            (status, got["field"].as_str()),
            (400, Some(field)),
            "{body}: {got}"
        );
        assert!(got["error"].as_str().unwrap().contains(message), "{body}: {got}");
    }
}

/// `"limit"` with `"calendar"`: a quota the request names, counted in the
/// calendar's periods (a tenant's month from its billing day, in its time
/// zone), `reset_ms` to the next boundary on the service's clock; the
/// answer names the calendar; mistakes are refused naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_may_name_a_calendar_for_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let clock = clock();
    let server = start(
        support::builder(&[&file])
            .clock(clock.clone())
            .max_limit_override(1_000),
    )
    .await;
    let client = reqwest::Client::new();
    let ask = |body: &'static str| decide(&client, &server, body);
    let billing = tollgate::calendar::Calendar::new(
        tollgate::calendar::Period::Month,
        "Europe/Berlin",
        Some("2023-01-15T09:00:00"),
    )
    .unwrap();
    let now = std::time::UNIX_EPOCH + Duration::from_nanos(clock.now_nanos());
    let (_, end) = billing.period_at(now);
    let until_end = ms(end.duration_since(now).unwrap());
    let body = r#"{"resource": "login", "key": "tenant", "limit": 2,
        "calendar": {"period": "month", "time_zone": "Europe/Berlin", "anchor": "2023-01-15T09:00:00"}}"#;
    for left in [1, 0] {
        let (status, got) = ask(body).await;
        assert_eq!(
            (status, &got["allowed"], &got["remaining"], &got["reset_ms"]),
            (200, &true.into(), &left.into(), &until_end.into()),
            "{got}"
        );
        assert_eq!(
            got["calendar"],
            serde_json::json!({"period": "month", "time_zone": "Europe/Berlin", "anchor": "2023-01-15T09:00:00"})
        );
    }
    let (_, got) = ask(body).await;
    assert_eq!(
        (&got["allowed"], &got["retry_after_ms"]),
        (&false.into(), &until_end.into()),
        "{got}"
    );
    // The resource's own minute is untouched, and names no calendar.
    let (_, got) = ask(r#"{"resource": "login", "key": "tenant", "cost": 0}"#).await;
    assert_eq!(got["remaining"], 5, "{got}");
    assert!(got.get("calendar").is_none(), "{got}");
    // The zone defaults to UTC, the anchor to the period's natural start.
    let (_, got) =
        ask(r#"{"resource": "login", "key": "tenant", "limit": 9, "calendar": {"period": "day"}}"#).await;
    assert_eq!(
        got["calendar"],
        serde_json::json!({"period": "day", "time_zone": "UTC", "anchor": "2001-01-01T00:00:00"})
    );
    refused(
        &client,
        &server,
        &[
        (
            r#"{"resource": "login", "key": "t", "calendar": {"period": "month"}}"#,
            "calendar",
            "without `limit`",
        ),
        (
            r#"{"resource": "login", "key": "t", "limit": 5, "window_ms": 1000, "calendar": {"period": "month"}}"#,
            "calendar",
            "not both",
        ),
        (
            r#"{"resource": "login", "key": "t", "limit": 5, "calendar": {"period": "fortnight"}}"#,
            "calendar.period",
            "fortnight",
        ),
        (
            r#"{"resource": "login", "key": "t", "limit": 5, "calendar": {"time_zone": "UTC"}}"#,
            "calendar.period",
            "required",
        ),
        (
            r#"{"resource": "login", "key": "t", "limit": 5, "calendar": {"period": "month", "time_zone": "Mars/Olympus"}}"#,
            "calendar.time_zone",
            "Mars/Olympus",
        ),
        (
            r#"{"resource": "login", "key": "t", "limit": 5, "calendar": {"period": "month", "anchor": "the 15th"}}"#,
            "calendar.anchor",
            "the 15th",
        ),
        (
            r#"{"resource": "login", "key": "t", "limit": 5, "calendar": {"period": "month", "zone": "UTC"}}"#,
            "calendar.zone",
            "not a field",
        ),
        (
            r#"{"resource": "login", "key": "t", "limit": 5, "calendar": "month"}"#,
            "calendar",
            "object",
        ),
        (
            r#"{"key": "t", "limit": 5, "calendar": {"period": "month"}}"#,
            "calendar",
            "sliding_window",
        ),
        ],
    )
    .await;
    server.stop().await;
}

/// `"limit"` and `"window_ms"`: a limit the request names, with the
/// resource's strategy and the key's state under the resource's window;
/// another window counts apart; limits above the service's ceiling and
/// malformed ones are refused naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_may_name_its_limit_within_the_ceiling() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let clock = clock();
    let server = start(
        support::builder(&[&file])
            .clock(clock.clone())
            .max_limit_override(1_000),
    )
    .await;
    let client = reqwest::Client::new();
    let ask = |body: &'static str| decide(&client, &server, body);
    // Under the resource's own limit, 2 of 5 spent.
    let (_, got) = ask(r#"{"resource": "login", "key": "t", "cost": 2}"#).await;
    assert_eq!(got["remaining"], 3);
    // A plan of 100 a minute: the 2 spent count.
    let (status, got) = ask(r#"{"resource": "login", "key": "t", "limit": 100}"#).await;
    assert_eq!(
        (status, &got["limit"], &got["remaining"]),
        (200, &100.into(), &97.into()),
        "{got}"
    );
    assert_eq!(got["strategy"], "fixed_window");
    // A plan of 2 a minute: 3 spent, denied until the minute ends.
    let (_, got) = ask(r#"{"resource": "login", "key": "t", "limit": 2}"#).await;
    assert_eq!(
        (&got["allowed"], &got["remaining"]),
        (&false.into(), &0.into()),
        "{got}"
    );
    // 50 an hour: a state of its own.
    let (_, got) = ask(r#"{"resource": "login", "key": "t", "limit": 50, "window_ms": 3600000}"#).await;
    assert_eq!(
        (&got["remaining"], &got["window_ms"]),
        (&49.into(), &3_600_000.into()),
        "{got}"
    );
    // A report under a plan.
    let (_, got) =
        ask(r#"{"resource": "login", "key": "t", "limit": 100, "cost": 500, "charge": "always"}"#).await;
    assert_eq!(got["allowed"], false, "{got}");
    let (_, got) = ask(r#"{"resource": "login", "key": "t", "cost": 0}"#).await;
    assert_eq!(
        got["remaining"], 0,
        "the report counts under the resource's own limit too"
    );
    refused(
        &client,
        &server,
        &[
            (r#"{"key": "t", "limit": 1001}"#, "limit", "--max-limit-override"),
            (r#"{"key": "t", "limit": -1}"#, "limit", "negative"),
            (
                r#"{"key": "t", "window_ms": 1000}"#,
                "window_ms",
                "without `limit`",
            ),
            (
                r#"{"key": "t", "limit": 5, "window_ms": 0}"#,
                "window_ms",
                "at least 1",
            ),
            (
                r#"{"key": "t", "limit": 5, "window_ms": "1m"}"#,
                "window_ms",
                "whole number",
            ),
        ],
    )
    .await;
    server.stop().await;
    // Turned off: every limit a request names is refused, 0 included.
    let off = start(support::builder(&[&file]).max_limit_override(0)).await;
    for body in [r#"{"key": "t", "limit": 0}"#, r#"{"key": "t", "limit": 5}"#] {
        let (status, got) = decide(&client, &off, body).await;
        assert_eq!(
            (status, got["field"].as_str()),
            (400, Some("limit")),
            "{body}: {got}"
        );
        assert!(
            got["error"].as_str().unwrap().contains("turned off"),
            "{body}: {got}"
        );
    }
    off.stop().await;
}
