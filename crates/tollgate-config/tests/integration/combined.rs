//! A resource whose `limits` combine rates with one `strategy: concurrency`
//! limit: read alike in every format, built into a rate limiter and a
//! concurrency limiter (`Limiters::in_flight`), and each mistake named at
//! its line.

use std::time::Duration;

use tollgate::{Policy, Strategy};
use tollgate_config::{Format, PolicyFile};

use crate::support::rejects;

fn rates() -> Policy {
    Policy::compound([
        tollgate::Limit::new(Strategy::TokenBucket, 10, Duration::from_secs(1)).unwrap(),
        tollgate::Limit::new(Strategy::SlidingWindow, 1000, Duration::from_secs(3600)).unwrap(),
    ])
    .unwrap()
}

#[tokio::test]
async fn a_resource_combines_rates_with_a_concurrency_limit_in_every_format() {
    let yaml = "\
tollgate:
  default: { limit: 100, window: 1m }
  resources:
    api:
      limits:
        - { limit: 10, window: 1s, strategy: token_bucket }
        - { strategy: concurrency, limit: 4, ttl: 5m }
        - { limit: 1000, window: 1h }
";
    let toml = r#"
[tollgate]
default = { limit = 100, window = "1m" }
[[tollgate.resources.api.limits]]
limit = 10
window = "1s"
strategy = "token_bucket"
[[tollgate.resources.api.limits]]
strategy = "concurrency"
limit = 4
ttl = "5m"
[[tollgate.resources.api.limits]]
limit = 1000
window = "1h"
"#;
    let json = r#"{"tollgate": {"default": {"limit": 100, "window": "1m"}, "resources": {"api": {
        "limits": [{"limit": 10, "window": "1s", "strategy": "token_bucket"},
                   {"strategy": "concurrency", "limit": 4, "ttl": "5m"},
                   {"limit": 1000, "window": "1h"}]}}}}"#;
    let slots = Policy::new(Strategy::Concurrency, 4, Duration::from_secs(300)).unwrap();
    for (format, text) in [(Format::Yaml, yaml), (Format::Toml, toml), (Format::Json, json)] {
        let file = PolicyFile::from_str(text, format, "policies").unwrap();
        assert_eq!(*file.policy("api"), rates(), "{format}");
        assert_eq!(file.in_flight("api"), Some(&slots), "{format}");
        assert_eq!(file.in_flight("default"), None, "{format}");
        let limiters = file.build().await.unwrap();
        let (limiter, in_flight) = limiters.limiters_of("api");
        assert_eq!(*limiter.policy(), rates(), "{format}");
        assert_eq!(in_flight.map(|l| *l.policy()), Some(slots), "{format}");
        assert!(limiters.in_flight("other").is_none(), "{format}");
    }
}

#[tokio::test]
async fn the_ttl_defaults_to_30s_and_the_limiters_hold_and_decide_apart() {
    let text = "\
tollgate:
  deny_cache: true
  default: { limit: 100, window: 1m }
  resources:
    export:
      limits:
        - { limit: 3, window: 1m, strategy: fixed_window }
        - { strategy: concurrency, limit: 1 }
";
    let file = PolicyFile::from_str(text, Format::Yaml, "policies.yaml").unwrap();
    let slots = Policy::new(Strategy::Concurrency, 1, Duration::from_secs(30)).unwrap();
    assert_eq!(file.in_flight("export"), Some(&slots));
    // The file-wide deny cache is the rates'; the concurrency limit
    // leaves it out, as it does alone.
    let limiters = file.build().await.unwrap();
    let slots = limiters.in_flight("export").unwrap();
    let held = slots.acquire_permit("k", 1).await.unwrap();
    assert!(held.decision().allowed);
    assert!(!slots.acquire_permit("k", 1).await.unwrap().decision().allowed);
    drop(held);
    assert!(slots.acquire_permit("k", 1).await.unwrap().decision().allowed);
    // The rates count apart from the permits: three a minute.
    let rates = limiters.limiter("export");
    for _ in 0..3 {
        assert!(rates.allow("k").await.unwrap().allowed);
    }
    assert!(!rates.allow("k").await.unwrap().allowed);
}

#[test]
fn combination_mistakes_are_named_at_their_line() {
    let head = "tollgate:\n  default: { limit: 100, window: 1m }\n  resources:\n    a:\n      limits:\n";
    let rate = "        - { limit: 10, window: 1s }\n";
    let slots = "        - { strategy: concurrency, limit: 2 }\n";
    let cases = [
        (
            format!("{head}{rate}{slots}        - {{ strategy: concurrency, limit: 3, ttl: 1m }}\n"),
            8,
            "tollgate.resources.a.limits[2]",
            "is a second concurrency limit: limits[1] is one already",
        ),
        (
            format!("{head}{rate}        - {{ strategy: concurrency, limit: 2, window: 1m }}\n"),
            7,
            "tollgate.resources.a.limits[1]",
            "takes `limit` and `ttl`",
        ),
        (
            format!("{head}{slots}        - {{ limit: 10, window: 1s, ttl: 5s }}\n"),
            7,
            "tollgate.resources.a.limits[1]",
            "`ttl` is how long a permit of strategy concurrency lasts",
        ),
        (
            format!("{head}{rate}        - {{ strategy: concurrency, limit: 2, ttl: 0s }}\n"),
            7,
            "tollgate.resources.a.limits[1].ttl",
            "must be longer than zero",
        ),
    ];
    for (text, line, field, message) in cases {
        rejects(Format::Yaml, &text, line, field, message);
    }
}

#[test]
fn the_default_and_a_fallback_take_no_concurrency_limit() {
    let default = "\
tollgate:
  default:
    limits:
      - { limit: 10, window: 1s }
      - { strategy: concurrency, limit: 2 }
";
    let err = PolicyFile::from_str(default, Format::Yaml, "policies.yaml").unwrap_err();
    assert_eq!(err.field(), "tollgate.default.limits", "{err}");
    assert!(err.message().contains("only a resource's `limits`"), "{err}");
    let fallback = "\
tollgate:
  fallback:
    limits:
      - { limit: 10, window: 1s }
      - { strategy: concurrency, limit: 2 }
  default: { limit: 100, window: 1m }
";
    let err = PolicyFile::from_str(fallback, Format::Yaml, "policies.yaml").unwrap_err();
    assert_eq!(err.field(), "tollgate.fallback.limits", "{err}");
    assert!(err.message().contains("only a resource's `limits`"), "{err}");
}

#[test]
fn a_list_of_a_concurrency_limit_alone_is_that_limit() {
    let text = "\
tollgate:
  default: { limit: 100, window: 1m }
  resources:
    a:
      limits:
        - { strategy: concurrency, limit: 2, ttl: 1m }
";
    let file = PolicyFile::from_str(text, Format::Yaml, "policies.yaml").unwrap();
    let alone = Policy::new(Strategy::Concurrency, 2, Duration::from_secs(60)).unwrap();
    assert_eq!(*file.policy("a"), alone);
    assert_eq!(file.in_flight("a"), None);
}
