//! The settings beside the policies (`exempt`, `deny`, `shadow`,
//! `deny_cache`, `top_keys`, `fallback`): read alike in YAML, TOML and JSON, file-wide
//! and per resource, and applied by the limiters built from the file.

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::protection::DenyCache;
use tollgate::protection::Lease;
use tollgate::top::TopKeys;
use tollgate::{FailPolicy, KeyList, Limit, Listed, MemoryBackend, Policy, Strategy};
use tollgate_config::{AnyBackend, Format, PolicyFile, Settings, Target};

const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);

const YAML: &str = r#"
tollgate:
  strategy: token_bucket
  exempt: [10.0.0.0/8, health-checker]
  deny: ["2001:db8::/32"]
  shadow: false
  deny_cache: true
  fallback: { limit: 25, window: 1m }
  default: { limit: 3, window: 1m }
  resources:
    api:
      limit: 2
      window: 1h
      strategy: fixed_window
      shadow: true
      exempt: [ops]
      deny: [203.0.113.9, 12345]
      deny_cache: { capacity: 500, max_key_len: 64 }
      top_keys: { capacity: 50 }
      fallback:
        limits:
          - { limit: 2, window: 1s }
          - { limit: 50, window: 1h, strategy: fixed_window }
    login: { limit: 2, window: 1h, strategy: fixed_window, deny_cache: false, top_keys: false }
"#;

const TOML: &str = r#"
[tollgate]
strategy = "token_bucket"
exempt = ["10.0.0.0/8", "health-checker"]
deny = ["2001:db8::/32"]
shadow = false
deny_cache = true
fallback = { limit = 25, window = "1m" }
default = { limit = 3, window = "1m" }

[tollgate.resources.api]
limit = 2
window = "1h"
strategy = "fixed_window"
shadow = true
exempt = ["ops"]
deny = ["203.0.113.9", 12345]
deny_cache = { capacity = 500, max_key_len = 64 }
top_keys = { capacity = 50 }
fallback = { limits = [{ limit = 2, window = "1s" }, { limit = 50, window = "1h", strategy = "fixed_window" }] }

[tollgate.resources.login]
limit = 2
window = "1h"
strategy = "fixed_window"
deny_cache = false
top_keys = false
"#;

const JSON: &str = r#"{"tollgate": {
  "strategy": "token_bucket",
  "exempt": ["10.0.0.0/8", "health-checker"],
  "deny": ["2001:db8::/32"],
  "shadow": false,
  "deny_cache": true,
  "fallback": {"limit": 25, "window": "1m"},
  "default": {"limit": 3, "window": "1m"},
  "resources": {
    "api": {
      "limit": 2, "window": "1h", "strategy": "fixed_window",
      "shadow": true,
      "exempt": ["ops"],
      "deny": ["203.0.113.9", 12345],
      "deny_cache": {"capacity": 500, "max_key_len": 64},
      "top_keys": {"capacity": 50},
      "fallback": {"limits": [{"limit": 2, "window": "1s"}, {"limit": 50, "window": "1h", "strategy": "fixed_window"}]}
    },
    "login": {"limit": 2, "window": "1h", "strategy": "fixed_window", "deny_cache": false, "top_keys": false}
  }
}}"#;

fn keys(entries: &[&str]) -> KeyList {
    KeyList::parse("test", entries).unwrap()
}

/// The settings the three files give each target, built with the core's
/// types.
fn expected(target: Target<'_>) -> Settings {
    let mut settings = Settings::default();
    settings.exempt = keys(&["10.0.0.0/8", "health-checker"]);
    settings.deny = keys(&["2001:db8::/32"]);
    settings.deny_cache = Some(DenyCache::new());
    settings.fallback = Some(Policy::new(Strategy::TokenBucket, 25, MINUTE).unwrap());
    // Kept unless the file says otherwise.
    settings.top_keys = Some(TopKeys::new());
    match target {
        Target::Resource("api") => {
            settings.shadow = true;
            settings.exempt = keys(&["10.0.0.0/8", "health-checker", "ops"]);
            settings.deny = keys(&["2001:db8::/32", "203.0.113.9", "12345"]);
            settings.deny_cache = Some(DenyCache::new().capacity(500).max_key_len(64));
            settings.top_keys = Some(TopKeys::new().capacity(50));
            settings.fallback = Some(
                Policy::compound([
                    Limit::new(Strategy::TokenBucket, 2, SECOND).unwrap(),
                    Limit::new(Strategy::FixedWindow, 50, HOUR).unwrap(),
                ])
                .unwrap(),
            );
        }
        Target::Resource("login") => {
            settings.deny_cache = None;
            settings.top_keys = None;
        }
        _ => {}
    }
    settings
}

