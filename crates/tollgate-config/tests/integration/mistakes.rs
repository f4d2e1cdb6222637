//! Every kind of mistake, in every format where it can be made, is reported
//! with the file, the line, the field path and what is wrong.

use tollgate_config::{ConfigFileError, ErrorKind, Format, PolicyFile};

use crate::support::rejects;

#[test]
fn display_matches_the_documented_form() {
    let yaml = "tollgate:\n  strategy: sliding_window\n  fail_open: false\n  key_prefix: tollgate\n  default:  { limit: 100, window: 1m }\n  resources:\n    login:  { limit: 5,  window: 1 mnute }\n";
    let err = PolicyFile::from_str(yaml, Format::Yaml, "policies.yaml").unwrap_err();
    assert_eq!(
        err.to_string(),
        "policies.yaml:7: tollgate.resources.login.window: \"1 mnute\" is not a duration (unknown time \
         unit \"mnute\", supported units: ns, us/µs, ms, sec, min, hours, days, weeks, months, years \
         (and few variations))"
    );
    assert_eq!(err.column(), Some(34));
}

#[test]
fn malformed_syntax() {
    rejects(
        Format::Yaml,
        "tollgate:\n  default: { limit: 1, window: 1s }\n resources:\n",
        3,
        "",
        "did not find expected key",
    );
    rejects(
        Format::Yaml,
        "tollgate:\n  default: { limit: 1, window: \"1s }\n",
        2,
        "tollgate.default",
        "unclosed quote",
    );
    rejects(
        Format::Toml,
        "[tollgate]\ndefault = { limit = 100, window = \"1m\"\n",
        2,
        "",
        "unclosed inline table",
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\n  \"default\": {\"limit\": 100 \"window\": \"1m\"}}}",
        2,
        "tollgate.default",
        "expected `,` or `}`",
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"}}}\n}",
        2,
        "",
        "trailing characters",
    );
}

#[test]
fn unknown_fields_list_the_expected_ones() {
    let cases = [
        (
            Format::Yaml,
            "tollgate:\n  default: { limit: 100, window: 1m }\n  resources:\n    login:\n      limit: 5\n      windw: 1m\n",
            6,
        ),
        (
            Format::Toml,
            "[tollgate]\ndefault = { limit = 100, window = \"1m\" }\n[tollgate.resources.login]\nlimit = 5\nwindw = \"1m\"\n",
            5,
        ),
        (
            Format::Json,
            "{\"tollgate\": {\n  \"default\": {\"limit\": 100, \"window\": \"1m\"},\n  \"resources\": {\n    \"login\": {\"limit\": 5,\n      \"windw\": \"1m\"}}}}",
            5,
        ),
    ];
    for (format, text, line) in cases {
        let err = rejects(
            format,
            text,
            line,
            "tollgate.resources.login.windw",
            "unknown field `windw`",
        );
        for expected in ["limit", "window", "strategy"] {
            assert!(err.message().contains(expected), "{err}");
        }
    }
    let cases = [
        (
            Format::Yaml,
            "tollgate:\n  default: { limit: 1, window: 1s }\n  redis: x\n",
            3,
        ),
        (
            Format::Toml,
            "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\nredis = \"x\"\n",
            3,
        ),
        (
            Format::Json,
            "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"redis\": \"x\"}}",
            2,
        ),
    ];
    for (format, text, line) in cases {
        let err = rejects(format, text, line, "tollgate.redis", "unknown field `redis`");
        for expected in [
            "redis_url",
            "redis_cluster",
            "fail_open",
            "key_prefix",
            "resources",
        ] {
            assert!(err.message().contains(expected), "{err}");
        }
    }
    rejects(
        Format::Yaml,
        "tollgate:\n  default: { limit: 1, window: 1s }\nlimits: {}\n",
        3,
        "limits",
        "expected one of tollgate",
    );
    rejects(
        Format::Toml,
        "[limits]\n[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n",
        1,
        "limits",
        "`tollgate`",
    );
    rejects(Format::Json, "{\"limits\": {}}", 1, "limits", "`tollgate`");
}

