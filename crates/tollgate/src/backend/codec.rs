//! The byte encoding of strategy state for custom stores.
//!
//! One tag byte (`F` fixed window, `S` sliding window, `G` token or leaky
//! bucket) followed by the state's fields as little-endian `u64`s. A blocked
//! key's value is `B`, the tick its block ends as a little-endian `u64`, then
//! its state's encoding, if it has state. A concurrency limit's permits
//! are `P`, the latest tick an operation used, then each permit as its
//! 16-byte identifier, its cost and its expiry, all little-endian; a key's
//! unsettled holds `H`, then each hold as its 16-byte identifier, its
//! estimate, the tick it was taken and its expiry. The format is stable:
//! stores may persist it.

use crate::error::{BackendError, BackendErrorKind};
use crate::strategy::holds::{HoldId, HoldRecord, HoldSet};
use crate::strategy::permits::{Held, PermitId, PermitSet};
use crate::strategy::{FixedWindowState, GcraState, SlidingWindowState, State};

/// The bytes of one permit in a stored [`PermitSet`].
const PERMIT_BYTES: usize = 16 + 8 + 8;

/// Encodes a key's permits for storage.
pub(crate) fn encode_permits(set: &PermitSet) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + 8 + PERMIT_BYTES * set.permits.len());
    out.push(b'P');
    out.extend_from_slice(&set.seen.to_le_bytes());
    for permit in &set.permits {
        out.extend_from_slice(&permit.id.0.to_le_bytes());
        out.extend_from_slice(&permit.cost.to_le_bytes());
        out.extend_from_slice(&permit.expires.to_le_bytes());
    }
    out
}

/// Decodes a key's stored permits.
///
/// # Errors
///
/// A [`BackendErrorKind::Protocol`] error when the bytes are not permits
/// written by [`encode_permits`].
pub(crate) fn decode_permits(bytes: &[u8]) -> Result<PermitSet, BackendError> {
    let bad = || {
        BackendError::new(
            BackendErrorKind::Protocol,
            format!("stored value of {} bytes is not a key's permits", bytes.len()),
        )
    };
    let [b'P', rest @ ..] = bytes else {
        return Err(bad());
    };
    if rest.len() < 8 || (rest.len() - 8) % PERMIT_BYTES != 0 {
        return Err(bad());
    }
    let (seen, permits) = rest.split_at(8);
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    let permits = permits
        .chunks_exact(PERMIT_BYTES)
        .map(|p| Held {
            id: PermitId(u128::from_le_bytes(p[..16].try_into().expect("16 bytes"))),
            cost: word(&p[16..24]),
            expires: word(&p[24..]),
        })
        .collect();
    Ok(PermitSet {
        seen: word(seen),
        permits,
    })
}

/// Encodes a state for storage.
pub(crate) fn encode_state(state: &State) -> Vec<u8> {
    let mut out = Vec::with_capacity(25);
    encode_state_into(state, &mut out);
    out
}

/// Appends a state's encoding to `out`; returns its length (at most 25).
pub(crate) fn encode_state_into(state: &State, out: &mut Vec<u8>) -> usize {
    let (tag, fields): (u8, &[u64]) = match state {
        State::FixedWindow(s) => (b'F', &[s.start, s.count]),
        State::SlidingWindow(s) => (b'S', &[s.start, s.curr, s.prev]),
        State::Gcra(s) => (b'G', &[s.tat]),
    };
    out.push(tag);
    for f in fields {
        out.extend_from_slice(&f.to_le_bytes());
    }
    1 + 8 * fields.len()
}

/// Decodes a stored state.
///
/// # Errors
///
/// A [`BackendErrorKind::Protocol`] error when the bytes are not a state
/// written by [`encode_state`].
pub(crate) fn decode_state(bytes: &[u8]) -> Result<State, BackendError> {
    let bad = || {
        BackendError::new(
            BackendErrorKind::Protocol,
            format!("stored value of {} bytes is not a tollgate state", bytes.len()),
        )
    };
    let (&tag, rest) = bytes.split_first().ok_or_else(bad)?;
    if rest.len() % 8 != 0 {
        return Err(bad());
    }
    let fields: Vec<u64> = rest
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("chunk of 8")))
        .collect();
    match (tag, fields.as_slice()) {
        (b'F', &[start, count]) => Ok(State::FixedWindow(FixedWindowState { start, count })),
        (b'S', &[start, curr, prev]) => Ok(State::SlidingWindow(SlidingWindowState { start, curr, prev })),
        (b'G', &[tat]) => Ok(State::Gcra(GcraState { tat })),
        _ => Err(bad()),
    }
}

/// The bytes of one hold in a stored [`HoldSet`].
const HOLD_BYTES: usize = 16 + 8 + 8 + 8;

/// Encodes a key's unsettled holds for storage.
pub(crate) fn encode_holds(set: &HoldSet) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + HOLD_BYTES * set.holds.len());
    out.push(b'H');
    for hold in &set.holds {
        out.extend_from_slice(&hold.id.0.to_le_bytes());
        for field in [hold.estimate, hold.taken, hold.expires] {
            out.extend_from_slice(&field.to_le_bytes());
        }
    }
    out
}