#[test]
fn every_setting_is_read_alike_in_every_format_file_wide_and_per_resource() {
    for (format, text) in [(Format::Yaml, YAML), (Format::Toml, TOML), (Format::Json, JSON)] {
        let file =
            PolicyFile::from_str(text, format, "inline").unwrap_or_else(|err| panic!("{format}: {err}"));
        for target in [
            Target::Default,
            Target::Resource("api"),
            Target::Resource("login"),
            Target::Resource("not-named"),
        ] {
            assert_eq!(file.settings(target), expected(target), "{format}: {target}");
        }
        assert_eq!(file.fail_policy(), FailPolicy::Fallback, "{format}");
        assert!(file.has_settings(), "{format}");
    }
    // A file without them has none, and fails closed as before.
    let plain = PolicyFile::from_str(
        "tollgate:\n  default: { limit: 1, window: 1s }\n",
        Format::Yaml,
        "p.yaml",
    )
    .unwrap();
    assert!(!plain.has_settings());
    // Top keys are kept unless the file turns them off: they change no
    // decision.
    let mut kept = Settings::default();
    kept.top_keys = Some(TopKeys::new());
    assert_eq!(plain.settings(Target::Default), kept);
    assert_eq!(plain.fail_policy(), FailPolicy::Closed);
}

#[test]
fn a_remote_store_caches_denials_unless_the_file_says_not_to() {
    let file = |storage: &str, cache: &str, login: &str| {
        let text = format!(
            "tollgate:\n{storage}{cache}  default: {{ limit: 1, window: 1s }}\n  resources:\n    login: {{ limit: 1, window: 1s{login} }}\n"
        );
        PolicyFile::from_str(&text, Format::Yaml, "p.yaml").unwrap()
    };
    let cache = |file: &PolicyFile, target| file.settings(target).deny_cache;
    for storage in [
        "  redis_url: redis://127.0.0.1:1\n",
        "  redis_cluster: [redis://127.0.0.1:1]\n",
        "  redis_sentinel: { master: m, urls: [redis://127.0.0.1:1] }\n",
    ] {
        let on = file(storage, "", "");
        assert_eq!(cache(&on, Target::Default), Some(DenyCache::new()), "{storage}");
        assert_eq!(
            cache(&on, Target::Resource("login")),
            Some(DenyCache::new()),
            "{storage}"
        );
        let off = file(storage, "  deny_cache: false\n", "");
        assert_eq!(cache(&off, Target::Default), None, "{storage}");
        assert_eq!(cache(&off, Target::Resource("login")), None, "{storage}");
        let one_off = file(storage, "", ", deny_cache: false");
        assert_eq!(
            cache(&one_off, Target::Default),
            Some(DenyCache::new()),
            "{storage}"
        );
        assert_eq!(cache(&one_off, Target::Resource("login")), None, "{storage}");
        let sized = file(storage, "  deny_cache: { capacity: 7 }\n", "");
        assert_eq!(
            cache(&sized, Target::Default),
            Some(DenyCache::new().capacity(7)),
            "{storage}"
        );
    }
    // In memory the store never fails nor costs a round trip: no cache
    // unless asked for.
    assert_eq!(cache(&file("", "", ""), Target::Default), None);
}

#[test]
fn deny_cache_accepts_text_and_a_partial_map() {
    for (value, cache) in [
        ("\"true\"", Some(DenyCache::new())),
        ("\"false\"", None),
        ("{}", Some(DenyCache::new())),
        ("{ capacity: 7 }", Some(DenyCache::new().capacity(7))),
        ("{ max_key_len: \"32\" }", Some(DenyCache::new().max_key_len(32))),
    ] {
        let text = format!("tollgate:\n  deny_cache: {value}\n  default: {{ limit: 1, window: 1s }}\n");
        let file = PolicyFile::from_str(&text, Format::Yaml, "p.yaml").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(file.settings(Target::Default).deny_cache, cache, "{value}");
    }
}

