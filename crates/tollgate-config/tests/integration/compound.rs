//! Several limits on one resource (`limits`): read alike in YAML, TOML and
//! JSON, with every mistake in a list reported at its element's line and
//! path, and limiters that decide by all the limits.

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::{Limit, MemoryBackend, Policy, Strategy};
use tollgate_config::{AnyBackend, ErrorKind, Format, PolicyFile, Target};

use crate::support::rejects;

fn limit(strategy: Strategy, limit: u64, window: Duration) -> Limit {
    Limit::new(strategy, limit, window).unwrap()
}

const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3_600);

#[test]
fn limits_are_read_alike_in_every_format() {
    let yaml = "\
tollgate:
  strategy: token_bucket
  default:
    limits:
      - { limit: 100, window: 1m }
      - { limit: 1000, window: 1h, strategy: fixed_window }
  resources:
    api:
      limits:
        - limit: 10
          window: 1s
        - limit: 1000
          window: 1h
          strategy: sliding_window
    one:
      limits: [{ limit: 5, window: 1m, strategy: leaky_bucket }]
    plain: { limit: 7, window: 1s }
";
    let toml = r#"
[tollgate]
strategy = "token_bucket"
default = { limits = [{ limit = 100, window = "1m" }, { limit = 1000, window = "1h", strategy = "fixed_window" }] }

[[tollgate.resources.api.limits]]
limit = 10
window = "1s"

[[tollgate.resources.api.limits]]
limit = 1000
window = "1h"
strategy = "sliding_window"

[tollgate.resources.one]
limits = [{ limit = 5, window = "1m", strategy = "leaky_bucket" }]

[tollgate.resources.plain]
limit = 7
window = "1s"
"#;
    let json = r#"{"tollgate": {
  "strategy": "token_bucket",
  "default": {"limits": [{"limit": 100, "window": "1m"}, {"limit": 1000, "window": "1h", "strategy": "fixed_window"}]},
  "resources": {
    "api": {"limits": [{"limit": 10, "window": "1s"}, {"limit": 1000, "window": "1h", "strategy": "sliding_window"}]},
    "one": {"limits": [{"limit": 5, "window": "1m", "strategy": "leaky_bucket"}]},
    "plain": {"limit": 7, "window": "1s"}
  }
}}"#;
    // Limits without `strategy` take `tollgate.strategy`, as single ones do.
    let expected = vec![
        (
            Target::Default,
            Policy::compound([
                limit(Strategy::TokenBucket, 100, MINUTE),
                limit(Strategy::FixedWindow, 1000, HOUR),
            ])
            .unwrap(),
        ),
        (
            Target::Resource("api"),
            Policy::compound([
                limit(Strategy::TokenBucket, 10, SECOND),
                limit(Strategy::SlidingWindow, 1000, HOUR),
            ])
            .unwrap(),
        ),
        // A list of one is a policy of one limit.
        (
            Target::Resource("one"),
            Policy::new(Strategy::LeakyBucket, 5, MINUTE).unwrap(),
        ),
        (
            Target::Resource("plain"),
            Policy::new(Strategy::TokenBucket, 7, SECOND).unwrap(),
        ),
    ];
    for (format, text) in [(Format::Yaml, yaml), (Format::Toml, toml), (Format::Json, json)] {
        let file = PolicyFile::from_str(text, format, "inline").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(file.effective_policies(), expected, "{format}");
        assert!(!file.policy("one").is_compound(), "{format}");
        assert_eq!(file.policy("elsewhere"), file.default_policy(), "{format}");
    }
}

#[test]
fn eight_limits_are_accepted() {
    let eight: Vec<Element> = (1..=8).map(nth_second).collect();
    for format in Format::ALL {
        let (text, _) = with_limits(format, &eight);
        let file = PolicyFile::from_str(&text, format, "inline").unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(
            file.policy("api").limits().len(),
            tollgate::Policy::MAX_LIMITS,
            "{format}"
        );
    }
}