/// Decodes a key's stored holds.
///
/// # Errors
///
/// A [`BackendErrorKind::Protocol`] error when the bytes are not holds
/// written by [`encode_holds`].
pub(crate) fn decode_holds(bytes: &[u8]) -> Result<HoldSet, BackendError> {
    let [b'H', rest @ ..] = bytes else {
        return Err(not_holds(bytes));
    };
    if rest.len() % HOLD_BYTES != 0 {
        return Err(not_holds(bytes));
    }
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    let holds = rest
        .chunks_exact(HOLD_BYTES)
        .map(|h| HoldRecord {
            id: HoldId(u128::from_le_bytes(h[..16].try_into().expect("16 bytes"))),
            estimate: word(&h[16..24]),
            taken: word(&h[24..32]),
            expires: word(&h[32..]),
        })
        .collect();
    Ok(HoldSet { holds })
}

fn not_holds(bytes: &[u8]) -> BackendError {
    BackendError::new(
        BackendErrorKind::Protocol,
        format!("stored value of {} bytes is not a key's holds", bytes.len()),
    )
}

/// A key's stored value: its state and, when an operator blocked it, the
/// tick the block ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// The strategy state, `None` when absent.
    pub state: Option<State>,
    /// The tick a block ends, `None` when the key was never blocked (an
    /// ended block may remain until the value is next written).
    pub blocked_until: Option<u64>,
}

/// Encodes a record; `None` when it holds nothing (delete the key).
pub(crate) fn encode_record(record: &Record) -> Option<Vec<u8>> {
    match (record.blocked_until, &record.state) {
        (None, None) => None,
        (None, Some(state)) => Some(encode_state(state)),
        (Some(until), state) => {
            let mut out = Vec::with_capacity(1 + 8 + 25);
            out.push(b'B');
            out.extend_from_slice(&until.to_le_bytes());
            if let Some(state) = state {
                out.extend_from_slice(&encode_state(state));
            }
            Some(out)
        }
    }
}

/// Decodes a stored record (a plain state, or a blocked one).
///
/// # Errors
///
/// A [`BackendError`](crate::backend::BackendError) of kind `Corrupt` when
/// the bytes are not a record this crate wrote.
pub fn decode_record(bytes: &[u8]) -> Result<Record, BackendError> {
    match bytes {
        [b'B', rest @ ..] if rest.len() >= 8 => {
            let (until, state) = rest.split_at(8);
            Ok(Record {
                blocked_until: Some(u64::from_le_bytes(until.try_into().expect("8 bytes"))),
                state: if state.is_empty() {
                    None
                } else {
                    Some(decode_state(state)?)
                },
            })
        }
        _ => Ok(Record {
            state: Some(decode_state(bytes)?),
            blocked_until: None,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        let states = [
            State::FixedWindow(FixedWindowState {
                start: 7_000,
                count: 3,
            }),
            State::SlidingWindow(SlidingWindowState {
                start: 1,
                curr: 2,
                prev: u64::MAX,
            }),
            State::Gcra(GcraState { tat: 42 }),
        ];
        for s in states {
            assert_eq!(decode_state(&encode_state(&s)).unwrap(), s);
        }
        for record in [
            Record {
                state: Some(states[1]),
                blocked_until: Some(9),
            },
            Record {
                state: None,
                blocked_until: Some(u64::MAX),
            },
            Record {
                state: Some(states[2]),
                blocked_until: None,
            },
        ] {
            assert_eq!(decode_record(&encode_record(&record).unwrap()).unwrap(), record);
        }
        assert_eq!(encode_record(&Record::default()), None);
        let set = PermitSet {
            seen: 5,
            permits: vec![Held {
                id: PermitId(u128::MAX - 3),
                cost: 2,
                expires: 9,
            }],
        };
        assert_eq!(decode_permits(&encode_permits(&set)).unwrap(), set);
        let holds = HoldSet {
            holds: vec![HoldRecord {
                id: HoldId(7),
                estimate: 5,
                taken: 11,
                expires: u64::MAX,
            }],
        };
        assert_eq!(decode_holds(&encode_holds(&holds)).unwrap(), holds);
        assert_eq!(
            decode_holds(b"H123").unwrap_err().kind(),
            BackendErrorKind::Protocol
        );
        for garbage in [&b"P1234567"[..], b"F12345678", b"P12345678123"] {
            assert_eq!(
                decode_permits(garbage).unwrap_err().kind(),
                BackendErrorKind::Protocol
            );
        }
        for garbage in [
            &b""[..],
            b"F",
            b"G1234567",
            b"X12345678",
            b"F12345678",
            b"B1234567",
        ] {
            let err = decode_record(garbage).unwrap_err();
            assert_eq!(err.kind(), BackendErrorKind::Protocol);
        }
    }
}
