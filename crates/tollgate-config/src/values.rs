//! The values of the schema's fields: each is expanded (`${VAR}`), parsed
//! and validated as it is read, so that a mistake is reported at its line.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Unexpected, Visitor};
use serde::Deserialize;
use tollgate::calendar::{Calendar, Period};
use tollgate::{ConfigError, Policy, Strategy};

use crate::env;
use crate::fields::deserialize_any_with;

/// Expands `${VAR}` in a string value.
pub(crate) fn expanded<E: de::Error>(raw: &str) -> Result<Cow<'_, str>, E> {
    env::expand(raw).map_err(E::custom)
}

/// What is wrong with a limit beyond what 64 bits hold: it is over the
/// core's maximum ([`tollgate::Policy::MAX_LIMIT`]), said the same way in every
/// format.
pub(crate) fn limit_too_large() -> String {
    format!(
        "must be at most {} (2^62, the maximum limit, within which every time and product the \
         strategies compute is exact)",
        tollgate::Policy::MAX_LIMIT
    )
}

/// A value for messages: `"text"`, or `"text" (from "${VAR}")` when it came
/// from the environment.
pub(crate) fn shown(raw: &str, value: &str) -> String {
    let raw = env::unshield_braces(raw);
    if raw == value {
        format!("{value:?}")
    } else {
        format!("{value:?} (from {raw:?})")
    }
}

/// Checks a limit with [`Policy::new`]'s rules.
fn check_limit(limit: u64) -> Result<u64, ConfigError> {
    Policy::new(Strategy::FixedWindow, limit, Duration::from_secs(1)).map(|_| limit)
}

/// Checks a window with [`Policy::new`]'s rules.
fn check_window(window: Duration) -> Result<Duration, ConfigError> {
    Policy::new(Strategy::FixedWindow, 1, window).map(|_| window)
}

/// `limit`: a whole number of at least 1 (or a string holding one).
pub(crate) struct Limit(pub(crate) u64);
deserialize_any_with!(Limit, LimitVisitor);

struct LimitVisitor;

impl Visitor<'_> for LimitVisitor {
    type Value = Limit;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a whole number of requests, at least 1 (such as 100)")
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Limit, E> {
        check_limit(n).map(Limit).map_err(|e| E::custom(e.reason()))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Limit, E> {
        match u64::try_from(n) {
            Ok(n) => self.visit_u64(n),
            Err(_) => Err(E::invalid_value(Unexpected::Signed(n), &self)),
        }
    }

    /// TOML reads integers beyond 64 bits as 128-bit ones.
    fn visit_i128<E: de::Error>(self, n: i128) -> Result<Limit, E> {
        match u64::try_from(n) {
            Ok(n) => self.visit_u64(n),
            Err(_) if n > 0 => Err(E::custom(limit_too_large())),
            Err(_) => Err(E::invalid_value(Unexpected::Other("a negative number"), &self)),
        }
    }

    fn visit_u128<E: de::Error>(self, n: u128) -> Result<Limit, E> {
        match u64::try_from(n) {
            Ok(n) => self.visit_u64(n),
            Err(_) => Err(E::custom(limit_too_large())),
        }
    }

    /// YAML and JSON read integers beyond 64 bits as floating point; those
    /// are too large. Other floating-point values are not whole numbers.
    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Limit, E> {
        // 2^64, the first whole number that 64 bits do not hold.
        const BEYOND_U64: f64 = 18_446_744_073_709_551_616.0;
        if n.is_finite() && n >= BEYOND_U64 {
            Err(E::custom(limit_too_large()))
        } else {
            Err(E::invalid_type(Unexpected::Float(n), &self))
        }
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<Limit, E> {
        let text = expanded(raw)?;
        let digits = text.trim();
        match digits.parse::<u64>() {
            Ok(n) => self.visit_u64(n),
            Err(_) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
                Err(E::custom(limit_too_large()))
            }
            Err(_) => Err(E::custom(format!(
                "{} is not a whole number of requests (such as 100)",
                shown(raw, &text)
            ))),
        }
    }
}

/// `window`: a human-readable duration (`250ms`, `1s`, `1m`, `1h`, `1d`).
pub(crate) struct Window(pub(crate) Duration);
deserialize_any_with!(Window, WindowVisitor);

struct WindowVisitor;

