//! `strategy: concurrency` in policy files: `limit` and `ttl` (30 s unless
//! given) read alike in every format, limiters that hold permits, and each
//! mistake named at its line.

use std::time::Duration;

use tollgate::{Error, Policy, Strategy};
use tollgate_config::{Format, PolicyFile};

use crate::support::rejects;

#[tokio::test]
async fn a_concurrency_policy_holds_permits_for_its_ttl() {
    let yaml = "\
tollgate:
  default: { limit: 100, window: 1m }
  resources:
    exports: { strategy: concurrency, limit: 2 }
    streams: { strategy: concurrency, limit: 4, ttl: 5m }
";
    let toml = r#"
[tollgate]
default = { limit = 100, window = "1m" }
[tollgate.resources.exports]
strategy = "concurrency"
limit = 2
[tollgate.resources.streams]
strategy = "concurrency"
limit = 4
ttl = "5m"
"#;
    let json = r#"{"tollgate": {"default": {"limit": 100, "window": "1m"}, "resources": {
        "exports": {"strategy": "concurrency", "limit": 2},
        "streams": {"strategy": "concurrency", "limit": 4, "ttl": "5m"}}}}"#;
    let exports = Policy::new(Strategy::Concurrency, 2, Duration::from_secs(30)).unwrap();
    let streams = Policy::new(Strategy::Concurrency, 4, Duration::from_secs(300)).unwrap();
    for (format, text) in [(Format::Yaml, yaml), (Format::Toml, toml), (Format::Json, json)] {
        let file = PolicyFile::from_str(text, format, "policies").unwrap();
        let limiters = file.build().await.unwrap();
        assert_eq!(*limiters.limiter("exports").policy(), exports, "{format}");
        assert_eq!(*limiters.limiter("streams").policy(), streams, "{format}");
    }
    let file = PolicyFile::from_str(yaml, Format::Yaml, "policies.yaml").unwrap();
    let limiters = file.build().await.unwrap();
    let exports = limiters.limiter("exports");
    let first = exports.acquire_permit("tenant", 1).await.unwrap();
    let second = exports.acquire_permit("tenant", 1).await.unwrap();
    let third = exports.acquire_permit("tenant", 1).await.unwrap();
    assert!(first.decision().allowed && second.decision().allowed && !third.decision().allowed);
    assert!(third
        .decision()
        .retry_after
        .is_some_and(|r| r <= Duration::from_secs(30)));
    assert_eq!(first.expires_in(), Some(Duration::from_secs(30)));
    drop(first);
    assert!(
        exports
            .acquire_permit("tenant", 1)
            .await
            .unwrap()
            .decision()
            .allowed
    );
    let Err(Error::Config(err)) = limiters.limiter("default").acquire_permit("k", 1).await else {
        panic!("a rate limit held a permit");
    };
    assert_eq!(err.field(), "strategy");
}

#[test]
fn concurrency_mistakes_are_named_where_they_are() {
    let head = "tollgate:\n  default: { limit: 100, window: 1m }\n  resources:\n";
    let cases = [
        (
            "    a: { strategy: concurrency, limit: 2, window: 1m }\n",
            "tollgate.resources.a",
            "takes `limit` and `ttl`",
        ),
        (
            "    a: { limit: 2, window: 1m, ttl: 10s }\n",
            "tollgate.resources.a",
            "`ttl` is how long a permit of strategy concurrency lasts",
        ),
        (
            "    a: { strategy: concurrency, limit: 2, ttl: 0s }\n",
            "tollgate.resources.a.ttl",
            "must be longer than zero",
        ),
    ];
    for (resource, field, message) in cases {
        let text = format!("{head}{resource}");
        let err = PolicyFile::from_str(&text, Format::Yaml, "policies.yaml").unwrap_err();
        assert_eq!(err.field(), field, "{text}\n{err}");
        assert!(err.message().contains(message), "{text}\n{err}");
    }
    rejects(
        Format::Yaml,
        "tollgate:\n  strategy: concurrency\n  default: { limit: 1, window: 1s }\n",
        2,
        "tollgate.strategy",
        "cannot be every policy's strategy",
    );
}

#[tokio::test]
async fn a_deny_cache_on_a_concurrency_policy_is_refused_naming_it() {
    let text = "\
tollgate:
  default: { limit: 100, window: 1m }
  resources:
    exports: { strategy: concurrency, limit: 2, deny_cache: true }
";
    let built = match PolicyFile::from_str(text, Format::Yaml, "policies.yaml") {
        Ok(file) => file.build().await.map(|_| ()).map_err(|e| e.to_string()),
        Err(err) => Err(err.to_string()),
    };
    let err = built.unwrap_err();
    assert!(err.contains("deny_cache") && err.contains("concurrency"), "{err}");
}

#[tokio::test]
async fn file_wide_rate_settings_leave_a_concurrency_policy_out() {
    let text = "\
tollgate:
  deny_cache: true
  charge: always
  default: { limit: 100, window: 1m }
  resources:
    exports: { strategy: concurrency, limit: 1 }
";
    let file = PolicyFile::from_str(text, Format::Yaml, "policies.yaml").unwrap();
    let limiters = file.build().await.unwrap();
    let exports = limiters.limiter("exports");
    assert_eq!(exports.charges(), tollgate::Charge::Admitted);
    let held = exports.acquire_permit("k", 1).await.unwrap();
    assert!(!exports.acquire_permit("k", 1).await.unwrap().decision().allowed);
    drop(held);
    // No cached denial outlives the release.
    assert!(exports.acquire_permit("k", 1).await.unwrap().decision().allowed);
}
