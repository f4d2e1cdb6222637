//! `${VAR}` and `${VAR:-default}` in string values, in every format. Each
//! test uses variable names of its own, so tests running in parallel never
//! see each other's variables.

use std::time::Duration;

use tollgate::{FailPolicy, Strategy};
use tollgate_config::{Format, PolicyFile, Storage};

fn set(name: &str, value: &str) {
    std::env::set_var(name, value);
}

fn load(format: Format, text: &str) -> PolicyFile {
    PolicyFile::from_str(text, format, "inline").unwrap_or_else(|err| panic!("{err}"))
}

#[test]
fn variables_expand_before_values_are_parsed() {
    set("TGC_ENV_A_LIMIT", "7");
    set("TGC_ENV_A_WINDOW", "2m");
    set("TGC_ENV_A_STRATEGY", "token_bucket");
    set("TGC_ENV_A_FAIL_OPEN", "true");
    set("TGC_ENV_A_PREFIX", "app");
    set("TGC_ENV_A_HOST", "127.0.0.1:6390");
    let yaml = r#"
tollgate:
  strategy: ${TGC_ENV_A_STRATEGY}
  redis_url: redis://${TGC_ENV_A_HOST}/1
  fail_open: ${TGC_ENV_A_FAIL_OPEN}
  key_prefix: ${TGC_ENV_A_PREFIX}-v2
  default: { limit: "${TGC_ENV_A_LIMIT}", window: "${TGC_ENV_A_WINDOW}" }
"#;
    let toml = r#"
[tollgate]
strategy = "${TGC_ENV_A_STRATEGY}"
redis_url = "redis://${TGC_ENV_A_HOST}/1"
fail_open = "${TGC_ENV_A_FAIL_OPEN}"
key_prefix = "${TGC_ENV_A_PREFIX}-v2"
default = { limit = "${TGC_ENV_A_LIMIT}", window = "${TGC_ENV_A_WINDOW}" }
"#;
    let json = r#"{"tollgate": {
  "strategy": "${TGC_ENV_A_STRATEGY}",
  "redis_url": "redis://${TGC_ENV_A_HOST}/1",
  "fail_open": "${TGC_ENV_A_FAIL_OPEN}",
  "key_prefix": "${TGC_ENV_A_PREFIX}-v2",
  "default": {"limit": "${TGC_ENV_A_LIMIT}", "window": "${TGC_ENV_A_WINDOW}"}
}}"#;
    for (format, text) in [(Format::Yaml, yaml), (Format::Toml, toml), (Format::Json, json)] {
        let file = load(format, text);
        let policy = file.default_policy();
        assert_eq!(
            (
                policy.limits()[0].strategy(),
                policy.limits()[0].limit(),
                policy.limits()[0].window()
            ),
            (Strategy::TokenBucket, 7, Duration::from_secs(120)),
            "{format}"
        );
        assert_eq!(
            file.storage(),
            &Storage::Redis("redis://127.0.0.1:6390/1".to_owned())
        );
        assert_eq!(file.fail_policy(), FailPolicy::Open);
        assert_eq!(file.key_prefix(), "app-v2");
    }
}

#[test]
fn defaults_apply_when_a_variable_is_unset_or_empty() {
    set("TGC_ENV_B_EMPTY", "");
    set("TGC_ENV_B_LIMIT", "9");
    let texts = [
        (
            Format::Yaml,
            "tollgate:\n  default: { limit: \"${TGC_ENV_B_LIMIT:-3}\", window: \"${TGC_ENV_B_UNSET:-30s}\" }\n  resources:\n    a: { limit: 1, window: \"${TGC_ENV_B_EMPTY:-1h}\" }\n",
        ),
        (
            Format::Toml,
            "[tollgate]\ndefault = { limit = \"${TGC_ENV_B_LIMIT:-3}\", window = \"${TGC_ENV_B_UNSET:-30s}\" }\nresources.a = { limit = 1, window = \"${TGC_ENV_B_EMPTY:-1h}\" }\n",
        ),
        (
            Format::Json,
            r#"{"tollgate": {"default": {"limit": "${TGC_ENV_B_LIMIT:-3}", "window": "${TGC_ENV_B_UNSET:-30s}"}, "resources": {"a": {"limit": 1, "window": "${TGC_ENV_B_EMPTY:-1h}"}}}}"#,
        ),
    ];
    for (format, text) in texts {
        let file = load(format, text);
        assert_eq!(
            file.default_policy().limits()[0].limit(),
            9,
            "{format}: the set variable wins"
        );
        assert_eq!(
            file.default_policy().limits()[0].window(),
            Duration::from_secs(30),
            "{format}"
        );
        assert_eq!(
            file.policy("a").limits()[0].window(),
            Duration::from_secs(3_600),
            "{format}"
        );
    }
}

