//! The values of the settings beside the policies: the `exempt` and `deny`
//! lists, `deny_cache`, `top_keys` and `lease`, each expanded (`${VAR}`) and validated as it is
//! read, so that a mistake is reported at its line (`exempt[2]`).

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Unexpected, Visitor};
use serde::Deserialize;
use std::time::Duration;

use tollgate::protection::DenyCache;
use tollgate::protection::Lease;
use tollgate::top::TopKeys;
use tollgate::KeyList;

use crate::fields::deserialize_any_with;
use crate::values::{expanded, shown};

/// `exempt` or `deny`: a list of exact keys and CIDR blocks, each entry
/// checked by [`KeyList::parse`]'s rules as it is read.
pub(crate) struct KeyEntries(pub(crate) Vec<String>);
deserialize_any_with!(KeyEntries, KeyEntriesVisitor);

struct KeyEntriesVisitor;

impl<'de> Visitor<'de> for KeyEntriesVisitor {
    type Value = KeyEntries;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a list of keys and CIDR blocks, such as [\"10.0.0.0/8\", \"2001:db8::/32\", \"health-checker\"]",
        )
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<KeyEntries, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = seq.next_element_seed(KeyEntry)? {
            entries.push(entry);
        }
        Ok(KeyEntries(entries))
    }
}

/// One entry of a key list: text (a key, an IP address or a CIDR block), or
/// a whole number, taken as its decimal text (a numeric key).
struct KeyEntry;