#[test]
fn durations_must_be_durations() {
    let message = "\"1 mnute\" is not a duration (unknown time unit \"mnute\"";
    rejects(
        Format::Yaml,
        "tollgate:\n  default: { limit: 100, window: 1m }\n  resources:\n    login:\n      limit: 5\n      window: 1 mnute\n",
        6,
        "tollgate.resources.login.window",
        message,
    );
    rejects(
        Format::Toml,
        "[tollgate]\ndefault = { limit = 100, window = \"1m\" }\n[tollgate.resources.login]\nlimit = 5\nwindow = \"1 mnute\"\n",
        5,
        "tollgate.resources.login.window",
        message,
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\n  \"default\": {\"limit\": 100, \"window\": \"1m\"},\n  \"resources\": {\n    \"login\": {\"limit\": 5,\n      \"window\": \"1 mnute\"}}}}",
        5,
        "tollgate.resources.login.window",
        message,
    );
}

#[test]
fn a_limit_of_zero_is_invalid() {
    let message = "must be at least 1";
    rejects(
        Format::Yaml,
        "tollgate:\n  default:\n    limit: 0\n    window: 1m\n",
        3,
        "tollgate.default.limit",
        message,
    );
    rejects(
        Format::Toml,
        "[tollgate.default]\nlimit = 0\nwindow = \"1m\"\n",
        2,
        "tollgate.default.limit",
        message,
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\"default\": {\n\"limit\": 0, \"window\": \"1m\"}}}",
        2,
        "tollgate.default.limit",
        message,
    );
}

#[test]
fn a_window_of_zero_is_invalid() {
    let message = "must be longer than zero";
    let field = "tollgate.resources.a.window";
    rejects(
        Format::Yaml,
        "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    a: { limit: 1, window: 0s }\n",
        4,
        field,
        message,
    );
    rejects(Format::Toml, "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n\n[tollgate.resources]\na = { limit = 1, window = \"0ms\" }\n", 5, field, message);
    rejects(Format::Json, "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"resources\": {\"a\": {\"limit\": 1, \"window\": \"0s\"}}}}", 2, field, message);
}

#[test]
fn a_window_beyond_a_hundred_years_is_invalid() {
    let message = "exceeds the maximum of 3153600000s (100 years)";
    rejects(
        Format::Yaml,
        "tollgate:\n  default: { limit: 1, window: 200y }\n",
        2,
        "tollgate.default.window",
        message,
    );
    rejects(
        Format::Toml,
        "[tollgate]\ndefault = { limit = 1, window = \"101years\" }\n",
        2,
        "tollgate.default.window",
        message,
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"200y\"}}}",
        1,
        "tollgate.default.window",
        message,
    );
    // Shorter than the shared 1µs resolution.
    rejects(
        Format::Yaml,
        "tollgate:\n  default: { limit: 1, window: 10ns }\n",
        2,
        "tollgate.default.window",
        "1µs resolution",
    );
}

#[test]
fn unknown_strategies_list_the_known_ones() {
    let message = "unknown strategy \"sliding\": expected one of fixed_window, sliding_window, token_bucket, leaky_bucket";
    rejects(
        Format::Yaml,
        "tollgate:\n  strategy: sliding\n  default: { limit: 1, window: 1s }\n",
        2,
        "tollgate.strategy",
        message,
    );
    rejects(
        Format::Toml,
        "[tollgate]\nstrategy = \"sliding\"\ndefault = { limit = 1, window = \"1s\" }\n",
        2,
        "tollgate.strategy",
        message,
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\n\"strategy\": \"sliding\",\n\"default\": {\"limit\": 1, \"window\": \"1s\"}}}",
        2,
        "tollgate.strategy",
        message,
    );
    let field = "tollgate.resources.login.strategy";
    rejects(Format::Yaml, "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    login: { limit: 1, window: 1s, strategy: sliding }\n", 4, field, message);
    rejects(Format::Toml, "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.resources.login]\nlimit = 1\nwindow = \"1s\"\nstrategy = \"sliding\"\n", 6, field, message);
    rejects(Format::Json, "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"resources\": {\"login\": {\"limit\": 1, \"window\": \"1s\",\n\"strategy\": \"sliding\"}}}}", 3, field, message);
}

