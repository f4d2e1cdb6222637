//! One policy as written: a single limit (`limit`, `window` or
//! `calendar`, optionally `strategy`; or `strategy: concurrency` with
//! `limit` and `ttl`), or `limits`, a list of rate limits decided together
//! (a compound policy), in a resource's list with at most one concurrency
//! limit beside them, beside the fields its place in the file takes
//! ([`Beside`]). Mistakes are reported at the value they
//! concern, an element of `limits` by its index (`limits[1].window`).

use std::convert::Infallible;
use std::fmt;
use std::time::Duration;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use tollgate::calendar::Calendar;
use tollgate::{ConfigError, Limit, Policy, Strategy};

use crate::fields::{deserialize_any_with, next};
use crate::setting_field::SettingField;
use crate::values::{self, CalendarSetting, StrategyName, Window};

/// One policy entry, as written.
pub(crate) enum RawPolicy {
    /// `limit`, `window` and optionally `strategy`.
    One(RawLimit),
    /// `limits`: one or more limits, decided together.
    Several(Vec<RawLimit>),
}

/// One limit, as written; without `strategy` it takes the file's
/// `tollgate.strategy` when the policy is resolved (a calendar window is a
/// fixed window whatever that is).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawLimit {
    limit: u64,
    span: Span,
    strategy: Option<Strategy>,
}

/// What a limit counts in: windows of `window`, or a calendar's periods.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Span {
    Window(Duration),
    Calendar(Calendar),
}

impl Span {
    /// `window` or `calendar`, whichever was given: an error when both
    /// or neither were.
    fn given<E: de::Error>(window: Option<Window>, calendar: Option<CalendarSetting>) -> Result<Self, E> {
        match (window, calendar) {
            (Some(Window(window)), None) => Ok(Span::Window(window)),
            (None, Some(CalendarSetting(calendar))) => Ok(Span::Calendar(calendar)),
            (None, None) => Err(de::Error::missing_field("window")),
            (Some(_), Some(_)) => Err(de::Error::custom(window_and_calendar())),
        }
    }

    /// The span of a policy of one limit: a concurrency limit's `ttl`
    /// (30 s unless given), which takes no `window` or `calendar`; any
    /// other limit's `window` or `calendar`, which takes no `ttl`.
    fn of_one<E: de::Error>(
        strategy: Option<Strategy>,
        window: Option<Window>,
        calendar: Option<CalendarSetting>,
        ttl: Option<Window>,
    ) -> Result<Self, E> {
        if strategy != Some(Strategy::Concurrency) {
            if ttl.is_some() {
                return Err(de::Error::custom(
                    "`ttl` is how long a permit of strategy concurrency lasts; a rate limit takes \
                     `window` (or `calendar`): give `strategy: concurrency`, or leave `ttl` out",
                ));
            }
            return Self::given(window, calendar);
        }
        if window.is_some() || calendar.is_some() {
            let given = if window.is_some() { "window" } else { "calendar" };
            return Err(de::Error::custom(format!(
                "strategy concurrency limits what requests hold at once, not a rate: it takes \
                 `limit` and `ttl` (how long a permit lasts unless extended, {}s by default), \
                 not `{given}`",
                DEFAULT_TTL.as_secs()
            )));
        }
        Ok(Span::Window(ttl.map_or(DEFAULT_TTL, |t| t.0)))
    }

    /// Refuses a calendar under any strategy but the fixed window.
    fn check_strategy(self, strategy: Option<Strategy>) -> Result<(), String> {
        match (self, strategy) {
            (Span::Calendar(_), Some(strategy)) if strategy != Strategy::FixedWindow => Err(format!(
                "strategy {strategy} cannot count in a calendar's periods: only fixed_window takes \
                 `calendar` (a sliding window weighs windows of one length, a bucket refills at \
                 one rate); give `window` instead, or strategy fixed_window"
            )),
            _ => Ok(()),
        }
    }
}

