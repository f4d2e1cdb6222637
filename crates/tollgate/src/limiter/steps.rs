//! A decision's steps, written once: the exempt and deny lists, the deny
//! cache, the circuit breaker, the store, the fail policy, shadow mode, the
//! metrics and the top keys. [`Limiter::allow_by`] takes them for the awaited
//! and the immediate path alike, generic over the [`Way`] it waits; the two
//! differ only where one waits (for the store, for another request of the
//! key, for a reconnection) and the other cannot.

use std::sync::atomic::Ordering;

use super::way::Way;
use super::{FailPolicy, Limiter};
use crate::backend::{Backend, Leased};
use crate::decision::{Decision, Listed};
use crate::error::{BackendError, BackendErrorKind, Error};
use crate::keylist::Probe;
use crate::lease::{LeaseCall, Take};
use crate::operation::Operation;
use crate::protection::{Breaker, Claim, DenyTable, Gate, Lookup, ProbeGuard, Protection, Settled};

impl<B: Backend> Limiter<B> {
    /// Decides one request of `cost` units for `key`: the lists, then the
    /// store (behind the deny cache and the circuit breaker when the
    /// limiter has them, the fail policy applied to a failure), then shadow
    /// mode, the metrics and the top keys. `None`, with nothing charged,
    /// only when `W` cannot have the store's answer (the [`AtOnce`] way on
    /// a binding that must be awaited); the [`Awaited`] way always answers.
    ///
    /// [`AtOnce`]: super::way::AtOnce
    /// [`Awaited`]: super::way::Awaited
    #[inline]
    pub(super) async fn allow_by<W: Way>(&self, key: &[u8], cost: u64) -> Option<Result<Decision, Error>> {
        if let Some(decision) = self.listed(key) {
            return Some(Ok(self.conclude(decision, key, cost)));
        }
        let result = match &self.protection {
            Some(protection) => self.protected::<W>(protection, key, cost).await?,
            None => {
                let started = self.start();
                let result = W::apply(&self.binding, key, cost).await?;
                self.finish(result, started, key, cost)
            }
        };
        Some(result.map(|decision| self.conclude(decision, key, cost)))
    }

    /// The store's part of [`Limiter::allow_by`] with the deny cache in front
    /// of the store and the circuit breaker around it.
    ///
    /// A request finding another one of its key asking the store (the deny
    /// cache's single flight) waits for that answer and looks again, or,
    /// when `W` cannot wait, asks the store itself; a probe of the circuit
    /// breaker first re-establishes the connection. Returning `None` drops
    /// the passage: its probe is given back and its claim released.
    async fn protected<W: Way>(
        &self,
        p: &Protection,
        key: &[u8],
        cost: u64,
    ) -> Option<Result<Decision, Error>> {
        let mut now = p.clock.now_nanos();
        let mut lease = None;
        if let (true, Some(table)) = (cost > 0, &p.lease) {
            loop {
                match table.take(key, cost, now) {
                    Take::Spent(decision) => return Some(Ok(decision)),
                    Take::Ask(call) => {
                        lease = Some(call);
                        break;
                    }
                    Take::Wait(answered) => {
                        if !W::answered(answered).await {
                            break;
                        }
                        now = p.clock.now_nanos();
                    }
                }
            }
        }
        let mut claim = None;
        if let (true, Some(cache)) = (cost > 0, &p.deny) {
            loop {
                match self.look_up(cache, key, now) {
                    Looked::Denied(decision) => return Some(Ok(decision)),
                    Looked::Ask(claimed) => {
                        claim = claimed;
                        break;
                    }
                    Looked::Wait(answered) => {
                        if !W::answered(answered).await {
                            break;
                        }
                        now = p.clock.now_nanos();
                    }
                }
            }
        }
        let passage = match self.pass_breaker(p, now, claim, key, cost) {
            Ok(passage) => passage,
            Err(answer) => return Some(answer),
        };
        if passage.gate == Gate::Probe {
            if let Err(err) = W::reconnect(&self.binding).await {
                return Some(self.probe_unreachable(p, passage, err, key, cost));
            }
        }
        let started = self.start();
        let result = match lease {
            Some(call) => self.lease_from_store::<W>(call, key, cost).await?,
            None => W::apply(&self.binding, key, cost).await?,
        };
        Some(self.record_store(p, passage, result, started, key, cost))
    }

    /// The store's answer to a request asking for a lease, recorded in the
    /// limiter's leases; `None`, with nothing done, only when `W` cannot
    /// have it.
    async fn lease_from_store<W: Way>(
        &self,
        call: LeaseCall<'_>,
        key: &[u8],
        cost: u64,
    ) -> Option<Result<Decision, BackendError>> {
        let ask = call.ask();
        if ask.want == 0 && ask.returning == 0 {
            // Nothing to lease or give back: the store's ordinary decision,
            // which costs it less, recorded as a request without a lease.
            let result = W::apply(&self.binding, key, cost).await?;
            return Some(call.settle(result.map(|d| Leased::new(d, 0, None, u64::MAX))));
        }
        match W::lease(&self.binding, key, ask).await? {
            Some(result) => Some(call.settle(result)),
            // `Backend::leases` said it leases; decided as without.
            None => {
                drop(call);
                W::apply(&self.binding, key, cost).await
            }
        }
    }

