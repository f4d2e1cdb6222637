//! The values of the settings beside the policies: the `exempt` and `deny`
//! lists and `deny_cache`, each expanded (`${VAR}`) and validated as it is
//! read, so that a mistake is reported at its line (`exempt[2]`).

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Unexpected, Visitor};
use serde::Deserialize;
use tollgate::{DenyCache, KeyList};

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
    capacity: Option<Size>,
    #[serde(default)]
    max_key_len: Option<Size>,
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

/// `deny_cache.capacity` and `deny_cache.max_key_len`: a whole number of
/// at least 1 (or a string holding one).
struct Size(usize);
deserialize_any_with!(Size, SizeVisitor);

struct SizeVisitor;

impl Visitor<'_> for SizeVisitor {
    type Value = Size;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a whole number, at least 1 (such as 10000)")
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Size, E> {
        if n == 0 {
            return Err(E::custom(
                "must be at least 1; to turn the cache off, write `deny_cache: false`",
            ));
        }
        usize::try_from(n)
            .map(Size)
            .map_err(|_| E::custom(format!("must be at most {}", usize::MAX)))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Size, E> {
        match u64::try_from(n) {
            Ok(n) => self.visit_u64(n),
            Err(_) => Err(E::invalid_value(Unexpected::Signed(n), &self)),
        }
    }

    fn visit_str<E: de::Error>(self, raw: &str) -> Result<Size, E> {
        let text = expanded(raw)?;
        match text.trim().parse::<u64>() {
            Ok(n) => self.visit_u64(n),
            Err(_) => Err(E::custom(format!("{} is not a whole number", shown(raw, &text)))),
        }
    }
}