impl Visitor<'_> for WindowVisitor {
    type Value = Window;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration with a unit, such as \"250ms\", \"1s\", \"1m\", \"1h\" or \"1d\"")
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<Window, E> {
        let text = expanded(raw)?;
        let window = humantime::parse_duration(text.trim())
            .map_err(|e| E::custom(format!("{} is not a duration ({e})", shown(raw, &text))))?;
        check_window(window)
            .map(Window)
            .map_err(|e| E::custom(e.reason()))
    }
}

/// `strategy`: one of the four strategy names.
pub(crate) struct StrategyName(pub(crate) Strategy);
deserialize_any_with!(StrategyName, StrategyVisitor);

struct StrategyVisitor;

impl Visitor<'_> for StrategyVisitor {
    type Value = StrategyName;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a strategy name: fixed_window, sliding_window, token_bucket, leaky_bucket or concurrency",
        )
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<StrategyName, E> {
        let text = expanded(raw)?;
        text.parse().map(StrategyName).map_err(E::custom)
    }
}

/// `fail_open`: `true` or `false` (or a string holding one).
pub(crate) struct Flag(pub(crate) bool);
deserialize_any_with!(Flag, FlagVisitor);

struct FlagVisitor;

impl Visitor<'_> for FlagVisitor {
    type Value = Flag;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("true or false")
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Flag, E> {
        Ok(Flag(value))
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<Flag, E> {
        let text = expanded(raw)?;
        match text.trim() {
            "true" => Ok(Flag(true)),
            "false" => Ok(Flag(false)),
            _ => Err(E::custom(format!("{} is not true or false", shown(raw, &text)))),
        }
    }
}

/// `calendar`: `{ period, time_zone, anchor }`, the periods a calendar
/// window counts in, in place of `window`.
pub(crate) struct CalendarSetting(pub(crate) Calendar);
deserialize_any_with!(CalendarSetting, CalendarVisitor);

/// What `calendar` holds, each part read (and expanded) at its own line.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CalendarFields {
    period: PeriodName,
    #[serde(default)]
    time_zone: Option<Text>,
    #[serde(default)]
    anchor: Option<Text>,
}

struct CalendarVisitor;

impl<'de> Visitor<'de> for CalendarVisitor {
    type Value = CalendarSetting;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a calendar: a map with `period` (day, week, month, quarter or year) and optionally \
             `time_zone` (an IANA name, UTC by default) and `anchor` (a local date and time such \
             as \"2026-01-15T09:00:00\")",
        )
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<CalendarSetting, A::Error> {
        let fields = CalendarFields::deserialize(de::value::MapAccessDeserializer::new(map))?;
        let zone = fields.time_zone.as_ref().map_or("UTC", |z| z.0.as_str());
        Calendar::new(
            fields.period.0,
            zone,
            fields.anchor.as_ref().map(|a| a.0.as_str()),
        )
        .map(CalendarSetting)
        .map_err(|e| de::Error::custom(e.to_string()))
    }
}

/// `calendar.period`: `day`, `week`, `month`, `quarter` or `year`.
struct PeriodName(Period);
deserialize_any_with!(PeriodName, PeriodVisitor);

struct PeriodVisitor;

impl Visitor<'_> for PeriodVisitor {
    type Value = PeriodName;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a period: day, week, month, quarter or year")
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<PeriodName, E> {
        let text = expanded(raw)?;
        text.parse()
            .map(PeriodName)
            .map_err(|e: ConfigError| E::custom(e.reason()))
    }
}

/// Text, `${VAR}` expanded; TOML's local date-times (`anchor =
/// 2026-01-15T09:00:00`, unquoted) are read as their text.
struct Text(String);
deserialize_any_with!(Text, TextVisitor);

struct TextVisitor;

