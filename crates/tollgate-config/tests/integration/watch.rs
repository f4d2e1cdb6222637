//! A watched policy file: edits, replacements by rename and reloads on
//! demand are applied to the running limiter with the keys' state kept;
//! invalid files and storage changes are reported and change nothing.
//! Every wait for the watcher is bounded (a channel read with a timeout).

use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::MemoryBackend;
use tollgate_config::{LoadError, PolicyWatcher, ReloadError, Storage};

/// How long a test waits for the watcher to report.
const PATIENCE: Duration = Duration::from_secs(5);

/// A policy file whose resource `api` allows `limit` per hour.
fn policies(limit: u64) -> String {
    format!(
        "tollgate:\n  default: {{ limit: 100, window: 1h }}\n  resources:\n    api:\n      limit: {limit}\n      window: 1h\n      strategy: fixed_window\n"
    )
}

/// What the watcher reported: the `api` limit of each file it applied, and
/// each error as (line, field, as displayed).
struct Reports {
    reloads: Receiver<u64>,
    errors: Receiver<(Option<usize>, String, String)>,
}

impl Reports {
    /// The next applied file's `api` limit.
    #[track_caller]
    fn reload(&self) -> u64 {
        self.reloads
            .recv_timeout(PATIENCE)
            .expect("the watcher applied the file")
    }

    /// The next error.
    #[track_caller]
    fn error(&self) -> (Option<usize>, String, String) {
        self.errors
            .recv_timeout(PATIENCE)
            .expect("the watcher reported an error")
    }
}

/// Writes `text` to `policies.yaml` in `dir` and watches it, on a manual
/// clock, with `debounce`.
async fn watch(dir: &Path, text: &str, debounce: Duration) -> (PolicyWatcher, Reports, PathBuf) {
    let path = dir.join("policies.yaml");
    std::fs::write(&path, text).unwrap();
    let (reloaded, reloads) = channel();
    let (failed, errors) = channel();
    let clock = ManualClock::new(Duration::from_secs(1_800_000_000));
    let watcher = PolicyWatcher::builder(&path, move |err| {
        let (line, field) = match err {
            ReloadError::File(err) => (err.line(), err.field().to_owned()),
            _ => (None, String::new()),
        };
        let _ = failed.send((line, field, err.to_string()));
    })
    .backend(MemoryBackend::new().clock(clock))
    .debounce(debounce)
    .on_reload(move |file| {
        let _ = reloaded.send(file.policy("api").limits()[0].limit());
    })
    .start()
    .await
    .unwrap_or_else(|err| panic!("{err}"));
    (watcher, Reports { reloads, errors }, path)
}

/// The `api` limit of the policies in effect.
fn api_limit(watcher: &PolicyWatcher) -> u64 {
    watcher.limiters().named_policy("api").1.limits()[0].limit()
}

/// Whether one more request of `key` under `api` is admitted.
async fn allows(watcher: &PolicyWatcher, key: &str) -> bool {
    watcher
        .limiters()
        .limiter("api")
        .allow(key)
        .await
        .unwrap()
        .allowed
}

/// How many more requests of `key` under `api` are admitted.
async fn admitted(watcher: &PolicyWatcher, key: &str) -> u64 {
    let mut n = 0;
    while allows(watcher, key).await {
        n += 1;
    }
    n
}

#[tokio::test]
async fn an_edit_applies_the_new_limit_and_keys_keep_what_they_spent() {
    let dir = tempfile::tempdir().unwrap();
    let (watcher, reports, path) = watch(dir.path(), &policies(3), Duration::from_millis(50)).await;
    for remaining in [2, 1] {
        assert_eq!(
            watcher
                .limiters()
                .limiter("api")
                .allow("k")
                .await
                .unwrap()
                .remaining,
            remaining
        );
    }
    std::fs::write(&path, policies(5)).unwrap();
    assert_eq!(reports.reload(), 5);
    assert_eq!(api_limit(&watcher), 5);
    assert_eq!(watcher.file().policy("api").limits()[0].limit(), 5);
    // The key spent 2 of its window's units: 3 more, where a new key has 5.
    assert_eq!(admitted(&watcher, "k").await, 3);
    assert_eq!(admitted(&watcher, "new").await, 5);
}

