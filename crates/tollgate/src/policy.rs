//! Validated policies: one or several limits, each a strategy, a limit and
//! a window.

use std::fmt;
use std::time::Duration;

use crate::calendar::Calendar;
use crate::error::ConfigError;
use crate::strategy::{CalendarTicks, LimitRate, Rate, Strategy, Tick, MAX_LIMIT};

/// The longest window a policy accepts ([`Policy::MAX_WINDOW`]).
pub(crate) const MAX_WINDOW: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// One validated limit: a strategy, a limit `L` and a window `W`, or a
/// fixed window over the periods of a [`Calendar`].
///
/// Build one with [`Limit::new`] or [`Limit::per_calendar`]; every
/// instance is known to be valid. A [`Policy`] holds one limit or several
/// decided together.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limit {
    strategy: Strategy,
    /// The periods of a calendar window (two bytes, so that a limit stays
    /// 24 bytes).
    calendar: Option<Calendar>,
    limit: u64,
    /// `W` in nanoseconds: at most [`Policy::MAX_WINDOW`](crate::Policy::MAX_WINDOW), so it fits, and 8 bytes
    /// where a `Duration` takes 16 (a [`Policy`] holds [`Policy::MAX_LIMITS`](crate::Policy::MAX_LIMITS)).
    /// For a calendar window, its period's longest length.
    window_nanos: u64,
}

impl fmt::Debug for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("Limit");
        debug
            .field("strategy", &self.strategy)
            .field("limit", &self.limit);
        match self.calendar {
            Some(calendar) => debug.field("calendar", &calendar),
            None => debug.field("window", &self.window()),
        };
        debug.finish()
    }
}

/// Checks a window's bounds, naming `window`: longer than zero, at least
/// one microsecond, at most [`MAX_WINDOW`].
fn check_window(window: Duration) -> Result<(), ConfigError> {
    if window.is_zero() {
        return Err(ConfigError::new("window", "must be longer than zero"));
    }
    if window < Duration::from_micros(1) {
        return Err(ConfigError::new(
            "window",
            format!("{window:?} is shorter than the 1µs resolution shared by all backends"),
        ));
    }
    if window > MAX_WINDOW {
        return Err(ConfigError::new(
            "window",
            format!(
                "{}s exceeds the maximum of {}s (100 years)",
                window.as_secs(),
                MAX_WINDOW.as_secs()
            ),
        ));
    }
    Ok(())
}

impl Limit {
    /// Validates and builds a limit.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming `limit` when it is 0 or above [`Policy::MAX_LIMIT`](crate::Policy::MAX_LIMIT)
    /// (2^62), or `window` when it is zero, shorter than one microsecond, or
    /// longer than [`Policy::MAX_WINDOW`](crate::Policy::MAX_WINDOW). For
    /// [`Strategy::Concurrency`] the window is the permits' `ttl`, and its
    /// errors name `ttl`.
    pub fn new(strategy: Strategy, limit: u64, window: Duration) -> Result<Self, ConfigError> {
        if limit == 0 {
            return Err(ConfigError::new("limit", "must be at least 1"));
        }
        if limit > MAX_LIMIT {
            return Err(ConfigError::new(
                "limit",
                format!(
                    "{limit} exceeds 2^62 = {MAX_LIMIT}, the maximum limit, within which every \
                     time and product the strategies compute is exact"
                ),
            ));
        }
        check_window(window).map_err(|err| match strategy {
            Strategy::Concurrency => ConfigError::new("ttl", err.reason().to_owned()),
            _ => err,
        })?;
        Ok(Self {
            strategy,
            calendar: None,
            limit,
            // At most MAX_WINDOW, checked above.
            window_nanos: window.as_nanos() as u64,
        })
    }

    /// Validates and builds a fixed window of `limit` units per period of
    /// `calendar` ("10,000 a month"): each period is a bucket, and `reset`
    /// and `retry_after` name the next boundary exactly. Only the fixed
    /// window takes a calendar ([calendar
    /// windows](crate::_documentation::semantics#calendar-windows) says
    /// why).
    ///
    /// ```
    /// use tollgate::calendar::{Calendar, Period};
    /// use tollgate::{Limit, Strategy};
    ///
    /// let monthly = Limit::per_calendar(10_000, Calendar::new(Period::Month, "UTC", None)?)?;
    /// assert_eq!(monthly.strategy(), Strategy::FixedWindow);
    /// assert_eq!(monthly.to_string(), "fixed_window 10000 per month from 2001-01-01T00:00:00 UTC");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming `limit`, as for [`Limit::new`].
    pub fn per_calendar(limit: u64, calendar: Calendar) -> Result<Self, ConfigError> {
        let mut built = Self::new(Strategy::FixedWindow, limit, calendar.period().longest())?;
        built.calendar = Some(calendar);
        Ok(built)
    }