/// The key under which the `toml` crate hands over a date-time value.
const TOML_DATETIME: &str = "$__toml_private_datetime";

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("text")
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<Text, E> {
        Ok(Text(expanded(raw)?.into_owned()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Text, A::Error> {
        match map.next_entry::<String, String>()? {
            Some((key, value)) if key == TOML_DATETIME => Ok(Text(value)),
            _ => Err(de::Error::invalid_type(Unexpected::Map, &self)),
        }
    }
}

/// `charge`: `admitted` (the default) or `always`.
pub(crate) struct ChargeSetting(pub(crate) tollgate::Charge);
deserialize_any_with!(ChargeSetting, ChargeVisitor);

struct ChargeVisitor;

impl Visitor<'_> for ChargeVisitor {
    type Value = ChargeSetting;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "`admitted` (a denied request is charged nothing) or `always` (usage reported after the fact)",
        )
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<ChargeSetting, E> {
        let text = expanded(raw)?;
        match text.trim() {
            "admitted" => Ok(ChargeSetting(tollgate::Charge::Admitted)),
            "always" => Ok(ChargeSetting(tollgate::Charge::Always)),
            _ => Err(E::custom(format!(
                "{} is not `admitted` or `always`: `always` charges every request its cost, \
                 admitted or not (usage reported after the fact)",
                shown(raw, &text)
            ))),
        }
    }
}

/// `key_prefix`: non-empty text.
pub(crate) struct KeyPrefix(pub(crate) String);
deserialize_any_with!(KeyPrefix, KeyPrefixVisitor);

struct KeyPrefixVisitor;

impl Visitor<'_> for KeyPrefixVisitor {
    type Value = KeyPrefix;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the prefix of every state key, such as \"tollgate\"")
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<KeyPrefix, E> {
        let text = expanded(raw)?;
        if text.is_empty() {
            return Err(E::custom("must not be empty"));
        }
        Ok(KeyPrefix(text.into_owned()))
    }
}

/// `redis_url`: one server's URL; empty (for example `${REDIS_URL:-}` with
/// the variable unset) means no Redis.
pub(crate) struct RedisUrl(pub(crate) Option<String>);
deserialize_any_with!(RedisUrl, RedisUrlVisitor);

struct RedisUrlVisitor;

impl Visitor<'_> for RedisUrlVisitor {
    type Value = RedisUrl;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Redis URL, such as \"redis://127.0.0.1:6379\"")
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<RedisUrl, E> {
        let text = expanded(raw)?;
        let url = text.trim();
        if url.is_empty() {
            return Ok(RedisUrl(None));
        }
        check_url(url).map_err(E::custom)?;
        Ok(RedisUrl(Some(url.to_owned())))
    }

    fn visit_unit<E: de::Error>(self) -> Result<RedisUrl, E> {
        Ok(RedisUrl(None))
    }

    fn visit_none<E: de::Error>(self) -> Result<RedisUrl, E> {
        Ok(RedisUrl(None))
    }
}

/// `redis_cluster`: a list of seed URLs, or one string of comma-separated
/// URLs (handy from a single environment variable); an empty string means no
/// Redis.
pub(crate) struct Seeds(pub(crate) Option<Vec<String>>);

impl<'de> Deserialize<'de> for Seeds {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(UrlsVisitor(UrlList::Seeds))
            .map(Seeds)
    }
}

/// `redis_sentinel.urls`: the sentinels' URLs, written like `redis_cluster`;
/// an empty string means none.
pub(crate) struct SentinelUrls(pub(crate) Option<Vec<String>>);

impl<'de> Deserialize<'de> for SentinelUrls {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_any(UrlsVisitor(UrlList::Sentinels))
            .map(SentinelUrls)
    }
}

/// Which list of URLs is being read, for messages.
#[derive(Clone, Copy)]
enum UrlList {
    Seeds,
    Sentinels,
}

impl UrlList {
    /// `seed` or `sentinel`.
    fn noun(self) -> &'static str {
        match self {
            UrlList::Seeds => "seed",
            UrlList::Sentinels => "sentinel",
        }
    }

    /// The field to remove instead of leaving it empty.
    fn field(self) -> &'static str {
        match self {
            UrlList::Seeds => "redis_cluster",
            UrlList::Sentinels => "redis_sentinel",
        }
    }
}

/// A list of URLs, or one string of comma-separated URLs; `None` for an
/// empty string.
struct UrlsVisitor(UrlList);

