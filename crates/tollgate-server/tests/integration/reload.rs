//! Reloads: atomic, keeping the state of unchanged policies and of limits
//! whose strategy and window stay, refusing an
//! invalid file while the old configuration serves, on demand and when a
//! file changes.

use std::time::{Duration, Instant};

use tollgate::clock::ManualClock;

use crate::support::{self, decide, start};

fn policies(b_limit: u64) -> String {
    format!(
        "tollgate:
  default: {{ limit: 1000000, window: 1h }}
  resources:
    a: {{ limit: 10, window: 1m, strategy: fixed_window }}
    b: {{ limit: {b_limit}, window: 1m, strategy: fixed_window }}
"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_under_load_keeps_unchanged_state_and_fails_no_request() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", &policies(5));
    let clock = ManualClock::new(Duration::from_secs(1_700_000_040));
    let server = start(support::builder(&[&file]).clock(clock)).await;
    let client = reqwest::Client::new();
    for _ in 0..4 {
        decide(&client, &server, r#"{"resource": "a", "key": "k"}"#).await;
    }
    decide(&client, &server, r#"{"resource": "b", "key": "k"}"#).await;
    // Load on the default policy while the configuration is reloaded.
    let load = {
        let client = client.clone();
        let url = server.url("/v1/decide");
        tokio::spawn(async move {
            let mut answered = 0;
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                let response = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(r#"{"key": "load"}"#)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), 200);
                answered += 1;
            }
            answered
        })
    };
    for i in 0..20 {
        std::fs::write(&file, policies(6 + i % 2)).unwrap();
        server.reloader.reload().await.unwrap();
    }
    assert!(load.await.unwrap() > 0);
    // `a` kept its state; `b` changed only its limit (to 7) and kept the
    // unit it spent, as a policy whose strategy and window stay does.
    let (_, a) = decide(&client, &server, r#"{"resource": "a", "key": "k"}"#).await;
    assert_eq!(
        (a["limit"].as_u64(), a["remaining"].as_u64()),
        (Some(10), Some(5)),
        "{a}"
    );
    let (_, b) = decide(&client, &server, r#"{"resource": "b", "key": "k"}"#).await;
    assert_eq!(
        (b["limit"].as_u64(), b["remaining"].as_u64()),
        (Some(7), Some(5)),
        "{b}"
    );
    // An invalid file is refused with its location; the old set serves on.
    std::fs::write(
        &file,
        policies(7).replace(
            "window: 1m, strategy: fixed_window }\n    b",
            "window: 1 mnute }\n    b",
        ),
    )
    .unwrap();
    let err = server.reloader.reload().await.unwrap_err();
    assert_eq!(
        (err.file(), err.line(), err.field()),
        (
            file.display().to_string().as_str(),
            Some(4),
            "tollgate.resources.a.window"
        )
    );
    let (_, a) = decide(&client, &server, r#"{"resource": "a", "key": "k"}"#).await;
    assert_eq!(a["remaining"].as_u64(), Some(4), "{a}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_file_is_reloaded_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", &policies(5));
    let server = start(support::builder(&[&file]).watch_files(true)).await;
    let client = reqwest::Client::new();
    // Replace the file the way editors do: write beside it, rename over it.
    let next = support::write(dir.path(), "p.yaml.tmp", &policies(9));
    std::fs::rename(&next, &file).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, b) = decide(&client, &server, r#"{"resource": "b", "key": "k", "cost": 0}"#).await;
        if b["limit"] == 9 {
            break;
        }
        assert!(Instant::now() < deadline, "the change was not picked up: {b}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await;
}

/// Makes a FIFO at `path`.
fn mkfifo(path: &std::path::Path) {
    let status = std::process::Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_is_not_regular_is_refused_without_blocking_anything() {
    let dir = tempfile::tempdir().unwrap();
    let file = support::write(dir.path(), "p.yaml", &policies(5));
    let server = start(support::builder(&[&file])).await;
    let client = reqwest::Client::new();
    // The file becomes a FIFO nobody writes to: reading it would wait for
    // ever. The reload is refused at once, naming the file and what it is.
    std::fs::remove_file(&file).unwrap();
    mkfifo(&file);
    let reload = tokio::time::timeout(Duration::from_secs(5), server.reloader.reload());
    let err = reload.await.expect("the reload returns").unwrap_err();
    assert_eq!(err.file(), file.display().to_string());
    assert!(err.to_string().contains("FIFO"), "{err}");
    // At start, it, a link to it and a directory are refused alike.
    let link = dir.path().join("link.yaml");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let subdir = dir.path().join("dir.yaml");
    std::fs::create_dir(&subdir).unwrap();
    for path in [&file, &link, &subdir] {
        let start = tokio::time::timeout(Duration::from_secs(5), support::builder(&[path]).bind());
        let err = start.await.expect("the start returns").unwrap_err().to_string();
        assert!(err.starts_with(&path.display().to_string()), "{err}");
        assert!(err.contains("not a regular file"), "{err}");
    }
    // The old configuration serves on.
    let (status, b) = decide(&client, &server, r#"{"resource": "b", "key": "k"}"#).await;
    assert_eq!((status, b["limit"].as_u64()), (200, Some(5)), "{b}");
    server.stop().await;
}
