//! Limiters built from files keep their state in memory unless the file
//! names Redis, and decide by each resource's policy.

use std::path::PathBuf;
use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::{FailPolicy, MemoryBackend, Strategy};
use tollgate_config::{load_limiters, AnyBackend, Format, LoadError, PolicyFile};

const POLICIES: &str = "\
tollgate:
  strategy: sliding_window
  fail_open: true
  default:  { limit: 100, window: 1m }
  resources:
    login:  { limit: 5,  window: 1m }
    search: { limit: 3,  window: 1h, strategy: token_bucket }
    export: { limit: 2,  window: 1m, strategy: fixed_window }
";

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn decisions_follow_each_resource_policy() {
    let file = PolicyFile::from_str(POLICIES, Format::Yaml, "policies.yaml").unwrap();
    let limiter = file.build().await.unwrap();

    // login: sliding window, 5 per minute (anchored at the first request).
    for remaining in (0..5).rev() {
        let d = limiter.limiter("login").allow("alice").await.unwrap();
        assert!(d.allowed);
        assert_eq!(d.remaining, remaining);
    }
    let d = limiter.limiter("login").allow("alice").await.unwrap();
    assert!(!d.allowed);
    assert!(d
        .retry_after
        .is_some_and(|r| r > Duration::ZERO && r <= Duration::from_secs(120)));
    // Another key, and another resource, have budgets of their own.
    assert!(limiter.limiter("login").allow("bob").await.unwrap().allowed);

    // search: token bucket, 3 per hour: a burst of 3, then one token per 20 minutes.
    let d = limiter.limiter("search").allow_n("alice", 3).await.unwrap();
    assert!(d.allowed);
    assert_eq!(d.remaining, 0);
    let d = limiter.limiter("search").allow("alice").await.unwrap();
    assert!(!d.allowed);
    let retry = d.retry_after.unwrap();
    assert!(
        retry > Duration::from_secs(1_190) && retry <= Duration::from_secs(1_200),
        "{retry:?}"
    );

    // Anything else: the default, sliding window, 100 per minute.
    let d = limiter.limiter("checkout").allow("alice").await.unwrap();
    assert_eq!((d.allowed, d.limit, d.remaining), (true, 100, 99));

    assert_eq!(
        limiter.named_policy("search").1.limits()[0].strategy(),
        Strategy::TokenBucket
    );
    assert_eq!(
        limiter.named_policy("login").1.limits()[0].strategy(),
        Strategy::SlidingWindow
    );
    assert_eq!(
        limiter.named_policy("export").1.limits()[0].strategy(),
        Strategy::FixedWindow
    );
    assert_eq!(
        limiter.named_policy("checkout"),
        ("default", *file.default_policy())
    );
    assert_eq!(limiter.limiter("login").fail_policy(), FailPolicy::Open);
    assert_eq!(limiter.resources().len(), 3);
}

#[tokio::test]
async fn a_file_on_a_manual_clock() {
    let file = PolicyFile::from_str(POLICIES, Format::Yaml, "policies.yaml").unwrap();
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let backend = AnyBackend::from(MemoryBackend::new().clock(clock.clone()));
    let limiter = file.limiters_builder(backend).build().unwrap();

    // export: fixed window, 2 per clock-aligned minute.
    assert!(limiter.limiter("export").allow("k").await.unwrap().allowed);
    assert!(limiter.limiter("export").allow("k").await.unwrap().allowed);
    let d = limiter.limiter("export").allow("k").await.unwrap();
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(Duration::from_secs(40))); // 1_700_000_000 is 20 s into its minute
    clock.advance(Duration::from_secs(40));
    let d = limiter.limiter("export").allow("k").await.unwrap();
    assert!(d.allowed);
    assert_eq!(d.remaining, 1);
}

#[tokio::test]
async fn load_limiter_reads_and_builds_in_one_call() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "policies.yml", POLICIES);
    let limiter = load_limiters(&path).await.unwrap();
    assert_eq!(limiter.named_policy("login").1.limits()[0].limit(), 5);
    assert!(limiter.limiter("login").allow("carol").await.unwrap().allowed);

    let path = write(
        &dir,
        "broken.toml",
        "[tollgate]\ndefault = { limit = 0, window = \"1m\" }\n",
    );
    match load_limiters(&path).await {
        Err(LoadError::File(err)) => {
            assert_eq!(
                err.to_string(),
                format!("{}:2: tollgate.default.limit: must be at least 1", path.display())
            );
        }
        other => panic!("expected a file error, got {other:?}"),
    }
}

#[tokio::test]
async fn the_example_files_build() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/policies");
    if std::env::var_os("REDIS_URL").is_some() {
        return; // the examples would connect to that server
    }
    for name in ["policies.yaml", "policies.toml", "policies.json"] {
        let limiter = load_limiters(dir.join(name)).await.unwrap();
        let d = limiter.limiter("search").allow("k").await.unwrap();
        assert_eq!((d.allowed, d.limit), (true, 50), "{name}");
        // streams: 4 at once per key, the file's deny cache left out.
        let streams = limiter.limiter("streams");
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(streams.acquire_permit("k", 1).await.unwrap());
        }
        assert!(
            !streams.acquire_permit("k", 1).await.unwrap().decision().allowed,
            "{name}"
        );
        drop(held);
        assert!(
            streams.acquire_permit("k", 1).await.unwrap().decision().allowed,
            "{name}"
        );
        // api: 10 per second and 1000 per hour; the tighter binds.
        let d = limiter.limiter("api").allow("k").await.unwrap();
        assert_eq!((d.allowed, d.limit, d.bound_by), (true, 10, 0), "{name}");
        // The lists and shadow mode: file-wide, and a resource's own.
        let listed = |d: tollgate::Decision| (d.allowed, d.listed, d.shadow_denied);
        let exempt = limiter.limiter("search").allow("10.1.2.3").await.unwrap();
        assert_eq!(
            listed(exempt),
            (true, Some(tollgate::Listed::Exempt), false),
            "{name}"
        );
        let denied = limiter.limiter("login").allow("198.51.100.7").await.unwrap();
        assert_eq!(
            listed(denied),
            (false, Some(tollgate::Listed::Denied), false),
            "{name}"
        );
        let shadowed = limiter.limiter("export").allow("192.0.2.66").await.unwrap();
        assert_eq!(
            listed(shadowed),
            (true, Some(tollgate::Listed::Denied), true),
            "{name}"
        );
    }
}

#[cfg(not(feature = "redis"))]
#[tokio::test]
async fn without_redis_support_a_redis_url_is_a_build_error() {
    let file = PolicyFile::from_str(
        "tollgate:\n  redis_url: redis://127.0.0.1:6390\n  default: { limit: 1, window: 1s }\n",
        Format::Yaml,
        "policies.yaml",
    )
    .unwrap();
    let Err(tollgate::Error::Config(err)) = file.build().await else {
        panic!("expected a configuration error");
    };
    assert_eq!(err.field(), "tollgate.redis_url");
    assert!(err.reason().contains("`redis` feature"), "{err}");
}