impl<'de> Visitor<'de> for UrlsVisitor {
    type Value = Option<Vec<String>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            UrlList::Seeds => f.write_str("a list of Redis Cluster seed URLs"),
            UrlList::Sentinels => f.write_str("a list of Redis Sentinel URLs"),
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut urls = Vec::new();
        while let Some(url) = seq.next_element_seed(OneUrl(self.0))? {
            urls.push(url);
        }
        if urls.is_empty() {
            return Err(de::Error::custom(format!(
                "lists no {} URL; give at least one, or remove `{}`",
                self.0.noun(),
                self.0.field()
            )));
        }
        Ok(Some(urls))
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<Self::Value, E> {
        let text = expanded(raw)?;
        if text.trim().is_empty() {
            return Ok(None);
        }
        let mut urls = Vec::new();
        for url in text.split(',').map(str::trim) {
            if url.is_empty() {
                return Err(E::custom(format!(
                    "an empty {} URL between commas",
                    self.0.noun()
                )));
            }
            check_url(url).map_err(E::custom)?;
            urls.push(url.to_owned());
        }
        Ok(Some(urls))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// One URL of a list.
struct OneUrl(UrlList);

impl<'de> DeserializeSeed<'de> for OneUrl {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl Visitor<'_> for OneUrl {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            UrlList::Seeds => f.write_str("a Redis URL, such as \"redis://127.0.0.1:7000\""),
            UrlList::Sentinels => f.write_str("a Redis Sentinel URL, such as \"redis://127.0.0.1:26379\""),
        }
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<String, E> {
        let text = expanded(raw)?;
        let url = text.trim();
        if url.is_empty() {
            return Err(E::custom(format!("a {} URL must not be empty", self.0.noun())));
        }
        check_url(url).map_err(E::custom)?;
        Ok(url.to_owned())
    }
}

/// `redis_sentinel.master`: the name the sentinels monitor the primary by;
/// empty (from an unset variable) means none.
pub(crate) struct PrimaryName(pub(crate) Option<String>);
deserialize_any_with!(PrimaryName, PrimaryNameVisitor);

struct PrimaryNameVisitor;

impl Visitor<'_> for PrimaryNameVisitor {
    type Value = PrimaryName;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the name of the primary, as in the sentinels' `sentinel monitor NAME …`")
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<PrimaryName, E> {
        let text = expanded(raw)?;
        let name = text.trim();
        if name.chars().any(char::is_control) || name.contains(' ') {
            return Err(E::custom(format!(
                "{} is not a primary name: it must not contain spaces or control characters",
                shown(raw, name)
            )));
        }
        Ok(PrimaryName((!name.is_empty()).then(|| name.to_owned())))
    }

    fn visit_unit<E: de::Error>(self) -> Result<PrimaryName, E> {
        Ok(PrimaryName(None))
    }

    fn visit_none<E: de::Error>(self) -> Result<PrimaryName, E> {
        Ok(PrimaryName(None))
    }
}

/// `redis_sentinel.password`: the primary's password, typically
/// `"${REDIS_PASSWORD}"`; empty (from an unset variable) means none. No
/// message repeats it.
pub(crate) struct PrimaryPassword(pub(crate) Option<String>);
deserialize_any_with!(PrimaryPassword, PrimaryPasswordVisitor);

struct PrimaryPasswordVisitor;

impl PrimaryPasswordVisitor {
    /// Refuses a value that is not a string without repeating it.
    fn not_text<E: de::Error>(what: &str) -> Result<PrimaryPassword, E> {
        Err(E::custom(format!(
            "must be a string (the primary's password, such as \"${{REDIS_PASSWORD}}\"), not {what}; \
             quote it"
        )))
    }
}

