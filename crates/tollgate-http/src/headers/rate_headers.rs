//! The rate-limit headers of one decision, kept small until written.

use std::borrow::Borrow;
use std::time::Duration;

use bytes::Bytes;
use tollgate::{Decision, Policy};

use super::field::{http_name, int_value, Field, FieldValue};
use super::structured_field::{push_item_name, push_sf_param};
use super::HeaderMode;

/// The rate-limit headers for one decision under one [`HeaderMode`], kept
/// as the figures they are made of: small (they travel in the response
/// future), and made into header values only when written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum RateHeaders {
    /// No header (`HeaderMode::Off`, or a request admitted under fail-open).
    #[default]
    None,
    /// Limit, remaining and seconds until reset, under the `RateLimit-*`
    /// names or the legacy `X-RateLimit-*` ones.
    Counts {
        legacy: bool,
        limit: u64,
        remaining: u64,
        reset: u64,
    },
    /// The IETF draft's two structured fields, `RateLimit-Policy` (every
    /// limit of the policy) then `RateLimit` (the binding one), one string
    /// cut in two at `split`: one allocation, however many limits.
    Structured { text: Box<str>, split: usize },
}

impl RateHeaders {
    /// The headers for `decision` under `mode`. `policy` gives the policy's
    /// name and the policy the decision was made under, for the structured
    /// fields only. `Retry-After` is not among them: see [`write_denial`].
    pub(crate) fn for_decision<'p, P: Borrow<Policy>>(
        mode: HeaderMode,
        decision: &Decision,
        policy: impl FnOnce() -> (&'p str, P),
    ) -> Self {
        match mode {
            HeaderMode::Off => RateHeaders::None,
            HeaderMode::RateLimit | HeaderMode::Legacy => RateHeaders::Counts {
                legacy: mode == HeaderMode::Legacy,
                limit: decision.limit,
                remaining: decision.remaining,
                reset: ceil_secs(decision.reset),
            },
            HeaderMode::IetfDraft => {
                let (name, policy) = policy();
                Self::structured(decision, name, policy.borrow())
            }
        }
    }

    /// The IETF draft's fields for `decision`, made under `policy` named
    /// `name`. Kept out of line: the text is built in a loop that the
    /// other modes' requests need not carry through the instruction cache.
    #[inline(never)]
    fn structured(decision: &Decision, name: &str, policy: &Policy) -> Self {
        let limits = policy.limits();
        // A decision names a limit its policy does not have only when the
        // policy was replaced between the decision and this lookup; the
        // first limit then stands for it.
        let bound = if decision.bound_by < limits.len() {
            decision.bound_by
        } else {
            0
        };
        let compound = limits.len() > 1;
        let item = name.len() + if compound { 29 } else { 24 };
        let mut text = String::with_capacity((limits.len() + 1) * item);
        for (i, limit) in limits.iter().enumerate() {
            if i > 0 {
                text.push_str(", ");
            }
            push_item_name(&mut text, name, compound.then_some(i));
            push_sf_param(&mut text, "q", limit.limit());
            push_sf_param(&mut text, "w", ceil_secs(limit.window()));
        }
        let split = text.len();
        push_item_name(&mut text, name, compound.then_some(bound));
        push_sf_param(&mut text, "r", decision.remaining);
        push_sf_param(&mut text, "t", ceil_secs(decision.reset));
        RateHeaders::Structured {
            text: text.into_boxed_str(),
            split,
        }
    }

    /// Sets the headers on an `http` header map, replacing earlier values.
    #[inline(always)]
    pub(crate) fn write_to(self, map: &mut http::HeaderMap) {
        // No headers, as with `HeaderMode::Off`, costs no call.
        if !matches!(self, RateHeaders::None) {
            self.write_some_to(map);
        }
    }