impl RawPolicy {
    /// The validated policy, each limit that names no strategy taking
    /// `fallback`.
    ///
    /// # Errors
    ///
    /// The core's [`ConfigError`], its field relative to the policy (such
    /// as `limits[1]`): two limits that share a strategy and a window once
    /// `fallback` fills in the strategy one of them leaves out. (Everything
    /// that can be checked without `fallback` is checked, with its line,
    /// while the file is read.)
    ///
    /// A list that combines rates with a concurrency limit gives its rates
    /// here, and the concurrency limit in [`RawPolicy::in_flight`]; a list
    /// of a concurrency limit alone is that limit.
    pub(crate) fn policy(&self, fallback: Strategy) -> Result<Policy, ConfigError> {
        let limits = match self {
            RawPolicy::One(limit) => return limit.resolve(fallback).map(Policy::from),
            RawPolicy::Several(limits) => limits,
        };
        // The rates, by their index in the list as written.
        let rates: Vec<(usize, &RawLimit)> = limits
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.is_concurrency())
            .collect();
        if rates.is_empty() {
            return limits[0]
                .resolve(fallback)
                .map(Policy::from)
                .map_err(|e| e.within("limits[0]"));
        }
        let resolved = rates
            .iter()
            .map(|(i, limit)| {
                limit
                    .resolve(fallback)
                    .map_err(|e| e.within(format!("limits[{i}]")))
            })
            .collect::<Result<Vec<Limit>, _>>()?;
        Policy::compound(resolved).map_err(|err| {
            // The core names the rates by their index among the rates.
            let field = (0..rates.len())
                .find(|j| err.field() == format!("limits[{j}]"))
                .map_or_else(|| err.field().to_owned(), |j| format!("limits[{}]", rates[j].0));
            let mut reason = err.reason().to_owned();
            if limits.iter().any(|l| l.strategy.is_none()) {
                reason = format!(
                    "{reason}; a limit without `strategy` takes `tollgate.strategy`, here {fallback}"
                );
            }
            ConfigError::new(field, reason)
        })
    }

    /// The concurrency limit a list combines with its rates: the permits
    /// a resource's requests hold while they run, besides the rates
    /// [`RawPolicy::policy`] gives. `None` for a policy of rates only, and
    /// for a concurrency limit alone (which is the policy itself).
    pub(crate) fn in_flight(&self) -> Option<Policy> {
        let RawPolicy::Several(limits) = self else {
            return None;
        };
        let slots = limits.iter().find(|l| l.is_concurrency())?;
        if limits.len() == 1 {
            return None;
        }
        // Checked as the file was read (a concurrency limit names its
        // strategy, and its limit and ttl are Limit::new's).
        slots.resolve(Strategy::Concurrency).ok().map(Policy::from)
    }

    /// Whether the policy, as written, holds a concurrency limit.
    fn holds_concurrency(limits: &[RawLimit]) -> bool {
        limits.iter().any(RawLimit::is_concurrency)
    }
}

impl RawLimit {
    /// Whether this is a concurrency limit.
    fn is_concurrency(&self) -> bool {
        self.strategy == Some(Strategy::Concurrency)
    }

    /// The limit, with `fallback` when it names no strategy.
    fn resolve(&self, fallback: Strategy) -> Result<Limit, ConfigError> {
        match self.span {
            Span::Window(window) => Limit::new(self.strategy.unwrap_or(fallback), self.limit, window),
            Span::Calendar(calendar) => {
                self.span
                    .check_strategy(self.strategy)
                    .map_err(|reason| ConfigError::new("strategy", reason))?;
                Limit::per_calendar(self.limit, calendar)
            }
        }
    }
}

/// What a policy that is not a map was expected to be.
const EXPECTING_POLICY: &str = "a policy: a map with `limit`, `window` (or `calendar`) and optionally \
                                `strategy`, or with `limits`, a list of such maps";

/// The fields of a policy's limits: all a policy gives where it takes no
/// settings.
pub(crate) const LIMIT_FIELDS: &[&str] = &["limit", "window", "calendar", "strategy", "ttl", "limits"];