#[test]
fn an_unset_variable_names_the_variable_and_the_field() {
    let message = "environment variable TGC_ENV_C_UNSET is not set (write ${TGC_ENV_C_UNSET:-default} to give a default)";
    let field = "tollgate.resources.login.window";
    let cases = [
        (
            Format::Yaml,
            "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    login: { limit: 5, window: \"${TGC_ENV_C_UNSET}\" }\n",
            4,
        ),
        (
            Format::Toml,
            "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n\n[tollgate.resources.login]\nlimit = 5\nwindow = \"${TGC_ENV_C_UNSET}\"\n",
            6,
        ),
        (
            Format::Json,
            "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"resources\": {\"login\": {\"limit\": 5, \"window\": \"${TGC_ENV_C_UNSET}\"}}}}",
            2,
        ),
    ];
    for (format, text, line) in cases {
        let err = PolicyFile::from_str(text, format, "policies").unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("policies:{line}: {field}: {message}"),
            "{format}"
        );
    }
    let err = PolicyFile::from_str(
        "tollgate:\n  redis_url: ${TGC_ENV_C_UNSET_URL}\n  default: { limit: 1, window: 1s }\n",
        Format::Yaml,
        "policies.yaml",
    )
    .unwrap_err();
    assert_eq!((err.line(), err.field()), (Some(2), "tollgate.redis_url"));
    assert!(err.message().contains("TGC_ENV_C_UNSET_URL is not set"), "{err}");
}

#[test]
fn invalid_values_from_the_environment_show_where_they_came_from() {
    set("TGC_ENV_D_WINDOW", "soon");
    let err = PolicyFile::from_str(
        "tollgate:\n  default: { limit: 1, window: \"${TGC_ENV_D_WINDOW}\" }\n",
        Format::Yaml,
        "policies.yaml",
    )
    .unwrap_err();
    assert_eq!(err.field(), "tollgate.default.window");
    assert!(
        err.message()
            .starts_with("\"soon\" (from \"${TGC_ENV_D_WINDOW}\") is not a duration"),
        "{err}"
    );
}

#[test]
fn an_empty_redis_url_means_memory() {
    let text = "tollgate:\n  redis_url: ${TGC_ENV_E_UNSET:-}\n  default: { limit: 1, window: 1s }\n";
    assert_eq!(load(Format::Yaml, text).storage(), &Storage::Memory);
    set("TGC_ENV_E_URL", "redis://user:pw@127.0.0.1:6391");
    let text = "tollgate:\n  redis_url: ${TGC_ENV_E_URL:-}\n  default: { limit: 1, window: 1s }\n";
    let file = load(Format::Yaml, text);
    assert_eq!(
        file.storage(),
        &Storage::Redis("redis://user:pw@127.0.0.1:6391".to_owned())
    );
    assert_eq!(
        file.storage().to_string(),
        "Redis at redis://user:***@127.0.0.1:6391"
    );
}

#[test]
fn values_are_expanded_once_and_dollars_can_be_escaped() {
    set("TGC_ENV_F_PREFIX", "${TGC_ENV_F_OTHER}");
    let text = "tollgate:\n  key_prefix: ${TGC_ENV_F_PREFIX}$$x\n  default: { limit: 1, window: 1s }\n";
    assert_eq!(load(Format::Yaml, text).key_prefix(), "${TGC_ENV_F_OTHER}$x");
}