    /// The calendar whose periods are the windows, for a limit built with
    /// [`Limit::per_calendar`].
    pub fn calendar(&self) -> Option<Calendar> {
        self.calendar
    }

    /// What the limit counts in: its window (`60s`) or its calendar
    /// (`month from 2001-01-01T00:00:00 UTC`).
    fn span(&self) -> String {
        match self.calendar {
            Some(calendar) => calendar.to_string(),
            None => format!("{:?}", self.window()),
        }
    }

    /// Whether `other` counts in the same state as this limit: the same
    /// strategy over the same windows (its `L` may differ).
    pub(crate) fn same_windows(&self, other: &Limit) -> bool {
        self.strategy == other.strategy
            && self.window_nanos == other.window_nanos
            && self.calendar == other.calendar
    }

    /// The strategy.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// `L`, the units admitted per window.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// `W`, the window; for a calendar window, the longest its period can
    /// last ([`Period::longest`](crate::calendar::Period::longest)).
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window_nanos)
    }

    /// The rate in nanosecond ticks (the in-memory clock unit).
    pub fn rate_nanos(&self) -> Rate {
        self.rate(Tick::Nanos)
    }

    /// The rate in microsecond ticks, rounding the window down to whole
    /// microseconds (used by backends whose clock counts microseconds).
    pub fn rate_micros(&self) -> Rate {
        self.rate(Tick::Micros)
    }

    /// The rate in `tick`s, with the calendar when there is one.
    pub(crate) fn rate(&self, tick: Tick) -> Rate {
        // MAX_WINDOW in nanoseconds is below MAX_WINDOW_TICKS.
        let window = tick.from_nanos(self.window_nanos);
        match self.calendar {
            Some(calendar) => Rate::per_calendar(self.limit, CalendarTicks { calendar, tick }, window),
            None => Rate::new(self.limit, window),
        }
    }
}

impl fmt::Display for Limit {
    /// `token_bucket 10 per 1s`, or for a concurrency limit
    /// `concurrency 4 at once, ttl 30s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.strategy.is_concurrency() {
            return write!(f, "concurrency {} at once, ttl {:?}", self.limit, self.window());
        }
        write!(f, "{} {} per {}", self.strategy, self.limit, self.span())
    }
}

/// The most limits one [`Policy`] may hold ([`Policy::MAX_LIMITS`]).
pub(crate) const MAX_LIMITS: usize = 8;

/// What a resource enforces: one [`Limit`], or several decided together as
/// one atomic step (a compound policy).
///
/// A request is admitted only when every limit admits it, and then every
/// limit is charged; when any limit denies, none is charged.
/// [Several limits on one request](crate::_documentation::semantics#several-limits-on-one-request-compound-policies)
/// gives the exact rules for `remaining`, `reset`, `retry_after` and the limit
/// that bound a decision ([`Decision::bound_by`](crate::Decision::bound_by)).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limit, Policy, Strategy};
///
/// // A burst cap and a sustained cap on the same keys.
/// let policy = Policy::compound([
///     Limit::new(Strategy::TokenBucket, 10, Duration::from_secs(1))?,
///     Limit::new(Strategy::SlidingWindow, 1_000, Duration::from_secs(3_600))?,
/// ])?;
/// assert_eq!(policy.limits().len(), 2);
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Policy {
    /// The limits in `limits[..len]`; the slots after them hold [`UNUSED`],
    /// so that equal policies are equal field by field.
    limits: [Limit; MAX_LIMITS],
    len: u8,
}

/// What fills the unused slots of a [`Policy`].
const UNUSED: Limit = Limit {
    strategy: Strategy::FixedWindow,
    calendar: None,
    limit: 1,
    window_nanos: 1_000_000_000,
};

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy").field("limits", &self.limits()).finish()
    }
}

impl Policy {
    /// The largest limit `L` of any limit of a policy: 2^62, within which
    /// every time and product the strategies compute is exact.
    pub const MAX_LIMIT: u64 = MAX_LIMIT;

    /// The most limits one policy may hold.
    pub const MAX_LIMITS: usize = MAX_LIMITS;

    /// The longest window a policy accepts: 100 years of 365 days. It keeps
    /// the window in nanoseconds below
    /// [`MAX_WINDOW_TICKS`](crate::strategy::MAX_WINDOW_TICKS), within which
    /// all decision arithmetic is exact; longer windows serve no real use.
    pub const MAX_WINDOW: Duration = MAX_WINDOW;

    /// A policy of one limit; the same as [`Limit::new`] then
    /// [`Policy::from`].
    ///
    /// # Errors
    ///
    /// As for [`Limit::new`].
    pub fn new(strategy: Strategy, limit: u64, window: Duration) -> Result<Self, ConfigError> {
        Limit::new(strategy, limit, window).map(Self::from)
    }

