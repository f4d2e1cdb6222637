//! The header names this crate sets, and their numeric values made without
//! allocating.

use std::sync::LazyLock;

use bytes::Bytes;

/// A header this crate sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Field {
    Limit,
    Remaining,
    Reset,
    RetryAfter,
    Policy,
    RateLimit,
    LegacyLimit,
    LegacyRemaining,
    LegacyReset,
}

impl Field {
    /// The header name, in lower case.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Field::Limit => "ratelimit-limit",
            Field::Remaining => "ratelimit-remaining",
            Field::Reset => "ratelimit-reset",
            Field::RetryAfter => "retry-after",
            Field::Policy => "ratelimit-policy",
            Field::RateLimit => "ratelimit",
            Field::LegacyLimit => "x-ratelimit-limit",
            Field::LegacyRemaining => "x-ratelimit-remaining",
            Field::LegacyReset => "x-ratelimit-reset",
        }
    }

    /// The position of this field in declaration order.
    pub(crate) const fn index(self) -> usize {
        self as usize
    }
}

/// The `http` names of the fields, in declaration order.
static HTTP_NAMES: [http::HeaderName; 9] = [
    http::HeaderName::from_static(Field::Limit.name()),
    http::HeaderName::from_static(Field::Remaining.name()),
    http::HeaderName::from_static(Field::Reset.name()),
    http::HeaderName::from_static(Field::RetryAfter.name()),
    http::HeaderName::from_static(Field::Policy.name()),
    http::HeaderName::from_static(Field::RateLimit.name()),
    http::HeaderName::from_static(Field::LegacyLimit.name()),
    http::HeaderName::from_static(Field::LegacyRemaining.name()),
    http::HeaderName::from_static(Field::LegacyReset.name()),
];

/// Numbers below this have a preallocated header value.
const SMALL_INTS: u64 = 1000;

/// The header values `0` to `999`, sliced from one string made once, so
/// that the common numbers cost neither an allocation nor a reference count.
static SMALL_INT_VALUES: LazyLock<Vec<http::HeaderValue>> = LazyLock::new(|| {
    let mut text = String::new();
    let mut ends = Vec::with_capacity(SMALL_INTS as usize);
    for n in 0..SMALL_INTS {
        text.push_str(&n.to_string());
        ends.push(text.len());
    }
    let text: &'static str = Box::leak(text.into_boxed_str());
    let mut start = 0;
    ends.into_iter()
        .map(|end| {
            let value = http::HeaderValue::from_static(&text[start..end]);
            start = end;
            value
        })
        .collect()
});

/// `n` as a header value.
pub(crate) fn int_value(n: u64) -> http::HeaderValue {
    match SMALL_INT_VALUES.get(n as usize) {
        Some(value) if n < SMALL_INTS => value.clone(),
        _ => http::HeaderValue::from(n),
    }
}

/// A header value: a number, or structured-field text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FieldValue {
    Int(u64),
    Text(Bytes),
}

/// The `http` name of `field`, without parsing it.
pub(crate) fn http_name(field: Field) -> http::HeaderName {
    HTTP_NAMES[field.index()].clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_become_the_same_header_values_with_or_without_the_table() {
        for n in [0, 1, 9, 10, 99, 100, 998, 999, 1000, 12_345, u64::MAX] {
            assert_eq!(int_value(n), http::HeaderValue::from(n), "{n}");
        }
    }

    #[test]
    fn every_field_has_its_own_http_name() {
        let fields = [
            Field::Limit,
            Field::Remaining,
            Field::Reset,
            Field::RetryAfter,
            Field::Policy,
            Field::RateLimit,
            Field::LegacyLimit,
            Field::LegacyRemaining,
            Field::LegacyReset,
        ];
        for (i, field) in fields.into_iter().enumerate() {
            assert_eq!(field.index(), i, "{field:?}");
            assert_eq!(http_name(field).as_str(), field.name(), "{field:?}");
        }
    }
}