#[test]
fn list_entries_are_expanded_from_the_environment() {
    std::env::set_var("TGC_ADMIN_NET", "192.0.2.0/24");
    let file = PolicyFile::from_str(
        "tollgate:\n  exempt: [\"${TGC_ADMIN_NET}\", \"${TGC_UNSET_KEY:-fallback-key}\"]\n  default: { limit: 1, window: 1s }\n",
        Format::Yaml,
        "p.yaml",
    )
    .unwrap();
    assert_eq!(
        file.settings(Target::Default).exempt,
        keys(&["192.0.2.0/24", "fallback-key"])
    );
}

/// The limiter of [`YAML`] on a manual clock.
fn limiter() -> tollgate::Limiters<AnyBackend> {
    let file = PolicyFile::from_str(YAML, Format::Yaml, "p.yaml").unwrap();
    let backend =
        AnyBackend::from(MemoryBackend::new().clock(ManualClock::new(Duration::from_secs(1_000_000))));
    file.limiters_builder(backend).build().unwrap()
}

#[tokio::test]
async fn exempt_keys_are_allowed_without_counting_everywhere() {
    let limiter = limiter();
    // File-wide: under the default policy and every resource.
    for resource in ["", "login", "api", "elsewhere"] {
        for _ in 0..10 {
            let d = limiter.limiter(resource).allow("10.1.2.3").await.unwrap();
            assert_eq!((d.allowed, d.listed), (true, Some(Listed::Exempt)), "{resource}");
        }
    }
    // `ops` only under api, which adds it: login counts it.
    assert_eq!(
        limiter.limiter("api").allow("ops").await.unwrap().listed,
        Some(Listed::Exempt)
    );
    for expected in [true, true, false] {
        let d = limiter.limiter("login").allow("ops").await.unwrap();
        assert_eq!((d.allowed, d.listed), (expected, None));
    }
}

#[tokio::test]
async fn denied_keys_are_denied_file_wide_and_per_resource() {
    let limiter = limiter();
    for (resource, key, denied) in [
        ("", "2001:db8::7", true),
        ("login", "2001:db8:1::1", true),
        ("api", "2001:db8::7", true),
        ("api", "203.0.113.9", true),
        ("api", "12345", true),
        // api's own entries are not the default's or login's.
        ("", "203.0.113.9", false),
        ("login", "12345", false),
    ] {
        let d = limiter.limiter(resource).allow(key).await.unwrap();
        let listed = denied.then_some(Listed::Denied);
        // api is in shadow mode: a listed key is allowed and marked too.
        let shadow = resource == "api";
        assert_eq!(
            (d.allowed, d.listed, d.shadow_denied),
            (!denied || shadow, listed, denied && shadow),
            "{resource} {key}"
        );
    }
}

#[tokio::test]
async fn shadow_mode_allows_what_enforcement_would_deny_and_marks_it() {
    let limiter = limiter();
    // api: 2 per hour, in shadow mode.
    for n in 1..=4 {
        let d = limiter.limiter("api").allow("k").await.unwrap();
        assert!(d.allowed);
        assert_eq!(d.shadow_denied, n > 2, "request {n}");
    }
    // login enforces the same policy.
    let mut allowed = Vec::new();
    for _ in 0..3 {
        allowed.push(limiter.limiter("login").allow("k").await.unwrap().allowed);
    }
    assert_eq!(allowed, [true, true, false]);
    assert!(limiter.limiter("api").is_shadow());
    assert!(!limiter.limiter("login").is_shadow() && !limiter.limiter("").is_shadow());
}

#[tokio::test]
async fn a_fallback_gives_every_limiter_the_fail_policy_fallback() {
    let limiter = limiter();
    assert_eq!(limiter.limiter("").fail_policy(), FailPolicy::Fallback);
    assert_eq!(limiter.limiter("api").fail_policy(), FailPolicy::Fallback);
    // `fail_open: false` beside a fallback changes nothing.
    let file = PolicyFile::from_str(
        "tollgate:\n  fail_open: false\n  fallback: { limit: 1, window: 1s }\n  default: { limit: 1, window: 1s }\n",
        Format::Yaml,
        "p.yaml",
    )
    .unwrap();
    assert_eq!(file.fail_policy(), FailPolicy::Fallback);
}

