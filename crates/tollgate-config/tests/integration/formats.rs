//! The three formats describe the same schema: the example files in
//! `examples/policies` load to identical policies, and every setting is read.

use std::path::PathBuf;
use std::time::Duration;

use tollgate::protection::DenyCache;
use tollgate::{FailPolicy, KeyList, Limit, Policy, Strategy};
use tollgate_config::{ErrorKind, Format, PolicyFile, Settings, Storage, Target};

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/policies")
        .join(name)
}

fn policy(strategy: Strategy, limit: u64, window: Duration) -> Policy {
    Policy::new(strategy, limit, window).unwrap()
}

/// The settings the example files give each target.
fn settings(target: Target<'_>) -> Settings {
    let keys = |entries: &[&str]| KeyList::parse("test", entries).unwrap();
    let mut settings = Settings::default();
    settings.exempt = keys(&["10.0.0.0/8", "health-checker"]);
    settings.deny = keys(&["192.0.2.66"]);
    settings.deny_cache = Some(DenyCache::new());
    settings.fallback = Some(policy(Strategy::SlidingWindow, 25, Duration::from_secs(60)));
    settings.top_keys = Some(tollgate::top::TopKeys::new());
    match target {
        Target::Resource("login") => settings.deny = keys(&["192.0.2.66", "198.51.100.0/24"]),
        Target::Resource("search") => settings.deny_cache = None,
        Target::Resource("export") => settings.shadow = true,
        Target::Resource("tokens") => settings.charge = tollgate::Charge::Always,
        Target::Resource("api") => {
            settings.deny_cache = Some(DenyCache::new().capacity(50_000).max_key_len(128));
            settings.fallback = Some(policy(Strategy::TokenBucket, 3, Duration::from_secs(1)));
        }
        _ => {}
    }
    settings
}

#[test]
fn example_files_load_to_identical_policies() {
    let expected = vec![
        (
            Target::Default,
            policy(Strategy::SlidingWindow, 100, Duration::from_secs(60)),
        ),
        (
            Target::Resource("api"),
            Policy::compound([
                Limit::new(Strategy::TokenBucket, 10, Duration::from_secs(1)).unwrap(),
                Limit::new(Strategy::SlidingWindow, 1000, Duration::from_secs(3_600)).unwrap(),
            ])
            .unwrap(),
        ),
        (
            Target::Resource("export"),
            policy(Strategy::FixedWindow, 10, Duration::from_secs(3_600)),
        ),
        (
            Target::Resource("login"),
            policy(Strategy::SlidingWindow, 5, Duration::from_secs(60)),
        ),
        (
            Target::Resource("search"),
            policy(Strategy::TokenBucket, 50, Duration::from_secs(1)),
        ),
        (
            Target::Resource("streams"),
            policy(Strategy::Concurrency, 4, Duration::from_secs(300)),
        ),
        (
            Target::Resource("tokens"),
            policy(Strategy::FixedWindow, 100_000, Duration::from_secs(3_600)),
        ),
        (
            Target::Resource("uploads"),
            policy(Strategy::FixedWindow, 20, Duration::from_secs(60)),
        ),
    ];
    let uploads_in_flight = policy(Strategy::Concurrency, 2, Duration::from_secs(600));
    for name in ["policies.yaml", "policies.toml", "policies.json"] {
        let path = example(name);
        let file = PolicyFile::load(&path).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(file.effective_policies(), expected, "{name}");
        assert_eq!(file.origin(), path.display().to_string());
        assert_eq!(file.strategy(), Strategy::SlidingWindow, "{name}");
        assert_eq!(file.fail_policy(), FailPolicy::Fallback, "{name}");
        for (target, _) in &expected {
            assert_eq!(file.settings(*target), settings(*target), "{name}: {target}");
        }
        assert_eq!(file.in_flight("uploads"), Some(&uploads_in_flight), "{name}");
        assert_eq!(file.key_prefix(), "tollgate", "{name}");
        // `${REDIS_URL:-}`: in memory unless the variable is set.
        if std::env::var_os("REDIS_URL").is_none() {
            assert_eq!(file.storage(), &Storage::Memory, "{name}");
        }
    }
}

#[test]
fn formats_follow_the_extension() {
    assert_eq!(Format::from_path("a/policies.yaml"), Some(Format::Yaml));
    assert_eq!(Format::from_path("policies.YML"), Some(Format::Yaml));
    assert_eq!(Format::from_path("policies.toml"), Some(Format::Toml));
    assert_eq!(Format::from_path("policies.Json"), Some(Format::Json));
    assert_eq!(Format::from_path("policies.ini"), None);
    assert_eq!(Format::from_path("policies"), None);
    assert_eq!("yml".parse::<Format>(), Ok(Format::Yaml));
    assert!("xml"
        .parse::<Format>()
        .unwrap_err()
        .to_string()
        .contains("yaml, yml, toml or json"));
}

