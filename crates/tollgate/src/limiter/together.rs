//! Deciding together: the parts of one request, each a limiter's decision
//! on its own key, made as one step.
//!
//! Envoy's rate-limit API sends several descriptors in one request (a
//! per-client limit, a per-route limit, a global one) and wants one answer:
//! over the limit when any is. Deciding them one by one and giving back
//! the charges of a denied request keeps the limits, but between a charge
//! and its refund another request (in this process or another sharing the
//! store) can see the charge and be denied although it fits. [`decide`]
//! makes the whole request one step where the backend can
//! ([`Binding::apply_together`]: Redis, standalone or through Sentinel, and
//! a Redis Cluster when every key lives in one hash slot), so no other
//! request ever sees a charge that is later taken back.
//!
//! **The contract.** The parts are decided in order, each with its cost
//! against the state the earlier parts of the request left (so one limit
//! and key named twice counts both). The request is admitted when every
//! *decisive* part admits, and then every part that admitted is charged.
//! The first decisive part that denies denies the request, and then nothing
//! at all is charged: that part reports its denial, and every other part
//! the decision a request of that part alone would get against the stored
//! state, reporting its state uncharged when that decision admits. A part
//! that is not decisive (Envoy's `shadow_mode`, or a limiter in shadow
//! mode) is decided, reported and charged like the others, but its denial
//! denies nothing.
//!
//! Each limiter's options apply to its part: its shadow mode, its metrics,
//! its deny cache (a denial it holds denies the part without a charge, and
//! a unit part's denial is cached as by [`Limiter::allow`]; the single
//! flight of [`DenyCache`](crate::DenyCache) is not taken here, since one
//! request waiting on several keys could wait on itself), and its fail
//! policy when the store fails (each part then decided by its own limiter's
//! fallback or fail policy, which cannot be one step).
//!
//! [`decide`] answers `None`, and the caller decides the parts one by one,
//! when the backend cannot decide them in one step, when a limiter has
//! exempt or deny lists, and while a limiter's circuit breaker is not
//! closed (the one-by-one path probes and falls back as each limiter's
//! breaker says).

use crate::backend::{Backend, Binding, BindingPart};
use crate::decision::Decision;
use crate::error::{BackendError, Error};
use crate::limiter::Limiter;
use crate::protection::Gate;

/// One part of a request for [`decide`]: a limiter's decision on a key.
#[derive(Debug)]
pub struct Part<'a, B: Backend> {
    /// The limiter whose policy decides the part.
    pub limiter: &'a Limiter<B>,
    /// The caller's key.
    pub key: &'a [u8],
    /// The units the part asks for.
    pub cost: u64,
    /// Whether the part's denial denies the request; see the
    /// [module docs](self).
    pub decisive: bool,
}

impl<B: Backend> Clone for Part<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for Part<'_, B> {}

