//! Reading maps field by field: a map into a derived struct with what was
//! expected, and a field's value checked against the fields read before it,
//! each mistake reported at the value it concerns.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

/// Implements `Deserialize` for `$ty` through `deserialize_any` with the
/// visitor `$visitor`, so that a value of another type is reported with
/// what the visitor expected.
macro_rules! deserialize_any_with {
    ($ty:ident, $visitor:ident) => {
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                deserializer.deserialize_any($visitor)
            }
        }
    };
}

pub(crate) use deserialize_any_with;

/// Reads a map into the derived `T` through `deserialize_any`, so that a
/// value of another type is reported with what was expected.
pub(crate) struct MapOf<T> {
    expecting: &'static str,
    _value: PhantomData<T>,
}

impl<T> MapOf<T> {
    pub(crate) fn new(expecting: &'static str) -> Self {
        Self {
            expecting,
            _value: PhantomData,
        }
    }
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for MapOf<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.expecting)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        T::deserialize(de::value::MapAccessDeserializer::new(map))
    }
}

/// Reads the value of a map's field; a field given twice, or one that
/// `conflicts` with another field (which returns the message), is an error
/// at the value.
pub(crate) fn next<'de, A, T>(
    map: &mut A,
    slot: &Option<T>,
    conflicts: impl FnOnce(&T) -> Option<String>,
) -> Result<T, A::Error>
where
    A: MapAccess<'de>,
    T: Deserialize<'de>,
{
    let twice = slot.is_some();
    map.next_value_seed(Checked::new(move |value: T| {
        if twice {
            Err("is given twice".to_owned())
        } else if let Some(conflict) = conflicts(&value) {
            Err(conflict)
        } else {
            Ok(value)
        }
    }))
}

/// Deserializes a `T`, then checks it with `check`; a failed check is
/// reported at the value, under the value's field path.
pub(crate) struct Checked<T, F> {
    check: F,
    _value: PhantomData<T>,
}

impl<T, F> Checked<T, F> {
    pub(crate) fn new<U>(check: F) -> Self
    where
        F: FnOnce(T) -> Result<U, String>,
    {
        Self {
            check,
            _value: PhantomData,
        }
    }
}

impl<'de, T, U, F> DeserializeSeed<'de> for Checked<T, F>
where
    T: Deserialize<'de>,
    F: FnOnce(T) -> Result<U, String>,
{
    type Value = U;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<U, D::Error> {
        let value = T::deserialize(deserializer)?;
        (self.check)(value).map_err(de::Error::custom)
    }
}
