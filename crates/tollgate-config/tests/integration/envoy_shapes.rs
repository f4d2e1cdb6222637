//! Envoy files in every shape envoyproxy/ratelimit's README shows (the
//! configurations are written here, one per shape): each loads, and
//! matches and keys descriptors as envoyproxy/ratelimit does. The parity
//! table in docs/service.md names what is read differently.

use tollgate::Charge;
use tollgate_config::envoy::{descriptor_key, Domain, EnvoyFile, RateLimit, Unit};
use tollgate_config::PolicySet;

/// The rule and key of a descriptor of `entries` under the domain of the
/// file `text`.
async fn domain_of(text: &str) -> (tempfile::TempDir, PolicySet) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rl.yaml");
    std::fs::write(&path, text).unwrap();
    let set = PolicySet::load(&[&path])
        .await
        .unwrap_or_else(|err| panic!("{err}\n{text}"));
    (dir, set)
}

fn only_domain(set: &PolicySet) -> &Domain {
    let mut domains = set.domains();
    let (_, domain) = domains.next().expect("one domain");
    domain
}

fn per_unit(domain: &Domain, entries: &[(&str, &str)]) -> Option<(Unit, u32)> {
    match domain.find(entries.iter().copied())?.rule().limit {
        RateLimit::PerUnit { unit, requests, .. } => Some((unit, requests)),
        RateLimit::Unlimited => None,
    }
}

#[tokio::test]
async fn limits_by_value_and_nested_lists_match_the_full_depth() {
    // Two values of one key (README example 1), a nested list under a
    // placeholder and a key without a value (example 2), a value more
    // specific than its key (example 3), and the depth of a request
    // (example 4).
    let (_dir, set) = domain_of(
        "domain: shapes
descriptors:
  - key: database
    value: users
    rate_limit: { unit: second, requests_per_unit: 500 }
  - key: database
    value: default
    rate_limit: { unit: second, requests_per_unit: 400 }
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: { unit: day, requests_per_unit: 5 }
  - key: to_number
    rate_limit: { unit: day, requests_per_unit: 100 }
  - key: remote_address
    rate_limit: { unit: second, requests_per_unit: 10 }
  - key: remote_address
    value: 50.0.0.5
    rate_limit: { unit: second, requests_per_unit: 0 }
  - key: key
    value: value
    rate_limit: { unit: second, requests_per_unit: 300 }
",
    )
    .await;
    let d = only_domain(&set);
    assert_eq!(per_unit(d, &[("database", "users")]), Some((Unit::Second, 500)));
    assert_eq!(per_unit(d, &[("database", "default")]), Some((Unit::Second, 400)));
    assert_eq!(per_unit(d, &[("database", "other")]), None);
    assert!(d.find([("database", "other")]).is_none());
    assert_eq!(
        per_unit(d, &[("message_type", "marketing"), ("to_number", "2061111111")]),
        Some((Unit::Day, 5))
    );
    assert_eq!(
        per_unit(d, &[("to_number", "2061111111")]),
        Some((Unit::Day, 100))
    );
    assert_eq!(
        per_unit(d, &[("remote_address", "50.0.0.1")]),
        Some((Unit::Second, 10))
    );
    assert_eq!(
        per_unit(d, &[("remote_address", "50.0.0.5")]),
        Some((Unit::Second, 0))
    );
    assert!(
        d.find([("key", "value"), ("subkey", "subvalue")]).is_none(),
        "deeper than configured"
    );
}