    /// A policy that admits nothing: a fixed window of `window` whose limit
    /// is 0. Every request of a cost of 1 or more is denied, with nothing
    /// `remaining`, `reset` at the end of the current window (windows are
    /// aligned to the clock, as a fixed window's are) and no `retry_after`:
    /// it is never admitted. A peek (cost 0) is denied too: no unit request
    /// would be admitted. No store is asked and no state is kept: the limiter answers at once, on
    /// every backend (its shadow mode, key lists, metrics and top keys
    /// apply as to any decision). This is what Envoy's
    /// `requests_per_unit: 0` means; [`Limit::new`] refuses a limit of 0,
    /// so that a 0 written by mistake is not taken for "deny everything".
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limiter, Policy};
    ///
    /// let limiter = Limiter::builder().policy(Policy::zero(Duration::from_secs(60))?).build()?;
    /// let d = limiter.check("k");
    /// assert!(!d.allowed);
    /// assert_eq!((d.limit, d.remaining, d.retry_after), (0, 0, None));
    /// assert!(d.reset <= Duration::from_secs(60));
    /// # Ok::<(), tollgate::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming `window`, as for [`Limit::new`].
    pub fn zero(window: Duration) -> Result<Self, ConfigError> {
        check_window(window)?;
        Ok(Self::from(Limit {
            strategy: Strategy::FixedWindow,
            calendar: None,
            limit: 0,
            window_nanos: window.as_nanos() as u64,
        }))
    }

    /// Whether the policy admits nothing ([`Policy::zero`]): one of its
    /// limits is 0.
    pub fn admits_nothing(&self) -> bool {
        self.limits().iter().any(|l| l.limit == 0)
    }

    /// A policy of several limits, decided together in the order given
    /// (which only breaks ties when naming the limit that bound a decision).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming `limits` when there are none or more than
    /// [`Policy::MAX_LIMITS`](crate::Policy::MAX_LIMITS), or `limits[i]` when two limits share a strategy and a
    /// window (the one with the larger limit could never deny: keep the
    /// smaller). A strategy and a window identify a limit's state, so a
    /// limit can later change its `L` and keep its state.
    pub fn compound(limits: impl IntoIterator<Item = Limit>) -> Result<Self, ConfigError> {
        let given: Vec<Limit> = limits.into_iter().take(MAX_LIMITS + 1).collect();
        let limits = &given[..];
        if limits.is_empty() {
            return Err(ConfigError::new("limits", "must hold at least one limit"));
        }
        if limits.len() > MAX_LIMITS {
            return Err(ConfigError::new(
                "limits",
                format!("holds more than {MAX_LIMITS} limits, the most one policy may hold"),
            ));
        }
        for (i, limit) in limits.iter().enumerate() {
            if limit.strategy.is_concurrency() && limits.len() > 1 {
                return Err(ConfigError::new(
                    format!("limits[{i}]"),
                    "is a concurrency limit, which stands alone in its policy: a resource \
                     cannot yet combine it with other limits",
                ));
            }
            if let Some(j) = limits[..i].iter().position(|l| l.same_windows(limit)) {
                return Err(ConfigError::new(
                    format!("limits[{i}]"),
                    format!(
                        "has the same strategy and window as limits[{j}] ({} per {}); keep \
                         only the smaller limit, the larger could never deny",
                        limit.strategy,
                        limit.span()
                    ),
                ));
            }
        }
        let mut slots = [UNUSED; MAX_LIMITS];
        slots[..limits.len()].copy_from_slice(limits);
        Ok(Self {
            limits: slots,
            len: limits.len() as u8,
        })
    }

    /// The limits, in the order given (never empty).
    pub fn limits(&self) -> &[Limit] {
        &self.limits[..usize::from(self.len)]
    }

    /// Whether the policy holds more than one limit.
    pub fn is_compound(&self) -> bool {
        self.len > 1
    }

    /// Every limit in the ticks of a backend's clock, as the compound
    /// decision ([`crate::strategy::decide_all`]) takes them. Windows round
    /// down to whole ticks.
    pub fn limit_rates(&self, tick: Tick) -> Vec<LimitRate> {
        self.limits()
            .iter()
            .map(|l| LimitRate {
                strategy: l.strategy(),
                rate: l.rate(tick),
            })
            .collect()
    }

    /// The limit of a single-limit policy, `None` for a compound one.
    pub fn single(&self) -> Option<&Limit> {
        match self.limits() {
            [one] => Some(one),
            _ => None,
        }
    }
}

impl From<Limit> for Policy {
    fn from(limit: Limit) -> Self {
        let mut limits = [UNUSED; MAX_LIMITS];
        limits[0] = limit;
        Self { limits, len: 1 }
    }
}

impl fmt::Display for Policy {
    /// The limits joined by ` and `, e.g.
    /// `token_bucket 10 per 1s and sliding_window 1000 per 3600s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, limit) in self.limits().iter().enumerate() {
            if i > 0 {
                f.write_str(" and ")?;
            }
            write!(f, "{limit}")?;
        }
        Ok(())
    }
}
