//! Permits of requests in flight on Redis (SEMANTICS.md, "Requests in
//! flight"): a concurrency limit's calls, each operation on a key's permits
//! one call of the permits entry point, which applies several operations
//! in order when they go out together ([`lanes`](super::lanes)).

use std::time::Duration;

use tollgate::backend::{Answer, BackendError, BackendErrorKind, Call, Permitted, Reserved, Tick};
use tollgate::strategy::permits::{PermitOp, PermitOutcome};
use tollgate::Operation;

use super::{keys_beside, RedisBinding};
use crate::scripts;

/// The numbers the permits entry point answers for each operation.
const PER_OPERATION: usize = 5;

/// What the permits entry point answers, in a call of several operations,
/// for one that failed (its error is had from a call of its own).
const FAILED: i64 = -2;

impl RedisBinding {
    /// The answer to `call` on a concurrency limit, whose permits are kept
    /// beside the key's state key ([`permit_keys`]; the state key holds
    /// only a block): a decision (a report's or a reservation's too) is
    /// whether a permit would be granted now, holding nothing; a reset
    /// frees the key's permits, a block denies its acquisitions until it
    /// ends, a refund or a penalty changes nothing; a lease is refused.
    pub(super) async fn call_permits(&self, call: Call<'_, Self>) -> Result<Answer, BackendError> {
        let peek = |key, cost| self.permit(key, PermitOp::Peek { cost });
        Ok(match call {
            Call::Permit { key, op } => Answer::Permitted(self.permit(key, op).await?),
            Call::Decide { key, cost } | Call::Charge { key, cost } => {
                Answer::Decided(peek(key, cost).await?.decision)
            }
            Call::Reserve { key, cost, .. } => {
                let decision = peek(key, cost).await?.decision;
                Answer::Reserved(Box::new(Reserved::new(decision, Duration::ZERO, None)))
            }
            Call::Cancel { .. } => Answer::Cancelled(false),
            Call::Operate { key, op } => {
                if !matches!(op, Operation::Refund(_) | Operation::Penalty(_)) {
                    self.operate_keys(key, op).await?;
                }
                Answer::Done
            }
            Call::Together(_) => Answer::Apart,
            Call::Reconnect => {
                self.ping_twice().await?;
                Answer::Done
            }
            Call::Lease { .. } | Call::Hold { .. } | Call::Settle { .. } => return Err(call.unsupported()),
        })
    }

    /// Applies `op` to `key`'s permits in a call of its own.
    pub(super) async fn permit_one(&self, key: &[u8], op: PermitOp) -> Result<Permitted, BackendError> {
        let reply = Self::call_permit_ops(&[(self, key, op)]).await?;
        parse_permitted(&reply, self.shared.limits[0].rate.limit)
    }

    /// Applies `parts` (none: no call; one: a call of its own), all of one
    /// backend, in order in one call, each exactly as in a call of its own
    /// after those before it. An operation the call failed on (a key whose
    /// value is no permits') is sent again alone, for its own error; the
    /// others are answered.
    pub(super) async fn permit_many(
        parts: &[(&RedisBinding, &[u8], PermitOp)],
    ) -> Vec<Result<Permitted, BackendError>> {
        if let [(binding, key, op)] = parts {
            return vec![binding.permit_one(key, *op).await];
        }
        if parts.is_empty() {
            return Vec::new();
        }
        let reply = match Self::call_permit_ops(parts).await {
            Ok(reply) if reply.len() == PER_OPERATION * parts.len() => reply,
            Ok(reply) => {
                let err = unexpected(&reply);
                return parts.iter().map(|_| Err(copy(&err))).collect();
            }
            Err(err) => return parts.iter().map(|_| Err(copy(&err))).collect(),
        };
        let mut answers = Vec::with_capacity(parts.len());
        for (&(binding, key, op), answer) in parts.iter().zip(reply.chunks_exact(PER_OPERATION)) {
            answers.push(if answer[0] == FAILED {
                binding.permit_one(key, op).await
            } else {
                parse_permitted(answer, binding.shared.limits[0].rate.limit)
            });
        }
        answers
    }

    /// One call of the permits entry point for `parts`, on the server's
    /// clock (or the caller's, when the backend has one): each part's state
    /// key and the two keys of its permits; then now, the grace, and each
    /// part's operation, `L`, ttl, permit identifier and cost.
    async fn call_permit_ops(parts: &[(&RedisBinding, &[u8], PermitOp)]) -> Result<Vec<i64>, BackendError> {
        let first = &*parts[0].0.shared;
        let mut keys = Vec::with_capacity(3 * parts.len());
        let mut numbers = Vec::with_capacity(4 * parts.len());
        let mut names = Vec::with_capacity(parts.len());
        for &(binding, key, op) in parts {
            let shared = &*binding.shared;
            let state_key = binding.state_keys(key).remove(0);
            let [set, units] = permit_keys(&state_key);
            keys.extend([state_key, set, units]);
            let (name, id, cost) = match op {
                PermitOp::Acquire { id, cost } => ("acquire", id.to_string(), shared.cost_arg(cost)),
                PermitOp::Peek { cost } => ("peek", String::new(), shared.cost_arg(cost)),
                PermitOp::Release { id } => ("release", id.to_string(), String::from("0")),
                PermitOp::Extend { id } => ("extend", id.to_string(), String::from("0")),
            };
            let rate = shared.limits[0].rate;
            names.push(name);
            numbers.push([rate.limit.to_string(), rate.window.to_string(), id, cost]);
        }
        let now = first.now_arg();
        let mut args: Vec<&[u8]> = Vec::with_capacity(2 + PER_OPERATION * parts.len());
        args.extend([now.as_bytes(), first.grace_ms.as_bytes()]);
        for (name, numbers) in names.iter().zip(&numbers) {
            args.push(name.as_bytes());
            args.extend(numbers.iter().map(String::as_bytes));
        }
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        first.call(scripts::permits(), &keys, &args).await
    }
}