/// How long a permit of a concurrency limit lasts unless the policy gives
/// `ttl`.
pub(crate) const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The fields a policy gives beside its limits, which depend on where it
/// is written (a resource takes its settings, a `fallback` none): what
/// [`read_policy`] leaves to the place, and what the place keeps of them.
pub(crate) trait Beside {
    /// A field beside the limits.
    type Field;

    /// Every field a policy here may give, for the message of an unknown
    /// one.
    const FIELDS: &'static [&'static str];

    /// Whether a policy here may combine its rates with a concurrency
    /// limit in `limits` (a resource's may; the default's and a
    /// fallback's decide rates only).
    const COMBINES_IN_FLIGHT: bool;

    /// The field called `name`: `Ok(None)` when no policy gives it
    /// anywhere, the message of the mistake when a policy gives it
    /// elsewhere but not here.
    fn field(&self, name: &str) -> Result<Option<Self::Field>, String>;

    /// Reads the value of `field` from `map`.
    fn read<'de, A: MapAccess<'de>>(&mut self, field: Self::Field, map: &mut A) -> Result<(), A::Error>;
}

/// Nothing beside a policy's limits: a setting is refused with the
/// message the function gives for its name.
pub(crate) struct LimitsOnly(pub(crate) fn(&str) -> String);

impl Beside for LimitsOnly {
    type Field = Infallible;

    const FIELDS: &'static [&'static str] = LIMIT_FIELDS;

    const COMBINES_IN_FLIGHT: bool = false;

    fn field(&self, name: &str) -> Result<Option<Infallible>, String> {
        match SettingField::named(name) {
            Some(_) => Err((self.0)(name)),
            None => Ok(None),
        }
    }

    fn read<'de, A: MapAccess<'de>>(&mut self, field: Infallible, _: &mut A) -> Result<(), A::Error> {
        match field {}
    }
}

/// Reads a policy map: its limits, and the fields beside them into
/// `beside`.
pub(crate) fn read_policy<'de, B: Beside, D: Deserializer<'de>>(
    deserializer: D,
    beside: B,
) -> Result<(RawPolicy, B), D::Error> {
    deserializer.deserialize_any(PolicyVisitor(beside))
}

/// A field of a policy.
enum PolicyField<F> {
    Limit,
    Window,
    Calendar,
    Strategy,
    Ttl,
    Limits,
    Beside(F),
}

/// Reads a policy's field name, refusing the names `B` does not take.
struct PolicyKey<'a, B>(&'a B);

impl<'de, B: Beside> DeserializeSeed<'de> for PolicyKey<'_, B> {
    type Value = PolicyField<B::Field>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_identifier(self)
    }
}

impl<B: Beside> Visitor<'_> for PolicyKey<'_, B> {
    type Value = PolicyField<B::Field>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, name: &str) -> Result<Self::Value, E> {
        Ok(match name {
            "limit" => PolicyField::Limit,
            "window" => PolicyField::Window,
            "calendar" => PolicyField::Calendar,
            "strategy" => PolicyField::Strategy,
            "ttl" => PolicyField::Ttl,
            "limits" => PolicyField::Limits,
            _ => match self.0.field(name) {
                Ok(Some(field)) => PolicyField::Beside(field),
                Ok(None) => return Err(E::unknown_field(name, B::FIELDS)),
                Err(refused) => return Err(E::custom(refused)),
            },
        })
    }
}

/// `limits` given beside `field`, one of the fields of a single limit.
fn single_and_list(field: &str) -> String {
    format!(
        "`{field}` and `limits` are mutually exclusive: a policy is one limit (`limit`, `window` \
         or `calendar`, and optionally `strategy`) or a list of limits (`limits`), not both"
    )
}

/// A concurrency limit in the `limits` of a policy that decides rates
/// only (the default, a fallback).
fn in_flight_not_here() -> String {
    "holds a concurrency limit, which only a resource's `limits` may combine with its rates: \
     the default policy and a fallback decide rates (give the concurrency limit to the \
     resources whose requests hold it)"
        .to_owned()
}