#[test]
fn other_extensions_are_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policies.ini");
    std::fs::write(&path, "tollgate: {}").unwrap();
    let err = PolicyFile::load(&path).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnknownFormat);
    assert_eq!(err.file(), path.display().to_string());
    assert_eq!(err.line(), None);
    assert_eq!(
        err.to_string(),
        format!(
            "{}: unknown policy file format: the name must end in .yaml, .yml, .toml or .json",
            path.display()
        )
    );
}

#[test]
fn a_missing_file_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.yaml");
    let err = PolicyFile::load(&path).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io);
    assert!(std::error::Error::source(&err).is_some());
    let shown = err.to_string();
    assert!(
        shown.starts_with(&format!("{}: cannot read the file: ", path.display())),
        "{shown}"
    );
}

#[test]
fn every_setting_is_read_in_every_format() {
    let yaml = r#"
tollgate:
  strategy: leaky_bucket
  redis_url: "redis://:pw@127.0.0.1:6390/2"
  fail_open: true
  key_prefix: app
  default: { limit: 7, window: 250ms }
  resources:
    "api v2": { limit: 3, window: 1h 30m, strategy: fixed_window }
"#;
    let toml = r#"
[tollgate]
strategy = "leaky_bucket"
redis_url = "redis://:pw@127.0.0.1:6390/2"
fail_open = true
key_prefix = "app"
default = { limit = 7, window = "250ms" }
resources."api v2" = { limit = 3, window = "1h 30m", strategy = "fixed_window" }
"#;
    let json = r#"{"tollgate": {
  "strategy": "leaky_bucket",
  "redis_url": "redis://:pw@127.0.0.1:6390/2",
  "fail_open": true,
  "key_prefix": "app",
  "default": {"limit": 7, "window": "250ms"},
  "resources": {"api v2": {"limit": 3, "window": "1h 30m", "strategy": "fixed_window"}}
}}"#;
    for (format, text) in [(Format::Yaml, yaml), (Format::Toml, toml), (Format::Json, json)] {
        let file = PolicyFile::from_str(text, format, "inline").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(file.format(), format);
        assert_eq!(file.strategy(), Strategy::LeakyBucket);
        assert_eq!(
            file.default_policy(),
            &policy(Strategy::LeakyBucket, 7, Duration::from_millis(250))
        );
        assert_eq!(
            file.policy("api v2"),
            &policy(Strategy::FixedWindow, 3, Duration::from_secs(5_400))
        );
        assert_eq!(file.policy("elsewhere"), file.default_policy());
        assert_eq!(file.fail_policy(), FailPolicy::Open);
        assert_eq!(file.key_prefix(), "app");
        assert_eq!(
            file.storage(),
            &Storage::Redis("redis://:pw@127.0.0.1:6390/2".to_owned())
        );
        assert_eq!(
            file.storage().to_string(),
            "Redis at redis://:***@127.0.0.1:6390/2"
        );
        assert!(!format!("{file:?}").contains("pw"), "{file:?}");
    }
}

#[test]
fn cluster_seeds_are_a_list_or_a_comma_separated_string() {
    let seeds = vec![
        "redis://127.0.0.1:7000".to_owned(),
        "redis://127.0.0.1:7001".to_owned(),
    ];
    let texts = [
        (
            Format::Yaml,
            "tollgate:\n  redis_cluster: [redis://127.0.0.1:7000, redis://127.0.0.1:7001]\n  default: { limit: 1, window: 1s }\n",
        ),
        (
            Format::Yaml,
            "tollgate:\n  redis_cluster: redis://127.0.0.1:7000, redis://127.0.0.1:7001\n  default: { limit: 1, window: 1s }\n",
        ),
        (
            Format::Toml,
            "[tollgate]\nredis_cluster = [\"redis://127.0.0.1:7000\", \"redis://127.0.0.1:7001\"]\ndefault = { limit = 1, window = \"1s\" }\n",
        ),
        (
            Format::Json,
            r#"{"tollgate": {"redis_cluster": ["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"], "default": {"limit": 1, "window": "1s"}}}"#,
        ),
    ];
    for (format, text) in texts {
        let file = PolicyFile::from_str(text, format, "inline").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(file.storage(), &Storage::RedisCluster(seeds.clone()), "{text}");
    }
}

#[test]
fn targets_display_as_names() {
    assert_eq!(Target::Default.to_string(), "default");
    assert_eq!(Target::Resource("login").to_string(), "login");
}

