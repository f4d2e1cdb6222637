//! Every mistake in the settings beside the policies (`exempt`, `deny`,
//! `shadow`, `deny_cache`, `lease`, `fallback`), in every format, is reported with
//! the file, the line, the field path and what is wrong.

use tollgate_config::Format;

use crate::support::rejects;

/// One mistake written in each format, with the line where each reports
/// it: (format, text, line).
type Written<'a> = [(Format, &'a str, usize); 3];

/// Checks that each file of `written` is refused at its line, under `field`,
/// with a message containing `message`.
#[track_caller]
fn refused(written: Written<'_>, field: &str, message: &str) {
    for (format, text, line) in written {
        rejects(format, text, line, field, message);
    }
}

#[test]
fn a_bad_list_entry_names_its_index() {
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    api:\n      limit: 1\n      window: 1s\n      exempt: [10.0.0.0/8, health, 10.0.0.1/8]\n",
                7,
            ),
            (
                Format::Toml,
                "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.resources.api]\nlimit = 1\nwindow = \"1s\"\nexempt = [\n  \"10.0.0.0/8\",\n  \"health\",\n  \"10.0.0.1/8\",\n]\n",
                9,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"resources\": {\"api\": {\"limit\": 1, \"window\": \"1s\",\n\"exempt\": [\"10.0.0.0/8\", \"health\",\n\"10.0.0.1/8\"]}}}}",
                4,
            ),
        ],
        "tollgate.resources.api.exempt[2]",
        "\"10.0.0.1/8\" has address bits set past its prefix; write the network address",
    );
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  deny:\n    - 192.0.2.1\n    - x/8\n  default: { limit: 1, window: 1s }\n",
                4,
            ),
            (
                Format::Toml,
                "[tollgate]\ndeny = [\"192.0.2.1\",\n\"x/8\"]\ndefault = { limit = 1, window = \"1s\" }\n",
                3,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"deny\": [\"192.0.2.1\",\n\"x/8\"], \"default\": {\"limit\": 1, \"window\": \"1s\"}}}",
                2,
            ),
        ],
        "tollgate.deny[1]",
        "\"x\" in \"x/8\" is not an IP address",
    );
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  deny: [\"10.0.0.0/33\"]\n  default: { limit: 1, window: 1s }\n",
                2,
            ),
            (
                Format::Toml,
                "[tollgate]\ndeny = [\"10.0.0.0/33\"]\ndefault = { limit = 1, window = \"1s\" }\n",
                2,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\n\"deny\": [\"10.0.0.0/33\"], \"default\": {\"limit\": 1, \"window\": \"1s\"}}}",
                2,
            ),
        ],
        "tollgate.deny[0]",
        "\"33\" is not a prefix length from 0 to 32",
    );
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  exempt: [a, \"\"]\n  default: { limit: 1, window: 1s }\n",
                2,
            ),
            (
                Format::Toml,
                "[tollgate]\nexempt = [\"a\", \"\"]\ndefault = { limit = 1, window = \"1s\" }\n",
                2,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"exempt\": [\"a\", \"\"],\n\"default\": {\"limit\": 1, \"window\": \"1s\"}}}",
                1,
            ),
        ],
        "tollgate.exempt[1]",
        "an entry must not be empty",
    );
}

#[test]
fn a_list_must_be_a_list() {
    let message = "expected a list of keys and CIDR blocks";
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  default: { limit: 1, window: 1s }\n  exempt: 10.0.0.0/8\n",
                3,
            ),
            (
                Format::Toml,
                "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\nexempt = \"10.0.0.0/8\"\n",
                3,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"exempt\": \"10.0.0.0/8\"}}",
                2,
            ),
        ],
        "tollgate.exempt",
        message,
    );
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    api: { limit: 1, window: 1s, deny: { key: a } }\n",
                4,
            ),
            (
                Format::Toml,
                "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.resources.api]\nlimit = 1\nwindow = \"1s\"\ndeny = { key = \"a\" }\n",
                6,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"resources\": {\"api\": {\"limit\": 1, \"window\": \"1s\",\n\"deny\": {\"key\": \"a\"}}}}}",
                3,
            ),
        ],
        "tollgate.resources.api.deny",
        message,
    );
    // An entry that is neither text nor a whole number.
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  default: { limit: 1, window: 1s }\n  exempt: [a, [b]]\n",
                3,
            ),
            (
                Format::Toml,
                "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\nexempt = [\"a\", 1.5]\n",
                3,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"exempt\": [\"a\", true]}}",
                2,
            ),
        ],
        "tollgate.exempt[1]",
        "expected a key, an IP address or a CIDR block",
    );
}

