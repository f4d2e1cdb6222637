//! `calendar:` in place of `window`: read in every format, refused with its
//! line and field where it is wrong.

use tollgate::calendar::{Calendar, Period};
use tollgate::{Limit, Policy, Strategy};
use tollgate_config::{Format, PolicyFile};

use crate::support::rejects;

fn billing() -> Policy {
    let calendar = Calendar::new(Period::Month, "Europe/Berlin", Some("2026-01-15T09:00:00")).unwrap();
    Limit::per_calendar(10_000, calendar).unwrap().into()
}

#[test]
fn a_calendar_reads_the_same_in_every_format() {
    let texts = [
        (
            Format::Yaml,
            "tollgate:\n  default: { limit: 100, window: 1m }\n  resources:\n    monthly:\n      limit: 10000\n      \
             calendar: { period: month, time_zone: Europe/Berlin, anchor: \"2026-01-15T09:00:00\" }\n",
        ),
        (
            Format::Toml,
            "[tollgate]\ndefault = { limit = 100, window = \"1m\" }\n[tollgate.resources.monthly]\nlimit = 10000\n\
             calendar = { period = \"month\", time_zone = \"Europe/Berlin\", anchor = 2026-01-15T09:00:00 }\n",
        ),
        (
            Format::Json,
            r#"{"tollgate": {"default": {"limit": 100, "window": "1m"}, "resources": {"monthly":
               {"limit": 10000, "calendar": {"period": "month", "time_zone": "Europe/Berlin",
                "anchor": "2026-01-15T09:00:00"}}}}}"#,
        ),
    ];
    for (format, text) in texts {
        let file = PolicyFile::from_str(text, format, "inline").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(*file.policy("monthly"), billing(), "{format}");
    }
}

#[test]
fn a_calendar_takes_utc_and_the_natural_start_by_default_and_sits_in_a_list() {
    let yaml = "tollgate:\n  strategy: token_bucket\n  default:\n    limits:\n      - { limit: 10, window: 1s }\n      \
                - { limit: 1000, calendar: { period: day } }\n";
    let file = PolicyFile::from_str(yaml, Format::Yaml, "inline").unwrap_or_else(|e| panic!("{e}"));
    let daily = Calendar::new(Period::Day, "UTC", None).unwrap();
    let expected = Policy::compound([
        Limit::new(Strategy::TokenBucket, 10, std::time::Duration::from_secs(1)).unwrap(),
        // A calendar window is a fixed window, whatever `tollgate.strategy` says.
        Limit::per_calendar(1000, daily).unwrap(),
    ])
    .unwrap();
    assert_eq!(*file.policy("anything"), expected);
}

#[test]
fn calendar_mistakes_name_their_line_and_field() {
    let head =
        "tollgate:\n  default: { limit: 100, window: 1m }\n  resources:\n    monthly:\n      limit: 10\n";
    let cases = [
        (
            "      calendar: { period: fortnight }\n",
            "tollgate.resources.monthly.calendar.period",
            "\"fortnight\" is not a period",
        ),
        (
            "      calendar: { period: month, time_zone: Mars/Olympus }\n",
            "tollgate.resources.monthly.calendar",
            "invalid time_zone: \"Mars/Olympus\" is not a time zone",
        ),
        (
            "      calendar: { period: month, anchor: \"the 15th\" }\n",
            "tollgate.resources.monthly.calendar",
            "invalid anchor: \"the 15th\" is not a local date and time",
        ),
        (
            "      calendar: { period: month, every: 2 }\n",
            "tollgate.resources.monthly.calendar.every",
            "unknown field `every`",
        ),
        (
            "      calendar: month\n",
            "tollgate.resources.monthly.calendar",
            "a calendar: a map with `period`",
        ),
        (
            "      calendar: { period: month }\n      window: 30d\n",
            "tollgate.resources.monthly.window",
            "`window` and `calendar` are mutually exclusive",
        ),
        (
            "      calendar: { period: month }\n      strategy: sliding_window\n",
            "tollgate.resources.monthly.strategy",
            "strategy sliding_window cannot count in a calendar's periods",
        ),
    ];
    for (tail, field, message) in cases {
        let text = format!("{head}{tail}");
        // Reported at the value that conflicts: the second of two fields.
        let line = if tail.lines().count() == 2 { 7 } else { 6 };
        rejects(Format::Yaml, &text, line, field, message);
    }
    // In a list, the element is named.
    rejects(
        Format::Yaml,
        "tollgate:\n  default:\n    limits:\n      - { limit: 10, window: 1s }\n      - { limit: 5, calendar: { period: week }, strategy: token_bucket }\n",
        5,
        "tollgate.default.limits[1]",
        "strategy token_bucket cannot count in a calendar's periods",
    );
}