impl Visitor<'_> for PrimaryPasswordVisitor {
    type Value = PrimaryPassword;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the primary's password as a string, such as \"${REDIS_PASSWORD}\"")
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<PrimaryPassword, E> {
        let text = expanded(raw)?;
        if text.chars().any(|c| c == '\r' || c == '\n' || c == '\0') {
            return Err(E::custom(
                "must not contain a line break or NUL (is the variable read from a file with a \
                 trailing newline?)",
            ));
        }
        Ok(PrimaryPassword((!text.is_empty()).then(|| text.into_owned())))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<PrimaryPassword, E> {
        Self::not_text("a boolean")
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<PrimaryPassword, E> {
        Self::not_text("a number")
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<PrimaryPassword, E> {
        Self::not_text("a number")
    }

    fn visit_i128<E: de::Error>(self, _: i128) -> Result<PrimaryPassword, E> {
        Self::not_text("a number")
    }

    fn visit_u128<E: de::Error>(self, _: u128) -> Result<PrimaryPassword, E> {
        Self::not_text("a number")
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<PrimaryPassword, E> {
        Self::not_text("a number")
    }

    fn visit_unit<E: de::Error>(self) -> Result<PrimaryPassword, E> {
        Ok(PrimaryPassword(None))
    }

    fn visit_none<E: de::Error>(self) -> Result<PrimaryPassword, E> {
        Ok(PrimaryPassword(None))
    }
}

/// `redis_sentinel.username`: the primary's ACL user; empty (from an unset
/// variable) means the `default` user.
pub(crate) struct PrimaryUser(pub(crate) Option<String>);
deserialize_any_with!(PrimaryUser, PrimaryUserVisitor);

struct PrimaryUserVisitor;

impl Visitor<'_> for PrimaryUserVisitor {
    type Value = PrimaryUser;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the primary's ACL user name")
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<PrimaryUser, E> {
        let text = expanded(raw)?;
        let name = text.trim();
        if name.chars().any(char::is_control) || name.contains(' ') {
            return Err(E::custom(format!(
                "{} is not a user name: it must not contain spaces or control characters",
                shown(raw, name)
            )));
        }
        Ok(PrimaryUser((!name.is_empty()).then(|| name.to_owned())))
    }

    fn visit_unit<E: de::Error>(self) -> Result<PrimaryUser, E> {
        Ok(PrimaryUser(None))
    }

    fn visit_none<E: de::Error>(self) -> Result<PrimaryUser, E> {
        Ok(PrimaryUser(None))
    }
}

/// `redis_sentinel.db`: the primary's database number, from 0 to 2^31 - 1
/// (Redis's `databases` is an `int`), or a string holding one; empty (from
/// an unset variable) means 0.
pub(crate) struct Database(pub(crate) i64);
deserialize_any_with!(Database, DatabaseVisitor);

struct DatabaseVisitor;

impl DatabaseVisitor {
    const MAX: i64 = i32::MAX as i64;

    fn too_large<E: de::Error>() -> E {
        E::custom(format!(
            "must be at most {} (the largest number of databases Redis accepts)",
            Self::MAX
        ))
    }
}

impl Visitor<'_> for DatabaseVisitor {
    type Value = Database;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a database number, 0 or more (such as 2)")
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Database, E> {
        match i64::try_from(n) {
            Ok(n) if n <= Self::MAX => Ok(Database(n)),
            _ => Err(Self::too_large()),
        }
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Database, E> {
        match u64::try_from(n) {
            Ok(n) => self.visit_u64(n),
            Err(_) => Err(E::invalid_value(Unexpected::Signed(n), &self)),
        }
    }

    fn visit_i128<E: de::Error>(self, n: i128) -> Result<Database, E> {
        match u64::try_from(n) {
            Ok(n) => self.visit_u64(n),
            Err(_) if n > 0 => Err(Self::too_large()),
            Err(_) => Err(E::invalid_value(Unexpected::Other("a negative number"), &self)),
        }
    }

    fn visit_u128<E: de::Error>(self, n: u128) -> Result<Database, E> {
        u64::try_from(n)
            .map_err(|_| Self::too_large())
            .and_then(|n| self.visit_u64(n))
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<Database, E> {
        let text = expanded(raw)?;
        let digits = text.trim();
        if digits.is_empty() {
            return Ok(Database(0));
        }
        if !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(E::custom(format!(
                "{} is not a database number: expected a whole number, 0 or more",
                shown(raw, digits)
            )));
        }
        match digits.parse::<u64>() {
            Ok(n) => self.visit_u64(n),
            Err(_) => Err(Self::too_large()),
        }
    }
}

/// Checks that `url` parses as a Redis URL. The message never repeats the
/// URL, which may hold a password.
#[cfg(feature = "redis")]
fn check_url(url: &str) -> Result<(), String> {
    use tollgate_redis::redis::IntoConnectionInfo;

    url.into_connection_info().map(|_| ()).map_err(|_| {
        "is not a Redis URL: expected redis://[user:password@]host[:port][/db], rediss://… for TLS, \
         or redis+unix:///path/to/socket"
            .to_owned()
    })
}

/// Without Redis support, URLs are checked when the limiter is built.
#[cfg(not(feature = "redis"))]
fn check_url(_url: &str) -> Result<(), String> {
    Ok(())
}