/// Decides `parts` as one step (see the [module docs](self)): one decision
/// per part, in order, each through its limiter's shadow mode and metrics.
///
/// `None` when they cannot be decided in one step: decide them one by one.
///
/// # Errors
///
/// [`Error::Backend`] when the store failed and a part's limiter fails
/// closed.
pub async fn decide<B: Backend>(parts: &[Part<'_, B>]) -> Option<Result<Vec<Decision>, Error>> {
    if parts.is_empty() || parts.iter().any(|p| p.limiter.has_lists) {
        return None;
    }
    if !breakers_closed(parts) {
        return None;
    }
    // Denials the limiters' caches hold: a decisive one is sent with a cost
    // above every limit (denied alone, nothing charged), another as a peek.
    let mut cached: Vec<Option<Decision>> = Vec::with_capacity(parts.len());
    let mut asked = Vec::with_capacity(parts.len());
    for part in parts {
        let protection = part.limiter.protection.as_deref();
        let now = protection.map_or(0, |p| p.clock.now_nanos());
        asked.push(now);
        let hit = match protection.and_then(|p| p.deny.as_ref()) {
            Some(cache) if part.cost > 0 => cache.get(part.key, now),
            _ => None,
        };
        if hit.is_some() {
            part.limiter.metrics.deny_cache_hit();
        }
        cached.push(hit);
    }
    let sent: Vec<BindingPart<'_, B::Binding>> = parts
        .iter()
        .zip(&cached)
        .map(|(part, hit)| {
            let decisive = part.decisive && !part.limiter.shadow;
            BindingPart {
                binding: &part.limiter.binding,
                key: part.key,
                cost: match hit {
                    None => part.cost,
                    Some(_) if decisive => u64::MAX,
                    Some(_) => 0,
                },
                decisive,
            }
        })
        .collect();
    let started: Vec<Option<u64>> = parts.iter().map(|p| p.limiter.start()).collect();
    let result = B::Binding::apply_together(&sent).await?;
    for part in parts {
        if let Some(p) = part.limiter.protection.as_deref() {
            if let Some(breaker) = &p.breaker {
                breaker.record(Gate::Closed, result.is_ok(), p.clock.now_nanos());
            }
        }
    }
    Some(match result {
        Ok(decisions) if decisions.len() == parts.len() => {
            Ok(conclude(parts, decisions, cached, &asked, &started))
        }
        Ok(decisions) => fail(
            parts,
            &started,
            BackendError::new(
                crate::error::BackendErrorKind::Protocol,
                format!(
                    "the store answered {} decisions for a request of {} parts",
                    decisions.len(),
                    parts.len()
                ),
            ),
        ),
        Err(err) => fail(parts, &started, err),
    })
}

/// Whether every limiter's circuit breaker is closed. A probe the check
/// claimed is given back: the one-by-one path makes it.
fn breakers_closed<B: Backend>(parts: &[Part<'_, B>]) -> bool {
    let mut closed = true;
    for part in parts {
        let Some(p) = part.limiter.protection.as_deref() else {
            continue;
        };
        if let Some(breaker) = &p.breaker {
            match breaker.gate(p.clock.now_nanos()) {
                Gate::Closed => {}
                Gate::Probe => {
                    breaker.abandon_probe();
                    closed = false;
                }
                Gate::Open(_) => closed = false,
            }
        }
    }
    closed
}

/// The store's decisions through each limiter: timing, the deny cache,
/// shadow mode and the counts.
fn conclude<B: Backend>(
    parts: &[Part<'_, B>],
    decisions: Vec<Decision>,
    cached: Vec<Option<Decision>>,
    asked: &[u64],
    started: &[Option<u64>],
) -> Vec<Decision> {
    let mut out = Vec::with_capacity(parts.len());
    for (i, ((part, decision), hit)) in parts.iter().zip(decisions).zip(cached).enumerate() {
        part.limiter.metrics.finish_sample(started[i]);
        let decision = match hit {
            Some(hit) => hit,
            None => {
                // Only a unit request's own denial says when every request
                // is denied; a key named twice may have been denied by the
                // request's own charge.
                let named_once = || {
                    parts
                        .iter()
                        .filter(|p| std::ptr::eq(p.limiter, part.limiter) && p.key == part.key)
                        .count()
                        == 1
                };
                if part.cost == 1 && !decision.allowed && named_once() {
                    if let Some(cache) = part.limiter.protection.as_deref().and_then(|p| p.deny.as_ref()) {
                        cache.insert(part.key, asked[i], &decision);
                    }
                }
                decision
            }
        };
        out.push(part.limiter.conclude(decision, part.key, part.cost));
    }
    out
}

/// Every part through its limiter's fail policy after the store failed.
fn fail<B: Backend>(
    parts: &[Part<'_, B>],
    started: &[Option<u64>],
    err: BackendError,
) -> Result<Vec<Decision>, Error> {
    let mut out = Vec::with_capacity(parts.len());
    for (part, started) in parts.iter().zip(started) {
        let limiter = part.limiter;
        limiter.metrics.finish_sample(*started);
        limiter.metrics.backend_error();
        let copy = BackendError::new(err.kind(), err.to_string());
        let decision = limiter.on_failure(copy, part.key, part.cost)?;
        out.push(limiter.conclude(decision, part.key, part.cost));
    }
    Ok(out)
}
