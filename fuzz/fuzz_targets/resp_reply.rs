//! The Redis backend's reading of a script's reply, from the bytes on the
//! wire (RESP, decoded by the connection's own parser) to decisions.
//!
//! Arbitrary bytes are a decision or a protocol error, never a panic, and
//! a decision names a limit of its policy. A list of integers written as
//! RESP (in any of the ways a server may frame it) reads back as the same
//! integers.

#![no_main]

use std::time::Duration;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tollgate::{Limit, Policy, Strategy};
use tollgate_redis::__resp;

#[derive(Arbitrary, Debug)]
enum Input {
    Raw { bytes: Vec<u8>, policies: Vec<u8> },
    Numbers { numbers: Vec<i64>, framing: u8 },
}

fn policy(which: u8) -> Policy {
    let limit = |strategy, n, secs| Limit::new(strategy, n, Duration::from_secs(secs)).expect("a limit");
    match which % 3 {
        0 => Policy::new(Strategy::TokenBucket, 10, Duration::from_secs(1)).expect("a policy"),
        1 => Policy::compound([
            limit(Strategy::TokenBucket, 10, 1),
            limit(Strategy::SlidingWindow, 1_000, 3_600),
            limit(Strategy::FixedWindow, 5_000, 86_400),
        ])
        .expect("a policy"),
        _ => Policy::new(Strategy::LeakyBucket, Policy::MAX_LIMIT, Duration::from_secs(1)).expect("a policy"),
    }
}

/// `numbers` as RESP: a RESP2 array of integers, a RESP3 array, a set, or
/// the integers as bulk strings (which the conversion reads as numbers).
fn encode(numbers: &[i64], framing: u8) -> Vec<u8> {
    let mut out = Vec::new();
    let head = match framing % 3 {
        0 | 2 => b'*',
        _ => b'~',
    };
    out.push(head);
    out.extend_from_slice(format!("{}\r\n", numbers.len()).as_bytes());
    for n in numbers {
        if framing % 3 == 2 {
            let text = n.to_string();
            out.extend_from_slice(format!("${}\r\n{text}\r\n", text.len()).as_bytes());
        } else {
            out.extend_from_slice(format!(":{n}\r\n").as_bytes());
        }
    }
    out
}

fuzz_target!(|input: Input| match input {
    Input::Raw { bytes, policies } => {
        let policies: Vec<Policy> = policies.iter().take(4).map(|&p| policy(p)).collect();
        if let Some(first) = policies.first() {
            if let Ok(decision) = __resp::decision(&bytes, first) {
                assert!(decision.bound_by < first.limits().len(), "{decision:?}");
                assert!(first.limits().iter().any(|l| l.limit() == decision.limit), "{decision:?}");
            }
        }
        if let Ok(decisions) = __resp::together(&bytes, &policies) {
            assert_eq!(decisions.len(), policies.len());
            for (decision, policy) in decisions.iter().zip(&policies) {
                assert!(policy.limits().iter().any(|l| l.limit() == decision.limit), "{decision:?}");
            }
        }
    }
    Input::Numbers { numbers, framing } => {
        let bytes = encode(&numbers, framing);
        match __resp::integers(&bytes) {
            Ok(read) => assert_eq!(read, numbers, "{:?}", String::from_utf8_lossy(&bytes)),
            Err(err) => panic!("{numbers:?} framed {framing} did not read back: {err}"),
        }
    }
});