#[test]
fn a_byte_order_mark_is_skipped_in_every_format() {
    let texts = [
        (
            Format::Yaml,
            "\u{feff}tollgate:\n  default: { limit: 3, window: 1m }\n",
        ),
        (
            Format::Toml,
            "\u{feff}[tollgate]\ndefault = { limit = 3, window = \"1m\" }\n",
        ),
        (
            Format::Json,
            "\u{feff}{\"tollgate\": {\"default\": {\"limit\": 3, \"window\": \"1m\"}}}",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (format, text) in texts {
        let path = dir.path().join(format!("policies.{format}"));
        std::fs::write(&path, text).unwrap();
        let file = PolicyFile::load(&path).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(file.default_policy().limits()[0].limit(), 3, "{format}");
        // Positions are those an editor shows, which hides the mark.
        let broken = text.replace('3', "0");
        let err = PolicyFile::from_str(&broken, format, "inline").unwrap_err();
        assert_eq!(err.field(), "tollgate.default.limit", "{format}: {err}");
        assert_eq!(err.message(), "must be at least 1", "{format}: {err}");
    }
}

#[test]
fn sentinels_are_a_primary_name_and_urls_in_every_format() {
    let expected = Storage::RedisSentinel {
        master: "main".to_owned(),
        urls: vec![
            "redis://127.0.0.1:26379".to_owned(),
            "redis://127.0.0.1:26380".to_owned(),
        ],
        username: None,
        password: None,
        db: 0,
    };
    let texts = [
        (
            Format::Yaml,
            "tollgate:\n  redis_sentinel:\n    master: main\n    urls: [redis://127.0.0.1:26379, redis://127.0.0.1:26380]\n  default: { limit: 1, window: 1s }\n",
        ),
        (
            Format::Yaml,
            "tollgate:\n  redis_sentinel: { master: main, urls: \"redis://127.0.0.1:26379, redis://127.0.0.1:26380\" }\n  default: { limit: 1, window: 1s }\n",
        ),
        (
            Format::Toml,
            "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.redis_sentinel]\nmaster = \"main\"\nurls = [\"redis://127.0.0.1:26379\", \"redis://127.0.0.1:26380\"]\n",
        ),
        (
            Format::Json,
            r#"{"tollgate": {"redis_sentinel": {"master": "main", "urls": ["redis://127.0.0.1:26379", "redis://127.0.0.1:26380"]}, "default": {"limit": 1, "window": "1s"}}}"#,
        ),
    ];
    for (format, text) in texts {
        let file = PolicyFile::from_str(text, format, "inline").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(file.storage(), &expected, "{text}");
        assert_eq!(
            file.storage().to_string(),
            "Redis primary \"main\" through Sentinel redis://127.0.0.1:26379, redis://127.0.0.1:26380"
        );
    }
    // Both empty (unset variables) means in memory.
    let file = PolicyFile::from_str(
        "tollgate:\n  redis_sentinel: { master: \"${TGC_UNSET_SENTINEL_NAME:-}\", urls: \"${TGC_UNSET_SENTINEL_URLS:-}\" }\n  default: { limit: 1, window: 1s }\n",
        Format::Yaml,
        "inline",
    )
    .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(file.storage(), &Storage::Memory);
}

#[test]
fn a_sentinel_primary_password_user_and_database_are_read_in_every_format() {
    let expected = Storage::RedisSentinel {
        master: "main".to_owned(),
        urls: vec!["redis://:sentinel-pw@127.0.0.1:26379".to_owned()],
        username: Some("limiter".to_owned()),
        password: Some("s3cret pw".to_owned()),
        db: 2,
    };
    let texts = [
        (
            Format::Yaml,
            "tollgate:\n  redis_sentinel:\n    master: main\n    urls: [\"redis://:sentinel-pw@127.0.0.1:26379\"]\n    username: limiter\n    password: \"${TGC_UNSET_PRIMARY_PASSWORD:-s3cret pw}\"\n    db: 2\n  default: { limit: 1, window: 1s }\n",
        ),
        (
            Format::Toml,
            "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.redis_sentinel]\nmaster = \"main\"\nurls = [\"redis://:sentinel-pw@127.0.0.1:26379\"]\nusername = \"limiter\"\npassword = \"${TGC_UNSET_PRIMARY_PASSWORD:-s3cret pw}\"\ndb = \"2\"\n",
        ),
        (
            Format::Json,
            r#"{"tollgate": {"redis_sentinel": {"master": "main", "urls": ["redis://:sentinel-pw@127.0.0.1:26379"], "username": "limiter", "password": "${TGC_UNSET_PRIMARY_PASSWORD:-s3cret pw}", "db": 2}, "default": {"limit": 1, "window": "1s"}}}"#,
        ),
    ];
    for (format, text) in texts {
        let file = PolicyFile::from_str(text, format, "inline").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(file.storage(), &expected, "{text}");
        let shown = file.storage().to_string();
        assert_eq!(
            shown,
            "Redis primary \"main\" (user \"limiter\", password ***, database 2) through Sentinel \
             redis://:***@127.0.0.1:26379"
        );
        let debug = format!("{:?}", file.storage());
        assert!(
            !debug.contains("s3cret") && !debug.contains("sentinel-pw"),
            "{debug}"
        );
    }
    // An unset password variable means no password.
    let file = PolicyFile::from_str(
        "tollgate:\n  redis_sentinel: { master: main, urls: [redis://127.0.0.1:26379], password: \"${TGC_UNSET_PRIMARY_PASSWORD:-}\" }\n  default: { limit: 1, window: 1s }\n",
        Format::Yaml,
        "inline",
    )
    .unwrap_or_else(|err| panic!("{err}"));
    assert!(
        matches!(
            file.storage(),
            Storage::RedisSentinel {
                password: None,
                db: 0,
                ..
            }
        ),
        "{:?}",
        file.storage()
    );
}