#[test]
fn lease_is_off_unless_given_and_a_resource_replaces_the_file_wide_one() {
    let text = "tollgate:\n  lease: { max_units: 32 }\n  default: { limit: 1, window: 1s }\n  resources:\n    login: { limit: 1, window: 1s, lease: false }\n    search: { limit: 1, window: 1s, lease: { max_age: 250ms } }\n    api: { limit: 1, window: 1s }\n";
    let file = PolicyFile::from_str(text, Format::Yaml, "p.yaml").unwrap_or_else(|err| panic!("{err}"));
    let lease = |target| file.settings(target).lease;
    let wide = Some(Lease::new(32, Duration::from_millis(100)));
    assert_eq!(lease(Target::Default), wide);
    assert_eq!(lease(Target::Resource("api")), wide, "the file-wide lease");
    assert_eq!(lease(Target::Resource("login")), None);
    assert_eq!(
        lease(Target::Resource("search")),
        Some(Lease::new(64, Duration::from_millis(250))),
        "a resource's map starts from the defaults"
    );
    let none = PolicyFile::from_str(
        "tollgate:\n  default: { limit: 1, window: 1s }\n",
        Format::Yaml,
        "p.yaml",
    )
    .unwrap();
    assert_eq!(none.settings(Target::Default).lease, None, "off by default");
    let on = PolicyFile::from_str(
        "[tollgate]\nlease = true\ndefault = { limit = 1, window = \"1s\" }\n",
        Format::Toml,
        "p.toml",
    )
    .unwrap();
    assert_eq!(on.settings(Target::Default).lease, Some(Lease::default()));
}

/// `charge: always` on a resource (or file-wide) makes its limiter charge
/// every request, admitted or not; `admitted` and the default do not.
#[test]
fn charge_always_makes_a_resource_count_every_report() {
    use tollgate::Charge;
    let yaml = "
tollgate:
  charge: always
  default: { limit: 10, window: 1h }
  resources:
    tokens: { limit: 100, window: 1h, strategy: fixed_window }
    requests: { limit: 2, window: 1h, charge: admitted }
";
    for (format, text) in [
        (Format::Yaml, yaml.to_owned()),
        (
            Format::Toml,
            "[tollgate]\ncharge = \"always\"\ndefault = { limit = 10, window = \"1h\" }\n\
             [tollgate.resources.tokens]\nlimit = 100\nwindow = \"1h\"\nstrategy = \"fixed_window\"\n\
             [tollgate.resources.requests]\nlimit = 2\nwindow = \"1h\"\ncharge = \"admitted\"\n"
                .to_owned(),
        ),
        (
            Format::Json,
            r#"{"tollgate": {"charge": "always", "default": {"limit": 10, "window": "1h"},
               "resources": {"tokens": {"limit": 100, "window": "1h", "strategy": "fixed_window"},
                             "requests": {"limit": 2, "window": "1h", "charge": "admitted"}}}}"#
                .to_owned(),
        ),
    ] {
        let file = PolicyFile::from_str(&text, format, "charge").unwrap();
        assert_eq!(
            file.settings(Target::Resource("tokens")).charge,
            Charge::Always,
            "{format:?}"
        );
        assert_eq!(
            file.settings(Target::Resource("requests")).charge,
            Charge::Admitted,
            "{format:?}"
        );
        assert_eq!(
            file.settings(Target::Default).charge,
            Charge::Always,
            "{format:?}"
        );
        let limiters = file.limiters_builder(MemoryBackend::new()).build().unwrap();
        let tokens = limiters.limiter("tokens");
        assert_eq!(tokens.charges(), Charge::Always);
        // 70 tokens fit; 50 more do not, and are charged all the same.
        assert!(tokens.check_n("tenant", 70).allowed);
        assert!(!tokens.check_n("tenant", 50).allowed);
        assert!(!tokens.check_n("tenant", 0).allowed, "120 of 100 used");
        let requests = limiters.limiter("requests");
        assert_eq!(requests.charges(), Charge::Admitted);
        assert!(requests.check_n("tenant", 2).allowed);
        assert!(!requests.check_n("tenant", 5).allowed);
        assert!(!requests.check_n("tenant", 1).allowed);
        assert_eq!(requests.check_n("tenant", 0).remaining, 0);
    }
}
