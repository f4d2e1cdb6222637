//! Files that name Redis: limiters share state through a real server
//! started by the test, and an unreachable server is a clear error.

use crate::support;

use support::{free_port, RedisServer};
use tollgate::backend::BackendErrorKind;
use tollgate::Error;
use tollgate_config::{load_limiters, Format, LoadError, PolicyFile};

fn file(text: &str) -> PolicyFile {
    PolicyFile::from_str(text, Format::Yaml, "policies.yaml").unwrap_or_else(|err| panic!("{err}"))
}

#[tokio::test]
async fn limiters_built_from_the_file_share_state_in_redis() {
    let server = RedisServer::start();
    std::env::set_var("TGC_REDIS_A_URL", server.url());
    let policies = file(
        "tollgate:\n  redis_url: ${TGC_REDIS_A_URL}\n  key_prefix: app\n  default: { limit: 100, window: 1m }\n  resources:\n    login: { limit: 2, window: 1h, strategy: token_bucket }\n",
    );
    let first = policies.build().await.unwrap();
    let second = policies.build().await.unwrap(); // as another process would

    assert!(first.limiter("login").allow("alice").await.unwrap().allowed);
    let d = second.limiter("login").allow("alice").await.unwrap();
    assert_eq!((d.allowed, d.remaining), (true, 0));
    let d = first.limiter("login").allow("alice").await.unwrap();
    assert!(!d.allowed);
    assert!(d.retry_after.is_some());

    // The key layout follows the file: prefix, resource, strategy, key.
    assert_eq!(server.cli(&["EXISTS", "app:login:token_bucket:alice"]), "1");
    let d = second.limiter("search").allow("alice").await.unwrap();
    assert_eq!((d.allowed, d.limit, d.remaining), (true, 100, 99));
    assert_eq!(server.cli(&["EXISTS", "app::sliding_window:alice"]), "1");
}

#[tokio::test]
async fn an_unreachable_redis_is_a_clear_error() {
    let port = free_port(); // nothing listens there
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policies.json");
    let text = format!(
        "{{\"tollgate\": {{\"redis_url\": \"redis://127.0.0.1:{port}\", \"default\": {{\"limit\": 1, \"window\": \"1s\"}}}}}}"
    );
    std::fs::write(&path, text).unwrap();

    let err = PolicyFile::load(&path).unwrap().build().await.unwrap_err();
    let Error::Backend(backend) = &err else {
        panic!("expected a backend error, got {err:?}");
    };
    assert_eq!(backend.kind(), BackendErrorKind::Unavailable);
    let message = err.to_string();
    assert!(
        message.starts_with(&format!(
            "rate-limit backend unavailable: cannot use Redis at 127.0.0.1:{port}: nothing accepts connections there"
        )),
        "{message}"
    );
    assert!(matches!(
        load_limiters(&path).await,
        Err(LoadError::Build(Error::Backend(_)))
    ));

    let err = file(&format!(
        "tollgate:\n  redis_cluster: [redis://127.0.0.1:{port}]\n  default: {{ limit: 1, window: 1s }}\n"
    ))
    .build()
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Backend(_)), "{err:?}");
    assert!(err.to_string().contains(&format!("127.0.0.1:{port}")), "{err}");
}