#[test]
fn shadow_is_true_or_false() {
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    api:\n      limit: 1\n      window: 1s\n      shadow: maybe\n",
                7,
            ),
            (
                Format::Toml,
                "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.resources.api]\nlimit = 1\nwindow = \"1s\"\nshadow = \"maybe\"\n",
                6,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"resources\": {\"api\": {\"limit\": 1, \"window\": \"1s\",\n\"shadow\": \"maybe\"}}}}",
                3,
            ),
        ],
        "tollgate.resources.api.shadow",
        "\"maybe\" is not true or false",
    );
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  shadow: [true]\n  default: { limit: 1, window: 1s }\n",
                2,
            ),
            (
                Format::Toml,
                "[tollgate]\nshadow = 1\ndefault = { limit = 1, window = \"1s\" }\n",
                2,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"shadow\": 1,\n\"default\": {\"limit\": 1, \"window\": \"1s\"}}}",
                1,
            ),
        ],
        "tollgate.shadow",
        "expected true or false",
    );
}

#[test]
fn deny_cache_is_a_flag_or_a_map_of_sizes() {
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  deny_cache: sure\n  default: { limit: 1, window: 1s }\n",
                2,
            ),
            (
                Format::Toml,
                "[tollgate]\ndeny_cache = \"sure\"\ndefault = { limit = 1, window = \"1s\" }\n",
                2,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"deny_cache\": \"sure\",\n\"default\": {\"limit\": 1, \"window\": \"1s\"}}}",
                1,
            ),
        ],
        "tollgate.deny_cache",
        "\"sure\" is not true or false (nor a map with `capacity` and `max_key_len`)",
    );
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  deny_cache: 5\n  default: { limit: 1, window: 1s }\n",
                2,
            ),
            (
                Format::Toml,
                "[tollgate]\ndeny_cache = 5\ndefault = { limit = 1, window = \"1s\" }\n",
                2,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"deny_cache\": 5,\n\"default\": {\"limit\": 1, \"window\": \"1s\"}}}",
                1,
            ),
        ],
        "tollgate.deny_cache",
        "expected true, false, or a map with `capacity` (keys) and `max_key_len` (bytes)",
    );
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    api:\n      limit: 1\n      window: 1s\n      deny_cache:\n        capacity: 0\n",
                8,
            ),
            (
                Format::Toml,
                "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.resources.api]\nlimit = 1\nwindow = \"1s\"\n[tollgate.resources.api.deny_cache]\ncapacity = 0\n",
                7,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"resources\": {\"api\": {\"limit\": 1, \"window\": \"1s\",\n\"deny_cache\": {\n\"capacity\": 0}}}}}",
                4,
            ),
        ],
        "tollgate.resources.api.deny_cache.capacity",
        "must be at least 1; to turn the cache off, write `deny_cache: false`",
    );
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  deny_cache: { max_key_len: -1 }\n  default: { limit: 1, window: 1s }\n",
                2,
            ),
            (
                Format::Toml,
                "[tollgate]\ndeny_cache = { max_key_len = -1 }\ndefault = { limit = 1, window = \"1s\" }\n",
                2,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"deny_cache\": {\"max_key_len\": \"lots\"},\n\"default\": {\"limit\": 1, \"window\": \"1s\"}}}",
                1,
            ),
        ],
        "tollgate.deny_cache.max_key_len",
        "whole number",
    );
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  deny_cache: { size: 10 }\n  default: { limit: 1, window: 1s }\n",
                2,
            ),
            (
                Format::Toml,
                "[tollgate]\ndeny_cache = { size = 10 }\ndefault = { limit = 1, window = \"1s\" }\n",
                2,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"deny_cache\": {\"size\": 10},\n\"default\": {\"limit\": 1, \"window\": \"1s\"}}}",
                1,
            ),
        ],
        "tollgate.deny_cache.size",
        "unknown field `size`",
    );
}