#[tokio::test]
async fn an_invalid_edit_keeps_the_policies_and_reports_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let (watcher, reports, path) = watch(dir.path(), &policies(3), Duration::from_millis(50)).await;
    assert!(allows(&watcher, "k").await);
    std::fs::write(
        &path,
        policies(4).replace("window: 1h\n      strategy", "window: 1 mnute\n      strategy"),
    )
    .unwrap();
    let (line, field, shown) = reports.error();
    assert_eq!(
        (line, field.as_str()),
        (Some(6), "tollgate.resources.api.window"),
        "{shown}"
    );
    assert!(
        shown.starts_with(&format!(
            "{}:6: tollgate.resources.api.window: \"1 mnute\" is not a duration",
            path.display()
        )),
        "{shown}"
    );
    // Nothing changed: the limit, and what the key spent.
    assert_eq!(api_limit(&watcher), 3);
    assert_eq!(admitted(&watcher, "k").await, 2);
    // Once fixed, the file applies.
    std::fs::write(&path, policies(4)).unwrap();
    assert_eq!(reports.reload(), 4);
    assert_eq!(admitted(&watcher, "k").await, 1);
}

#[tokio::test]
async fn a_file_renamed_over_the_watched_one_applies() {
    let dir = tempfile::tempdir().unwrap();
    let (watcher, reports, path) = watch(dir.path(), &policies(3), Duration::from_millis(50)).await;
    // As editors and deployment tools do: write a new file, rename it over.
    let staged = dir.path().join(".policies.yaml.new");
    std::fs::write(&staged, policies(7)).unwrap();
    std::fs::rename(&staged, &path).unwrap();
    assert_eq!(reports.reload(), 7);
    assert_eq!(api_limit(&watcher), 7);
    // And again: the watch follows the name, not the replaced file.
    std::fs::write(&staged, policies(8)).unwrap();
    std::fs::rename(&staged, &path).unwrap();
    assert_eq!(reports.reload(), 8);
}

#[tokio::test]
async fn a_symbolic_link_swapped_to_another_version_applies() {
    // The layout of a Kubernetes ConfigMap volume: policies.yaml ->
    // ..data/policies.yaml, ..data -> a versioned directory, swapped whole.
    let dir = tempfile::tempdir().unwrap();
    let version = |name: &str, limit: u64| {
        let versioned = dir.path().join(name);
        std::fs::create_dir(&versioned).unwrap();
        std::fs::write(versioned.join("policies.yaml"), policies(limit)).unwrap();
    };
    version("v1", 3);
    version("v2", 6);
    std::os::unix::fs::symlink("v1", dir.path().join("..data")).unwrap();
    let path = dir.path().join("policies.yaml");
    std::os::unix::fs::symlink("..data/policies.yaml", &path).unwrap();
    let (reloaded, reloads) = channel();
    let watcher = PolicyWatcher::builder(&path, |err| panic!("{err}"))
        .debounce(Duration::from_millis(50))
        .on_reload(move |file| {
            let _ = reloaded.send(file.policy("api").limits()[0].limit());
        })
        .start()
        .await
        .unwrap();
    assert_eq!(api_limit(&watcher), 3);
    std::os::unix::fs::symlink("v2", dir.path().join("..data_tmp")).unwrap();
    std::fs::rename(dir.path().join("..data_tmp"), dir.path().join("..data")).unwrap();
    assert_eq!(reloads.recv_timeout(PATIENCE), Ok(6));
    assert_eq!(api_limit(&watcher), 6);
}

