//! Calendar periods against a model written the other way round: from the
//! instant's local date, the candidate boundaries around it (the anchor's
//! day clamped to each month's length, at the anchor's time), rather than
//! from the anchor moved by whole periods.

use std::time::{Duration, UNIX_EPOCH};

use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};
use proptest::prelude::*;

use super::{Calendar, Period};
use crate::error::ConfigError;

/// Zones with every kind of clock change: none, an hour each way, half an
/// hour (Lord Howe), at midnight (Santiago), a whole day skipped (Apia,
/// 30 December 2011), a zone ahead of UTC by a fraction of an hour
/// (Kolkata) and one behind it.
const ZONES: [&str; 8] = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Pacific/Apia",
    "Asia/Kolkata",
    "America/St_Johns",
];

/// The instants drawn from: 2018-01-01 to 2028-01-01 UTC.
const SPAN: std::ops::Range<i64> = 1_514_764_800..1_830_297_600;

fn place(zone: &TimeZone, local: DateTime) -> i64 {
    zone.to_ambiguous_timestamp(local)
        .compatible()
        .unwrap()
        .as_second()
}

fn days_in_month(year: i16, month: i8) -> i8 {
    Date::new(year, month, 1).unwrap().days_in_month()
}

/// The month `months` after (year, month).
fn add_months(year: i16, month: i8, months: i32) -> (i16, i8) {
    let index = i32::from(year) * 12 + i32::from(month) - 1 + months;
    (index.div_euclid(12) as i16, (index.rem_euclid(12) + 1) as i8)
}

/// The boundary in (year, month) for a monthly anchor: its day, or the
/// month's last when the month is shorter, at its time.
fn in_month(anchor: DateTime, year: i16, month: i8) -> DateTime {
    let day = anchor.day().min(days_in_month(year, month));
    Date::new(year, month, day).unwrap().to_datetime(anchor.time())
}

/// The model's candidates of a boundary near local date `date`, in local
/// time, sorted.
fn candidates(period: Period, anchor: DateTime, date: Date) -> Vec<DateTime> {
    let (year, month) = (date.year(), date.month());
    match period {
        Period::Day => (-2..=2)
            .map(|d| date.checked_add(d.days()).unwrap().to_datetime(anchor.time()))
            .collect(),
        Period::Week => (-9..=9)
            .map(|d| date.checked_add(d.days()).unwrap())
            .filter(|d| d.weekday() == anchor.weekday())
            .map(|d| d.to_datetime(anchor.time()))
            .collect(),
        Period::Month => (-2..=2)
            .map(|m| add_months(year, month, m))
            .map(|(y, m)| in_month(anchor, y, m))
            .collect(),
        Period::Quarter => (-5..=5)
            .map(|m| add_months(year, month, m))
            .filter(|&(_, m)| (i32::from(m) - i32::from(anchor.month())).rem_euclid(3) == 0)
            .map(|(y, m)| in_month(anchor, y, m))
            .collect(),
        Period::Year => (-2..=2)
            .map(|y| in_month(anchor, year + y, anchor.month()))
            .collect(),
    }
}

/// The model: the latest candidate at or before `t`, and the earliest
/// after it.
fn model(period: Period, zone: &TimeZone, anchor: DateTime, t: i64) -> (i64, i64) {
    let local = zone.to_datetime(Timestamp::from_second(t).unwrap()).date();
    let placed: Vec<i64> = candidates(period, anchor, local)
        .into_iter()
        .map(|c| place(zone, c))
        .collect();
    let start = placed
        .iter()
        .copied()
        .filter(|&b| b <= t)
        .max()
        .expect("a boundary before");
    let end = placed
        .iter()
        .copied()
        .filter(|&b| b > t)
        .min()
        .expect("a boundary after");
    (start, end)
}

fn periods_agree(period: Period, zone_name: &str, anchor: Option<&str>, instants: &[i64]) {
    let calendar = Calendar::new(period, zone_name, anchor).unwrap();
    let zone = TimeZone::get(zone_name).unwrap();
    let anchor: DateTime = calendar.anchor().parse().unwrap();
    for &t in instants {
        let at = UNIX_EPOCH + Duration::from_secs(t as u64);
        let (start, end) = calendar.period_at(at);
        let ours = (
            start.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64,
            end.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64,
        );
        assert_eq!(
            ours,
            model(period, &zone, anchor, t),
            "{calendar} at {}",
            Timestamp::from_second(t).unwrap()
        );
    }
}

/// Anchors that land on the edges: the 31st, 29 February, times that the
/// clocks skip or repeat, midnight and a Sunday.
const ANCHORS: [Option<&str>; 7] = [
    None,
    Some("2026-01-31T00:00:00"),
    Some("2024-02-29T12:00:00"),
    Some("2026-03-29T02:30:00"),
    Some("2026-10-25T02:30:00"),
    Some("2026-11-01T01:30:00"),
    Some("2026-03-15T00:00:00"),
];