/// `window` given beside `calendar`, or the other way round.
fn window_and_calendar() -> String {
    "`window` and `calendar` are mutually exclusive: a limit counts in windows of one length \
     (`window`) or in the periods of a calendar (`calendar`)"
        .to_owned()
}

/// Reads a policy, the fields beside its limits into `B`.
struct PolicyVisitor<B>(B);

impl<'de, B: Beside> Visitor<'de> for PolicyVisitor<B> {
    type Value = (RawPolicy, B);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(EXPECTING_POLICY)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut limit: Option<values::Limit> = None;
        let mut window: Option<Window> = None;
        let mut calendar: Option<CalendarSetting> = None;
        let mut strategy: Option<StrategyName> = None;
        let mut ttl: Option<Window> = None;
        let mut limits: Option<LimitList> = None;
        let mut beside = self.0;
        while let Some(field) = map.next_key_seed(PolicyKey(&beside))? {
            // A field of one limit after `limits`, or `limits` after one.
            let listed = limits.is_some();
            let single = [
                ("limit", limit.is_some()),
                ("window", window.is_some()),
                ("calendar", calendar.is_some()),
                ("strategy", strategy.is_some()),
                ("ttl", ttl.is_some()),
            ]
            .into_iter()
            .find(|(_, given)| *given)
            .map(|(name, _)| name);
            let beside_list = |name: &str| listed.then(|| single_and_list(name));
            let (has_window, has_calendar) = (window.is_some(), calendar.is_some());
            let named = strategy.as_ref().map(|s| s.0);
            match field {
                PolicyField::Limit => limit = Some(next(&mut map, &limit, |_| beside_list("limit"))?),
                PolicyField::Window => {
                    window = Some(next(&mut map, &window, |_| {
                        beside_list("window").or_else(|| has_calendar.then(window_and_calendar))
                    })?);
                }
                PolicyField::Calendar => {
                    calendar = Some(next(&mut map, &calendar, |c: &CalendarSetting| {
                        beside_list("calendar")
                            .or_else(|| has_window.then(window_and_calendar))
                            .or_else(|| Span::Calendar(c.0).check_strategy(named).err())
                    })?);
                }
                PolicyField::Strategy => {
                    let counted = calendar.as_ref().map(|c| Span::Calendar(c.0));
                    strategy = Some(next(&mut map, &strategy, |s: &StrategyName| {
                        beside_list("strategy").or_else(|| counted?.check_strategy(Some(s.0)).err())
                    })?);
                }
                PolicyField::Ttl => ttl = Some(next(&mut map, &ttl, |_| beside_list("ttl"))?),
                PolicyField::Limits => {
                    limits = Some(next(&mut map, &limits, |list: &LimitList| {
                        single.map(single_and_list).or_else(|| {
                            let refused = !B::COMBINES_IN_FLIGHT && RawPolicy::holds_concurrency(&list.0);
                            refused.then(in_flight_not_here)
                        })
                    })?);
                }
                PolicyField::Beside(field) => beside.read(field, &mut map)?,
            }
        }
        let policy = match limits {
            Some(LimitList(limits)) => RawPolicy::Several(limits),
            None => {
                let limit = limit.ok_or_else(|| de::Error::missing_field("limit"))?.0;
                let strategy = strategy.map(|s| s.0);
                let span = Span::of_one(strategy, window, calendar, ttl)?;
                span.check_strategy(strategy).map_err(de::Error::custom)?;
                RawPolicy::One(RawLimit {
                    limit,
                    span,
                    strategy,
                })
            }
        };
        Ok((policy, beside))
    }
}

/// One element of `limits`: a map with `limit`, `window` or `calendar`,
/// and optionally `strategy`; or `strategy: concurrency` with `limit` and
/// optionally `ttl`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitFields {
    limit: values::Limit,
    #[serde(default)]
    window: Option<Window>,
    #[serde(default)]
    calendar: Option<CalendarSetting>,
    #[serde(default)]
    strategy: Option<StrategyName>,
    #[serde(default)]
    ttl: Option<Window>,
}