    /// Applies a per-key operation: validated, the key's denial forgotten
    /// in the deny cache, then applied to the store; `None`, with nothing
    /// done, only when `W` cannot have the store apply it.
    pub(super) async fn operate_by<W: Way>(&self, key: &[u8], op: Operation) -> Option<Result<(), Error>> {
        if let Err(err) = op.validate() {
            return Some(Err(err.into()));
        }
        self.forget_denial(key);
        self.end_lease::<W>(key, op).await?;
        Some(W::operate(&self.binding, key, op).await?.map_err(Error::Backend))
    }

    /// Ends this process's lease of `key` before an operation changes the
    /// key's state, giving its unspent units back first (except before a
    /// reset, which clears them anyway). A return that fails is not
    /// repeated: the store may have applied it. `None` only when `W`
    /// cannot reach the store.
    async fn end_lease<W: Way>(&self, key: &[u8], op: Operation) -> Option<()> {
        let Some(table) = self.protection.as_ref().and_then(|p| p.lease.as_ref()) else {
            return Some(());
        };
        let Some(ask) = table.end(key) else {
            return Some(());
        };
        if op != Operation::Reset {
            if let Some(Ok(_)) = W::lease(&self.binding, key, ask).await? {
                table.count_returned(ask.returning);
            }
        }
        Some(())
    }

    /// Forgets a denial of `key` in the deny cache, before an operation
    /// changes its state.
    fn forget_denial(&self, key: &[u8]) {
        if let Some(cache) = self.protection.as_ref().and_then(|p| p.deny.as_ref()) {
            cache.remove(key);
        }
    }

    /// The decision of the exempt and deny lists, when the key is on one;
    /// the deny list wins.
    #[inline]
    pub(super) fn listed(&self, key: &[u8]) -> Option<Decision> {
        if !self.has_lists {
            return None;
        }
        let lists = self.options.as_deref()?;
        let limit = self.policy.limits()[0].limit();
        // The key is read as an address once for both lists.
        let mut probe = Probe::new(key);
        if lists.deny.holds(&mut probe) {
            Some(Decision::listed(Listed::Denied, limit))
        } else if lists.exempt.holds(&mut probe) {
            Some(Decision::listed(Listed::Exempt, limit))
        } else {
            None
        }
    }

    /// Applies shadow mode to a decision of `cost` units for `key` and
    /// counts it.
    #[inline]
    pub(super) fn conclude(&self, mut decision: Decision, key: &[u8], cost: u64) -> Decision {
        if self.shadow && !decision.allowed {
            decision.allowed = true;
            decision.shadow_denied = true;
            self.metrics.shadow_denied();
        }
        if !decision.fail_open {
            self.metrics.decided(decision.allowed);
        }
        if let Some(capacity) = self.top_capacity {
            self.record_top(capacity, key, &decision, cost);
        }
        decision
    }

    /// Applies the fail policy to a backend's answer and counts it.
    #[inline]
    pub(super) fn finish(
        &self,
        result: Result<Decision, BackendError>,
        started: Option<u64>,
        key: &[u8],
        cost: u64,
    ) -> Result<Decision, Error> {
        self.metrics.finish_sample(started);
        match result {
            Ok(decision) => Ok(decision),
            Err(err) => {
                self.metrics.backend_error();
                self.on_failure(err, key, cost)
            }
        }
    }

    /// What the fail policy makes of a request the store did not decide.
    pub(super) fn on_failure(&self, err: BackendError, key: &[u8], cost: u64) -> Result<Decision, Error> {
        match self.fail {
            FailPolicy::Closed => Err(Error::Backend(err)),
            FailPolicy::Open => {
                self.fail_open_events.fetch_add(1, Ordering::Relaxed);
                self.metrics.failed_open();
                Ok(Decision::failed_open(self.policy.limits()[0].limit()))
            }
            FailPolicy::Fallback => {
                let fallback = self.protection.as_ref().and_then(|p| p.fallback.as_ref());
                // `Options::validate` guarantees a fallback under this policy.
                let Some(fallback) = fallback else {
                    return Err(Error::Backend(err));
                };
                let Ok(mut decision) = fallback.check(key, cost) else {
                    return Err(Error::Backend(err));
                };
                decision.fallback = true;
                self.metrics.fell_back();
                Ok(decision)
            }
        }
    }

