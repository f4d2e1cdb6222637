//! One mapping from a decision to response headers, for every framework.

use std::sync::LazyLock;
use std::time::Duration;

use sfv::{Integer, ItemSerializer, KeyRef, StringRef};
use tollgate::{Decision, Policy};

/// Which rate-limit headers go on every decided response.
///
/// Whatever the mode, a 429 carries `Retry-After` (delay-seconds, rounded
/// up), and a response that was not decided (a backend error, a missing
/// key) carries none of these headers. Delays are whole seconds rounded up,
/// so a client that waits the advertised time is never early.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HeaderMode {
    /// `RateLimit-Limit: 100`, `RateLimit-Remaining: 42`,
    /// `RateLimit-Reset: 17` (seconds until the key's state is fresh).
    #[default]
    RateLimit,
    /// The structured fields of the IETF draft
    /// (draft-ietf-httpapi-ratelimit-headers):
    /// `RateLimit-Policy: "default";q=100;w=60` (quota and window in
    /// seconds) and `RateLimit: "default";r=42;t=17` (remaining and seconds
    /// until reset). The name is the resource's for a resource with its own
    /// policy, otherwise `default`.
    IetfDraft,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset`
    /// (seconds until reset, like `RateLimit-Reset`).
    Legacy,
    /// No rate-limit headers (429 still carries `Retry-After`).
    Off,
}

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
fn int_value(n: u64) -> http::HeaderValue {
    match SMALL_INT_VALUES.get(n as usize) {
        Some(value) if n < SMALL_INTS => value.clone(),
        _ => http::HeaderValue::from(n),
    }
}

/// A header value: a number, or structured-field text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FieldValue {
    Int(u64),
    Text(String),
}

/// The headers for one decision (at most four), without allocating for
/// numbers.
#[derive(Clone, Debug, Default)]
pub(crate) struct RateHeaders {
    items: [Option<(Field, FieldValue)>; 4],
}

impl RateHeaders {
    fn push(&mut self, field: Field, value: FieldValue) {
        if let Some(slot) = self.items.iter_mut().find(|slot| slot.is_none()) {
            *slot = Some((field, value));
        }
    }

    /// Sets the headers on an `http` header map, replacing earlier values.
    pub(crate) fn write_to(self, map: &mut http::HeaderMap) {
        for (field, value) in self.into_fields() {
            let value = match value {
                FieldValue::Int(n) => int_value(n),
                // Structured-field text is printable ASCII by construction;
                // the string becomes the value without a copy.
                FieldValue::Text(text) => match http::HeaderValue::try_from(text) {
                    Ok(value) => value,
                    Err(_) => continue,
                },
            };
            map.insert(HTTP_NAMES[field.index()].clone(), value);
        }
    }

    /// Whether there is no header to set (mode `Off` on an admitted
    /// request).
    pub(crate) fn is_empty(&self) -> bool {
        self.items[0].is_none()
    }

    /// The headers, in order.
    pub(crate) fn into_fields(self) -> impl Iterator<Item = (Field, FieldValue)> {
        self.items.into_iter().flatten()
    }

    /// The headers for `decision` under `mode`; `Retry-After` is added when
    /// the request was denied. `policy` gives the policy's name and the policy, for the structured
    /// fields only.
    pub(crate) fn for_decision<'p>(
        mode: HeaderMode,
        decision: &Decision,
        policy: impl FnOnce() -> (&'p str, &'p Policy),
    ) -> Self {
        let mut h = Self::default();
        let reset = ceil_secs(decision.reset);
        match mode {
            HeaderMode::RateLimit => {
                h.push(Field::Limit, FieldValue::Int(decision.limit));
                h.push(Field::Remaining, FieldValue::Int(decision.remaining));
                h.push(Field::Reset, FieldValue::Int(reset));
            }
            HeaderMode::Legacy => {
                h.push(Field::LegacyLimit, FieldValue::Int(decision.limit));
                h.push(Field::LegacyRemaining, FieldValue::Int(decision.remaining));
                h.push(Field::LegacyReset, FieldValue::Int(reset));
            }
            HeaderMode::IetfDraft => {
                let (name, policy) = policy();
                let name = sf_string(name);
                let name = StringRef::from_str(&name).unwrap_or(StringRef::constant("default"));
                let policy_field = ItemSerializer::new()
                    .bare_item(name)
                    .parameter(KeyRef::constant("q"), sf_integer(policy.limit()))
                    .parameter(KeyRef::constant("w"), sf_integer(ceil_secs(policy.window())))
                    .finish();
                let state_field = ItemSerializer::new()
                    .bare_item(name)
                    .parameter(KeyRef::constant("r"), sf_integer(decision.remaining))
                    .parameter(KeyRef::constant("t"), sf_integer(reset))
                    .finish();
                h.push(Field::Policy, FieldValue::Text(policy_field));
                h.push(Field::RateLimit, FieldValue::Text(state_field));
            }
            HeaderMode::Off => {}
        }
        if !decision.allowed {
            if let Some(retry) = decision.retry_after {
                h.push(Field::RetryAfter, FieldValue::Int(ceil_secs(retry)));
            }
        }
        h
    }
}

/// Whole seconds, rounded up.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// The largest integer a structured field can carry.
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

fn sf_integer(n: u64) -> Integer {
    // Clamped into range, so the conversion cannot fail.
    Integer::try_from(n.min(SF_INTEGER_MAX)).unwrap_or(Integer::ZERO)
}

/// `name` with every character a structured-field string cannot hold
/// (anything but printable ASCII) replaced by `?`.
fn sf_string(name: &str) -> std::borrow::Cow<'_, str> {
    if name.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        std::borrow::Cow::Borrowed(name)
    } else {
        std::borrow::Cow::Owned(
            name.chars()
                .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::Strategy;

    fn decision(allowed: bool, remaining: u64, reset_ms: u64, retry_ms: Option<u64>) -> Decision {
        Decision::new(
            allowed,
            100,
            remaining,
            Duration::from_millis(reset_ms),
            retry_ms.map(Duration::from_millis),
        )
    }

    fn text(h: &RateHeaders) -> Vec<(&'static str, String)> {
        h.clone()
            .into_fields()
            .map(|(f, v)| {
                let v = match v {
                    FieldValue::Int(n) => n.to_string(),
                    FieldValue::Text(t) => t.clone(),
                };
                (f.name(), v)
            })
            .collect()
    }

    static POLICY: std::sync::LazyLock<Policy> = std::sync::LazyLock::new(|| {
        Policy::new(Strategy::FixedWindow, 100, Duration::from_secs(60)).unwrap()
    });

    fn named(name: &'static str) -> impl FnOnce() -> (&'static str, &'static Policy) {
        move || (name, &*POLICY)
    }

    #[test]
    fn rate_limit_fields_round_delays_up() {
        let h = RateHeaders::for_decision(
            HeaderMode::RateLimit,
            &decision(true, 42, 16_001, None),
            named("default"),
        );
        assert_eq!(
            text(&h),
            [
                ("ratelimit-limit", "100".to_owned()),
                ("ratelimit-remaining", "42".to_owned()),
                ("ratelimit-reset", "17".to_owned()),
            ]
        );
    }

    #[test]
    fn a_denial_adds_retry_after_in_every_mode() {
        for mode in [
            HeaderMode::RateLimit,
            HeaderMode::IetfDraft,
            HeaderMode::Legacy,
            HeaderMode::Off,
        ] {
            let h = RateHeaders::for_decision(mode, &decision(false, 0, 30_000, Some(2_500)), named("x"));
            assert_eq!(
                text(&h).last(),
                Some(&("retry-after", "3".to_owned())),
                "{mode:?}"
            );
        }
    }

    #[test]
    fn ietf_draft_fields_are_structured_items() {
        let h = RateHeaders::for_decision(
            HeaderMode::IetfDraft,
            &decision(true, 50, 29_500, None),
            named("/users/{id}"),
        );
        assert_eq!(
            text(&h),
            [
                ("ratelimit-policy", r#""/users/{id}";q=100;w=60"#.to_owned()),
                ("ratelimit", r#""/users/{id}";r=50;t=30"#.to_owned()),
            ]
        );
    }

    #[test]
    fn names_are_escaped_or_replaced() {
        let h = RateHeaders::for_decision(
            HeaderMode::IetfDraft,
            &decision(true, 1, 0, None),
            named("a\"b\\ü"),
        );
        assert_eq!(text(&h)[1].1, r#""a\"b\\?";r=1;t=0"#);
    }

    #[test]
    fn huge_numbers_are_clamped_to_the_structured_range() {
        let mut d = decision(true, u64::MAX, 0, None);
        d.limit = u64::MAX;
        let h = RateHeaders::for_decision(HeaderMode::IetfDraft, &d, named("default"));
        assert_eq!(text(&h)[1].1, r#""default";r=999999999999999;t=0"#);
    }

    #[test]
    fn numbers_become_the_same_header_values_with_or_without_the_table() {
        for n in [0, 1, 9, 10, 99, 100, 998, 999, 1000, 12_345, u64::MAX] {
            assert_eq!(int_value(n), http::HeaderValue::from(n), "{n}");
        }
    }

    #[test]
    fn off_sets_nothing_on_allowed_responses() {
        let h = RateHeaders::for_decision(HeaderMode::Off, &decision(true, 1, 1, None), named("d"));
        assert_eq!(h.into_fields().count(), 0);
    }
}