#[test]
fn resource_names_must_not_be_empty() {
    let message = "a resource name must not be empty";
    let field = "tollgate.resources.\"\"";
    rejects(Format::Yaml, "tollgate:\n  default: { limit: 100, window: 1m }\n  resources:\n    \"\": { limit: 5, window: 1m }\n", 4, field, message);
    rejects(Format::Toml, "[tollgate]\ndefault = { limit = 100, window = \"1m\" }\n[tollgate.resources.\"\"]\nlimit = 5\nwindow = \"1m\"\n", 3, field, message);
    rejects(Format::Json, "{\"tollgate\": {\n\"default\": {\"limit\": 100, \"window\": \"1m\"},\n\"resources\": {\n\"\": {\"limit\": 5, \"window\": \"1m\"}}}}", 4, field, message);
}

#[test]
fn resources_must_be_defined_once() {
    let field = "tollgate.resources.a";
    rejects(Format::Yaml, "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    a: { limit: 5, window: 1m }\n    a: { limit: 6, window: 1m }\n", 5, field, "this resource is defined twice");
    rejects(Format::Json, "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"}, \"resources\": {\n\"a\": {\"limit\": 5, \"window\": \"1m\"},\n\"a\": {\"limit\": 6, \"window\": \"1m\"}}}}", 3, field, "this resource is defined twice");
    // TOML itself forbids a table defined twice.
    rejects(Format::Toml, "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.resources.a]\nlimit = 1\nwindow = \"1s\"\n[tollgate.resources.a]\nlimit = 2\nwindow = \"1s\"\n", 6, "", "duplicate key");
}

#[test]
fn fields_must_be_given_once() {
    rejects(
        Format::Yaml,
        "tollgate:\n  default: { limit: 1, window: 1s }\n  fail_open: true\n  fail_open: false\n",
        4,
        "tollgate.fail_open",
        "is given twice",
    );
    rejects(
        Format::Yaml,
        "tollgate:\n  default: { limit: 1, window: 1s, limit: 2 }\n",
        2,
        "tollgate.default.limit",
        "is given twice",
    );
    rejects(Format::Json, "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"default\": {\"limit\": 1, \"window\": \"1s\"}}}", 2, "tollgate.default", "is given twice");
    rejects(
        Format::Toml,
        "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\nfail_open = true\nfail_open = false\n",
        4,
        "",
        "duplicate key",
    );
}

#[test]
fn the_default_policy_is_required() {
    let message = "is required: the policy of every resource without its own";
    rejects(
        Format::Yaml,
        "tollgate:\n  resources:\n    login: { limit: 5, window: 1m }\n",
        2,
        "tollgate.default",
        message,
    );
    rejects(
        Format::Toml,
        "[tollgate.resources.login]\nlimit = 5\nwindow = \"1m\"\n",
        1,
        "tollgate.default",
        message,
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\n\"resources\": {\"login\": {\"limit\": 5, \"window\": \"1m\"}}\n}}",
        3,
        "tollgate.default",
        message,
    );
    // And so are a policy's limit and window, and the section itself.
    rejects(
        Format::Yaml,
        "tollgate:\n  default:\n    limit: 5\n",
        3,
        "tollgate.default.window",
        "is required",
    );
    rejects(
        Format::Toml,
        "[tollgate]\ndefault = { window = \"1m\" }\n",
        2,
        "tollgate.default.limit",
        "is required",
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\"default\": {\"window\": \"1m\"}}}",
        1,
        "tollgate.default.limit",
        "is required",
    );
    rejects(
        Format::Yaml,
        "# nothing else\ntollgate2: {}\n",
        2,
        "tollgate2",
        "unknown field",
    );
    rejects(
        Format::Toml,
        "# nothing\n",
        1,
        "tollgate",
        "top-level `tollgate` key",
    );
    rejects(Format::Json, "{}", 1, "tollgate", "top-level `tollgate` key");
}