#[test]
fn a_fallback_is_a_policy_of_limits_only() {
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  default: { limit: 1, window: 1s }\n  fallback:\n    limit: 1\n",
                4,
            ),
            (
                Format::Toml,
                "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\nfallback = { limit = 1 }\n",
                3,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"fallback\": {\"limit\": 1}}}",
                2,
            ),
        ],
        "tollgate.fallback.window",
        "is required",
    );
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  default: { limit: 1, window: 1s }\n  fallback: { limit: 1, window: 1 mnute }\n",
                3,
            ),
            (
                Format::Toml,
                "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\nfallback = { limit = 1, window = \"1 mnute\" }\n",
                3,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"fallback\": {\"limit\": 1, \"window\": \"1 mnute\"}}}",
                2,
            ),
        ],
        "tollgate.fallback.window",
        "\"1 mnute\" is not a duration",
    );
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  default: { limit: 1, window: 1s }\n  fallback:\n    limits:\n      - { limit: 2, window: 1s }\n      - { limit: 0, window: 1h }\n",
                6,
            ),
            (
                Format::Toml,
                "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.fallback]\nlimits = [\n  { limit = 2, window = \"1s\" },\n  { limit = 0, window = \"1h\" },\n]\n",
                6,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"fallback\": {\"limits\": [{\"limit\": 2, \"window\": \"1s\"},\n{\"limit\": 0, \"window\": \"1h\"}]}}}",
                3,
            ),
        ],
        "tollgate.fallback.limits[1].limit",
        "must be at least 1",
    );
    let nested = "`shadow` is not part of a fallback policy, which gives only `limit`, `window` and \
                  `strategy`, or `limits`";
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  default: { limit: 1, window: 1s }\n  fallback: { limit: 1, window: 1s }\n  resources:\n    api:\n      limit: 1\n      window: 1s\n      fallback: { limit: 1, window: 1s, shadow: true }\n",
                8,
            ),
            (
                Format::Toml,
                "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\nfallback = { limit = 1, window = \"1s\" }\n[tollgate.resources.api]\nlimit = 1\nwindow = \"1s\"\nfallback = { limit = 1, window = \"1s\", shadow = true }\n",
                7,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"}, \"fallback\": {\"limit\": 1, \"window\": \"1s\"},\n\"resources\": {\"api\": {\"limit\": 1, \"window\": \"1s\",\n\"fallback\": {\"limit\": 1, \"window\": \"1s\", \"shadow\": true}}}}}",
                3,
            ),
        ],
        "tollgate.resources.api.fallback.shadow",
        nested,
    );
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  default: { limit: 1, window: 1s }\n  fallback: 25\n",
                3,
            ),
            (
                Format::Toml,
                "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\nfallback = 25\n",
                3,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"fallback\": 25}}",
                2,
            ),
        ],
        "tollgate.fallback",
        "expected a policy: a map with `limit`, `window` (or `calendar`) and optionally `strategy`",
    );
}

#[test]
fn the_default_takes_the_file_wide_settings_and_gives_none_of_its_own() {
    for setting in ["exempt", "deny", "shadow", "deny_cache", "fallback"] {
        let message = format!(
            "`{setting}` is not set in `default`: set it under `tollgate`, where it applies to the \
             default policy and to every resource (a resource may set its own)"
        );
        let field = format!("tollgate.default.{setting}");
        let yaml = format!("tollgate:\n  default:\n    limit: 1\n    window: 1s\n    {setting}: []\n");
        let toml = format!("[tollgate.default]\nlimit = 1\nwindow = \"1s\"\n{setting} = []\n");
        let json = format!(
            "{{\"tollgate\": {{\"default\": {{\"limit\": 1, \"window\": \"1s\",\n\"{setting}\": []}}}}}}"
        );
        refused(
            [
                (Format::Yaml, &yaml, 5),
                (Format::Toml, &toml, 4),
                (Format::Json, &json, 2),
            ],
            &field,
            &message,
        );
    }
}