impl<'de> DeserializeSeed<'de> for KeyEntry {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl KeyEntry {
    /// `entry` if [`KeyList::parse`] accepts it, else its reason.
    fn checked<E: de::Error>(entry: String) -> Result<String, E> {
        KeyList::parse("", [&entry])
            .map(|_| entry)
            .map_err(|err| E::custom(err.reason()))
    }
}

impl Visitor<'_> for KeyEntry {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key, an IP address or a CIDR block such as \"10.0.0.0/8\"")
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<String, E> {
        Self::checked(expanded(raw)?.into_owned())
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<String, E> {
        Ok(n.to_string())
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<String, E> {
        Ok(n.to_string())
    }
}

/// `deny_cache`: `true` (a cache of [`DenyCache::new`]'s size), `false`
/// (none), or a map with `capacity` and `max_key_len`, each optional.
pub(crate) struct DenyCacheSetting(pub(crate) Option<DenyCache>);
deserialize_any_with!(DenyCacheSetting, DenyCacheVisitor);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DenyCacheFields {
    #[serde(default)]
    capacity: Option<Size<DENY_CACHE>>,
    #[serde(default)]
    max_key_len: Option<Size<DENY_CACHE>>,
}

struct DenyCacheVisitor;

impl<'de> Visitor<'de> for DenyCacheVisitor {
    type Value = DenyCacheSetting;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("true, false, or a map with `capacity` (keys) and `max_key_len` (bytes)")
    }

    fn visit_bool<E: de::Error>(self, on: bool) -> Result<DenyCacheSetting, E> {
        Ok(DenyCacheSetting(on.then(DenyCache::new)))
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<DenyCacheSetting, E> {
        let text = expanded(raw)?;
        match text.trim() {
            "true" => self.visit_bool(true),
            "false" => self.visit_bool(false),
            _ => Err(E::custom(format!(
                "{} is not true or false (nor a map with `capacity` and `max_key_len`)",
                shown(raw, &text)
            ))),
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<DenyCacheSetting, A::Error> {
        let fields = DenyCacheFields::deserialize(de::value::MapAccessDeserializer::new(map))?;
        let mut cache = DenyCache::new();
        if let Some(Size(capacity)) = fields.capacity {
            cache = cache.capacity(capacity);
        }
        if let Some(Size(bytes)) = fields.max_key_len {
            cache = cache.max_key_len(bytes);
        }
        Ok(DenyCacheSetting(Some(cache)))
    }
}

/// `top_keys`: `true` (top keys of [`TopKeys::new`]'s capacity), `false`
/// (none), or a map with `capacity`.
pub(crate) struct TopKeysSetting(pub(crate) Option<TopKeys>);
deserialize_any_with!(TopKeysSetting, TopKeysVisitor);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TopKeysFields {
    #[serde(default)]
    capacity: Option<Size<TOP_KEYS>>,
}

struct TopKeysVisitor;

impl<'de> Visitor<'de> for TopKeysVisitor {
    type Value = TopKeysSetting;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("true, false, or a map with `capacity` (keys per metric and minute)")
    }

    fn visit_bool<E: de::Error>(self, on: bool) -> Result<TopKeysSetting, E> {
        Ok(TopKeysSetting(on.then(TopKeys::new)))
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<TopKeysSetting, E> {
        let text = expanded(raw)?;
        match text.trim() {
            "true" => self.visit_bool(true),
            "false" => self.visit_bool(false),
            _ => Err(E::custom(format!(
                "{} is not true or false (nor a map with `capacity`)",
                shown(raw, &text)
            ))),
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TopKeysSetting, A::Error> {
        let fields = TopKeysFields::deserialize(de::value::MapAccessDeserializer::new(map))?;
        let mut top = TopKeys::new();
        if let Some(Size(capacity)) = fields.capacity {
            top = top.capacity(capacity);
        }
        Ok(TopKeysSetting(Some(top)))
    }
}

/// `lease`: `true` (leases of [`Lease::default`]: 64 units, 100 ms),
/// `false` (none), or a map with `max_units` and `max_age`, each optional.
pub(crate) struct LeaseSetting(pub(crate) Option<Lease>);
deserialize_any_with!(LeaseSetting, LeaseVisitor);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LeaseFields {
    #[serde(default)]
    max_units: Option<LeaseUnits>,
    #[serde(default)]
    max_age: Option<LeaseAge>,
}

struct LeaseVisitor;

impl<'de> Visitor<'de> for LeaseVisitor {
    type Value = LeaseSetting;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "true, false, or a map with `max_units` (units) and `max_age` (a duration such as \"100ms\")",
        )
    }

    fn visit_bool<E: de::Error>(self, on: bool) -> Result<LeaseSetting, E> {
        Ok(LeaseSetting(on.then(Lease::default)))
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<LeaseSetting, E> {
        let text = expanded(raw)?;
        match text.trim() {
            "true" => self.visit_bool(true),
            "false" => self.visit_bool(false),
            _ => Err(E::custom(format!(
                "{} is not true or false (nor a map with `max_units` and `max_age`)",
                shown(raw, &text)
            ))),
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<LeaseSetting, A::Error> {
        let fields = LeaseFields::deserialize(de::value::MapAccessDeserializer::new(map))?;
        let default = Lease::default();
        Ok(LeaseSetting(Some(Lease::new(
            fields.max_units.map_or(default.max_units(), |u| u.0),
            fields.max_age.map_or(default.max_age(), |a| a.0),
        ))))
    }
}

/// `lease.max_units`: a whole number from 1 to [`tollgate::protection::Lease::MAX_UNITS`].
struct LeaseUnits(u64);
deserialize_any_with!(LeaseUnits, LeaseUnitsVisitor);

struct LeaseUnitsVisitor;

impl Visitor<'_> for LeaseUnitsVisitor {
    type Value = LeaseUnits;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a whole number of units, at least 1 (such as 64)")
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<LeaseUnits, E> {
        if (1..=tollgate::protection::Lease::MAX_UNITS).contains(&n) {
            Ok(LeaseUnits(n))
        } else {
            Err(E::custom(format!(
                "must be from 1 to {} (1: every request asks the store; to turn \
                 leases off, write `lease: false`)",
                tollgate::protection::Lease::MAX_UNITS
            )))
        }
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<LeaseUnits, E> {
        match u64::try_from(n) {
            Ok(n) => self.visit_u64(n),
            Err(_) => Err(E::invalid_value(Unexpected::Signed(n), &self)),
        }
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<LeaseUnits, E> {
        let text = expanded(raw)?;
        match text.trim().parse::<u64>() {
            Ok(n) => self.visit_u64(n),
            Err(_) => Err(E::custom(format!("{} is not a whole number", shown(raw, &text)))),
        }
    }
}

/// `lease.max_age`: a duration from 1 ms to [`tollgate::protection::Lease::MAX_AGE`].
struct LeaseAge(Duration);
deserialize_any_with!(LeaseAge, LeaseAgeVisitor);

struct LeaseAgeVisitor;

impl Visitor<'_> for LeaseAgeVisitor {
    type Value = LeaseAge;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration with a unit, such as \"100ms\" or \"1s\"")
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<LeaseAge, E> {
        let text = expanded(raw)?;
        let age = humantime::parse_duration(text.trim())
            .map_err(|e| E::custom(format!("{} is not a duration ({e})", shown(raw, &text))))?;
        if age < Duration::from_millis(1) || age > tollgate::protection::Lease::MAX_AGE {
            return Err(E::custom(format!(
                "must be from 1ms to {}s: a lease is spent within it, and an operation on a key \
                 reaches every process within it",
                tollgate::protection::Lease::MAX_AGE.as_secs()
            )));
        }
        Ok(LeaseAge(age))
    }
}

/// [`Size`] of `deny_cache`.
const DENY_CACHE: u8 = 0;
/// [`Size`] of `top_keys`.
const TOP_KEYS: u8 = 1;

/// A size in the map of `deny_cache` (`capacity`, `max_key_len`) or of
/// `top_keys` (`capacity`), which setting being `OF`: a whole number of at
/// least 1 and at most the setting's largest (or a string holding one).
struct Size<const OF: u8>(usize);

impl<'de, const OF: u8> Deserialize<'de> for Size<OF> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(SizeVisitor::<OF>)
    }
}

struct SizeVisitor<const OF: u8>;

impl<const OF: u8> SizeVisitor<OF> {
    /// The setting's name and its largest size.
    fn setting() -> (&'static str, u64) {
        match OF {
            TOP_KEYS => ("top_keys", TopKeys::MAX_CAPACITY as u64),
            _ => ("deny_cache", u64::try_from(usize::MAX).unwrap_or(u64::MAX)),
        }
    }
}

impl<const OF: u8> Visitor<'_> for SizeVisitor<OF> {
    type Value = Size<OF>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a whole number, at least 1 (such as 10000)")
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Size<OF>, E> {
        let (setting, max) = Self::setting();
        if n == 0 {
            let what = if OF == TOP_KEYS { "top keys" } else { "the cache" };
            return Err(E::custom(format!(
                "must be at least 1; to turn {what} off, write `{setting}: false`"
            )));
        }
        if n > max {
            return Err(E::custom(format!("must be at most {max}")));
        }
        usize::try_from(n)
            .map(Size)
            .map_err(|_| E::custom(format!("must be at most {}", usize::MAX)))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Size<OF>, E> {
        match u64::try_from(n) {
            Ok(n) => self.visit_u64(n),
            Err(_) => Err(E::invalid_value(Unexpected::Signed(n), &self)),
        }
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<Size<OF>, E> {
        let text = expanded(raw)?;
        match text.trim().parse::<u64>() {
            Ok(n) => self.visit_u64(n),
            Err(_) => Err(E::custom(format!("{} is not a whole number", shown(raw, &text)))),
        }
    }
}
