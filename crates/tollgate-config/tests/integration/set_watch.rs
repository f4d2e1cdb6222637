//! A watched set of files, a tollgate policy file and an Envoy file: an
//! edit of either applies with the state of unchanged limits kept, an
//! invalid edit is reported with its line and field and changes nothing,
//! and a rewrite with the same bytes applies nothing. Every wait for the
//! watcher is bounded (a channel read with a timeout).

use std::path::Path;
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::clock::SharedClock;
use tollgate_config::envoy::descriptor_key;
use tollgate_config::{PolicySet, PolicySetWatcher, ReloadError};

/// How long a test waits for the watcher to report.
const PATIENCE: Duration = Duration::from_secs(5);

fn policies(limit: u64) -> String {
    format!("tollgate:\n  default: {{ limit: {limit}, window: 1h, strategy: fixed_window }}\n")
}

fn envoy(per_minute: u32, other: u32) -> String {
    format!(
        "domain: shop\ndescriptors:\n  - key: user\n    rate_limit: {{ unit: minute, requests_per_unit: {per_minute} }}\n  - key: path\n    rate_limit: {{ unit: hour, requests_per_unit: {other} }}\n"
    )
}

/// Admits requests of `key` under the Envoy descriptor `user` until one
/// is denied; how many were admitted.
async fn envoy_admitted(set: &PolicySet, key: &str) -> u64 {
    let rule = set.domain("shop").unwrap().find([("user", key)]).unwrap();
    let limiter = rule.limiter().unwrap();
    let key = descriptor_key([key]);
    let mut n = 0;
    while limiter.allow(&key).await.unwrap().allowed {
        n += 1;
    }
    n
}

struct Watched {
    watcher: PolicySetWatcher,
    reloads: Receiver<()>,
    errors: Receiver<(Option<usize>, String, String)>,
}

async fn start(dir: &Path) -> Watched {
    let (reloaded, reloads) = channel();
    let (failed, errors) = channel();
    let clock: SharedClock = Arc::new(ManualClock::new(Duration::from_secs(1_800_000_000)));
    let watcher = PolicySetWatcher::builder([dir.join("policies.yaml"), dir.join("envoy.yaml")])
        .clock(clock)
        .debounce(Duration::from_millis(50))
        .on_reload(move |_| {
            let _ = reloaded.send(());
        })
        .on_error(move |err: &ReloadError| {
            let _ = failed.send((err.line(), err.field().to_owned(), err.to_string()));
        })
        .start()
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    Watched {
        watcher,
        reloads,
        errors,
    }
}

#[tokio::test]
async fn an_envoy_edit_applies_and_unchanged_limits_keep_their_state() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policies.yaml"), policies(3)).unwrap();
    std::fs::write(dir.path().join("envoy.yaml"), envoy(2, 10)).unwrap();
    let watched = start(dir.path()).await;
    let before = watched.watcher.current();
    assert_eq!(envoy_admitted(&before, "alice").await, 2);
    let path_limiter = before
        .domain("shop")
        .unwrap()
        .find([("path", "/")])
        .unwrap()
        .limiter()
        .cloned();
    let policies_before = before.policies().unwrap().clone();
    // Raise the `user` limit: alice keeps the 2 she spent in this window.
    std::fs::write(dir.path().join("envoy.yaml"), envoy(5, 10)).unwrap();
    watched
        .reloads
        .recv_timeout(PATIENCE)
        .expect("the set was reloaded");
    let after = watched.watcher.current();
    assert_eq!(envoy_admitted(&after, "alice").await, 3);
    assert_eq!(envoy_admitted(&after, "bob").await, 5);
    // The unchanged Envoy limit and the unchanged policy file keep their
    // limiters as they were.
    let path_after = after
        .domain("shop")
        .unwrap()
        .find([("path", "/")])
        .unwrap()
        .limiter()
        .cloned();
    assert!(Arc::ptr_eq(&path_limiter.unwrap(), &path_after.unwrap()));
    assert!(std::sync::Arc::ptr_eq(
        &policies_before.limiter(""),
        &after.policies().unwrap().limiter("")
    ));
}

