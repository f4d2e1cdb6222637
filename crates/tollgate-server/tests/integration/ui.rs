//! The operators' page, `/ui`: its answer's headers and access checks, and
//! the page itself in a real browser. Headless Chromium loads it from a
//! running service while clients are being limited, and the test reads the
//! DOM the page built: the denied key is in its policy's table of most
//! denied keys, the chart of decisions per second has points, and the key
//! holding most of a concurrency policy heads its table of keys in flight.
//!
//! Needs Chromium (`apt-get install chromium`; `.ci/run` installs it);
//! without it the browser test says so and passes, unless `CI` is set.
//! `TOLLGATE_UI_SCREENSHOT=FILE` also saves a screenshot of the page there
//! (the one in docs/ui.png was made so).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::support::{self, decide, start, Running};

const POLICIES: &str = "tollgate:
  default: { limit: 100000, window: 1h }
  resources:
    login: { limit: 5, window: 1h, strategy: fixed_window }
    search: { limit: 1000, window: 1m, strategy: token_bucket }
    streams: { strategy: concurrency, limit: 5, ttl: 1h }
";

/// The browser on the `PATH`, if any.
fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|dir| dir.join(name))
                    .find(|p| p.is_file())
            })
        });
    assert!(
        found.is_some() || std::env::var_os("CI").is_none(),
        "Chromium is not installed (apt-get install chromium)"
    );
    found
}

/// Runs headless Chromium on `url` with `args` (`--dump-dom`,
/// `--screenshot=…`), letting the page's timers run for 9 s of the
/// browser's virtual time (it waits for the page's requests), and returns
/// what it printed.
fn browse(browser: &Path, profile: &Path, url: &str, args: &[String]) -> String {
    let output = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--virtual-time-budget=9000")
        .args(args)
        .arg(url)
        .output()
        .expect("Chromium runs");
    assert!(
        output.status.success(),
        "Chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Clients while the browser looks: `abuser` over the `login` limit on
/// every request, and admitted keys on `search`, until `stop`.
fn load(server: &Running, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    let url = server.url("/v1/decide");
    tokio::spawn(async move {
        let client = reqwest::Client::new();
        let mut requests = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let key = format!("user-{}", requests % 50);
            for body in [
                r#"{"resource": "login", "key": "abuser"}"#.to_owned(),
                format!(r#"{{"resource": "search", "key": "{key}"}}"#),
            ] {
                let sent = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(sent.status(), 200);
                requests += 1;
            }
        }
        requests
    })
}

/// The element of the DOM that starts with `start` (up to its end tag
/// `end`, the first after it).
fn element<'a>(dom: &'a str, start: &str, end: &str) -> &'a str {
    let at = dom
        .find(start)
        .unwrap_or_else(|| panic!("no {start} in the page:\n{dom}"));
    let len = dom[at..]
        .find(end)
        .unwrap_or_else(|| panic!("{start} is not closed"));
    &dom[at..at + len]
}