#[test]
fn values_of_the_wrong_type() {
    // A limit that is not a whole number.
    let message = "\"five\" is not a whole number of requests";
    rejects(
        Format::Yaml,
        "tollgate:\n  default: { limit: five, window: 1m }\n",
        2,
        "tollgate.default.limit",
        message,
    );
    rejects(
        Format::Toml,
        "[tollgate]\ndefault = { limit = \"five\", window = \"1m\" }\n",
        2,
        "tollgate.default.limit",
        message,
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\"default\": {\"limit\": \"five\", \"window\": \"1m\"}}}",
        1,
        "tollgate.default.limit",
        message,
    );
    let message = "expected a whole number of requests, at least 1";
    rejects(
        Format::Yaml,
        "tollgate:\n  default: { limit: -3, window: 1m }\n",
        2,
        "tollgate.default.limit",
        message,
    );
    rejects(
        Format::Toml,
        "[tollgate]\ndefault = { limit = 1.5, window = \"1m\" }\n",
        2,
        "tollgate.default.limit",
        message,
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\"default\": {\"limit\": [5], \"window\": \"1m\"}}}",
        1,
        "tollgate.default.limit",
        message,
    );
    // A window without a unit.
    let message = "expected a duration with a unit, such as \"250ms\", \"1s\", \"1m\", \"1h\" or \"1d\"";
    rejects(
        Format::Yaml,
        "tollgate:\n  default: { limit: 1, window: 60 }\n",
        2,
        "tollgate.default.window",
        message,
    );
    rejects(
        Format::Toml,
        "[tollgate]\ndefault = { limit = 1, window = 60 }\n",
        2,
        "tollgate.default.window",
        message,
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": 60}}}",
        1,
        "tollgate.default.window",
        message,
    );
    // A flag that is neither true nor false.
    rejects(
        Format::Yaml,
        "tollgate:\n  default: { limit: 1, window: 1s }\n  fail_open: maybe\n",
        3,
        "tollgate.fail_open",
        "\"maybe\" is not true or false",
    );
    rejects(
        Format::Toml,
        "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\nfail_open = 1\n",
        3,
        "tollgate.fail_open",
        "expected true or false",
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"fail_open\": \"yes\"}}",
        2,
        "tollgate.fail_open",
        "\"yes\" is not true or false",
    );
    // A policy, a section or a resource map that is not a map.
    let message = "expected a policy: a map with `limit`, `window` (or `calendar`) and optionally `strategy`";
    rejects(
        Format::Yaml,
        "tollgate:\n  default: 7\n",
        2,
        "tollgate.default",
        message,
    );
    rejects(
        Format::Toml,
        "[tollgate]\ndefault = 7\n",
        2,
        "tollgate.default",
        message,
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\"default\": 7}}",
        1,
        "tollgate.default",
        message,
    );
    let message = "expected a map from resource names to policies";
    rejects(
        Format::Yaml,
        "tollgate:\n  default: { limit: 1, window: 1s }\n  resources: [login]\n",
        3,
        "tollgate.resources",
        message,
    );
    rejects(
        Format::Toml,
        "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\nresources = [\"login\"]\n",
        3,
        "tollgate.resources",
        message,
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"resources\": [\"login\"]}}",
        2,
        "tollgate.resources",
        message,
    );
    rejects(
        Format::Yaml,
        "tollgate: 5\n",
        1,
        "tollgate",
        "expected the `tollgate` section: a map with `default`",
    );
    rejects(
        Format::Toml,
        "tollgate = 5\n",
        1,
        "tollgate",
        "expected the `tollgate` section: a map with `default`",
    );
    rejects(
        Format::Json,
        "{\"tollgate\": 5}",
        1,
        "tollgate",
        "expected the `tollgate` section: a map with `default`",
    );
}