#[test]
fn fail_open_true_and_a_fallback_are_exclusive_at_whichever_comes_second() {
    let message = "`fail_open: true` and `fallback` are mutually exclusive";
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  fail_open: true\n  default: { limit: 1, window: 1s }\n  fallback: { limit: 1, window: 1s }\n",
                4,
            ),
            (
                Format::Toml,
                "[tollgate]\nfail_open = true\ndefault = { limit = 1, window = \"1s\" }\nfallback = { limit = 1, window = \"1s\" }\n",
                4,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"fail_open\": true,\n\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"fallback\": {\"limit\": 1, \"window\": \"1s\"}}}",
                3,
            ),
        ],
        "tollgate.fallback",
        message,
    );
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  fallback: { limit: 1, window: 1s }\n  default: { limit: 1, window: 1s }\n  fail_open: \"true\"\n",
                4,
            ),
            // (TOML hands plain values over before tables, inline ones too.)
            (
                Format::Yaml,
                "tollgate:\n  fallback:\n    limits: [{ limit: 1, window: 1s }]\n  fail_open: true\n  default: { limit: 1, window: 1s }\n",
                4,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"fallback\": {\"limit\": 1, \"window\": \"1s\"},\n\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"fail_open\": true}}",
                3,
            ),
        ],
        "tollgate.fail_open",
        message,
    );
}

#[test]
fn a_resource_fallback_needs_the_file_wide_one() {
    let message = "`resources.api.fallback` is given but `fallback` is not: a resource's fallback takes \
                   the place of the file-wide one, which gives the whole file the fail policy \
                   `fallback`; give `fallback` under `tollgate` too";
    // Known once the section is read: reported at the section.
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    api: { limit: 1, window: 1s, fallback: { limit: 1, window: 1s } }\n",
                2,
            ),
            (
                Format::Toml,
                "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.resources.api]\nlimit = 1\nwindow = \"1s\"\nfallback = { limit = 1, window = \"1s\" }\n",
                1,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"resources\": {\"api\": {\"limit\": 1, \"window\": \"1s\", \"fallback\": {\"limit\": 1, \"window\": \"1s\"}}}\n}}",
                3,
            ),
        ],
        "tollgate",
        message,
    );
}

#[test]
fn settings_must_be_given_once() {
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    api:\n      limit: 1\n      window: 1s\n      shadow: true\n      shadow: false\n",
                8,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"resources\": {\"api\": {\"limit\": 1, \"window\": \"1s\", \"shadow\": true,\n\"shadow\": false}}}}",
                3,
            ),
            (
                Format::Yaml,
                "tollgate:\n  exempt: [a]\n  default: { limit: 1, window: 1s }\n  resources:\n    api:\n      limit: 1\n      window: 1s\n      shadow: true\n      shadow: false\n",
                9,
            ),
        ],
        "tollgate.resources.api.shadow",
        "is given twice",
    );
    // TOML itself refuses a key given twice.
    rejects(
        Format::Toml,
        "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\nexempt = [\"a\"]\nexempt = [\"b\"]\n",
        4,
        "",
        "duplicate key",
    );
    rejects(
        Format::Yaml,
        "tollgate:\n  deny: [a]\n  default: { limit: 1, window: 1s }\n  deny: [b]\n",
        4,
        "tollgate.deny",
        "is given twice",
    );
}

#[test]
fn a_fallback_whose_limits_repeat_once_tollgate_strategy_fills_in_is_named() {
    // Known once the whole file is read: the path, no line (as for a
    // resource's `limits`).
    let text = "tollgate:\n  default: { limit: 1, window: 1s }\n  fallback:\n    limits:\n      - { limit: 1, window: 1s, strategy: fixed_window }\n      - { limit: 2, window: 1s }\n  strategy: fixed_window\n";
    let err = tollgate_config::PolicyFile::from_str(text, Format::Yaml, "p.yaml").unwrap_err();
    assert_eq!(
        (err.line(), err.field()),
        (None, "tollgate.fallback.limits[1]"),
        "{err}"
    );
    assert!(
        err.message()
            .contains("has the same strategy and window as limits[0]"),
        "{err}"
    );
}

