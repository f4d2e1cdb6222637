//! The boundaries of a calendar's periods, computed from its anchor, and
//! the period that holds an instant.

use std::sync::atomic::{AtomicU64, Ordering};

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::Span;

use super::Period;
use crate::error::ConfigError;

/// A calendar's periods: what [`super::Calendar`] points to.
///
/// The k-th boundary is the anchor moved by k periods in civil time, then
/// placed in the time zone (a skipped local time moved on by the gap, a
/// repeated one taken the first time): every boundary comes from the
/// anchor, never from the boundary before, so the periods never drift.
/// Boundaries fall on whole seconds (anchors are whole seconds and zone
/// offsets are too).
pub(crate) struct Periods {
    period: Period,
    zone: TimeZone,
    /// The zone's IANA name.
    zone_name: Box<str>,
    anchor: DateTime,
    /// The last period found, `start_s << LENGTH_BITS | length_s` in
    /// seconds (0: none), so that decisions within one period skip the
    /// time zone arithmetic. Any thread may replace it; a reading is
    /// always one whole period.
    last: AtomicU64,
}

/// What makes two calendars the same: period, zone name and anchor.
pub(crate) type Identity = (Period, Box<str>, DateTime);

/// Bits of a cached period's length in seconds: 2^25 s is 388 days, more
/// than [`Period::longest`] of a year.
const LENGTH_BITS: u32 = 25;

/// The latest second a period is looked up for: 2^63 ns after the epoch
/// (2262-04-11), where the in-memory clock stands still
/// ([`crate::strategy::MAX_TICK`]); a later reading in coarser ticks counts
/// as this one.
const LAST_SECOND: u64 = (1 << 63) / 1_000_000_000;

/// The earliest and latest anchor years accepted: far enough around any
/// reading of the clock that every boundary a decision needs is within the
/// civil calendar's range.
const ANCHOR_YEARS: std::ops::RangeInclusive<i16> = 1900..=2200;

impl Periods {
    /// Validates the parts of a calendar (see [`super::Calendar::new`]).
    pub(crate) fn new(period: Period, zone_name: &str, anchor: Option<&str>) -> Result<Self, ConfigError> {
        let zone_name = zone_name.trim();
        let zone = TimeZone::get(zone_name).map_err(|e| {
            ConfigError::new(
                "time_zone",
                format!("{zone_name:?} is not a time zone of the tz database ({e}); give an IANA name such as Europe/Berlin, or UTC"),
            )
        })?;
        let anchor = match anchor {
            None => natural_start(period),
            Some(text) => parse_anchor(text)?,
        };
        let zone_name = zone.iana_name().unwrap_or(zone_name).into();
        Ok(Self {
            period,
            zone,
            zone_name,
            anchor,
            last: AtomicU64::new(0),
        })
    }

    /// What makes two calendars the same: period, zone and anchor.
    pub(crate) fn identity(&self) -> Identity {
        (self.period, self.zone_name.clone(), self.anchor)
    }

    pub(crate) fn period(&self) -> Period {
        self.period
    }

    pub(crate) fn time_zone(&self) -> &str {
        &self.zone_name
    }

    pub(crate) fn anchor(&self) -> String {
        self.anchor.strftime("%Y-%m-%dT%H:%M:%S").to_string()
    }

    /// The k-th boundary in seconds since the epoch: the anchor moved by
    /// `k` periods. `k` stays within a few thousand of 0 for any anchor
    /// and clock reading accepted, where civil arithmetic cannot fail.
    pub(crate) fn boundary(&self, k: i64) -> i64 {
        let moved = match self.period {
            Period::Day => Span::new().try_days(k),
            Period::Week => Span::new().try_weeks(k),
            Period::Month => Span::new().try_months(k),
            Period::Quarter => Span::new().try_months(k.saturating_mul(3)),
            Period::Year => Span::new().try_years(k),
        };
        let local = moved
            .and_then(|span| self.anchor.checked_add(span))
            .expect("a boundary within the anchor's range of the civil calendar");
        self.zone
            .to_ambiguous_timestamp(local)
            .compatible()
            .expect("a civil datetime within 1900..=2600 has a timestamp")
            .as_second()
    }