#[test]
fn malformed_references_are_errors() {
    let err = PolicyFile::from_str(
        "[tollgate]\nkey_prefix = \"${TGC_ENV_G\"\ndefault = { limit = 1, window = \"1s\" }\n",
        Format::Toml,
        "policies.toml",
    )
    .unwrap_err();
    assert_eq!((err.line(), err.field()), (Some(2), "tollgate.key_prefix"));
    assert!(err.message().contains("without a closing `}`"), "{err}");
    let err = PolicyFile::from_str(
        "{\"tollgate\": {\"key_prefix\": \"${1X}\", \"default\": {\"limit\": 1, \"window\": \"1s\"}}}",
        Format::Json,
        "policies.json",
    )
    .unwrap_err();
    assert_eq!(err.field(), "tollgate.key_prefix");
    assert!(
        err.message().contains("does not name an environment variable"),
        "{err}"
    );
}

#[test]
fn references_work_in_yaml_flow_maps_and_lists() {
    set("TGC_ENV_H_LIMIT", "12");
    set("TGC_ENV_H_WINDOW", "2m");
    set("TGC_ENV_H_SEED", "redis://127.0.0.1:7100");
    // The README's own style: flow maps with unquoted references.
    let file = load(
        Format::Yaml,
        "tollgate:\n  redis_cluster: [${TGC_ENV_H_SEED}, redis://127.0.0.1:${TGC_ENV_H_PORT:-7101}]\n  default: { limit: ${TGC_ENV_H_LIMIT}, window: ${TGC_ENV_H_WINDOW} }\n  resources: { \"${literal}\": { limit: ${TGC_ENV_H_UNSET:-4}, window: 1s } }\n",
    );
    let policy = file.default_policy();
    assert_eq!(
        (policy.limits()[0].limit(), policy.limits()[0].window()),
        (12, Duration::from_secs(120))
    );
    assert_eq!(
        file.storage(),
        &Storage::RedisCluster(vec![
            "redis://127.0.0.1:7100".to_owned(),
            "redis://127.0.0.1:7101".to_owned()
        ])
    );
    // Resource names are never expanded, and come back as written.
    assert_eq!(file.policy("${literal}").limits()[0].limit(), 4);

    // Mistakes name the reference as written.
    let err = PolicyFile::from_str(
        "tollgate:\n  default: { limit: ${TGC_ENV_H_MISSING}, window: 1m }\n",
        Format::Yaml,
        "policies.yaml",
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "policies.yaml:2: tollgate.default.limit: environment variable TGC_ENV_H_MISSING is not set \
         (write ${TGC_ENV_H_MISSING:-default} to give a default)"
    );
    assert_eq!(err.column(), Some(21));
    set("TGC_ENV_H_BAD", "soon");
    let err = PolicyFile::from_str(
        "tollgate:\n  default: { limit: 1, window: ${TGC_ENV_H_BAD} }\n",
        Format::Yaml,
        "policies.yaml",
    )
    .unwrap_err();
    assert!(
        err.message()
            .starts_with("\"soon\" (from \"${TGC_ENV_H_BAD}\") is not a duration"),
        "{err}"
    );
}

#[test]
fn unquoted_references_in_toml_and_json_ask_for_quotes() {
    let hint = "an environment reference is text: write it in quotes, as \"${VAR}\"";
    for (format, text) in [
        (
            Format::Toml,
            "[tollgate]\ndefault = { limit = ${TGC_ENV_I_LIMIT}, window = \"1m\" }\n",
        ),
        (
            Format::Json,
            "{\"tollgate\": {\"default\": {\"limit\": ${TGC_ENV_I_LIMIT}, \"window\": \"1m\"}}}",
        ),
    ] {
        let err = PolicyFile::from_str(text, format, "policies").unwrap_err();
        assert!(err.message().ends_with(hint), "{format}: {err}");
    }
}
