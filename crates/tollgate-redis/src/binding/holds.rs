//! Holds on Redis (SEMANTICS.md, "Estimates settled"): a hold is one call of the `hold` entry point, which decides the estimate
//! as a decision does and records the hold beside the key's first state
//! key; a settle is one call of the `settle` entry point, which takes the
//! hold out and gives back or charges the difference on every limit.

use tollgate::backend::{BackendError, BackendErrorKind, Settled};
use tollgate::strategy::holds::{self, HoldId};
use tollgate::strategy::LimitRate;
use tollgate::Decision;

use super::{decision_of, keys_beside, RedisBinding};
use crate::exact::MAX_EXACT_OPERAND;
use crate::reply::parse_blocked;
use crate::scripts;

impl RedisBinding {
    /// See [`Call::Hold`](tollgate::backend::Call::Hold): one call of the
    /// `hold` entry point on the key's state keys and its holds.
    pub(super) async fn hold_keys(
        &self,
        key: &[u8],
        id: HoldId,
        estimate: u64,
    ) -> Result<Decision, BackendError> {
        let shared = &*self.shared;
        let keys = self.keys_with_holds(key);
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let estimate = shared.cost_arg(estimate);
        let tail = [id.to_string(), longest_window(&shared.limits).to_string()];
        let reply = shared
            .call_limits(scripts::hold(), &keys, &estimate, &tail)
            .await?;
        decision_of(&shared.limits, &reply)
    }

    /// See [`Call::Settle`](tollgate::backend::Call::Settle): one call of
    /// the `settle` entry point on the key's state keys and its holds.
    ///
    /// # Errors
    ///
    /// A usage above [`MAX_EXACT_OPERAND`], beyond which the script's
    /// arithmetic would not be exact, as [`BackendErrorKind::Unsupported`]
    /// (nothing is taken or charged).
    pub(super) async fn settle_keys(
        &self,
        key: &[u8],
        id: HoldId,
        used: u64,
    ) -> Result<Settled, BackendError> {
        let shared = &*self.shared;
        if used > MAX_EXACT_OPERAND {
            return Err(BackendError::new(
                BackendErrorKind::Unsupported,
                format!(
                    "a usage of {used} units exceeds 2^51 = {MAX_EXACT_OPERAND}, the largest the Redis \
                     backend settles, within which its scripts compute exactly (Lua numbers are doubles)"
                ),
            ));
        }
        let keys = self.keys_with_holds(key);
        let keys: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        let reply = shared
            .call_limits(scripts::settle(), &keys, &used.to_string(), &[id.to_string()])
            .await?;
        if let Some(blocked) = parse_blocked(&reply, shared.limits[0].rate.limit)? {
            return Ok(Settled::new(false, blocked));
        }
        let bad = || {
            BackendError::new(
                BackendErrorKind::Protocol,
                format!("unexpected reply from the settle script: {reply:?}"),
            )
        };
        let (&settled, rows) = reply.split_last().ok_or_else(bad)?;
        // The rows hold four numbers per limit: never a blocked key's three.
        let decision = decision_of(&shared.limits, rows)?;
        match settled {
            0 | 1 => Ok(Settled::new(settled == 1, decision)),
            _ => Err(bad()),
        }
    }

    /// The state keys of `key`, then the two keys of its holds.
    fn keys_with_holds(&self, key: &[u8]) -> Vec<Vec<u8>> {
        let mut keys = self.state_keys(key);
        let holds = hold_keys(&keys[0]);
        keys.extend(holds);
        keys
    }
}

/// The keys of the holds of the rate-limit key whose first state key is
/// `state_key`, in its hash slot: the sorted set of their identifiers by
/// expiry (`…:holds`) and the hash of their estimates and times
/// (`…:hold_figures`), named as [`keys_beside`] names them.
pub(super) fn hold_keys(state_key: &[u8]) -> [Vec<u8>; 2] {
    keys_beside(state_key, [b":holds".as_slice(), b":hold_figures"])
}

/// The policy's longest window in microseconds, for which a hold can be
/// settled ([`holds::settleable_for`]), within the scripts' exact range.
fn longest_window(limits: &[LimitRate]) -> u64 {
    holds::settleable_for(limits).min(MAX_EXACT_OPERAND)
}

#[cfg(test)]
mod tests {
    use redis::cluster_routing::Slot;

    use super::*;

    #[test]
    fn hold_keys_share_the_state_keys_slot() {
        for state in [
            b"tollgate::fixed_window:k".as_slice(),
            b"tollgate:{api:k}:fixed_window:1",
            b"tollgate::fixed_window:a}b",
        ] {
            for key in hold_keys(state) {
                assert_eq!(Slot::for_key(&key), Slot::for_key(state));
            }
        }
        assert_eq!(
            hold_keys(b"s"),
            [b"{s}:holds".to_vec(), b"{s}:hold_figures".to_vec()]
        );
    }
}