#[tokio::test]
async fn an_invalid_envoy_edit_changes_nothing_and_the_same_bytes_apply_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policies.yaml"), policies(3)).unwrap();
    std::fs::write(dir.path().join("envoy.yaml"), envoy(2, 10)).unwrap();
    let watched = start(dir.path()).await;
    let before = watched.watcher.current();
    std::fs::write(
        dir.path().join("envoy.yaml"),
        envoy(2, 10).replace("unit: hour", "unit: fortnight"),
    )
    .unwrap();
    let (line, field, shown) = watched
        .errors
        .recv_timeout(PATIENCE)
        .expect("the mistake was reported");
    // The line of the descriptor (`- key: path`), as Envoy files report.
    assert_eq!(
        (line, field.as_str()),
        (Some(5), "descriptors[1].rate_limit.unit"),
        "{shown}"
    );
    assert!(shown.contains("envoy.yaml:5:"), "{shown}");
    assert!(Arc::ptr_eq(&before, &watched.watcher.current()));
    // Fixed again: the bytes are those in effect, yet they differ from the
    // last read, so the set is built again (and keeps every limiter).
    std::fs::write(dir.path().join("envoy.yaml"), envoy(2, 10)).unwrap();
    watched
        .reloads
        .recv_timeout(PATIENCE)
        .expect("the fixed file applied");
    // Rewriting the same bytes applies nothing.
    std::fs::write(dir.path().join("envoy.yaml"), envoy(2, 10)).unwrap();
    std::fs::write(dir.path().join("policies.yaml"), policies(3)).unwrap();
    let current = watched.watcher.current();
    // The next change shows whether an event was left unreported.
    std::fs::write(dir.path().join("policies.yaml"), policies(4)).unwrap();
    watched.reloads.recv_timeout(PATIENCE).expect("the edit applied");
    assert!(!Arc::ptr_eq(&current, &watched.watcher.current()));
    assert!(watched.reloads.try_recv().is_err(), "one reload per change");
    assert_eq!(
        watched
            .watcher
            .current()
            .policies()
            .unwrap()
            .limiter("")
            .policy()
            .limits()[0]
            .limit(),
        4
    );
}

#[tokio::test]
async fn reload_on_demand_applies_unchanged_files_and_reports_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policies.yaml"), policies(3)).unwrap();
    std::fs::write(dir.path().join("envoy.yaml"), envoy(2, 10)).unwrap();
    let watched = start(dir.path()).await;
    let before = watched.watcher.current();
    watched.watcher.reload().await.unwrap();
    assert!(!Arc::ptr_eq(&before, &watched.watcher.current()));
    std::fs::write(
        dir.path().join("policies.yaml"),
        policies(3) + "  key_prefix: \"\"\n",
    )
    .unwrap();
    let err = watched.watcher.reload().await.unwrap_err();
    assert!(err.file().ends_with("policies.yaml"), "{err}");
    assert_eq!(err.field(), "tollgate.key_prefix", "{err}");
}

#[tokio::test]
async fn a_set_has_one_policy_file_and_one_file_per_domain() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let a = write("a.yaml", &policies(1));
    let b = write("b.yaml", &policies(2));
    let err = PolicySet::load(&[&a, &b]).await.unwrap_err();
    assert_eq!(err.file(), b.display().to_string());
    assert!(
        err.message()
            .starts_with("only one tollgate policy file may be given"),
        "{err}"
    );
    let e1 = write("e1.yaml", &envoy(1, 1));
    let e2 = write("e2.yaml", &envoy(2, 2));
    let err = PolicySet::load(&[&e1, &e2]).await.unwrap_err();
    assert_eq!(
        (err.file(), err.field()),
        (e2.display().to_string().as_str(), "domain")
    );
    // Envoy files alone decide in memory, with no policy file's limiter.
    let set = PolicySet::load(&[&e1]).await.unwrap();
    assert!(set.in_memory() && set.policies().is_none() && set.policy_file().is_none());
    assert_eq!(envoy_admitted(&set, "carol").await, 1);
}