#[test]
fn key_prefixes_must_not_be_empty() {
    rejects(
        Format::Yaml,
        "tollgate:\n  key_prefix: \"\"\n  default: { limit: 1, window: 1s }\n",
        2,
        "tollgate.key_prefix",
        "must not be empty",
    );
    rejects(
        Format::Toml,
        "[tollgate]\nkey_prefix = \"\"\ndefault = { limit = 1, window = \"1s\" }\n",
        2,
        "tollgate.key_prefix",
        "must not be empty",
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\"key_prefix\": \"\", \"default\": {\"limit\": 1, \"window\": \"1s\"}}}",
        1,
        "tollgate.key_prefix",
        "must not be empty",
    );
}

#[test]
fn redis_url_and_redis_cluster_are_exclusive() {
    let message = "`redis_url` and `redis_cluster` are mutually exclusive";
    rejects(
        Format::Yaml,
        "tollgate:\n  redis_url: redis://127.0.0.1:7000\n  redis_cluster: [redis://127.0.0.1:7001]\n  default: { limit: 1, window: 1s }\n",
        3,
        "tollgate.redis_cluster",
        message,
    );
    rejects(
        Format::Toml,
        "[tollgate]\nredis_cluster = [\"redis://127.0.0.1:7001\"]\nredis_url = \"redis://127.0.0.1:7000\"\ndefault = { limit = 1, window = \"1s\" }\n",
        3,
        "tollgate.redis_url",
        message,
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\n\"redis_cluster\": [\"redis://127.0.0.1:7001\"],\n\"redis_url\": \"redis://127.0.0.1:7000\",\n\"default\": {\"limit\": 1, \"window\": \"1s\"}}}",
        3,
        "tollgate.redis_url",
        message,
    );
}

#[test]
fn redis_sentinel_is_exclusive_with_redis_url_and_redis_cluster() {
    rejects(
        Format::Yaml,
        "tollgate:\n  redis_url: redis://127.0.0.1:7000\n  redis_sentinel: { master: main, urls: [redis://127.0.0.1:26379] }\n  default: { limit: 1, window: 1s }\n",
        3,
        "tollgate.redis_sentinel",
        "`redis_url` and `redis_sentinel` are mutually exclusive",
    );
    rejects(
        Format::Toml,
        "[tollgate]\nredis_sentinel = { master = \"main\", urls = [\"redis://127.0.0.1:26379\"] }\nredis_cluster = [\"redis://127.0.0.1:7001\"]\ndefault = { limit = 1, window = \"1s\" }\n",
        2,
        "tollgate.redis_sentinel",
        "`redis_cluster` and `redis_sentinel` are mutually exclusive",
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\n\"redis_sentinel\": {\"master\": \"main\", \"urls\": [\"redis://127.0.0.1:26379\"]},\n\"redis_url\": \"redis://127.0.0.1:7000\",\n\"default\": {\"limit\": 1, \"window\": \"1s\"}}}",
        3,
        "tollgate.redis_url",
        "`redis_url` and `redis_sentinel` are mutually exclusive",
    );
}