    /// [`RateHeaders::write_to`] for headers other than `None`.
    fn write_some_to(self, map: &mut http::HeaderMap) {
        match self {
            RateHeaders::None => {}
            RateHeaders::Counts {
                legacy,
                limit,
                remaining,
                reset,
            } => {
                let [l, r, t] = count_fields(legacy);
                map.insert(http_name(l), int_value(limit));
                map.insert(http_name(r), int_value(remaining));
                map.insert(http_name(t), int_value(reset));
            }
            structured @ RateHeaders::Structured { .. } => {
                for (field, value) in structured.into_fields() {
                    if let FieldValue::Text(text) = value {
                        // Structured-field text is printable ASCII by
                        // construction; the bytes become the value without
                        // a copy.
                        if let Ok(value) = http::HeaderValue::from_maybe_shared(text) {
                            map.insert(http_name(field), value);
                        }
                    }
                }
            }
        }
    }

    /// The headers, in order.
    pub(crate) fn into_fields(self) -> impl Iterator<Item = (Field, FieldValue)> {
        let items = match self {
            RateHeaders::None => [None, None, None],
            RateHeaders::Counts {
                legacy,
                limit,
                remaining,
                reset,
            } => {
                let [l, r, t] = count_fields(legacy);
                [
                    Some((l, FieldValue::Int(limit))),
                    Some((r, FieldValue::Int(remaining))),
                    Some((t, FieldValue::Int(reset))),
                ]
            }
            RateHeaders::Structured { text, split } => {
                let mut state = Bytes::from(text.into_boxed_bytes());
                let policy = state.split_to(split);
                [
                    Some((Field::Policy, FieldValue::Text(policy))),
                    Some((Field::RateLimit, FieldValue::Text(state))),
                    None,
                ]
            }
        };
        items.into_iter().flatten()
    }
}

/// The fields of limit, remaining and reset, legacy or not.
fn count_fields(legacy: bool) -> [Field; 3] {
    if legacy {
        [Field::LegacyLimit, Field::LegacyRemaining, Field::LegacyReset]
    } else {
        [Field::Limit, Field::Remaining, Field::Reset]
    }
}

/// The seconds a denied client is told to wait (`Retry-After`), rounded
/// up; none for an admitted request or a denial that never ends.
pub(crate) fn retry_after_secs(decision: &Decision) -> Option<u64> {
    if decision.allowed {
        return None;
    }
    decision.retry_after.map(ceil_secs)
}

/// Sets the headers of a denial on `map`: the rate-limit `headers`, then
/// `Retry-After`.
pub(crate) fn write_denial(headers: RateHeaders, decision: &Decision, map: &mut http::HeaderMap) {
    headers.write_to(map);
    if let Some(secs) = retry_after_secs(decision) {
        map.insert(http_name(Field::RetryAfter), int_value(secs));
    }
}

