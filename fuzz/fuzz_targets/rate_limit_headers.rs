//! The rate-limit headers a decision is written as, read back by an
//! independent RFC 8941 parser (`sfv`): for any decision, policy and
//! policy name, in every header mode, what a client reads is what was
//! decided (the structured fields' integers clamped to their range, delays
//! rounded up to whole seconds) and `Retry-After` is there exactly when
//! waiting helps.

#![no_main]

use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use sfv::{BareItem, List, ListEntry, Parser};
use tollgate::{Decision, Limit, Policy, Strategy};
use tollgate_http::http::HeaderMap;
use tollgate_http::{write_decision_headers, HeaderMode};

/// The largest integer a structured field carries (RFC 8941 §3.3.1).
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

#[derive(Arbitrary, Debug)]
struct Input {
    name: String,
    limits: Vec<(u8, u64, u64)>,
    allowed: bool,
    limit: u64,
    remaining: u64,
    reset_ns: u64,
    retry_after_ns: Option<u64>,
    bound_by: u8,
    fail_open: bool,
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

fn int(map: &HeaderMap, name: &str) -> Option<u64> {
    let value = map.get(name)?.to_str().expect("a header written as text");
    Some(value.parse().unwrap_or_else(|_| panic!("{name}: {value:?} is not a whole number")))
}

/// The name a policy item is written under: printable ASCII kept, every
/// other character a `?`, and the limit's index for a compound policy.
fn item_name(name: &str, index: Option<usize>) -> String {
    let mut out: String = name.chars().map(|c| if (' '..='~').contains(&c) { c } else { '?' }).collect();
    if let Some(i) = index {
        out.push_str(&format!("[{i}]"));
    }
    out
}

/// The string and integer parameters of one list member.
fn member(entry: &ListEntry) -> (String, Vec<(String, u64)>) {
    let ListEntry::Item(item) = entry else {
        panic!("an inner list where an item was written: {entry:?}");
    };
    let BareItem::String(name) = &item.bare_item else {
        panic!("a policy name that is not a string: {item:?}");
    };
    let params = item
        .params
        .iter()
        .map(|(key, value)| match value {
            BareItem::Integer(n) => (key.as_str().to_owned(), u64::try_from(i64::from(*n)).expect("not negative")),
            other => panic!("parameter {key:?} is not an integer: {other:?}"),
        })
        .collect();
    (name.as_str().to_owned(), params)
}

fuzz_target!(|input: Input| {
    let limits: Vec<Limit> = input
        .limits
        .iter()
        .take(Policy::MAX_LIMITS)
        .filter_map(|&(strategy, limit, window_ms)| {
            let strategy = Strategy::ALL[usize::from(strategy) % 4];
            Limit::new(strategy, limit, Duration::from_millis(window_ms)).ok()
        })
        .collect();
    let Ok(policy) = Policy::compound(limits) else {
        return;
    };
    let retry_after = input.retry_after_ns.map(Duration::from_nanos);
    let mut decision = Decision::new(input.allowed, input.limit, input.remaining, Duration::from_nanos(input.reset_ns), retry_after);
    decision.bound_by = usize::from(input.bound_by);
    decision.fail_open = input.fail_open;

    for mode in [HeaderMode::RateLimit, HeaderMode::IetfDraft, HeaderMode::Legacy, HeaderMode::Off] {
        let mut map = HeaderMap::new();
        write_decision_headers(mode, &decision, &input.name, &policy, &mut map);
        if decision.fail_open {
            assert!(map.is_empty(), "a fail-open admission got headers: {map:?}");
            continue;
        }
        let retry = (!decision.allowed).then_some(retry_after).flatten().map(ceil_secs);
        assert_eq!(int(&map, "retry-after"), retry, "Retry-After under {mode:?}");
        let reset = ceil_secs(decision.reset);
        match mode {
            HeaderMode::RateLimit | HeaderMode::Legacy => {
                let prefix = if mode == HeaderMode::Legacy { "x-" } else { "" };
                assert_eq!(int(&map, &format!("{prefix}ratelimit-limit")), Some(decision.limit));
                assert_eq!(int(&map, &format!("{prefix}ratelimit-remaining")), Some(decision.remaining));
                assert_eq!(int(&map, &format!("{prefix}ratelimit-reset")), Some(reset));
            }
            HeaderMode::IetfDraft => {
                let limits = policy.limits();
                let compound = limits.len() > 1;
                let text = |name: &str| map.get(name).expect(name).to_str().expect("text").to_owned();
                let listed: List = Parser::new(&text("ratelimit-policy")).parse().expect("RateLimit-Policy parses");
                assert_eq!(listed.len(), limits.len());
                for (i, (entry, limit)) in listed.iter().zip(limits).enumerate() {
                    let (name, params) = member(entry);
                    assert_eq!(name, item_name(&input.name, compound.then_some(i)));
                    let expected = [
                        ("q".to_owned(), limit.limit().min(SF_INTEGER_MAX)),
                        ("w".to_owned(), ceil_secs(limit.window()).min(SF_INTEGER_MAX)),
                    ];
                    assert_eq!(params, expected);
                }
                let state: List = Parser::new(&text("ratelimit")).parse().expect("RateLimit parses");
                assert_eq!(state.len(), 1);
                let bound = if decision.bound_by < limits.len() { decision.bound_by } else { 0 };
                let (name, params) = member(&state[0]);
                assert_eq!(name, item_name(&input.name, compound.then_some(bound)));
                let expected = [
                    ("r".to_owned(), decision.remaining.min(SF_INTEGER_MAX)),
                    ("t".to_owned(), reset.min(SF_INTEGER_MAX)),
                ];
                assert_eq!(params, expected);
            }
            _ => assert_eq!(map.len(), usize::from(retry.is_some()), "headers under Off: {map:?}"),
        }
    }
});
