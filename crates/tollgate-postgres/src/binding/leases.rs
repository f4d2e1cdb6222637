//! Leases ([`Call::Lease`](tollgate::backend::Call::Lease)): one call of
//! the schema's `lease` function, which counts the lessee and ports the
//! core's `give_back` and `lease_all`.

use std::time::Duration;

use tollgate::backend::{BackendError, LeaseAsk, Leased, Tick};
use tollgate::strategy::{self, LimitRate};
use tollgate::Decision;

use super::{blocked, outcomes, reply_of, unexpected, PostgresBinding};
use crate::limits::MAX_OPERAND;

impl PostgresBinding {
    /// Decides a request of `key` that asks for a lease, as `ask` says.
    pub(super) async fn lease(&self, key: &[u8], ask: LeaseAsk) -> Result<Leased, BackendError> {
        let shared = &*self.shared;
        let keys = self.state_keys(key);
        let operand = |x: u64| x.min(MAX_OPERAND) as i64;
        let age = Tick::Micros.from_nanos(u64::try_from(ask.max_age.as_nanos()).unwrap_or(u64::MAX));
        // Past every time the functions keep: always.
        let before = (ask.return_before < MAX_OPERAND << 2).then_some(ask.return_before as i64);
        let own: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
            &shared.limits.cost(ask.cost),
            &operand(ask.want),
            // The lessee's number, its bits as they are.
            &(ask.lessee as i64),
            &operand(age),
            &operand(ask.returning),
            &before,
        ];
        let rows = shared.run(&shared.lease_sql, &keys, &own).await?;
        let reply = reply_of(&rows, "lease")?;
        let rates = &shared.limits.rates;
        if let Some(decision) = blocked(rates, &reply, "lease")? {
            return Ok(Leased::new(decision, 0, None, u64::MAX));
        }
        leased_of(rates, &reply).ok_or_else(|| unexpected("lease", &reply))
    }
}

/// The answer a `lease` reply (not a blocked key's) gives under `rates`;
/// `None` for a reply that is not one.
fn leased_of(rates: &[LimitRate], reply: &[i64]) -> Option<Leased> {
    let (decided, tail) = reply.split_at_checked(4 * rates.len())?;
    let &[extra, window_end, window_left, return_before] = tail else {
        return None;
    };
    let combined = strategy::combine(&outcomes(rates, decided, "lease").ok()?);
    let decision = Decision::from_compound(combined, rates, Tick::Micros);
    let window_left = match (window_end, window_left) {
        (-1, -1) => None,
        (_, left) => Some(Duration::from_micros(u64::try_from(left).ok()?)),
    };
    let return_before = match return_before {
        -1 => u64::MAX,
        before => u64::try_from(before).ok()?,
    };
    Some(Leased::new(
        decision,
        u64::try_from(extra).ok()?,
        window_left,
        return_before,
    ))
}