#[test]
fn a_top_keys_capacity_out_of_range_names_the_field() {
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    api:\n      limit: 1\n      window: 1s\n      top_keys:\n        capacity: 0\n",
                8,
            ),
            (
                Format::Toml,
                "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.resources.api]\nlimit = 1\nwindow = \"1s\"\n[tollgate.resources.api.top_keys]\ncapacity = 0\n",
                7,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"resources\": {\"api\": {\"limit\": 1, \"window\": \"1s\",\n\"top_keys\": {\n\"capacity\": 0}}}}}",
                4,
            ),
        ],
        "tollgate.resources.api.top_keys.capacity",
        "must be at least 1; to turn top keys off, write `top_keys: false`",
    );
    rejects(
        Format::Yaml,
        "tollgate:\n  top_keys: { capacity: 1000001 }\n  default: { limit: 1, window: 1s }\n",
        2,
        "tollgate.top_keys.capacity",
        "must be at most 1000000",
    );
    rejects(
        Format::Yaml,
        "tollgate:\n  top_keys: sometimes\n  default: { limit: 1, window: 1s }\n",
        2,
        "tollgate.top_keys",
        "is not true or false (nor a map with `capacity`)",
    );
}

#[test]
fn lease_settings_out_of_range_name_the_field_and_the_range() {
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  default: { limit: 1, window: 1s }\n  lease:\n    max_units: 0\n",
                4,
            ),
            (
                Format::Toml,
                "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.lease]\nmax_units = 0\n",
                4,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"lease\": {\"max_units\": 0}}}",
                2,
            ),
        ],
        "tollgate.lease.max_units",
        "must be from 1 to 1048576",
    );
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    api: { limit: 1, window: 1s, lease: { max_age: 2m } }\n",
                4,
            ),
            (
                Format::Toml,
                "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.resources.api]\nlimit = 1\nwindow = \"1s\"\nlease = { max_age = \"2m\" }\n",
                6,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"resources\": {\"api\": {\"limit\": 1, \"window\": \"1s\",\n\"lease\": {\"max_age\": \"2m\"}}}}}",
                3,
            ),
        ],
        "tollgate.resources.api.lease.max_age",
        "must be from 1ms to 60s",
    );
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  default: { limit: 1, window: 1s }\n  lease: { units: 5 }\n",
                3,
            ),
            (
                Format::Toml,
                "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\nlease = { units = 5 }\n",
                3,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"lease\": {\"units\": 5}}}",
                2,
            ),
        ],
        "tollgate.lease.units",
        "unknown field `units`",
    );
}

#[test]
fn charge_is_admitted_or_always() {
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    tokens:\n      limit: 1\n      window: 1s\n      charge: sometimes\n",
                7,
            ),
            (
                Format::Toml,
                "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.resources.tokens]\nlimit = 1\nwindow = \"1s\"\ncharge = \"sometimes\"\n",
                6,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"resources\": {\"tokens\": {\"limit\": 1, \"window\": \"1s\",\n\"charge\": \"sometimes\"}}}}",
                3,
            ),
        ],
        "tollgate.resources.tokens.charge",
        "\"sometimes\" is not `admitted` or `always`",
    );
    refused(
        [
            (
                Format::Yaml,
                "tollgate:\n  charge: true\n  default: { limit: 1, window: 1s }\n",
                2,
            ),
            (
                Format::Toml,
                "[tollgate]\ncharge = 1\ndefault = { limit = 1, window = \"1s\" }\n",
                2,
            ),
            (
                Format::Json,
                "{\"tollgate\": {\"charge\": [],\n\"default\": {\"limit\": 1, \"window\": \"1s\"}}}",
                1,
            ),
        ],
        "tollgate.charge",
        "expected `admitted`",
    );
}