/// One element of `limits`, read after the elements `before` and checked
/// against them ([`check_another`]). The check runs inside the element's
/// map, so that every format reports it at the element's line.
struct AnotherLimit<'a> {
    before: &'a [RawLimit],
}

impl<'de> DeserializeSeed<'de> for AnotherLimit<'_> {
    type Value = RawLimit;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<RawLimit, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for AnotherLimit<'_> {
    type Value = RawLimit;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a limit: a map with `limit`, `window` (or `calendar`) and optionally `strategy`")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawLimit, A::Error> {
        let fields = LimitFields::deserialize(de::value::MapAccessDeserializer::new(map))?;
        let strategy = fields.strategy.map(|s| s.0);
        let span = Span::of_one(strategy, fields.window, fields.calendar, fields.ttl)?;
        span.check_strategy(strategy).map_err(de::Error::custom)?;
        let limit = RawLimit {
            limit: fields.limit.0,
            span,
            strategy,
        };
        check_another(self.before, limit).map_err(de::Error::custom)?;
        Ok(limit)
    }
}

/// `limits`: one to [`tollgate::Policy::MAX_LIMITS`] limits, no two with the same strategy
/// and window.
struct LimitList(Vec<RawLimit>);

deserialize_any_with!(LimitList, LimitListVisitor);

struct LimitListVisitor;

impl<'de> Visitor<'de> for LimitListVisitor {
    type Value = LimitList;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a list of limits, each a map with `limit`, `window` (or `calendar`) and optionally `strategy`",
        )
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<LimitList, A::Error> {
        let mut limits: Vec<RawLimit> = Vec::new();
        while let Some(limit) = seq.next_element_seed(AnotherLimit { before: &limits })? {
            limits.push(limit);
        }
        if limits.is_empty() {
            return Err(de::Error::custom(
                "lists no limit; give at least one, or give one limit with `limit` and `window` \
                 instead of `limits`",
            ));
        }
        Ok(LimitList(limits))
    }
}

/// Checks `limit`, read after `before`: within [`tollgate::Policy::MAX_LIMITS`] rates, at
/// most one concurrency limit, and not the
/// strategy and window of an earlier limit as written (both naming the
/// same strategy, or both none). A limit that names a strategy and one that
/// takes `tollgate.strategy` are compared once the file is read
/// ([`RawPolicy::policy`]).
fn check_another(before: &[RawLimit], limit: RawLimit) -> Result<(), String> {
    // The rates fill a compound policy; a concurrency limit is held apart.
    let rates = before.iter().filter(|l| !l.is_concurrency()).count();
    if !limit.is_concurrency() && rates >= tollgate::Policy::MAX_LIMITS {
        return Err(format!(
            "one limit too many: a policy holds at most {} limits, besides a concurrency limit",
            tollgate::Policy::MAX_LIMITS
        ));
    }
    if let Some(j) = limit
        .is_concurrency()
        .then(|| before.iter().position(RawLimit::is_concurrency))
        .flatten()
    {
        return Err(format!(
            "is a second concurrency limit: limits[{j}] is one already, and a resource's \
             requests hold one permit while they run; keep one concurrency limit (the smaller \
             `limit`) beside the rates"
        ));
    }
    let same = |other: &RawLimit| other.strategy == limit.strategy && other.span == limit.span;
    let Some(j) = before.iter().position(same) else {
        return Ok(());
    };
    let window = match limit.span {
        Span::Window(window) => humantime::format_duration(window).to_string(),
        Span::Calendar(calendar) => calendar.to_string(),
    };
    let what = match limit.strategy {
        Some(strategy) => {
            format!("has the same strategy and window as limits[{j}] ({strategy} per {window})")
        }
        None => format!(
            "has the same window as limits[{j}] ({window}) and, like it, no `strategy` (both take \
             `tollgate.strategy`)"
        ),
    };
    Err(format!(
        "{what}; keep only the smaller limit, the larger could never deny"
    ))
}
