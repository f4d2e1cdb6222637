//! What the permit routes tell the service's counts of requests in flight:
//! the gauge of this replica's permits ([`crate::in_flight`]) and the keys
//! holding most ([`crate::holders`]).

use std::sync::Arc;
use std::time::Duration;

use tollgate::backend::Permitted;
use tollgate::strategy::permits::PermitId;
use tollgate::{Decision, Limiter};
use tollgate_config::AnyBackend;

use crate::in_flight::Ended;
use crate::shared::Shared;

/// The permit a route acted on: its resource as the token names it (or the
/// request did), its key and, when there is one, its identifier.
pub(crate) type Named<'a> = (&'a str, &'a [u8], Option<PermitId>);

/// Counts an acquire of `cost` units under `policy` answered `decision`,
/// holding the permit `named` for `expires_in`.
pub(crate) fn acquired(
    shared: &Shared,
    (limiter, policy): (&Arc<Limiter<AnyBackend>>, &str),
    named: Named<'_>,
    cost: u64,
    (decision, expires_in): (&Decision, Option<Duration>),
) {
    let (resource, key, id) = named;
    if let (Some(id), Some(expires_in)) = (id, expires_in) {
        shared
            .in_flight
            .acquired(policy, (resource, key, id.0), cost, expires_in);
    }
    if from_store(decision) {
        shared.holders.record(limiter, policy, key, decision);
    }
}

/// Counts what the store answered a release (`released`) or an extend of
/// the permit `named`.
pub(crate) fn ended(
    shared: &Shared,
    (limiter, policy): (&Arc<Limiter<AnyBackend>>, &str),
    named: Named<'_>,
    released: bool,
    answer: &Permitted,
) {
    let (resource, key, id) = named;
    if let Some(id) = id {
        let ended = match (answer.decision.allowed, answer.expires_in) {
            (false, _) => Ended::Gone,
            (true, Some(expires_in)) if !released => Ended::Extended(expires_in),
            (true, _) => Ended::Released,
        };
        shared.in_flight.ended((resource, key, id.0), ended);
    }
    if from_store(&answer.decision) {
        shared.holders.record(limiter, policy, key, &answer.decision);
    }
}

/// Whether a decision is the store's answer about the key (not the fail
/// policy's, nor a key list's).
fn from_store(decision: &Decision) -> bool {
    !decision.fail_open && !decision.fallback && decision.listed.is_none()
}