    /// The index of the period that holds second `t`: the `k` with
    /// `boundary(k) <= t < boundary(k + 1)`.
    pub(crate) fn index_at(&self, t: i64) -> i64 {
        let origin = self.boundary(0);
        let mut k = (t - origin).div_euclid(nominal_seconds(self.period));
        while self.boundary(k) > t {
            k -= 1;
        }
        while self.boundary(k + 1) <= t {
            k += 1;
        }
        k
    }

    /// The period that holds `now` (ticks of `tick_nanos` nanoseconds
    /// since the epoch): its start and its end in the same ticks. A period
    /// that began before the epoch starts at 0; an end past `u64::MAX`
    /// ticks is `u64::MAX`.
    pub(crate) fn period_at(&self, now: u64, tick_nanos: u64) -> (u64, u64) {
        let per_second = 1_000_000_000 / tick_nanos;
        let t = (now / per_second).min(LAST_SECOND);
        let (start, end) = self.seconds_at(t);
        let ticks = |s: i64| u64::try_from(s).unwrap_or(0).saturating_mul(per_second);
        (ticks(start), ticks(end))
    }

    /// The period that holds second `t` (at most 2^63 ns in seconds), in
    /// seconds: from the cache when it holds `t`.
    fn seconds_at(&self, t: u64) -> (i64, i64) {
        let last = self.last.load(Ordering::Relaxed);
        let (start, length) = (last >> LENGTH_BITS, last & ((1 << LENGTH_BITS) - 1));
        if t >= start && t - start < length {
            return (start as i64, (start + length) as i64);
        }
        let t = t as i64;
        let k = self.index_at(t);
        let (start, end) = (self.boundary(k), self.boundary(k + 1));
        if let (Ok(s), Ok(len)) = (u64::try_from(start), u64::try_from(end - start)) {
            if len < 1 << LENGTH_BITS && s < 1 << (64 - LENGTH_BITS) {
                self.last.store(s << LENGTH_BITS | len, Ordering::Relaxed);
            }
        }
        (start, end)
    }
}

/// The anchor a period has when none is given: midnight of a Monday that
/// is also the 1st of January (2001-01-01), so that it is the natural start
/// of every period.
fn natural_start(_period: Period) -> DateTime {
    jiff::civil::date(2001, 1, 1).at(0, 0, 0, 0)
}

/// The average length of a period in seconds, for a first guess of the
/// index that holds an instant (corrected by comparing boundaries).
fn nominal_seconds(period: Period) -> i64 {
    match period {
        Period::Day => 86_400,
        Period::Week => 7 * 86_400,
        // The Gregorian calendar's average month: 365.2425 / 12 days.
        Period::Month => 2_629_746,
        Period::Quarter => 3 * 2_629_746,
        Period::Year => 12 * 2_629_746,
    }
}

/// Reads an anchor: a local date and time in whole seconds, from 1900 to
/// 2200.
fn parse_anchor(text: &str) -> Result<DateTime, ConfigError> {
    let anchor: DateTime = text.trim().parse().map_err(|e| {
        ConfigError::new(
            "anchor",
            format!("{text:?} is not a local date and time such as 2026-01-15T09:00:00 ({e})"),
        )
    })?;
    if anchor.subsec_nanosecond() != 0 {
        return Err(ConfigError::new(
            "anchor",
            format!("{text:?} has a fraction of a second; periods start on whole seconds"),
        ));
    }
    if !ANCHOR_YEARS.contains(&anchor.year()) {
        return Err(ConfigError::new(
            "anchor",
            format!(
                "{text:?} is outside the years {} to {}",
                ANCHOR_YEARS.start(),
                ANCHOR_YEARS.end()
            ),
        ));
    }
    Ok(anchor)
}