#[test]
fn redis_sentinel_mistakes_name_the_field() {
    let yaml = |sentinel: &str| {
        format!("tollgate:\n  redis_sentinel: {sentinel}\n  default: {{ limit: 1, window: 1s }}\n")
    };
    rejects(
        Format::Yaml,
        &yaml("{ urls: [redis://127.0.0.1:26379] }"),
        2,
        "tollgate.redis_sentinel.master",
        "is required",
    );
    rejects(
        Format::Yaml,
        &yaml("{ master: main }"),
        2,
        "tollgate.redis_sentinel.urls",
        "is required",
    );
    rejects(
        Format::Yaml,
        &yaml("{ master: main, urls: [redis://127.0.0.1:26379], port: 1 }"),
        2,
        "tollgate.redis_sentinel.port",
        "unknown field `port`",
    );
    rejects(
        Format::Yaml,
        &yaml("{ master: main, urls: [] }"),
        2,
        "tollgate.redis_sentinel.urls",
        "lists no sentinel URL; give at least one, or remove `redis_sentinel`",
    );
    rejects(
        Format::Yaml,
        &yaml("{ master: main, urls: [redis://127.0.0.1:26379, \"\"] }"),
        2,
        "tollgate.redis_sentinel.urls[1]",
        "a sentinel URL must not be empty",
    );
    rejects(
        Format::Yaml,
        &yaml("{ master: \"my primary\", urls: [redis://127.0.0.1:26379] }"),
        2,
        "tollgate.redis_sentinel.master",
        "is not a primary name",
    );
    rejects(
        Format::Yaml,
        &yaml("{ master: \"\", urls: [redis://127.0.0.1:26379] }"),
        2,
        "tollgate.redis_sentinel",
        "`master` is empty but `urls` is not",
    );
    rejects(
        Format::Yaml,
        &yaml("redis://127.0.0.1:26379"),
        2,
        "tollgate.redis_sentinel",
        "a map with `master` (the primary's name) and `urls`",
    );
}

#[test]
fn redis_sentinel_credential_mistakes_name_the_field() {
    let yaml = |extra: &str| {
        format!(
            "tollgate:\n  redis_sentinel:\n    master: main\n    urls: [redis://127.0.0.1:26379]\n{extra}  default: {{ limit: 1, window: 1s }}\n"
        )
    };
    let err = rejects(
        Format::Yaml,
        &yaml("    password: 918273645\n"),
        5,
        "tollgate.redis_sentinel.password",
        "must be a string",
    );
    assert!(!err.to_string().contains("918273645"), "{err}");
    let err = rejects(
        Format::Yaml,
        &yaml("    password: \"s3cret\\nline\"\n"),
        5,
        "tollgate.redis_sentinel.password",
        "must not contain a line break",
    );
    assert!(!err.to_string().contains("s3cret"), "{err}");
    rejects(
        Format::Yaml,
        &yaml("    username: limiter\n"),
        3,
        "tollgate.redis_sentinel",
        "`username` is given but `password` is not",
    );
    rejects(
        Format::Yaml,
        &yaml("    username: \"my user\"\n    password: pw\n"),
        5,
        "tollgate.redis_sentinel.username",
        "is not a user name",
    );
    rejects(
        Format::Yaml,
        &yaml("    db: -1\n"),
        5,
        "tollgate.redis_sentinel.db",
        "a database number, 0 or more",
    );
    rejects(
        Format::Toml,
        "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.redis_sentinel]\nmaster = \"main\"\nurls = [\"redis://127.0.0.1:26379\"]\ndb = 2147483648\n",
        6,
        "tollgate.redis_sentinel.db",
        "must be at most 2147483647",
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\"redis_sentinel\": {\"master\": \"main\", \"urls\": [\"redis://127.0.0.1:26379\"],\n\"db\": \"two\"}, \"default\": {\"limit\": 1, \"window\": \"1s\"}}}",
        2,
        "tollgate.redis_sentinel.db",
        "\"two\" is not a database number",
    );
}

