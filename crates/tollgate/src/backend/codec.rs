//! The byte encoding of strategy state for custom stores.
//!
//! One tag byte (`F` fixed window, `S` sliding window, `G` token or leaky
//! bucket) followed by the state's fields as little-endian `u64`s. The format
//! is stable: stores may persist it.

use crate::error::{BackendError, BackendErrorKind};
use crate::strategy::{FixedWindowState, GcraState, SlidingWindowState, State};

/// Encodes a state for storage.
pub fn encode_state(state: &State) -> Vec<u8> {
    let (tag, fields): (u8, &[u64]) = match state {
        State::FixedWindow(s) => (b'F', &[s.start, s.count]),
        State::SlidingWindow(s) => (b'S', &[s.start, s.curr, s.prev]),
        State::Gcra(s) => (b'G', &[s.tat]),
    };
    let mut out = Vec::with_capacity(1 + 8 * fields.len());
    out.push(tag);
    for f in fields {
        out.extend_from_slice(&f.to_le_bytes());
    }
    out
}

/// Decodes a stored state.
///
/// # Errors
///
/// A [`BackendErrorKind::Protocol`] error when the bytes are not a state
/// written by [`encode_state`].
pub fn decode_state(bytes: &[u8]) -> Result<State, BackendError> {
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
        for garbage in [&b""[..], b"F", b"G1234567", b"X12345678", b"F12345678"] {
            let err = decode_state(garbage).unwrap_err();
            assert_eq!(err.kind(), BackendErrorKind::Protocol);
        }
    }
}