/// The number of points of the polyline of class `kind` in `chart`.
fn points(chart: &str, kind: &str) -> usize {
    let line = element(chart, &format!("<polyline class=\"{kind}\""), ">");
    let points = line.split("points=\"").nth(1).unwrap().split('"').next().unwrap();
    points.split_whitespace().filter(|p| p.contains(',')).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_who_is_limited_in_a_real_browser() {
    let Some(browser) = chromium() else {
        eprintln!("SKIPPED: Chromium is not installed (apt-get install chromium; .ci/run installs it)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let server = start(support::builder(&[&file])).await;
    let stop = Arc::new(AtomicBool::new(false));
    let clients = load(&server, stop.clone());
    // Let the denied key be denied before the page first looks.
    let client = reqwest::Client::new();
    for _ in 0..10 {
        decide(&client, &server, r#"{"resource": "login", "key": "abuser"}"#).await;
    }
    for (key, cost) in [("holder-light", 1), ("holder-heavy", 3)] {
        let acquired = client
            .post(server.url("/v1/acquire"))
            .header("content-type", "application/json")
            .body(format!(
                r#"{{"resource": "streams", "key": "{key}", "cost": {cost}}}"#
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(acquired.status(), 200);
    }

    let url = server.url("/ui");
    let profile = dir.path().join("profile");
    let browser_path = browser.clone();
    let dom = tokio::task::spawn_blocking({
        let profile = profile.clone();
        let url = url.clone();
        move || browse(&browser_path, &profile, &url, &["--dump-dom".to_owned()])
    })
    .await
    .unwrap();
    if let Some(path) = std::env::var_os("TOLLGATE_UI_SCREENSHOT") {
        let args = [
            format!("--screenshot={}", PathBuf::from(path).display()),
            "--window-size=1280,1400".to_owned(),
        ];
        tokio::task::spawn_blocking(move || browse(&browser, &profile, &url, &args))
            .await
            .unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let sent = clients.await.unwrap();
    assert!(sent > 0);

    // The login policy's section: abuser heads its table of denied keys,
    // with nothing left.
    let login = element(&dom, "<section id=\"policy-login\"", "</section>");
    let table = element(login, "<table class=\"top\"", "</table>");
    let first_row = element(table, "<tbody><tr>", "</tr>");
    assert!(first_row.contains("<td class=\"key\">abuser</td>"), "{table}");
    let cells: Vec<&str> = first_row
        .split("<td")
        .skip(1)
        .map(|cell| cell.split('>').nth(1).unwrap().split('<').next().unwrap())
        .collect();
    let denied: u64 = cells[1].parse().unwrap();
    assert!(denied >= 10, "{cells:?}");
    assert_eq!(cells[4], "0", "abuser has nothing left: {cells:?}");
    // Its chart has points for each kind of decision, from several
    // refreshes.
    let chart = element(login, "<svg", "</svg>");
    for kind in ["admitted", "denied", "shadow"] {
        assert!(points(chart, kind) >= 2, "{kind}: {chart}");
    }
    // The search policy (admitted keys) has a section too; the effective
    // policies and the store's state are shown.
    assert!(dom.contains("<section id=\"policy-search\""), "{dom}");
    // The concurrency policy's keys in flight, the heaviest first.
    let streams = element(&dom, "<section id=\"policy-streams\"", "</section>");
    let holders = element(streams, "<table class=\"holders\"", "</table>");
    let first_row = element(holders, "<tbody><tr>", "</tr>");
    assert_eq!(
        first_row, "<tbody><tr><td class=\"key\">holder-heavy</td><td>3</td><td>5</td>",
        "{holders}"
    );
    assert!(holders.contains("holder-light"), "{holders}");
    let effective = element(&dom, "<table id=\"effective\"", "</table>");
    assert!(
        effective.contains("<td>login</td><td>fixed_window</td><td>5</td><td>1h</td>"),
        "{effective}"
    );
    assert!(element(&dom, "<span id=\"ready\"", "</span>").contains("yes"));
    assert!(element(&dom, "<span id=\"breaker\"", "</span>").contains("closed"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_for_its_own_origin_only() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let server = start(support::builder(&[&file])).await;
    let client = reqwest::Client::new();
    let page = client.get(server.url("/ui")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let headers = page.headers();
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    assert_eq!(headers["x-frame-options"], "DENY");
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("frame-ancestors 'none'") && csp.contains("connect-src 'self'"),
        "{csp}"
    );
    assert!(page.text().await.unwrap().contains("<title>tollgate</title>"));
    // A link from another site, or a page whose name resolves here, gets
    // nothing.
    let linked = client
        .get(server.url("/ui"))
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .unwrap();
    assert_eq!(linked.status(), 403);
    let rebound = client
        .get(server.url("/ui"))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 421);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_the_page_is_served_and_its_data_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", POLICIES);
    let token = support::write(dir.path(), "token", "s3cret-token-of-the-admin\n");
    let server = start(support::builder(&[&file]).admin_token_file(&token)).await;
    let client = reqwest::Client::new();
    // The page holds no data: a browser following a link gets it...
    assert_eq!(client.get(server.url("/ui")).send().await.unwrap().status(), 200);
    // ...and what it shows needs the token.
    let policies = client.get(server.url("/v1/policies")).send().await.unwrap();
    assert_eq!(policies.status(), 401);
    let with_token = client
        .get(server.url("/v1/policies"))
        .bearer_auth("s3cret-token-of-the-admin")
        .send()
        .await
        .unwrap();
    assert_eq!(with_token.status(), 200);
    server.stop().await;
}