/// Whole seconds, rounded up (saturating at `u64::MAX`).
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
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
                    FieldValue::Text(t) => String::from_utf8(t.to_vec()).unwrap(),
                };
                (f.name(), v)
            })
            .collect()
    }

    /// The headers as written on an `http` header map, in order.
    fn written(map: &http::HeaderMap) -> Vec<(&str, &str)> {
        map.iter()
            .map(|(name, value)| (name.as_str(), value.to_str().unwrap()))
            .collect()
    }

    static POLICY: std::sync::LazyLock<Policy> = std::sync::LazyLock::new(|| {
        Policy::new(Strategy::FixedWindow, 100, Duration::from_secs(60)).unwrap()
    });

    fn named(name: &'static str) -> impl FnOnce() -> (&'static str, &'static Policy) {
        move || (name, &*POLICY)
    }

    /// An item of a structured list: its string and its integer parameters.
    type Item = (String, Vec<(String, i64)>);

    /// The IETF fields for `policy` named `name`, parsed back as RFC 8941
    /// lists: `RateLimit-Policy`'s items, then `RateLimit`'s.
    fn parsed_lists(policy: &Policy, name: &str, d: &Decision) -> [Vec<Item>; 2] {
        let mut map = http::HeaderMap::new();
        RateHeaders::for_decision(HeaderMode::IetfDraft, d, || (name, policy)).write_to(&mut map);
        ["ratelimit-policy", "ratelimit"].map(|field| {
            let list: sfv::List = sfv::Parser::new(map[field].as_bytes()).parse().unwrap();
            list.iter()
                .map(|entry| {
                    let sfv::ListEntry::Item(item) = entry else {
                        panic!("{field} holds an inner list")
                    };
                    let params = item
                        .params
                        .iter()
                        .map(|(k, v)| (k.as_str().to_owned(), i64::from(v.as_integer().unwrap())))
                        .collect();
                    (item.bare_item.as_string().unwrap().as_str().to_owned(), params)
                })
                .collect()
        })
    }

    /// The IETF fields for the one-limit policy named `name`: each field's
    /// one item.
    fn parsed_ietf(name: &'static str, d: &Decision) -> Vec<Item> {
        parsed_lists(&POLICY, name, d)
            .into_iter()
            .map(|mut items| {
                assert_eq!(items.len(), 1, "{items:?}");
                items.remove(0)
            })
            .collect()
    }

    fn params(pairs: [(&str, i64); 2]) -> Vec<(String, i64)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    #[test]
    fn rate_limit_fields_round_delays_up() {
        let mut map = http::HeaderMap::new();
        RateHeaders::for_decision(
            HeaderMode::RateLimit,
            &decision(true, 42, 16_001, None),
            named("default"),
        )
        .write_to(&mut map);
        assert_eq!(
            written(&map),
            [
                ("ratelimit-limit", "100"),
                ("ratelimit-remaining", "42"),
                ("ratelimit-reset", "17"),
            ]
        );
    }

    #[test]
    fn legacy_fields_carry_the_same_figures() {
        let mut map = http::HeaderMap::new();
        RateHeaders::for_decision(HeaderMode::Legacy, &decision(true, 0, 1_000, None), named("d"))
            .write_to(&mut map);
        assert_eq!(
            written(&map),
            [
                ("x-ratelimit-limit", "100"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "1"),
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
            let d = decision(false, 0, 30_000, Some(2_500));
            let mut map = http::HeaderMap::new();
            write_denial(RateHeaders::for_decision(mode, &d, named("x")), &d, &mut map);
            assert_eq!(written(&map).last(), Some(&("retry-after", "3")), "{mode:?}");
        }
    }

    #[test]
    fn an_admitted_request_gets_no_retry_after() {
        let d = decision(true, 5, 30_000, Some(2_500));
        let mut map = http::HeaderMap::new();
        write_denial(RateHeaders::None, &d, &mut map);
        assert!(map.is_empty());
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
        assert_eq!(
            parsed_ietf("/users/{id}", &decision(true, 50, 29_500, None)),
            [
                ("/users/{id}".to_owned(), params([("q", 100), ("w", 60)])),
                ("/users/{id}".to_owned(), params([("r", 50), ("t", 30)])),
            ]
        );
    }

    /// A burst limit and an hourly one.
    fn compound() -> Policy {
        Policy::compound([
            tollgate::Limit::new(Strategy::TokenBucket, 10, Duration::from_secs(1)).unwrap(),
            tollgate::Limit::new(Strategy::SlidingWindow, 1000, Duration::from_millis(3_599_500)).unwrap(),
        ])
        .unwrap()
    }

    #[test]
    fn a_compound_policy_lists_every_limit_and_names_the_binding_one() {
        let policy = compound();
        for bound_by in 0..2 {
            let mut d = decision(bound_by == 0, 3, 2_500, None);
            d.bound_by = bound_by;
            d.limit = policy.limits()[bound_by].limit();
            let h = RateHeaders::for_decision(HeaderMode::IetfDraft, &d, || ("api", &policy));
            assert_eq!(
                text(&h),
                [
                    (
                        "ratelimit-policy",
                        r#""api[0]";q=10;w=1, "api[1]";q=1000;w=3600"#.to_owned()
                    ),
                    ("ratelimit", format!(r#""api[{bound_by}]";r=3;t=3"#)),
                ]
            );
            // Parsed back: one item per limit, with the limit's own figures,
            // and the binding one named by `RateLimit`.
            let [listed, named] = parsed_lists(&policy, "api", &d);
            let expected: Vec<Item> = policy
                .limits()
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    let w = l.window().as_secs_f64().ceil() as i64;
                    (
                        format!("api[{i}]"),
                        vec![("q".into(), l.limit() as i64), ("w".into(), w)],
                    )
                })
                .collect();
            assert_eq!(listed, expected);
            assert_eq!(
                named,
                [(listed[bound_by].0.clone(), params([("r", 3), ("t", 3)]))]
            );
        }
    }

    #[test]
    fn the_count_fields_of_a_compound_policy_carry_the_binding_limit() {
        let mut d = decision(true, 7, 1_000, None);
        d.bound_by = 1;
        d.limit = 1000;
        for (mode, names) in [
            (
                HeaderMode::RateLimit,
                ["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"],
            ),
            (
                HeaderMode::Legacy,
                ["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"],
            ),
        ] {
            let policy = compound();
            let mut map = http::HeaderMap::new();
            RateHeaders::for_decision(mode, &d, || ("api", &policy)).write_to(&mut map);
            assert_eq!(
                written(&map),
                [(names[0], "1000"), (names[1], "7"), (names[2], "1")]
            );
        }
    }

    #[test]
    fn a_limit_the_policy_does_not_have_is_not_a_panic() {
        let policy = compound();
        let mut d = decision(true, 1, 0, None);
        d.bound_by = 9;
        let [listed, named] = parsed_lists(&policy, "api", &d);
        assert_eq!(listed.len(), 2);
        assert_eq!(named[0].0, "api[0]");
    }

    #[test]
    fn names_are_escaped_or_replaced() {
        let h = RateHeaders::for_decision(
            HeaderMode::IetfDraft,
            &decision(true, 1, 0, None),
            named("a\"b\\ü"),
        );
        assert_eq!(text(&h)[1].1, r#""a\"b\\?";r=1;t=0"#);
        // A parser reads back the escaped name.
        let parsed = parsed_ietf("a\"b\\ü\u{7f}\t", &decision(true, 1, 0, None));
        assert_eq!(parsed[0].0, "a\"b\\???");
        assert_eq!(parsed[1], ("a\"b\\???".to_owned(), params([("r", 1), ("t", 0)])));
        // And an empty name is an empty string.
        assert_eq!(parsed_ietf("", &decision(true, 1, 0, None))[0].0, "");
    }

    #[test]
    fn huge_numbers_are_clamped_to_the_structured_range() {
        let mut d = decision(true, u64::MAX, 0, None);
        d.limit = u64::MAX;
        d.reset = Duration::MAX;
        let h = RateHeaders::for_decision(HeaderMode::IetfDraft, &d, named("default"));
        assert_eq!(text(&h)[1].1, r#""default";r=999999999999999;t=999999999999999"#);
        assert_eq!(
            parsed_ietf("default", &d)[1],
            (
                "default".to_owned(),
                params([("r", 999_999_999_999_999), ("t", 999_999_999_999_999)])
            )
        );
    }

    #[test]
    fn delays_round_up_without_overflow() {
        assert_eq!(ceil_secs(Duration::from_millis(1)), 1);
        assert_eq!(ceil_secs(Duration::from_secs(2)), 2);
        assert_eq!(ceil_secs(Duration::MAX), u64::MAX);
    }

    #[test]
    fn off_sets_nothing_on_allowed_responses() {
        let h = RateHeaders::for_decision(HeaderMode::Off, &decision(true, 1, 1, None), named("d"));
        assert_eq!(h, RateHeaders::None);
        let mut map = http::HeaderMap::new();
        h.write_to(&mut map);
        assert!(map.is_empty());
    }

    #[test]
    fn the_headers_stay_small() {
        // They are moved with the response future of every admitted request.
        assert!(std::mem::size_of::<RateHeaders>() <= 32);
    }
}
