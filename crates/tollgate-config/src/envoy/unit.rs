//! The time unit of an Envoy limit and the fixed window it stands for.

use std::time::Duration;

/// The time unit of an Envoy limit, and the fixed window it becomes:
/// windows are aligned to multiples of the unit since the Unix epoch (UTC),
/// as in Envoy's own service, which also counts a month as 30 days and a
/// year as 365 days (so a "month" window does not follow the calendar).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3,600 seconds.
    Hour,
    /// 86,400 seconds (UTC days).
    Day,
    /// 7 days, starting on Thursdays (the epoch's weekday).
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// The unit named `text`, in any case: a configuration's `unit`, or
    /// the name of the rate-limit API's unit (`MINUTE`).
    pub fn parse(text: &str) -> Option<Unit> {
        Some(match text.to_ascii_lowercase().as_str() {
            "second" => Unit::Second,
            "minute" => Unit::Minute,
            "hour" => Unit::Hour,
            "day" => Unit::Day,
            "week" => Unit::Week,
            "month" => Unit::Month,
            "year" => Unit::Year,
            _ => return None,
        })
    }

    /// The window's length.
    pub fn window(self) -> Duration {
        const DAY: u64 = 86_400;
        Duration::from_secs(match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => DAY,
            Unit::Week => 7 * DAY,
            Unit::Month => 30 * DAY,
            Unit::Year => 365 * DAY,
        })
    }

    /// The lower-case name used in configuration files.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }
}