/// `err` again, for another call that it fails.
fn copy(err: &BackendError) -> BackendError {
    BackendError::new(err.kind(), err.to_string())
}

/// The error for a reply of the permits entry point that is none of its
/// answers.
fn unexpected(reply: &[i64]) -> BackendError {
    BackendError::new(
        BackendErrorKind::Protocol,
        format!("unexpected reply from the permits script: {reply:?}"),
    )
}

/// The keys of the permits of the rate-limit key whose state key is
/// `state_key`, in its hash slot: the sorted set of their identifiers by
/// expiry (`…:permits`) and the hash of their costs (`…:permit_units`),
/// named as [`beside`](super::beside) names them. A state key without a tag
/// that holds a `}` gets a tag of decimal digits in its slot instead
/// ([`slot_tag`](super::slot_tag)), followed by the state key: `{<digits>}:<state
/// key>:permits`.
pub(super) fn permit_keys(state_key: &[u8]) -> [Vec<u8>; 2] {
    keys_beside(state_key, [b":permits".as_slice(), b":permit_units"])
}

/// One operation's answer from the permits entry point: `{done, in_flight,
/// reset_us, retry_after_us, expires_in_us}` (-1 for none), or a blocked
/// key's `{-1, left_us, reset_us, 0, 0}`, which is denied with nothing
/// remaining until the block ends ([`Decision::blocked`](tollgate::Decision::blocked)'s
/// numbers).
fn parse_permitted(reply: &[i64], limit: u64) -> Result<Permitted, BackendError> {
    let bad = || unexpected(reply);
    let number = |n: i64| u64::try_from(n).map_err(|_| bad());
    let optional = |n: i64| if n == -1 { Ok(None) } else { number(n).map(Some) };
    let outcome = match *reply {
        [-1, left, reset, 0, 0] => {
            let (left, reset) = (number(left)?, number(reset)?);
            PermitOutcome {
                done: false,
                in_flight: limit,
                reset: reset.max(left),
                retry_after: Some(left),
                expires_in: None,
            }
        }
        [done @ (0 | 1), in_flight, reset, retry_after, expires_in] => PermitOutcome {
            done: done == 1,
            in_flight: number(in_flight)?,
            reset: number(reset)?,
            retry_after: optional(retry_after)?,
            expires_in: optional(expires_in)?,
        },
        _ => return Err(bad()),
    };
    // The units held may exceed `L` when the policy's limit was lowered
    // while permits were held: nothing remains until they go.
    Ok(Permitted::from_outcome(outcome, limit, Tick::Micros))
}

#[cfg(test)]
mod tests {
    use redis::cluster_routing::Slot;
    use tollgate::Decision;

    use super::*;

    #[test]
    fn permit_keys_share_the_state_keys_slot() {
        let states: [&[u8]; 5] = [
            b"tollgate::concurrency:k",
            b"tollgate:{api:k}:concurrency:1",
            b"tollgate::concurrency:a}b",
            b"tollgate::concurrency:}{",
            b"tollgate::concurrency:{}x}",
        ];
        for state in states {
            for key in permit_keys(state) {
                assert_eq!(
                    Slot::for_key(&key),
                    Slot::for_key(state),
                    "{}",
                    String::from_utf8_lossy(&key)
                );
            }
        }
        assert_eq!(
            permit_keys(b"s"),
            [b"{s}:permits".to_vec(), b"{s}:permit_units".to_vec()]
        );
    }

    #[test]
    fn a_permits_reply_is_read_or_refused() {
        let admitted = parse_permitted(&[1, 2, 30, -1, 30], 3).unwrap();
        assert!(admitted.decision.allowed);
        assert_eq!(admitted.in_flight(), 2);
        assert_eq!(admitted.expires_in, Some(Duration::from_micros(30)));
        let blocked = parse_permitted(&[-1, 50, 20, 0, 0], 3).unwrap();
        assert_eq!(blocked.decision, Decision::blocked(50, 20, 3, Tick::Micros));
        assert_eq!(blocked.expires_in, None);
        let lowered = parse_permitted(&[0, 5, 30, 10, -1], 3).unwrap();
        assert_eq!(lowered.decision.remaining, 0, "held under a higher limit");
        for bad in [
            &[2, 0, 0, -1, -1][..],
            &[1, 0, 0, -2, -1],
            &[0, 1, -5, -1, -1],
            &[-1, 50, 20],
            &[FAILED, 0, 0, 0, 0],
            &[1],
        ] {
            let err = parse_permitted(bad, 3).unwrap_err();
            assert_eq!(err.kind(), BackendErrorKind::Protocol);
        }
    }
}