#[tokio::test]
async fn a_policy_redis_cannot_serve_exactly_names_its_field() {
    let server = RedisServer::start();
    let policies = file(&format!(
        "tollgate:\n  redis_url: {}\n  default: {{ limit: 100, window: 1m }}\n  resources:\n    huge: {{ limit: 3000000000000000, window: 1s, strategy: token_bucket }}\n",
        server.url()
    ));
    let Err(Error::Config(err)) = policies.build().await else {
        panic!("a limit above 2^51 must be rejected by the Redis backend");
    };
    assert_eq!(err.field(), "tollgate.resources.huge.limit");
    assert!(err.reason().contains("exceeds 2^51"), "{err}");
    // The same file in memory is fine.
    let in_memory = policies.limiters_builder(tollgate::MemoryBackend::new()).build();
    assert!(in_memory.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_open_file_starts_with_redis_down_and_uses_redis_once_it_is_up() {
    let port = free_port(); // nothing listens there yet
    let policies = file(&format!(
        "tollgate:\n  redis_url: redis://127.0.0.1:{port}\n  fail_open: true\n  default: {{ limit: 2, window: 1h }}\n"
    ));
    let limiter = policies.build().await.unwrap_or_else(|err| panic!("{err}"));

    // Down: admitted, with nothing left and no error, and counted.
    let d = limiter.limiter("api").allow("alice").await.unwrap();
    assert_eq!((d.allowed, d.remaining), (true, 0));
    assert_eq!(limiter.limiter("").fail_open_events(), 1);

    // Up: decided on Redis, within a deadline polled for.
    let server = RedisServer::start_on(port);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    for probe in 0.. {
        let d = limiter
            .limiter("api")
            .allow(format!("probe{probe}"))
            .await
            .unwrap();
        if d.remaining == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Redis was not used within ten seconds"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let events = limiter.limiter("").fail_open_events();
    // The decision made while Redis was down charged nothing.
    assert_eq!(limiter.limiter("api").allow("alice").await.unwrap().remaining, 1);
    assert_eq!(limiter.limiter("api").allow("alice").await.unwrap().remaining, 0);
    assert!(!limiter.limiter("api").allow("alice").await.unwrap().allowed);
    assert_eq!(limiter.limiter("").fail_open_events(), events);
    assert_eq!(server.cli(&["EXISTS", "tollgate::sliding_window:alice"]), "1");
}

#[tokio::test]
async fn a_file_naming_sentinels_decides_on_the_primary_they_name() {
    let primary = RedisServer::start();
    let sentinel = RedisServer::start_sentinel("tgc-primary", &primary);
    let policies = file(&format!(
        "tollgate:\n  redis_sentinel:\n    master: tgc-primary\n    urls: [{}]\n  default: {{ limit: 2, window: 1h }}\n",
        sentinel.url()
    ));
    let limiter = policies.build().await.unwrap_or_else(|err| panic!("{err}"));
    let admitted = [
        limiter.limiter("api").allow("alice").await.unwrap().allowed,
        limiter.limiter("api").allow("alice").await.unwrap().allowed,
        limiter.limiter("api").allow("alice").await.unwrap().allowed,
    ];
    assert_eq!(admitted, [true, true, false]);
    assert_eq!(primary.cli(&["EXISTS", "tollgate::sliding_window:alice"]), "1");

    // A name the sentinel does not monitor is an error naming it and the field.
    let wrong = file(&format!(
        "tollgate:\n  redis_sentinel: {{ master: other, urls: [{}] }}\n  default: {{ limit: 2, window: 1h }}\n",
        sentinel.url()
    ));
    let err = wrong.build().await.unwrap_err();
    assert!(matches!(err, Error::Backend(_)), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("\"other\""), "{message}");
    assert!(message.contains(&sentinel.url()[8..]), "{message}");
}

#[tokio::test]
async fn a_file_gives_the_password_of_the_primary_sentinel_names() {
    const PASSWORD: &str = "tgc-primary-pw-5d1e";
    let primary = RedisServer::start_with(&["--requirepass", PASSWORD]);
    let sentinel = RedisServer::start_sentinel_with(
        "tgc-primary",
        &primary,
        &format!("sentinel auth-pass tgc-primary {PASSWORD}\n"),
    );
    let with = |login: &str| {
        file(&format!(
            "tollgate:\n  redis_sentinel:\n    master: tgc-primary\n    urls: [{}]\n{login}  default: {{ limit: 2, window: 1h }}\n",
            sentinel.url()
        ))
    };
    let policies = with(&format!(
        "    password: \"{PASSWORD}\"\n    username: default\n    db: 1\n"
    ));
    let limiter = policies.build().await.unwrap_or_else(|err| panic!("{err}"));
    let admitted = [
        limiter.limiter("api").allow("alice").await.unwrap().allowed,
        limiter.limiter("api").allow("alice").await.unwrap().allowed,
        limiter.limiter("api").allow("alice").await.unwrap().allowed,
    ];
    assert_eq!(admitted, [true, true, false]);
    let key = "tollgate::sliding_window:alice";
    let exists = |db: &str| primary.cli(&["--no-auth-warning", "-a", PASSWORD, "-n", db, "EXISTS", key]);
    assert_eq!((exists("1"), exists("0")), ("1".to_owned(), "0".to_owned()));

    // Without the password, or with a wrong one: an error naming the field
    // and the primary, without the password.
    for login in ["", "    password: wrong-pw-0c4b\n"] {
        let err = with(login).build().await.unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, Error::Backend(_)), "{err:?}");
        assert!(
            message.contains("`password`") && message.contains("redis_sentinel"),
            "{message}"
        );
        assert!(message.contains("\"tgc-primary\""), "{message}");
        assert!(message.contains("rejected the credentials"), "{message}");
        assert!(
            !message.contains(PASSWORD) && !message.contains("wrong-pw"),
            "{message}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_protects_its_redis_store_with_a_deny_cache_and_a_fallback() {
    let server = RedisServer::start();
    let policies = file(&format!(
        "tollgate:\n  redis_url: {}\n  deny_cache: true\n  fallback: {{ limit: 2, window: 1h, strategy: fixed_window }}\n  default: {{ limit: 100, window: 1h }}\n  resources:\n    login:\n      limit: 1\n      window: 1h\n      strategy: token_bucket\n      fallback: {{ limit: 1, window: 1h, strategy: fixed_window }}\n    search: {{ limit: 1, window: 1h, strategy: token_bucket, deny_cache: false }}\n",
        server.url()
    ));
    let limiter = policies.build().await.unwrap();
    for resource in ["login", "search"] {
        assert!(limiter.limiter(resource).allow("k").await.unwrap().allowed);
        assert!(!limiter.limiter(resource).allow("k").await.unwrap().allowed);
    }
    // The store forgets the keys: login's denial is still answered from its
    // deny cache, search (without one) asks the store and is admitted.
    assert_eq!(server.cli(&["FLUSHALL"]), "OK");
    let d = limiter.limiter("login").allow("k").await.unwrap();
    assert!(!d.allowed && d.retry_after.is_some(), "{d:?}");
    assert!(limiter.limiter("search").allow("k").await.unwrap().allowed);

    // The store goes away: each limiter decides by its fallback, login by
    // its own (1 per hour), the others by the file's (2 per hour).
    drop(server);
    let mut admitted = Vec::new();
    for resource in ["login", "search", "other"] {
        let mut n = 0;
        for _ in 0..5 {
            let d = limiter.limiter(resource).allow("fresh").await.unwrap();
            assert!(d.fallback, "{resource}: {d:?}");
            n += u64::from(d.allowed);
        }
        admitted.push(n);
    }
    assert_eq!(admitted, [1, 2, 2]);
}

#[tokio::test]
async fn a_file_with_a_fallback_starts_while_redis_is_down() {
    let port = free_port(); // nothing listens there
    let policies = file(&format!(
        "tollgate:\n  redis_url: redis://127.0.0.1:{port}\n  fallback: {{ limit: 1, window: 1h, strategy: fixed_window }}\n  default: {{ limit: 100, window: 1h }}\n"
    ));
    let limiter = policies.build().await.unwrap();
    let decisions = [
        limiter.limiter("").allow("k").await.unwrap(),
        limiter.limiter("").allow("k").await.unwrap(),
    ];
    assert_eq!(
        decisions.map(|d| (d.allowed, d.fallback, d.limit)),
        [(true, true, 1), (false, true, 1)]
    );
}

#[tokio::test]
async fn a_file_leases_units_of_hot_keys_from_redis() {
    let server = RedisServer::start();
    let policies = file(&format!(
        "tollgate:\n  redis_url: {}\n  lease: {{ max_units: 16, max_age: 10s }}\n  default: {{ limit: 100, window: 1h, strategy: fixed_window }}\n",
        server.url()
    ));
    let limiter = policies.build().await.unwrap();
    let default = limiter.limiter("");
    let mut remaining = Vec::new();
    for _ in 0..20 {
        remaining.push(default.allow("hot").await.unwrap().remaining);
    }
    assert_eq!(
        remaining,
        (80..100).rev().collect::<Vec<_>>(),
        "exact in one process"
    );
    // Redis counts what was leased as spent; ending the leases gives back
    // what was not.
    let key = "tollgate::fixed_window:hot";
    let charged: u64 = server
        .cli(&["GET", key])
        .split(':')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(charged > 20, "a lease was taken: {charged}");
    assert!(default.end_leases().await.unwrap() > 0);
    let charged: u64 = server
        .cli(&["GET", key])
        .split(':')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(charged, 20);
}

#[cfg(feature = "watch")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_gives_back_the_units_leased_under_a_changed_policy_and_keeps_an_unchanged_ones_leases() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policies.yaml");
    let write = |login: u64| {
        let text = format!(
            "tollgate:\n  redis_url: {}\n  lease: {{ max_units: 16, max_age: 10s }}\n  \
             default: {{ limit: 100, window: 1h, strategy: fixed_window }}\n  \
             resources:\n    login: {{ limit: {login}, window: 1h, strategy: fixed_window }}\n",
            server.url()
        );
        std::fs::write(&path, text).unwrap();
    };
    write(100);
    let watcher = tollgate_config::PolicySetWatcher::builder([path.clone()])
        .start()
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    let charged = |key: &str| -> u64 {
        server
            .cli(&["GET", key])
            .split(':')
            .nth(1)
            .map_or(0, |n| n.trim().parse().unwrap())
    };
    let before = watcher.current();
    let limiters = before.policies().unwrap();
    for _ in 0..20 {
        assert!(limiters.limiter("").allow("hot").await.unwrap().allowed);
        assert!(limiters.limiter("login").allow("hot").await.unwrap().allowed);
    }
    let default_key = "tollgate::fixed_window:hot";
    let login_key = "tollgate:login:fixed_window:hot";
    assert!(charged(default_key) > 20, "the default policy leased");
    assert!(charged(login_key) > 20, "login leased");
    let default_charged = charged(default_key);

    // login's limit changes, the default policy's does not: once the
    // reload returns, login's leased units are back and the default's
    // lease still counts.
    write(200);
    watcher.reload().await.unwrap();
    assert_eq!(charged(login_key), 20, "login's unspent units given back");
    assert_eq!(
        charged(default_key),
        default_charged,
        "the unchanged policy keeps its lease"
    );
    let after = watcher.current();
    assert!(std::sync::Arc::ptr_eq(
        &before.policies().unwrap().limiter(""),
        &after.policies().unwrap().limiter("")
    ));
}

#[tokio::test]
async fn an_envoy_domain_takes_the_file_wide_lease_and_no_resource_lease() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let policies = dir.path().join("policies.yaml");
    let envoy = dir.path().join("envoy.yaml");
    let write = |file_wide: &str| {
        std::fs::write(
            &policies,
            format!(
                "tollgate:\n  redis_url: {}\n{file_wide}  default: {{ limit: 100, window: 1h }}\n  \
                 resources:\n    search: {{ limit: 100, window: 1h, lease: {{ max_units: 16 }} }}\n",
                server.url()
            ),
        )
        .unwrap();
    };
    std::fs::write(
        &envoy,
        "domain: api\ndescriptors:\n  - key: user\n    rate_limit: { unit: hour, requests_per_unit: 1000 }\n",
    )
    .unwrap();

    // A resource's own lease stays the resource's.
    write("");
    let set = tollgate_config::PolicySet::load(&[&policies, &envoy])
        .await
        .unwrap();
    let rule = set.domain("api").unwrap().find([("user", "bob")]).unwrap();
    assert!(!rule.limiter().unwrap().leases());

    write("  lease: { max_units: 16, max_age: 10s }\n");
    let set = tollgate_config::PolicySet::load(&[&policies, &envoy])
        .await
        .unwrap();
    let rule = set.domain("api").unwrap().find([("user", "alice")]).unwrap();
    let limiter = rule.limiter().unwrap();
    assert!(limiter.leases());
    let mut remaining = Vec::new();
    for _ in 0..20 {
        remaining.push(limiter.allow("user_alice").await.unwrap().remaining);
    }
    assert_eq!(
        remaining,
        (980..1000).rev().collect::<Vec<_>>(),
        "exact in one process"
    );
    // Redis counts what was leased as spent, beyond the 20 decided.
    let keys = server.cli(&["KEYS", "*user_alice*"]);
    let key = keys
        .lines()
        .map(str::trim)
        .find(|key| !key.ends_with(":lessees"))
        .expect("the key's state is in Redis")
        .to_owned();
    let charged = |key: &str| -> u64 {
        server
            .cli(&["GET", key])
            .trim()
            .split(':')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(charged(&key) > 20, "a lease was taken: {}", charged(&key));
    assert!(set.end_leases().await.unwrap() > 0);
    assert_eq!(charged(&key), 20);
}