#[tokio::test]
async fn reload_applies_the_file_on_demand() {
    let dir = tempfile::tempdir().unwrap();
    // A debounce longer than the test: only reload() applies anything.
    let (watcher, reports, path) = watch(dir.path(), &policies(3), Duration::from_secs(3_600)).await;
    assert!(allows(&watcher, "k").await);
    std::fs::write(&path, policies(10)).unwrap();
    watcher.reload_blocking().unwrap();
    assert_eq!(api_limit(&watcher), 10);
    assert_eq!(admitted(&watcher, "k").await, 9);
    // An unchanged file applies again, keeping everything.
    watcher.reload_blocking().unwrap();
    assert_eq!(admitted(&watcher, "k").await, 0);
    // An invalid one is returned as the error, with its line.
    std::fs::write(&path, policies(0)).unwrap();
    let err = watcher.reload_blocking().unwrap_err();
    let ReloadError::File(file_err) = &err else {
        panic!("expected a file error, got {err}")
    };
    assert_eq!(
        (file_err.line(), file_err.field()),
        (Some(5), "tollgate.resources.api.limit")
    );
    assert_eq!(
        err.to_string(),
        format!(
            "{}:5: tollgate.resources.api.limit: must be at least 1",
            path.display()
        )
    );
    assert_eq!(api_limit(&watcher), 10);
    // reload() returns its outcome instead of calling the callbacks.
    assert!(reports.reloads.try_recv().is_err() && reports.errors.try_recv().is_err());
}

#[tokio::test]
async fn a_change_of_storage_is_refused_until_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (watcher, _reports, path) = watch(dir.path(), &policies(3), Duration::from_secs(3_600)).await;
    // Nothing listens on port 1, and nothing is tried: the change is refused first.
    let redis = format!(
        "tollgate:\n  redis_url: redis://:s3cret@127.0.0.1:1\n{}",
        &policies(4)["tollgate:\n".len()..]
    );
    std::fs::write(&path, &redis).unwrap();
    let err = watcher.reload_blocking().unwrap_err();
    let ReloadError::StorageChanged { field, from, to, .. } = &err else {
        panic!("expected a storage change, got {err}")
    };
    assert_eq!(*field, "tollgate.redis_url");
    assert_eq!(**from, Storage::Memory);
    assert_eq!(**to, Storage::Redis("redis://:s3cret@127.0.0.1:1".to_owned()));
    assert_eq!(
        err.to_string(),
        format!(
            "{}: tollgate.redis_url: the storage changed from in memory to Redis at \
             redis://:***@127.0.0.1:1; a running limiter cannot move its state to another store, \
             so the policies in effect stay until a restart",
            path.display()
        )
    );
    assert_eq!(api_limit(&watcher), 3);
    // Back to memory, the file applies.
    std::fs::write(&path, policies(4)).unwrap();
    watcher.reload_blocking().unwrap();
    assert_eq!(api_limit(&watcher), 4);
}

#[tokio::test]
async fn changes_wait_for_the_directory_to_be_quiet_and_apply_once() {
    let dir = tempfile::tempdir().unwrap();
    let quiet = Duration::from_millis(1_000);
    let (watcher, reports, path) = watch(dir.path(), &policies(3), quiet).await;
    // Two writes in a row: nothing before the quiet time, then the last.
    std::fs::write(&path, policies(4)).unwrap();
    std::fs::write(&path, policies(5)).unwrap();
    assert!(
        reports.reloads.recv_timeout(quiet / 4).is_err(),
        "applied before the directory was quiet"
    );
    assert_eq!(reports.reload(), 5);
    assert_eq!(api_limit(&watcher), 5);
}

#[tokio::test]
async fn an_invalid_file_at_start_is_a_load_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policies.toml");
    std::fs::write(&path, "[tollgate]\ndefault = { limit = 0, window = \"1m\" }\n").unwrap();
    match PolicyWatcher::builder(&path, |_| {}).start().await {
        Err(LoadError::File(err)) => assert_eq!(
            err.to_string(),
            format!("{}:2: tollgate.default.limit: must be at least 1", path.display())
        ),
        other => panic!("expected a file error, got {other:?}"),
    }
}
