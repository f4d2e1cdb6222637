//! A policy file watched under a running application: the middleware
//! serves a `PolicyWatcher`'s limiters, and an edit of the file changes
//! the limit of the next request, with the keys' state kept.

use crate::on_both_stacks;
use crate::support;

use std::sync::mpsc::channel;
use std::time::Duration;

use support::apps::{start, Stack};
use support::{client, clock, url};
use tollgate::MemoryBackend;
use tollgate_config::PolicyWatcher;
use tollgate_http::RateLimit;

fn policies(limit: u64) -> String {
    format!("tollgate:\n  default: {{ limit: {limit}, window: 1h, strategy: fixed_window }}\n")
}

/// The statuses of `n` requests to `GET /`, one after another.
async fn statuses(addr: std::net::SocketAddr, n: usize) -> Vec<u16> {
    let c = client();
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(c.get(url(addr, "/")).send().await.unwrap().status().as_u16());
    }
    out
}

async fn an_edited_policy_file_applies_to_the_running_app(stack: Stack) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policies.yaml");
    std::fs::write(&path, policies(2)).unwrap();
    let (reloaded, reloads) = channel();
    let watcher = PolicyWatcher::builder(&path, |err| panic!("not reloaded: {err}"))
        .backend(MemoryBackend::new().clock(clock()))
        .debounce(Duration::from_millis(50))
        .on_reload(move |file| {
            let _ = reloaded.send(file.default_policy().limits()[0].limit());
        })
        .start()
        .await
        .unwrap();
    let server = start(stack, RateLimit::new(watcher.limiters().clone())).await;
    assert_eq!(statuses(server.addr, 3).await, [200, 200, 429]);
    std::fs::write(&path, policies(5)).unwrap();
    let applied = tokio::task::spawn_blocking(move || reloads.recv_timeout(Duration::from_secs(5)))
        .await
        .unwrap();
    assert_eq!(applied, Ok(5));
    // The client spent 2 of the window's units: 3 more under the new limit.
    assert_eq!(statuses(server.addr, 4).await, [200, 200, 200, 429]);
}

on_both_stacks!(an_edited_policy_file_applies_to_the_running_app);
