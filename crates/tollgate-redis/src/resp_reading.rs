//! A reply read as the backend reads one, from the bytes on the wire to a
//! decision. Not public API: the fuzz target feeds it arbitrary RESP.

use redis::Value;
use tollgate::backend::{BackendError, BackendErrorKind, Tick};
use tollgate::strategy::{self, LimitRate};
use tollgate::{Decision, Policy};

use crate::reply::{parse_blocked, parse_reply, parse_together, NO_OUTCOME};

/// The decision `bytes` gives a request under `policy`, read as the
/// scripts' reply to one decision is read: RESP decoded by the same
/// parser as the connection's, converted to integers as the connection
/// converts them, then a blocked key's reply or one outcome per limit.
///
/// # Errors
///
/// A [`BackendErrorKind::Protocol`] error for bytes that are not such a
/// reply.
pub fn decision(bytes: &[u8], policy: &Policy) -> Result<Decision, BackendError> {
    let reply = integers(bytes)?;
    let limits = policy.limit_rates(Tick::Micros);
    if let Some(blocked) = parse_blocked(&reply, limits[0].rate.limit)? {
        return Ok(blocked);
    }
    let mut outcomes = [NO_OUTCOME; Policy::MAX_LIMITS];
    let outcomes = parse_reply(&reply, &mut outcomes[..limits.len()])?;
    Ok(Decision::from_compound(
        strategy::combine(outcomes),
        &limits,
        Tick::Micros,
    ))
}

/// The decisions `bytes` gives the parts of one request decided together
/// (each part under one of `policies`), read as the `together` entry
/// point's reply is read.
///
/// # Errors
///
/// As [`decision`].
pub fn together(bytes: &[u8], policies: &[Policy]) -> Result<Vec<Decision>, BackendError> {
    let reply = integers(bytes)?;
    let limits: Vec<Vec<LimitRate>> = policies.iter().map(|p| p.limit_rates(Tick::Micros)).collect();
    parse_together(&reply, limits.iter().map(Vec::as_slice))
}

/// The integers of a RESP reply, decoded and converted as the connection
/// does.
///
/// # Errors
///
/// A [`BackendErrorKind::Protocol`] error naming what could not be read.
pub fn integers(bytes: &[u8]) -> Result<Vec<i64>, BackendError> {
    let protocol = |what: String| BackendError::new(BackendErrorKind::Protocol, what);
    let value: Value = redis::parse_redis_value(bytes).map_err(|err| protocol(format!("not RESP: {err}")))?;
    redis::from_redis_value(value).map_err(|err| protocol(format!("not a list of integers: {err}")))
}
