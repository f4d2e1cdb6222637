//! Reservations and their cancels ([`Call::Reserve`](tollgate::backend::Call::Reserve),
//! [`Call::Cancel`](tollgate::backend::Call::Cancel)): one call each of the
//! schema's `reserve` and `cancel` functions, which port the core's
//! `reserve_all` and `cancel_all`.

use std::time::Duration;

use tollgate::backend::{BackendError, Receipt, Reserved, Tick};
use tollgate::strategy::{self, CompoundOutcome, GcraState, Outcome, SlidingWindowState, State};
use tollgate::{Decision, Policy, Strategy};

use super::{blocked, outcomes, reply_of, unexpected, PostgresBinding};
use crate::limits::MAX_OPERAND;

impl PostgresBinding {
    /// Reserves `cost` units of `key`, waiting at most `max_delay`.
    pub(super) async fn reserve(
        &self,
        key: &[u8],
        cost: u64,
        max_delay: Duration,
    ) -> Result<Reserved, BackendError> {
        let shared = &*self.shared;
        let keys = self.state_keys(key);
        let micros = u64::try_from(max_delay.as_micros()).unwrap_or(u64::MAX);
        let max_delay = micros.min(MAX_OPERAND << 2) as i64;
        let rows = shared
            .run(
                &shared.reserve_sql,
                &keys,
                &[&shared.limits.cost(cost), &max_delay],
            )
            .await?;
        let reply = reply_of(&rows, "reserve")?;
        let rates = &shared.limits.rates;
        if let Some(decision) = blocked(rates, &reply, "reserve")? {
            return Ok(Reserved::new(decision, Duration::ZERO, None));
        }
        reserved_of(rates, cost, &reply).ok_or_else(|| unexpected("reserve", &reply))
    }

    /// Gives back the reservation of `key` that `receipt` describes.
    pub(super) async fn cancel(&self, key: &[u8], receipt: &Receipt) -> Result<bool, BackendError> {
        let mut left_by = Vec::with_capacity(3 * receipt.states().len());
        for state in receipt.states() {
            let numbers = match state {
                Some(State::Gcra(GcraState { tat })) => [*tat, 0, 0],
                Some(State::SlidingWindow(SlidingWindowState { start, curr, prev })) => {
                    [*start, *curr, *prev]
                }
                // Only buckets and sliding windows reserve ahead.
                _ => return Ok(false),
            };
            left_by.extend(numbers.map(|x| x.min(i64::MAX as u64) as i64));
        }
        let shared = &*self.shared;
        let keys = self.state_keys(key);
        let cost = receipt.cost().min(MAX_OPERAND) as i64;
        let proceed = receipt.proceed().min(i64::MAX as u64) as i64;
        let rows = shared
            .run(&shared.cancel_sql, &keys, &[&cost, &proceed, &left_by])
            .await?;
        rows.first()
            .and_then(|row| row.try_get::<_, bool>(0).ok())
            .ok_or_else(|| unexpected("cancel", &[]))
    }
}

/// The reservation a `reserve` reply (not a blocked key's) gives under
/// `rates` for `cost` units; `None` for a reply that is not one.
fn reserved_of(rates: &[tollgate::strategy::LimitRate], cost: u64, reply: &[i64]) -> Option<Reserved> {
    let n = rates.len();
    let (decided, tail) = reply.split_at_checked(4 * n)?;
    let (&[status, wait, bound, now], left_by) = tail.split_at_checked(4)? else {
        return None;
    };
    if left_by.len() != 3 * n {
        return None;
    }
    let combined = strategy::combine(&outcomes(rates, decided, "reserve").ok()?);
    let wait = u64::try_from(wait).ok()?;
    let compound = match status {
        0 | 1 => combined,
        // Refused, beyond the longest wait or until a sliding window
        // turns: a peek's figures, denied by the limit that set the wait.
        2 | 3 => CompoundOutcome {
            outcome: Outcome {
                allowed: false,
                retry_after: Some(wait),
                ..combined.outcome
            },
            bound_by: usize::try_from(bound).ok().filter(|&i| i < n)?,
        },
        _ => return None,
    };
    let decision = Decision::from_compound(compound, rates, Tick::Micros);
    match status {
        1 => {}
        2 => return Some(Reserved::beyond_max_delay(decision)),
        _ => return Some(Reserved::new(decision, Duration::ZERO, None)),
    }
    let mut states = [None; Policy::MAX_LIMITS];
    for ((state, numbers), limit) in states.iter_mut().zip(left_by.chunks_exact(3)).zip(rates) {
        let [a, b, c] = [numbers[0], numbers[1], numbers[2]].map(|x| u64::try_from(x).ok());
        *state = Some(match limit.strategy {
            Strategy::SlidingWindow => State::SlidingWindow(SlidingWindowState {
                start: a?,
                curr: b?,
                prev: c?,
            }),
            _ => State::Gcra(GcraState { tat: a? }),
        });
    }
    let proceed = u64::try_from(now).ok()? + wait;
    let receipt = Receipt::new(cost, proceed, &states[..n]);
    Some(Reserved::new(
        decision,
        Duration::from_micros(wait),
        Some(receipt),
    ))
}
