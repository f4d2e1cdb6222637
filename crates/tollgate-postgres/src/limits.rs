//! A policy's limits as the SQL functions take them: each limit's strategy
//! number, `L`, `W` and `T` in microseconds, checked to stay within the
//! functions' bounds, and a calendar window's periods made for each call.

use tollgate::backend::{BackendError, BackendErrorKind, Tick};
use tollgate::clock::{Clock, SharedClock, SystemClock};
use tollgate::strategy::{CalendarTicks, LimitRate};
use tollgate::{ConfigError, Error, Operation, Policy, Strategy};

/// The largest limit, window (in microseconds) and cost of an operation
/// the backend takes: 2^51, so that every time and count the functions
/// keep stays below 2^53 and every sum within PostgreSQL's `bigint`.
pub const MAX_OPERAND: u64 = 1 << 51;

/// A policy's limits, in the arrays the functions take.
#[derive(Debug)]
pub(crate) struct Limits {
    /// The limits in microsecond ticks, as the core's functions see them.
    pub(crate) rates: Box<[LimitRate]>,
    pub(crate) kinds: Vec<i16>,
    pub(crate) lims: Vec<i64>,
    pub(crate) wins: Vec<i64>,
    pub(crate) intvs: Vec<i64>,
    /// The calendar of each limit that counts in calendar periods, by index.
    calendars: Box<[(usize, CalendarTicks)]>,
    /// The largest `L`: every larger cost decides alike, so costs are sent
    /// clamped to it plus one.
    max_limit: u64,
}

impl Limits {
    /// The limits of `policy`, each checked against [`MAX_OPERAND`]; an
    /// error names the limit of a compound policy (`limits[1]`).
    pub(crate) fn of(policy: &Policy) -> Result<Self, Error> {
        let mut rates = Vec::with_capacity(policy.limits().len());
        for (i, limit) in policy.limits().iter().enumerate() {
            let rate = limit.rate_micros();
            check(
                limit.strategy(),
                rate.limit,
                rate.window,
                rate.calendar().is_some(),
            )
            .map_err(|err| {
                Error::Config(if policy.is_compound() {
                    err.within(format!("limits[{i}]"))
                } else {
                    err
                })
            })?;
            rates.push(LimitRate {
                strategy: limit.strategy(),
                rate,
            });
        }
        let number = |s: Strategy| match s {
            Strategy::FixedWindow => 1,
            Strategy::SlidingWindow => 2,
            Strategy::TokenBucket => 3,
            _ => 4,
        };
        Ok(Self {
            kinds: rates.iter().map(|l| number(l.strategy)).collect(),
            lims: rates.iter().map(|l| l.rate.limit as i64).collect(),
            wins: rates
                .iter()
                .map(|l| {
                    if l.rate.calendar().is_some() {
                        0
                    } else {
                        l.rate.window as i64
                    }
                })
                .collect(),
            intvs: rates.iter().map(|l| l.rate.interval as i64).collect(),
            calendars: rates
                .iter()
                .enumerate()
                .filter_map(|(i, l)| Some((i, l.rate.calendar()?)))
                .collect(),
            max_limit: rates.iter().map(|l| l.rate.limit).max().unwrap_or(1),
            rates: rates.into_boxed_slice(),
        })
    }

    /// Whether the policy is one fixed window of fixed length, which the
    /// schema decides in one statement per call (`decide_fixed_window`).
    pub(crate) fn is_one_fixed_window(&self) -> bool {
        self.kinds == [1] && self.calendars.is_empty()
    }

    /// A cost as the functions receive it.
    pub(crate) fn cost(&self, cost: u64) -> i64 {
        cost.min(self.max_limit + 1) as i64
    }

    /// Four calendar boundaries per limit (zeros for a window of fixed
    /// length): the period before the one that holds now on `clock` (the
    /// system clock when the database's decides), that period and the one
    /// after, so that the database's now finds its period when the two
    /// clocks straddle a boundary.
    pub(crate) fn spans(&self, clock: Option<&SharedClock>) -> Vec<i64> {
        let mut spans = vec![0; 4 * self.rates.len()];
        if self.calendars.is_empty() {
            return spans;
        }
        let nanos = clock.map_or_else(|| SystemClock.now_nanos(), |c| c.now_nanos());
        let now = Tick::Micros.from_nanos(nanos);
        for (i, calendar) in &*self.calendars {
            let (start, end) = calendar.period_at(now);
            let before = calendar.period_at(start.saturating_sub(1)).0;
            let after = calendar.period_at(end).1;
            spans[4 * i..4 * i + 4].copy_from_slice(&[before, start, end, after].map(|t| t as i64));
        }
        spans
    }
}

/// Refuses a limit beyond [`MAX_OPERAND`], naming the field.
fn check(strategy: Strategy, limit: u64, window: u64, calendar: bool) -> Result<(), ConfigError> {
    if strategy == Strategy::Concurrency {
        return Err(ConfigError::new(
            "strategy",
            "the PostgreSQL backend keeps rates, not permits of requests in flight: keep a \
             concurrency limit in memory or on Redis",
        ));
    }
    if limit > MAX_OPERAND {
        return Err(ConfigError::new(
            "limit",
            format!("{limit} exceeds 2^51 = {MAX_OPERAND}, the largest limit on the PostgreSQL backend"),
        ));
    }
    if window > MAX_OPERAND && !calendar {
        return Err(ConfigError::new(
            "window",
            format!(
                "{window}µs exceeds 2^51µs = {MAX_OPERAND}µs (about 71 years), the longest window on \
                 the PostgreSQL backend"
            ),
        ));
    }
    Ok(())
}

/// An operation's name as `operate` takes it and its amount: the cost of
/// a refund or penalty, the length of a block in microseconds, 0 for a
/// reset.
pub(crate) fn operation_amount(op: Operation) -> Result<(&'static str, i64), BackendError> {
    let unsupported = |what: String| BackendError::new(BackendErrorKind::Unsupported, what);
    match op {
        Operation::Reset => Ok(("reset", 0)),
        Operation::Block(d) => {
            let micros = Tick::Micros.from_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
            Ok(("block", micros.min(MAX_OPERAND << 1) as i64))
        }
        Operation::Refund(cost) | Operation::Penalty(cost) if cost > MAX_OPERAND => {
            Err(unsupported(format!(
                "{} cost {cost} exceeds 2^51 = {MAX_OPERAND}, the largest cost of a per-key operation on \
             the PostgreSQL backend",
                op.name()
            )))
        }
        Operation::Refund(cost) => Ok(("refund", cost as i64)),
        Operation::Penalty(cost) => Ok(("penalty", cost as i64)),
        _ => Err(unsupported(format!(
            "the PostgreSQL backend does not know the operation {}",
            op.name()
        ))),
    }
}
