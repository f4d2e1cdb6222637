//! Calendar windows: a fixed window whose buckets are the days, weeks,
//! months, quarters or years of a time zone ("10,000 a month"), rather than
//! a fixed number of seconds.
//!
//! A [`Calendar`] names the periods: a [`Period`], an IANA time zone and an
//! anchor, the local date and time the periods repeat from. Give it to
//! [`Limit::per_calendar`](crate::Limit::per_calendar) (or `calendar:` in a
//! policy file) in place of a window.
//! [Calendar windows](crate::_documentation::semantics#calendar-windows) is
//! the contract: where a period starts on a day or at a time that does not
//! exist, and why only the fixed window takes a calendar.
//!
//! ```
//! use std::time::{Duration, UNIX_EPOCH};
//! use tollgate::calendar::{Calendar, Period};
//!
//! // Every month from the 15th at 09:00, Berlin time.
//! let billing = Calendar::new(Period::Month, "Europe/Berlin", Some("2026-01-15T09:00:00"))?;
//! // 2026-02-20T12:00:00Z falls in the period from 15 February 08:00 UTC
//! // (09:00 in Berlin, winter time) to 15 March 08:00 UTC.
//! let (start, end) = billing.period_at(UNIX_EPOCH + Duration::from_secs(1_771_588_800));
//! assert_eq!(start, UNIX_EPOCH + Duration::from_secs(1_771_142_400));
//! assert_eq!(end, UNIX_EPOCH + Duration::from_secs(1_773_561_600));
//! # Ok::<(), tollgate::ConfigError>(())
//! ```

mod periods;
mod registry;

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::ConfigError;
pub(crate) use periods::Periods;
use registry::CalendarId;

/// The length of the periods of a [`Calendar`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Period {
    /// A day: 23, 24 or 25 hours where the clocks change.
    Day,
    /// An ISO week, from Monday by default.
    Week,
    /// A month, 28 to 31 days.
    Month,
    /// Three months, from 1 January, April, July and October by default.
    Quarter,
    /// A year, 365 or 366 days.
    Year,
}

impl Period {
    /// Every period, shortest first.
    pub const ALL: [Period; 5] = [
        Period::Day,
        Period::Week,
        Period::Month,
        Period::Quarter,
        Period::Year,
    ];

    /// The name used in policy files: `day`, `week`, `month`, `quarter` or
    /// `year`.
    pub const fn name(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
            Period::Quarter => "quarter",
            Period::Year => "year",
        }
    }

    /// The longest a period can last: its longest calendar length plus an
    /// hour for a clock change (a day 25 hours, a month 31 days and an
    /// hour). Where a limit needs one duration (a key's lifetime on a store
    /// that expires keys by itself), this is it.
    pub const fn longest(self) -> Duration {
        const DAY: u64 = 86_400;
        let days = match self {
            Period::Day => 1,
            Period::Week => 7,
            Period::Month => 31,
            Period::Quarter => 92,
            Period::Year => 366,
        };
        Duration::from_secs(days * DAY + 3_600)
    }
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Period {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let name = s.trim().to_ascii_lowercase();
        Period::ALL.into_iter().find(|p| p.name() == name).ok_or_else(|| {
            ConfigError::new(
                "period",
                format!("{s:?} is not a period: expected day, week, month, quarter or year"),
            )
        })
    }
}

/// The periods a calendar window counts in: a [`Period`] in an IANA time
/// zone, repeating from an anchor.
///
/// A calendar is a small copyable handle; calendars equal in period, time
/// zone and anchor are the same calendar (and share their state's
/// identity: a limit keeps its count across a reload that keeps its
/// calendar). A process holds at most [`Calendar::MAX_DISTINCT`] distinct
/// calendars.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Calendar {
    id: CalendarId,
}

impl Calendar {
    /// The most distinct calendars one process may hold: each is kept for
    /// the process's life, so their number is bounded.
    pub const MAX_DISTINCT: usize = registry::CAPACITY;

    /// A calendar of `period` in `time_zone` (an IANA name such as
    /// `Europe/Berlin`, or `UTC`), repeating from `anchor`, a local date
    /// and time in whole seconds (`2026-01-15T09:00:00`; `None`: the
    /// period's natural start, midnight, Monday, the 1st, 1 January).
    ///
    /// Of the anchor, a day takes the time, a week the weekday and time, a
    /// month the day and time, a quarter the month within its quarter, the
    /// day and time, and a year all but the year. A day the month does not
    /// have is its last day (an anchor on the 31st starts a period on 30
    /// April), and a local time the clocks skip is moved on by the gap.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming `time_zone` when the tz database does not
    /// know the name, `anchor` when it is not a local date and time in
    /// whole seconds from 1900 to 2200, or `calendar` when the process
    /// already holds [`Calendar::MAX_DISTINCT`] other calendars.
    pub fn new(period: Period, time_zone: &str, anchor: Option<&str>) -> Result<Self, ConfigError> {
        let periods = Periods::new(period, time_zone, anchor)?;
        registry::intern(periods).map(|id| Self { id })
    }

    /// The length of the periods.
    pub fn period(&self) -> Period {
        self.periods().period()
    }

    /// The IANA name of the time zone.
    pub fn time_zone(&self) -> &'static str {
        self.periods().time_zone()
    }

    /// The local date and time the periods repeat from, as
    /// `YYYY-MM-DDTHH:MM:SS`.
    pub fn anchor(&self) -> String {
        self.periods().anchor()
    }

    /// The period that holds `at`: its start and the start of the next.
    /// Instants before the Unix epoch count as the epoch; a period that
    /// began before it starts at the epoch.
    pub fn period_at(&self, at: SystemTime) -> (SystemTime, SystemTime) {
        let nanos = at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let (start, end) = self.periods().period_at(nanos, 1);
        (
            UNIX_EPOCH + Duration::from_nanos(start),
            UNIX_EPOCH + Duration::from_nanos(end),
        )
    }

    /// `period@anchor@zone` (`month@2026-01-15T09:00:00@Europe/Berlin`):
    /// the calendar in a state key's tail and in the resource of a limit
    /// a request names in it.
    pub(crate) fn label(&self) -> String {
        format!("{}@{}@{}", self.period(), self.anchor(), self.time_zone())
    }

    /// The handle as 16 bits, for a rate that names it
    /// ([`crate::strategy::Rate::calendar`]).
    pub(crate) fn raw(self) -> u16 {
        self.id.raw()
    }

    /// The calendar of a handle's bits, when they name one made.
    pub(crate) fn from_raw(raw: u16) -> Option<Self> {
        CalendarId::from_raw(raw).map(|id| Self { id })
    }

    /// The periods themselves, shared by every copy of this handle.
    pub(crate) fn periods(&self) -> &'static Periods {
        registry::get(self.id)
    }
}

impl fmt::Debug for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Calendar")
            .field("period", &self.period())
            .field("time_zone", &self.time_zone())
            .field("anchor", &self.anchor())
            .finish()
    }
}

impl fmt::Display for Calendar {
    /// `month from 2026-01-15T09:00:00 Europe/Berlin`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} from {} {}", self.period(), self.anchor(), self.time_zone())
    }
}

#[cfg(test)]
mod tests;