/// One value of an element: a number, or text (quoted in every format).
#[derive(Clone, Copy)]
enum Value {
    Num(u64),
    Text(&'static str),
}

/// One element of a `limits` list: a map of fields, or a value as written.
#[derive(Clone)]
enum Element {
    Map(Vec<(&'static str, Value)>),
    Raw(&'static str),
}

use Value::{Num, Text};

fn map(fields: &[(&'static str, Value)]) -> Element {
    Element::Map(fields.to_vec())
}

/// `{ limit: n, window: ns }`.
fn nth_second(n: u64) -> Element {
    const WINDOWS: [&str; 9] = ["1s", "2s", "3s", "4s", "5s", "6s", "7s", "8s", "9s"];
    map(&[("limit", Num(n)), ("window", Text(WINDOWS[n as usize - 1]))])
}

impl Element {
    /// The element as a flow map in `format`.
    fn render(&self, format: Format) -> String {
        let fields = match self {
            Element::Raw(raw) => return (*raw).to_owned(),
            Element::Map(fields) => fields,
        };
        let fields: Vec<String> = fields
            .iter()
            .map(|(name, value)| {
                let value = match value {
                    Num(n) => n.to_string(),
                    Text(t) => format!("\"{t}\""),
                };
                match format {
                    Format::Yaml => format!("{name}: {value}"),
                    Format::Toml => format!("{name} = {value}"),
                    Format::Json => format!("\"{name}\": {value}"),
                }
            })
            .collect();
        match format {
            Format::Json => format!("{{{}}}", fields.join(", ")),
            _ => format!("{{ {} }}", fields.join(", ")),
        }
    }
}

/// A file in `format` whose resource `api` lists `elements`, and the line of
/// the first element; each element is on a line of its own.
fn with_limits(format: Format, elements: &[Element]) -> (String, usize) {
    // (text up to the first element, before each element, between elements,
    // after the last one, the line of the first)
    let (head, before, between, tail, first) = match format {
        Format::Yaml => (
            "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    api:\n      limits:\n",
            "        - ",
            "\n",
            "\n",
            6,
        ),
        Format::Toml => (
            "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.resources.api]\nlimits = [\n",
            "  ",
            ",\n",
            ",\n]\n",
            5,
        ),
        Format::Json => (
            "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"resources\": {\"api\": {\"limits\": [\n",
            "",
            ",\n",
            "\n]}}}}\n",
            3,
        ),
    };
    let items: Vec<String> = elements
        .iter()
        .map(|e| format!("{before}{}", e.render(format)))
        .collect();
    (format!("{head}{}{tail}", items.join(between)), first)
}

#[test]
fn a_mistake_in_an_element_names_its_index_and_line_in_every_format() {
    let valid = map(&[("limit", Num(10)), ("window", Text("1s"))]);
    // (elements, index of the element at fault, field under it, message)
    let cases: Vec<(Vec<Element>, usize, &str, &str)> = vec![
        (
            vec![
                valid.clone(),
                map(&[("limit", Num(100)), ("window", Text("1 mnute"))]),
            ],
            1,
            ".window",
            "\"1 mnute\" is not a duration (unknown time unit \"mnute\"",
        ),
        (
            vec![map(&[("limit", Num(10)), ("windw", Text("1s"))])],
            0,
            ".windw",
            "unknown field `windw`, expected one of ",
        ),
        (
            vec![valid.clone(), map(&[("limit", Num(100))])],
            1,
            ".window",
            "is required",
        ),
        (
            vec![valid.clone(), map(&[("limit", Num(0)), ("window", Text("1m"))])],
            1,
            ".limit",
            "must be at least 1",
        ),
        (
            vec![map(&[
                ("limit", Num(10)),
                ("window", Text("1s")),
                ("strategy", Text("bucket")),
            ])],
            0,
            ".strategy",
            "unknown strategy \"bucket\"",
        ),
        (
            vec![
                valid.clone(),
                map(&[("limit", Num(10)), ("window", Text("1s")), ("limits", Num(1))]),
            ],
            1,
            ".limits",
            "unknown field `limits`",
        ),
        (
            vec![Element::Raw("5")],
            0,
            "",
            "expected a limit: a map with `limit`, `window` (or `calendar`) and optionally `strategy`",
        ),
        (
            vec![
                map(&[
                    ("limit", Num(10)),
                    ("window", Text("1s")),
                    ("strategy", Text("token_bucket")),
                ]),
                map(&[
                    ("limit", Num(20)),
                    ("window", Text("1000ms")),
                    ("strategy", Text("token_bucket")),
                ]),
            ],
            1,
            "",
            "has the same strategy and window as limits[0] (token_bucket per 1s); keep only the \
             smaller limit, the larger could never deny",
        ),
        (
            vec![
                map(&[("limit", Num(10)), ("window", Text("1m"))]),
                valid.clone(),
                map(&[("limit", Num(20)), ("window", Text("60s"))]),
            ],
            2,
            "",
            "has the same window as limits[0] (1m) and, like it, no `strategy` (both take \
             `tollgate.strategy`); keep only the smaller limit",
        ),
        (
            (1..=9).map(nth_second).collect(),
            8,
            "",
            "one limit too many: a policy holds at most 8 limits",
        ),
    ];
    for (elements, index, under, message) in cases {
        for format in Format::ALL {
            let (text, first) = with_limits(format, &elements);
            let field = format!("tollgate.resources.api.limits[{index}]{under}");
            let err = rejects(format, &text, first + index, &field, message);
            if message == "is required" {
                assert_eq!(err.message(), message, "{format}: one limit needs both");
            }
            if under == ".windw" {
                // An element's fields only: `limits` does not nest.
                let expected = err.message().split("expected one of ").nth(1).unwrap_or_default();
                assert_eq!(
                    expected.replace('`', ""),
                    "limit, window, calendar, strategy, ttl",
                    "{format}"
                );
            }
        }
    }
}

#[test]
fn a_list_of_no_limits_or_not_a_list_is_refused_in_every_format() {
    let field = "tollgate.resources.api.limits";
    let empty = "lists no limit; give at least one, or give one limit with `limit` and `window` \
                 instead of `limits`";
    rejects(
        Format::Yaml,
        "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    api: { limits: [] }\n",
        4,
        field,
        empty,
    );
    rejects(
        Format::Toml,
        "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.resources.api]\nlimits = []\n",
        4,
        field,
        empty,
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"resources\": {\"api\": {\"limits\": []}}}}",
        2,
        field,
        empty,
    );
    let not_a_list = "expected a list of limits, each a map with `limit`, `window` (or `calendar`) and optionally `strategy`";
    rejects(
        Format::Yaml,
        "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    api:\n      limits: { limit: 1, window: 1s }\n",
        5,
        field,
        not_a_list,
    );
    rejects(
        Format::Toml,
        "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.resources.api.limits]\nlimit = 1\nwindow = \"1s\"\n",
        3,
        field,
        not_a_list,
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"resources\": {\"api\": {\n\"limits\": 10}}}}",
        3,
        field,
        not_a_list,
    );
}

#[test]
fn limits_beside_a_single_limit_is_refused_naming_the_resource() {
    let exclusive = "and `limits` are mutually exclusive: a policy is one limit (`limit`, `window` or \
                     `calendar`, and optionally `strategy`) or a list of limits (`limits`), not both";
    let limit_first = format!("`limit` {exclusive}");
    // `limits` after `limit`: the error is at `limits`.
    rejects(
        Format::Yaml,
        "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    api:\n      limit: 5\n      limits: [{ limit: 10, window: 1s }]\n",
        6,
        "tollgate.resources.api.limits",
        &limit_first,
    );
    rejects(
        Format::Toml,
        "[tollgate]\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.resources.api]\nlimit = 5\nlimits = [{ limit = 10, window = \"1s\" }]\n",
        5,
        "tollgate.resources.api.limits",
        &limit_first,
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"},\n\"resources\": {\"api\": {\"limit\": 5,\n\"limits\": [{\"limit\": 10, \"window\": \"1s\"}]}}}}",
        3,
        "tollgate.resources.api.limits",
        &limit_first,
    );
    // A field of one limit after `limits`: the error is at that field.
    rejects(
        Format::Yaml,
        "tollgate:\n  default:\n    limits: [{ limit: 10, window: 1s }]\n    window: 1m\n",
        4,
        "tollgate.default.window",
        &format!("`window` {exclusive}"),
    );
    rejects(
        Format::Toml,
        "[tollgate]\ndefault = { limits = [{ limit = 10, window = \"1s\" }], strategy = \"token_bucket\" }\n",
        2,
        "tollgate.default.strategy",
        &format!("`strategy` {exclusive}"),
    );
    rejects(
        Format::Json,
        "{\"tollgate\": {\"default\": {\"limits\": [{\"limit\": 10, \"window\": \"1s\"}],\n\"strategy\": \"fixed_window\"}}}",
        2,
        "tollgate.default.strategy",
        &format!("`strategy` {exclusive}"),
    );
    // Neither: what a policy needs.
    let err = rejects(
        Format::Yaml,
        "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    api: {}\n",
        4,
        "tollgate.resources.api.limit",
        "is required",
    );
    assert_eq!(
        err.message(),
        "is required: a policy gives `limit` and `window` or `calendar` (and optionally `strategy`), \
         or `limits`, a list of such limits"
    );
}

#[test]
fn a_limit_that_repeats_another_once_tollgate_strategy_fills_in_is_refused() {
    // limits[1] names no strategy and takes tollgate.strategy, token_bucket:
    // the same as limits[0]. Known only once the whole file is read, so the
    // error has the path but no line.
    let texts = [
        (
            Format::Yaml,
            "tollgate:\n  default: { limit: 1, window: 1s }\n  resources:\n    api:\n      limits:\n        - { limit: 10, window: 1s, strategy: token_bucket }\n        - { limit: 20, window: 1s }\n  strategy: token_bucket\n",
        ),
        (
            Format::Toml,
            "[tollgate]\nstrategy = \"token_bucket\"\ndefault = { limit = 1, window = \"1s\" }\n[tollgate.resources.api]\nlimits = [{ limit = 10, window = \"1s\", strategy = \"token_bucket\" }, { limit = 20, window = \"1s\" }]\n",
        ),
        (
            Format::Json,
            "{\"tollgate\": {\"default\": {\"limit\": 1, \"window\": \"1s\"}, \"strategy\": \"token_bucket\",\n\"resources\": {\"api\": {\"limits\": [{\"limit\": 10, \"window\": \"1s\", \"strategy\": \"token_bucket\"}, {\"limit\": 20, \"window\": \"1s\"}]}}}}",
        ),
    ];
    for (format, text) in texts {
        let err = PolicyFile::from_str(text, format, "p").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Invalid);
        assert_eq!(err.line(), None, "{format}: {err}");
        assert_eq!(
            err.to_string(),
            "p: tollgate.resources.api.limits[1]: has the same strategy and window as limits[0] \
             (token_bucket per 1s); keep only the smaller limit, the larger could never deny; a \
             limit without `strategy` takes `tollgate.strategy`, here token_bucket",
            "{format}"
        );
        // Under another strategy, the two limits differ.
        let other = text.replacen("token_bucket", "fixed_window", 1);
        let other = if format == Format::Yaml {
            text.replace("  strategy: token_bucket\n", "  strategy: leaky_bucket\n")
        } else {
            other
        };
        let file = PolicyFile::from_str(&other, format, "p").unwrap_or_else(|err| panic!("{err}"));
        assert!(file.policy("api").is_compound(), "{format}");
    }
}

#[tokio::test]
async fn a_compound_resource_admits_only_what_every_limit_admits() {
    let file = PolicyFile::from_str(
        "tollgate:\n  default: { limit: 100, window: 1m }\n  resources:\n    api:\n      limits:\n        - { limit: 3, window: 1s, strategy: token_bucket }\n        - { limit: 5, window: 1m, strategy: fixed_window }\n",
        Format::Yaml,
        "p.yaml",
    )
    .unwrap();
    let clock = ManualClock::new(Duration::from_secs(1_700_000_040)); // 0 s into a minute
    let backend = AnyBackend::from(MemoryBackend::new().clock(clock.clone()));
    let limiter = file.limiters_builder(backend).build().unwrap();
    // The bucket holds 3: the fourth request at once is denied by limits[0].
    for _ in 0..3 {
        assert!(limiter.limiter("api").allow("k").await.unwrap().allowed);
    }
    let d = limiter.limiter("api").allow("k").await.unwrap();
    assert_eq!((d.allowed, d.bound_by, d.limit), (false, 0, 3));
    // Two seconds later the bucket is full again, but the minute has room
    // for two more: the third is denied by limits[1], until the minute ends.
    clock.advance(Duration::from_secs(2));
    assert!(limiter.limiter("api").allow("k").await.unwrap().allowed);
    assert!(limiter.limiter("api").allow("k").await.unwrap().allowed);
    let d = limiter.limiter("api").allow("k").await.unwrap();
    assert_eq!((d.allowed, d.bound_by, d.limit), (false, 1, 5));
    assert_eq!(d.retry_after, Some(Duration::from_secs(58)));
    // Other resources keep the default.
    let d = limiter.limiter("search").allow("k").await.unwrap();
    assert_eq!((d.allowed, d.remaining), (true, 99));
}