/// How many random instants each (zone, period, anchor) is checked at:
/// `TOLLGATE_CALENDAR_INSTANTS`, 2,000 by default (the campaign quoted in
/// SEMANTICS.md runs 100,000).
fn instants() -> Vec<i64> {
    let count = std::env::var("TOLLGATE_CALENDAR_INSTANTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000usize);
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    (0..count)
        .map(|_| {
            // SplitMix64: a fixed sequence, so that a failure repeats.
            seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            SPAN.start + (z % (SPAN.end - SPAN.start) as u64) as i64
        })
        .collect()
}

#[test]
fn every_period_in_every_zone_agrees_with_the_model() {
    let instants = instants();
    for zone in ZONES {
        for period in Period::ALL {
            for anchor in ANCHORS {
                periods_agree(period, zone, anchor, &instants);
            }
        }
    }
}

/// Every boundary of the ten years, and the seconds either side of it,
/// where a model and an implementation that differ by one would part.
#[test]
fn the_seconds_around_every_boundary_agree_with_the_model() {
    for zone_name in ZONES {
        for period in Period::ALL {
            for anchor in ANCHORS {
                let calendar = Calendar::new(period, zone_name, anchor).unwrap();
                let periods = calendar.periods();
                let (first, last) = (periods.index_at(SPAN.start), periods.index_at(SPAN.end));
                let around: Vec<i64> = (first..=last)
                    .flat_map(|k| {
                        let b = periods.boundary(k);
                        [b - 1, b, b + 1]
                    })
                    .collect();
                periods_agree(period, zone_name, anchor, &around);
            }
        }
    }
}

#[test]
fn the_edges_of_the_contract() {
    let second = |text: &str| text.parse::<Timestamp>().unwrap().as_second();
    let period = |calendar: &Calendar, at: &str| {
        let (start, end) = calendar.period_at(UNIX_EPOCH + Duration::from_secs(second(at) as u64));
        let text = |t: std::time::SystemTime| {
            Timestamp::from_second(t.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64)
                .unwrap()
                .to_string()
        };
        (text(start), text(end))
    };
    // An anchor on the 31st: the last day of shorter months.
    let month = Calendar::new(Period::Month, "UTC", Some("2026-01-31T00:00:00")).unwrap();
    assert_eq!(
        period(&month, "2026-03-01T00:00:00Z"),
        ("2026-02-28T00:00:00Z".into(), "2026-03-31T00:00:00Z".into())
    );
    assert_eq!(
        period(&month, "2028-02-29T12:00:00Z"),
        ("2028-02-29T00:00:00Z".into(), "2028-03-31T00:00:00Z".into())
    );
    // 02:30 on the night Berlin's clocks go forward is 03:30 CEST (01:30
    // UTC): the period that begins then lasts 23 hours.
    let day = Calendar::new(Period::Day, "Europe/Berlin", Some("2026-01-01T02:30:00")).unwrap();
    assert_eq!(
        period(&day, "2026-03-29T01:00:00Z"),
        ("2026-03-28T01:30:00Z".into(), "2026-03-29T01:30:00Z".into())
    );
    // 02:30 on the night they go back exists twice: the first one (CEST).
    assert_eq!(
        period(&day, "2026-10-25T01:00:00Z"),
        ("2026-10-25T00:30:00Z".into(), "2026-10-26T01:30:00Z".into())
    );
    // Samoa skipped 30 December 2011: the day of the 29th ends when the
    // 31st begins.
    let apia = Calendar::new(Period::Day, "Pacific/Apia", None).unwrap();
    assert_eq!(
        period(&apia, "2011-12-30T09:59:59Z"),
        ("2011-12-29T10:00:00Z".into(), "2011-12-30T10:00:00Z".into())
    );
    // An ISO week from Monday, and a quarter from April.
    let week = Calendar::new(Period::Week, "UTC", None).unwrap();
    assert_eq!(
        period(&week, "2026-12-06T12:00:00Z"),
        ("2026-11-30T00:00:00Z".into(), "2026-12-07T00:00:00Z".into())
    );
    let quarter = Calendar::new(Period::Quarter, "UTC", None).unwrap();
    assert_eq!(
        period(&quarter, "2026-05-17T00:00:00Z"),
        ("2026-04-01T00:00:00Z".into(), "2026-07-01T00:00:00Z".into())
    );
}

#[test]
fn equal_calendars_are_one_and_mistakes_are_named() {
    let a = Calendar::new(Period::Month, "Europe/Berlin", Some("2026-01-15T09:00:00")).unwrap();
    let b = Calendar::new(Period::Month, " Europe/Berlin ", Some("2026-01-15T09:00:00")).unwrap();
    assert_eq!(a, b);
    assert_ne!(a, Calendar::new(Period::Month, "Europe/Berlin", None).unwrap());
    assert_eq!(a.to_string(), "month from 2026-01-15T09:00:00 Europe/Berlin");

    let field = |e: ConfigError| (e.field().to_owned(), e.reason().to_owned());
    let (name, why) = field(Calendar::new(Period::Day, "Mars/Olympus", None).unwrap_err());
    assert_eq!(name, "time_zone");
    assert!(why.contains("Mars/Olympus"), "{why}");
    for (anchor, says) in [
        ("15 January", "not a local date and time"),
        ("2026-01-15T09:00:00.5", "fraction of a second"),
        ("1700-01-01T00:00:00", "outside the years"),
    ] {
        let (name, why) = field(Calendar::new(Period::Month, "UTC", Some(anchor)).unwrap_err());
        assert_eq!(name, "anchor");
        assert!(why.contains(says), "{anchor}: {why}");
    }
    let (name, why) = field("fortnight".parse::<Period>().unwrap_err());
    assert_eq!(name, "period");
    assert!(why.contains("fortnight"), "{why}");
}

proptest! {
    /// In microsecond ticks, as a store counting microseconds reads it, a
    /// period is the nanosecond one divided by 1,000.
    #[test]
    fn ticks_of_any_length_name_the_same_period(t in SPAN) {
        let calendar = Calendar::new(Period::Month, "America/New_York", None).unwrap();
        let periods = calendar.periods();
        let nanos = t as u64 * 1_000_000_000 + 123;
        let (start, end) = periods.period_at(nanos, 1);
        let (start_us, end_us) = periods.period_at(nanos / 1_000, 1_000);
        prop_assert_eq!((start / 1_000, end / 1_000), (start_us, end_us));
        prop_assert!(start <= nanos && nanos < end);
    }
}