    /// What the deny cache says of a request of cost 1 or more for `key` at
    /// `now`, a cached denial counted as a hit.
    #[inline]
    fn look_up<'c>(&self, cache: &'c DenyTable, key: &'c [u8], now: u64) -> Looked<'c> {
        match cache.lookup(key, now) {
            Lookup::Denied(decision) => {
                self.metrics.deny_cache_hit();
                Looked::Denied(decision)
            }
            Lookup::Ask { claimed } => Looked::Ask(claimed.then(|| Claim::new(cache, key))),
            Lookup::Wait(answered) => Looked::Wait(answered),
        }
    }

    /// Takes a request that the deny cache sends to the store (holding
    /// `claim`, when it asks for its key's waiters) through the circuit
    /// breaker: the passage to the store, or the fail policy's answer when
    /// the breaker is open.
    fn pass_breaker<'p>(
        &self,
        p: &'p Protection,
        now: u64,
        claim: Option<Claim<'p>>,
        key: &[u8],
        cost: u64,
    ) -> Result<Passage<'p>, Result<Decision, Error>> {
        let gate = p.breaker.as_ref().map_or(Gate::Closed, |b| b.gate(now));
        if let Gate::Open(wait) = gate {
            // The waiters on the key meet the open breaker too, at once.
            if let Some(claim) = claim {
                claim.settle(Settled::Failed);
            }
            self.metrics.circuit_open();
            let failures = p.breaker.as_ref().map_or(0, Breaker::failures);
            let err = BackendError::new(
                BackendErrorKind::Unavailable,
                format!(
                    "not asking the store: its circuit breaker is open after {failures} consecutive \
                     failures, and the next probe is due in {} ms",
                    wait.as_millis()
                ),
            );
            return Err(self.on_failure(err, key, cost));
        }
        Ok(Passage {
            now,
            gate,
            probe: ProbeGuard::arm(gate, p.breaker.as_ref()),
            claim,
        })
    }

    /// A probe whose store could not be reached again: counted as failed
    /// without a decision being sent, and answered by the fail policy.
    #[cold]
    fn probe_unreachable(
        &self,
        p: &Protection,
        passage: Passage<'_>,
        err: BackendError,
        key: &[u8],
        cost: u64,
    ) -> Result<Decision, Error> {
        passage.probe.disarm();
        if let Some(breaker) = &p.breaker {
            breaker.record(passage.gate, false, p.clock.now_nanos());
        }
        if let Some(claim) = passage.claim {
            claim.settle(Settled::Failed);
        }
        self.on_failure(err, key, cost)
    }

    /// Records the store's answer to a request that went through `passage`
    /// (in the circuit breaker, and in the deny cache when it is a denial
    /// of a unit request), then applies the fail policy to it and counts it.
    fn record_store(
        &self,
        p: &Protection,
        passage: Passage<'_>,
        result: Result<Decision, BackendError>,
        started: Option<u64>,
        key: &[u8],
        cost: u64,
    ) -> Result<Decision, Error> {
        passage.probe.disarm();
        if let Some(breaker) = &p.breaker {
            breaker.record(passage.gate, result.is_ok(), p.clock.now_nanos());
        }
        if let Some(cache) = &p.deny {
            // Only a unit request's denial says when every request is
            // denied; an admission that left nothing says it too, for a
            // limit whose decision tells until when. Not with leases: units
            // this process gives back would not end it.
            let settled = match &result {
                Ok(decision) if cost == 1 && cache.insert(key, passage.now, decision) => Settled::Cached,
                Ok(decision)
                    if cost > 0
                        && p.lease.is_none()
                        && self.policy.single().is_some_and(|limit| {
                            cache.insert_exhausted(key, passage.now, decision, limit)
                        }) =>
                {
                    Settled::Cached
                }
                Ok(_) => Settled::Decided,
                Err(_) => Settled::Failed,
            };
            if let Some(claim) = passage.claim {
                claim.settle(settled);
            }
        }
        self.finish(result, started, key, cost)
    }

    /// The start time of this decision when it is one to time.
    #[inline]
    pub(super) fn start(&self) -> Option<u64> {
        self.metrics.start_sample()
    }
}

/// A protected request on its way to the store, past the deny cache and
/// the circuit breaker.
struct Passage<'p> {
    /// When the request was looked up in the deny cache.
    now: u64,
    /// What the circuit breaker let it through as.
    gate: Gate,
    /// Gives the probe back unless the store's answer is recorded.
    probe: ProbeGuard<'p>,
    /// The deny cache's single flight of the key, when this request asks
    /// for its waiters.
    claim: Option<Claim<'p>>,
}

/// What the deny cache says of a request (a [`Lookup`] with the claim made
/// and a hit counted).
enum Looked<'c> {
    /// Denied from the cache.
    Denied(Decision),
    /// Asks the store, for the key's waiters too when claimed.
    Ask(Option<Claim<'c>>),
    /// Another request asks the store: wait for its answer, then look again.
    Wait(tokio::sync::futures::OwnedNotified),
}