#[tokio::test]
async fn unlimited_shadow_replaces_and_detailed_metrics_load() {
    // An unlimited key (example 5), shadow mode (example 6), a limit that
    // replaces another (example 7), detailed metrics (example 8).
    let (_dir, set) = domain_of(
        "domain: shapes
descriptors:
  - key: user
    value: internal
    rate_limit: { unlimited: true }
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit: { requests_per_unit: 10, unit: second }
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit: { requests_per_unit: 20, unit: second }
  - key: category
    value: account
    rate_limit: { name: category_account, unit: minute, requests_per_unit: 10 }
  - key: path
    value: /account/read
    rate_limit:
      unit: minute
      requests_per_unit: 100
      replaces:
        - name: category_account
  - key: source_cluster
    detailed_metric: true
    descriptors:
      - key: destination_cluster
        rate_limit: { unit: hour, requests_per_unit: 1000 }
",
    )
    .await;
    let d = only_domain(&set);
    assert!(matches!(
        d.find([("user", "internal")]).unwrap().rule().limit,
        RateLimit::Unlimited
    ));
    let shadow = d.find([("service", "auth"), ("user", "user-a")]).unwrap().rule();
    assert!(shadow.shadow);
    assert!(
        !d.find([("service", "auth"), ("user", "user-b")])
            .unwrap()
            .rule()
            .shadow
    );
    let replacing = d.find([("path", "/account/read")]).unwrap().rule();
    assert_eq!(replacing.replaces, ["category_account"]);
    assert!(d
        .find([("source_cluster", "a"), ("destination_cluster", "b")])
        .is_some());
}

#[tokio::test]
async fn wildcards_share_thresholds_and_per_value_metrics_load() {
    // Wildcards trailing, in the middle and several (example 9), values
    // in metrics (example 10, read without effect: see the table), shared
    // thresholds (example 11), quota mode and metadata.
    let (_dir, set) = domain_of(
        "domain: shapes
descriptors:
  - key: user
    value: alice*
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: path
    value: /api/*/users
    rate_limit: { unit: minute, requests_per_unit: 6 }
  - key: path
    value: /v*/items/*
    rate_limit: { unit: minute, requests_per_unit: 7 }
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        value_to_metric: true
        rate_limit: { unit: minute, requests_per_unit: 8 }
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: { unit: hour, requests_per_unit: 10 }
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit: { unit: hour, requests_per_unit: 10 }
  - key: api
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: { unit: minute, requests_per_unit: 60 }
  - key: plan
    value: gold
    quota_mode: true
    metadata: { tier: gold, owner: { team: billing } }
    rate_limit: { unit: day, requests_per_unit: 1000 }
",
    )
    .await;
    let d = only_domain(&set);
    assert_eq!(per_unit(d, &[("user", "alice-1")]), Some((Unit::Minute, 5)));
    assert_eq!(per_unit(d, &[("path", "/api/v2/users")]), Some((Unit::Minute, 6)));
    assert_eq!(
        per_unit(d, &[("path", "/api/users")]),
        None,
        "the parts need their own characters"
    );
    assert_eq!(per_unit(d, &[("path", "/v1/items/42")]), Some((Unit::Minute, 7)));
    assert_eq!(
        per_unit(d, &[("route", "r"), ("method", "GET")]),
        Some((Unit::Minute, 8))
    );
    let key = |entries: &[(&str, &str)]| d.find_keyed(entries.iter().copied()).unwrap().1;
    assert_eq!(key(&[("files", "files/a.pdf")]), key(&[("files", "files/b.csv")]));
    assert_eq!(key(&[("files", "files/a.pdf")]), descriptor_key(["files/*"]));
    assert_ne!(
        key(&[("files_no_share", "files_no_share/a.pdf")]),
        key(&[("files_no_share", "files_no_share/b.csv")])
    );
    assert_eq!(
        key(&[("api", "api/v1"), ("method", "GET")]),
        descriptor_key(["api/*", "GET"]),
        "a shared wildcard above the limit's level stands for its values too"
    );
    let quota = d.find([("plan", "gold")]).unwrap().rule();
    assert!(quota.quota);
    assert_eq!(quota.charge, Charge::Admitted);
}

#[test]
fn what_envoyproxy_ratelimit_refuses_is_refused_with_the_reason() {
    for (text, message) in [
        (
            "domain: d\ndescriptors:\n  - key: a\n    value: plain\n    share_threshold: true\n    rate_limit: { unit: second, requests_per_unit: 1 }\n",
            "descriptors[0].share_threshold: is given on a descriptor whose value has no `*`",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unlimited: true, unit: second }\n",
            "an unlimited rate limit takes no unit",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n",
            "\"fortnight\" is not a unit",
        ),
    ] {
        let err = EnvoyFile::parse(text, "rl.yaml").unwrap_err().to_string();
        assert!(err.contains(message), "{err}");
    }
}