#[cfg(feature = "redis")]
#[test]
fn redis_urls_must_parse() {
    let message = "is not a Redis URL: expected redis://";
    rejects(
        Format::Yaml,
        "tollgate:\n  redis_url: http://user:secret@host\n  default: { limit: 1, window: 1s }\n",
        2,
        "tollgate.redis_url",
        message,
    );
    rejects(
        Format::Toml,
        "[tollgate]\nredis_url = \"localhost:6379\"\ndefault = { limit = 1, window = \"1s\" }\n",
        2,
        "tollgate.redis_url",
        message,
    );
    let err = rejects(Format::Json, "{\"tollgate\": {\"redis_cluster\": [\"redis://127.0.0.1:7000\",\n\"http://user:secret@host\"], \"default\": {\"limit\": 1, \"window\": \"1s\"}}}", 2, "tollgate.redis_cluster[1]", message);
    assert!(!err.to_string().contains("secret"), "{err}");
    rejects(
        Format::Yaml,
        "tollgate:\n  redis_cluster: []\n  default: { limit: 1, window: 1s }\n",
        2,
        "tollgate.redis_cluster",
        "lists no seed URL",
    );
    rejects(Format::Yaml, "tollgate:\n  redis_cluster: redis://127.0.0.1:7000,,redis://127.0.0.1:7001\n  default: { limit: 1, window: 1s }\n", 2, "tollgate.redis_cluster", "an empty seed URL between commas");
}

/// Writes `bytes` to a file named `policies.{format}` and loads it.
fn load_bytes(format: Format, bytes: &[u8]) -> (String, ConfigFileError) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("policies.{format}"));
    std::fs::write(&path, bytes).unwrap();
    let err = PolicyFile::load(&path).unwrap_err();
    (path.display().to_string(), err)
}

#[test]
fn a_byte_that_is_not_utf8_is_located() {
    let cases: [(Format, &[u8], usize, usize, usize); 3] = [
        (
            Format::Yaml,
            b"tollgate:\n  default: { limit: 1, window: 1m }\n  key_prefix: a\xffb\n",
            3,
            16,
            61,
        ),
        (
            Format::Toml,
            b"[tollgate]\nkey_prefix = \"\xc3\xa9\xc3\"\ndefault = { limit = 1, window = \"1m\" }\n",
            2,
            16,
            27,
        ),
        (
            Format::Json,
            b"{\"tollgate\": {\n\"default\": {\"limit\": 1, \"window\": \"1m\x80\"}}}",
            2,
            38,
            52,
        ),
    ];
    for (format, bytes, line, column, offset) in cases {
        let (path, err) = load_bytes(format, bytes);
        assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
        assert_eq!(
            (err.line(), err.column()),
            (Some(line), Some(column)),
            "{format}: {err}"
        );
        let byte = bytes[offset];
        assert_eq!(
            err.to_string(),
            format!(
                "{path}:{line}: the file is not UTF-8 text: byte 0x{byte:02X} at line {line}, column \
                 {column} (byte offset {offset}) is not valid UTF-8; save the file as UTF-8"
            ),
            "{format}"
        );
    }
}

/// What a file says about a limit beyond 64 bits: the core's maximum.
fn largest_limit_message() -> String {
    format!("must be at most {}", tollgate::Policy::MAX_LIMIT)
}

