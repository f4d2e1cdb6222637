//! The parts of one request decided as one step
//! ([`Call::Together`](tollgate::backend::Call::Together)): one call of the
//! schema's `together` function with every part's limits, keys and cost.

use tollgate::backend::{BackendError, BindingPart};
use tollgate::Decision;

use super::{decision_of, reply_of, unexpected, PostgresBinding};

impl PostgresBinding {
    /// Decides `parts` in one call when every part's policy is bound to
    /// the first part's backend (one database and schema); `None` when
    /// they are not, for the limiter to decide them one by one.
    pub(super) async fn together(
        parts: &[BindingPart<'_, Self>],
    ) -> Option<Result<Vec<Decision>, BackendError>> {
        let first = &*parts.first()?.binding.shared;
        let one_backend = parts
            .iter()
            .all(|p| std::sync::Arc::ptr_eq(&p.binding.shared.options.installer, &first.options.installer));
        if !one_backend {
            return None;
        }
        Some(Self::call_together(parts).await)
    }

    /// One call of `together`: every part's limits and state keys in
    /// order, then each part's cost, whether it is decisive and its number
    /// of limits.
    async fn call_together(parts: &[BindingPart<'_, Self>]) -> Result<Vec<Decision>, BackendError> {
        let first = &*parts[0].binding.shared;
        let (mut kinds, mut lims, mut wins, mut intvs, mut spans) = (vec![], vec![], vec![], vec![], vec![]);
        let (mut keys, mut costs, mut decisive, mut counts) = (vec![], vec![], vec![], vec![]);
        for part in parts {
            let shared = &*part.binding.shared;
            let l = &shared.limits;
            kinds.extend_from_slice(&l.kinds);
            lims.extend_from_slice(&l.lims);
            wins.extend_from_slice(&l.wins);
            intvs.extend_from_slice(&l.intvs);
            spans.extend(l.spans(shared.options.clock.as_ref()));
            keys.extend(part.binding.state_keys(part.key));
            costs.push(l.cost(part.cost));
            decisive.push(part.decisive);
            counts.push(l.kinds.len() as i32);
        }
        let rows = first
            .run_on(
                [&kinds, &lims, &wins, &intvs, &spans],
                &first.together_sql,
                &keys,
                &[&costs, &decisive, &counts],
            )
            .await?;
        let reply = reply_of(&rows, "together")?;
        if reply.len() != 4 * kinds.len() {
            return Err(unexpected("together", &reply));
        }
        let mut rest = reply.as_slice();
        parts
            .iter()
            .map(|part| {
                let rates = part.binding.limits();
                let (mine, tail) = rest.split_at(4 * rates.len());
                rest = tail;
                decision_of(rates, mine)
            })
            .collect()
    }
}