#[test]
fn a_limit_beyond_64_bits_names_the_largest_limit() {
    let message = largest_limit_message();
    let field = "tollgate.resources.api.limit";
    for limit in [
        "18446744073709551616",
        "99999999999999999999999999999999999999999999999999",
    ] {
        rejects(
            Format::Yaml,
            &format!("tollgate:\n  default: {{ limit: 1, window: 1s }}\n  resources:\n    api: {{ limit: {limit}, window: 1m }}\n"),
            4,
            field,
            &message,
        );
        rejects(
            Format::Yaml,
            &format!("tollgate:\n  default: {{ limit: 1, window: 1s }}\n  resources:\n    api:\n      limit: {limit}\n      window: 1m\n"),
            5,
            field,
            &message,
        );
        rejects(
            Format::Toml,
            &format!("[tollgate]\ndefault = {{ limit = 1, window = \"1s\" }}\n\n[tollgate.resources.api]\nlimit = {limit}\nwindow = \"1m\"\n"),
            5,
            field,
            &message,
        );
        rejects(
            Format::Json,
            &format!("{{\"tollgate\": {{\"default\": {{\"limit\": 1, \"window\": \"1s\"}},\n\"resources\": {{\"api\": {{\"limit\": {limit}, \"window\": \"1m\"}}}}}}}}"),
            2,
            field,
            &message,
        );
        // Written as text, too.
        rejects(
            Format::Json,
            &format!("{{\"tollgate\": {{\"default\": {{\"limit\": 1, \"window\": \"1s\"}},\n\"resources\": {{\"api\": {{\"limit\": \"{limit}\", \"window\": \"1m\"}}}}}}}}"),
            2,
            field,
            &message,
        );
    }
    // The message is the whole of it: no parser wording around it.
    let err = PolicyFile::from_str(
        "tollgate:\n  default: { limit: 18446744073709551616, window: 1s }\n",
        Format::Yaml,
        "policies.yaml",
    )
    .unwrap_err();
    assert!(err.message().starts_with(&message), "{err}");
    assert!(!err.message().contains("invalid"), "{err}");
    // Fractions and negative numbers are still not whole numbers of requests.
    rejects(
        Format::Json,
        "{\"tollgate\": {\"default\": {\"limit\": 2.5, \"window\": \"1s\"}}}",
        1,
        "tollgate.default.limit",
        "expected a whole number of requests",
    );
    rejects(
        Format::Toml,
        "[tollgate]\ndefault = { limit = -18446744073709551616, window = \"1s\" }\n",
        2,
        "tollgate.default.limit",
        "expected a whole number of requests",
    );
}

#[test]
fn too_many_nodes_are_counted_in_words() {
    let mut text = String::from("tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n");
    for i in 0..90_000 {
        text.push_str(&format!("    r{i}: {{ limit: 1, window: 1s }}\n"));
    }
    let err = PolicyFile::from_str(&text, Format::Yaml, "policies.yaml").unwrap_err();
    assert!(
        err.message().starts_with("the file has more than 250000 nodes"),
        "{err}"
    );
    // The 250,001st node: 11 come before the first resource (maps, keys and
    // values), then 6 per resource.
    let index = (250_001 - 11 - 1) / 6;
    assert_eq!(err.line(), Some(4 + index), "{err}");
    assert_eq!(err.field(), format!("tollgate.resources.r{index}"), "{err}");
}

#[test]
fn deep_nesting_is_described_in_words() {
    let nested = |depth: usize| ("[".repeat(depth), "]".repeat(depth));
    let (open, close) = nested(300);
    rejects(
        Format::Yaml,
        &format!("# policies\n\n{open}1{close}\n"),
        3,
        "",
        "nesting deeper than 80 levels at line 3",
    );
    rejects(
        Format::Toml,
        &format!("[tollgate]\ndefault = {{ limit = 1, window = \"1s\" }}\nresources = {open}1{close}\n"),
        3,
        "",
        "nesting deeper than 80 levels at line 3",
    );
}

#[test]
fn resource_names_must_not_hold_control_characters() {
    let field = "tollgate.resources.\"a\\u{7}b\"";
    let message = "a resource name must not contain control characters; found U+0007 at byte 1";
    rejects(Format::Yaml, "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    \"a\\ab\": { limit: 5, window: 1m }\n", 4, field, message);
    rejects(Format::Toml, "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n\n[tollgate.resources.\"a\\u0007b\"]\nlimit = 5\nwindow = \"1m\"\n", 4, field, message);
    rejects(Format::Json, "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"resources\": {\"a\\u0007b\": {\"limit\": 5, \"window\": \"1m\"}}}}", 2, field, message);
    rejects(
        Format::Yaml,
        "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    \"tab\\there\": { limit: 5, window: 1m }\n",
        4,
        "tollgate.resources.\"tab\\there\"",
        "found U+0009 at byte 3",
    );
}
