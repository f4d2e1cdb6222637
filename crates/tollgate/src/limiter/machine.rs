//! A decision's steps as a machine that does no I/O, written once: the
//! exempt and deny lists, the leases, the deny cache, the circuit breaker,
//! the store, the fail policy, shadow mode, the metrics and the top keys.
//!
//! [`Limiter::begin`] takes a request as far as it goes without the store:
//! it is decided ([`Step::Done`]), must ask the store ([`Step::Plain`] when
//! nothing protects it, [`Step::Ask`] with a [`Pending`] saying what to ask
//! otherwise), or must wait for another request of
//! its key that is asking the store ([`Step::Wait`]; [`Limiter::resume`]
//! goes on once it has waited, or at once for a driver that cannot wait).
//! [`Limiter::finish`] (or [`Limiter::finish_plain`]) records the store's
//! answer (in the leases, the circuit breaker and the deny cache), applies
//! the fail policy to a failure, and concludes. Reservations ([`Limiter::begin_reservation`]) and
//! per-key operations ([`Limiter::begin_operation`]) have their own entries.
//!
//! The drivers (`drive.rs`) only carry a step's question to the store and
//! its answer back: awaited on any store, or at once in memory, where the
//! whole machine is inlined synchronous code.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::futures::OwnedNotified;

use super::{FailPolicy, Limiter};
use crate::backend::{Backend, LeaseAsk, Leased, Permitted, Receipt, Reserved};
use crate::decision::{Decision, Listed};
use crate::error::{BackendError, BackendErrorKind, Error};
use crate::keylist::Probe;
use crate::lease::{LeaseCall, Take};
use crate::operation::Operation;
use crate::protection::{Breaker, Claim, DenyTable, Gate, Lookup, ProbeGuard, Protection, Settled};

/// Where a decision stands after [`Limiter::begin`] or [`Limiter::resume`].
pub(super) enum Step<'l> {
    /// Decided without the store: the decision, concluded, or the fail
    /// policy's error.
    Done(Result<Decision, Error>),
    /// Admitted from the key's lease without the store: the decision,
    /// concluded. Dropped without [`Spend::keep`], the [`Spend`] puts the
    /// units back in the lease.
    Spent(Decision, Spend<'l>),
    /// Nothing protects the store: ask it for a decision of the request's
    /// cost, then [`Limiter::finish_plain`] with its answer.
    Plain(Plain<'l>),
    /// As [`Step::Plain`], for a request charged whether admitted or not:
    /// ask the store with [`Call::Charge`](crate::backend::Call::Charge).
    Charge(Plain<'l>),
    /// Ask the store what [`Pending::question`] says, then [`Limiter::finish`]
    /// with its answer. Dropped instead, it gives back what it holds (a
    /// circuit breaker's probe, the key's single flight, a lease's flight).
    Ask(Pending<'l>),
    /// Another request of the key is asking the store: wait for
    /// [`Waiting::notified`], then [`Limiter::resume`].
    Wait(Waiting<'l>),
}

impl<'l> Step<'l> {
    /// The step as a [`Begun`] one, or the wait it is.
    pub(super) fn begun(self) -> Result<Begun<'l>, Waiting<'l>> {
        Ok(match self {
            Step::Done(result) => Begun::Done(result),
            Step::Spent(decision, spend) => Begun::Spent(decision, spend),
            Step::Plain(plain) => Begun::Plain(plain),
            // A request of several parts is begun uncharged: parts charged
            // always are decided alone (`together::allow_all`).
            Step::Charge(plain) => {
                debug_assert!(false, "a part of a request begun to be charged always");
                Begun::Plain(plain)
            }
            Step::Ask(pending) => Begun::Ask(pending),
            Step::Wait(waiting) => return Err(waiting),
        })
    }

    /// A request of `cost` for `key` waiting for `notified` in `stage`.
    fn wait(
        notified: OwnedNotified,
        key: &'l [u8],
        cost: u64,
        protection: &'l Protection,
        stage: Stage<'l>,
    ) -> Self {
        Step::Wait(Waiting {
            notified,
            resume: Resume {
                key,
                cost,
                protection,
                stage,
            },
        })
    }
}

/// A [`Step`] that does not wait: where a request of several parts stands
/// once each part went as far as it goes ([`Step::begun`]).
pub(super) enum Begun<'l> {
    /// As [`Step::Done`].
    Done(Result<Decision, Error>),
    /// As [`Step::Spent`].
    Spent(Decision, Spend<'l>),
    /// As [`Step::Plain`].
    Plain(Plain<'l>),
    /// As [`Step::Ask`].
    Ask(Pending<'l>),
}

impl Begun<'_> {
    /// Whether the request holds its key's single flight (the deny cache's
    /// claim, or a lease's flight): other requests of the key wait for its
    /// answer.
    pub(super) fn holds_flight(&self) -> bool {
        match self {
            Begun::Ask(pending) => {
                pending.passage.claim.is_some() || pending.lease.as_ref().is_some_and(|call| call.flying())
            }
            Begun::Done(_) | Begun::Spent(..) | Begun::Plain(_) => false,
        }
    }
}

/// A request waiting for another of its key to have the store's answer.
pub(super) struct Waiting<'l> {
    /// Ready once the other request has the store's answer.
    pub(super) notified: OwnedNotified,
    /// Where the request goes on from.
    pub(super) resume: Resume<'l>,
}

/// Units a request spent from its key's lease: kept, or put back when the
/// request is not made after all (another part of it was denied, or it is
/// decided another way), which dropping it does.
pub(super) struct Spend<'l> {
    protection: &'l Protection,
    key: &'l [u8],
    cost: u64,
    /// The lease spent from, named by when it was taken.
    lease: u64,
    kept: bool,
}

impl Spend<'_> {
    /// The request was made: its units stay spent.
    pub(super) fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Spend<'_> {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        if let Some(table) = &self.protection.lease {
            table.put_back(self.key, self.cost, self.lease, self.protection.clock.now_nanos());
        }
    }
}

/// Where a waiting request goes on from: the stage that sent it waiting.
pub(super) struct Resume<'l> {
    key: &'l [u8],
    cost: u64,
    protection: &'l Protection,
    stage: Stage<'l>,
}

/// The protected stages a request can wait in.
enum Stage<'l> {
    /// The leases: another request asks the store for the key's lease.
    Lease,
    /// The deny cache's single flight, the lease stage passed with its call.
    Deny(Option<Box<LeaseCall<'l>>>),
}

/// Where a reservation stands after [`Limiter::begin_reservation`].
pub(super) enum Reserving<'l> {
    /// The key's list decided: the reservation is this decision, concluded.
    Listed(Decision),
    /// Ask the store for the reservation, then
    /// [`Limiter::finish_reservation`].
    Ask(Plain<'l>),
}

/// A request on its way to a store that nothing protects.
pub(super) struct Plain<'l> {
    /// The request's key.
    pub(super) key: &'l [u8],
    /// The units the request asks for.
    pub(super) cost: u64,
    /// The start of the store call's time, when it is a call to time.
    started: Option<u64>,
}

/// A request on its way to the store, past its protection.
pub(super) struct Pending<'l> {
    plain: Plain<'l>,
    protection: &'l Protection,
    passage: Passage<'l>,
    /// The lease call, when the leases send the request to the store
    /// (boxed: it is the largest part, and a step is moved between the
    /// machine and its driver).
    lease: Option<Box<LeaseCall<'l>>>,
    /// Whether the store's answer may go into the deny cache.
    cacheable: bool,
    /// Whether the request is charged whether admitted or not
    /// ([`Charge::Always`](crate::Charge::Always)): the store is asked
    /// with [`Call::Charge`](crate::backend::Call::Charge). (Here
    /// beside `cacheable` rather than in [`Plain`], whose size every
    /// step's move pays for.)
    charged: bool,
}

/// What a [`Pending`] request asks the store: which [`Call`](crate::backend::Call)
/// its driver sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Question {
    /// A decision of the request's cost ([`Call::Decide`](crate::backend::Call::Decide)).
    Decide,
    /// A decision with a lease ([`Call::Lease`](crate::backend::Call::Lease)).
    Lease(LeaseAsk),
    /// A decision that charges the request whether admitted or not
    /// ([`Call::Charge`](crate::backend::Call::Charge)).
    Charge,
}

/// The store's answer to a [`Pending`] request, as its driver heard it.
pub(super) enum Reply {
    /// The answer to [`Question::Decide`] or [`Question::Charge`].
    Decided(Result<Decision, BackendError>),
    /// The answer to [`Question::Lease`].
    Leased(Result<Leased, BackendError>),
    /// The store could not be reached again before a circuit breaker's
    /// probe ([`Pending::reconnects_first`]); nothing was asked.
    Unreachable(BackendError),
}

impl<'l> Pending<'l> {
    /// The request's key.
    pub(super) fn key(&self) -> &'l [u8] {
        self.plain.key
    }

    /// The units the request asks for.
    pub(super) fn cost(&self) -> u64 {
        self.plain.cost
    }

    /// Whether the request is charged whether admitted or not.
    pub(super) fn charged(&self) -> bool {
        self.charged
    }

    /// What to ask the store.
    pub(super) fn question(&self) -> Question {
        if self.charged {
            return Question::Charge;
        }
        match &self.lease {
            // Nothing to lease or give back: the store's ordinary decision,
            // which costs it less, recorded as a request without a lease.
            Some(call) if call.ask().want > 0 || call.ask().returning > 0 => Question::Lease(call.ask()),
            _ => Question::Decide,
        }
    }

    /// Whether the store's connection is to be re-established first: the
    /// request is a circuit breaker's probe.
    pub(super) fn reconnects_first(&self) -> bool {
        self.passage.gate == Gate::Probe
    }

    /// The request asks for a plain decision instead of a lease
    /// ([`Question::Decide`]: a driver that cannot wait asks at once),
    /// recorded as without a lease.
    pub(super) fn without_lease(&mut self) {
        self.lease = None;
    }

    /// The store's answer may depend on more than this request's own cost
    /// (the same key named twice in one request of several parts): it is
    /// not cached as the key's denial.
    pub(super) fn not_cacheable(&mut self) {
        self.cacheable = false;
    }
}

impl<B: Backend> Limiter<B> {
    /// Takes a request of `cost` units for `key` as far as it goes without
    /// the store: the lists, then, when the limiter protects its store, the
    /// leases, the deny cache and the circuit breaker. A request `charged`
    /// whether admitted or not ([`Charge::Always`](crate::Charge::Always))
    /// passes the leases and the deny cache by: a report's usage is the
    /// store's to count.
    #[inline]
    pub(super) fn begin<'l>(&'l self, key: &'l [u8], cost: u64, charged: bool) -> Step<'l> {
        if let Some(decision) = self.decided_first(key) {
            return Step::Done(Ok(self.conclude(decision, key, cost)));
        }
        let charged = charged && cost > 0;
        match self.protection.as_deref() {
            None if charged => Step::Charge(self.to_store(key, cost)),
            None => Step::Plain(self.to_store(key, cost)),
            Some(protection) => self.begin_protected(protection, key, cost, charged),
        }
    }

    /// [`Self::begin`] for a limiter with nothing before its store (no
    /// lists, no protection) that charges only admitted requests: the
    /// request asks the store at once. `None` for any other limiter, whose
    /// requests [`Self::begin`] takes.
    #[inline]
    pub(super) fn plain<'l>(&'l self, key: &'l [u8], cost: u64) -> Option<Plain<'l>> {
        if self.decides_first || self.protection.is_some() {
            return None;
        }
        Some(self.to_store(key, cost))
    }

    /// A request of `cost` for `key` on its way to the store, its time
    /// started when it is a call to time.
    #[inline]
    fn to_store<'l>(&self, key: &'l [u8], cost: u64) -> Plain<'l> {
        Plain {
            key,
            cost,
            started: self.start(),
        }
    }

    /// [`Self::begin`]'s protected stages, out of the unprotected
    /// decision's line.
    #[inline(never)]
    fn begin_protected<'l>(
        &'l self,
        protection: &'l Protection,
        key: &'l [u8],
        cost: u64,
        charged: bool,
    ) -> Step<'l> {
        if charged {
            return self.begin_charged(protection, key, cost);
        }
        let resume = Resume {
            key,
            cost,
            protection,
            stage: Stage::Lease,
        };
        self.resume(resume, true)
    }

    /// [`Self::begin_protected`] for a request charged whether admitted or
    /// not: past the leases and the deny cache, straight to the circuit
    /// breaker.
    #[cold]
    #[inline(never)]
    fn begin_charged<'l>(&'l self, protection: &'l Protection, key: &'l [u8], cost: u64) -> Step<'l> {
        match self.pass_breaker(protection, protection.clock.now_nanos(), None, (key, cost, true)) {
            Ok(passage) => Step::Ask(Pending {
                plain: self.to_store(key, cost),
                protection,
                passage,
                lease: None,
                cacheable: true,
                charged: true,
            }),
            Err(answer) => Step::Done(answer.map(|decision| self.conclude(decision, key, cost))),
        }
    }

    /// Goes on with a request from where it waited: it looks again when it
    /// `waited` for the other request's answer; a driver that cannot wait
    /// passes `false`, and the request then asks the store itself (without
    /// a lease, or without the deny cache's single flight).
    pub(super) fn resume<'l>(&'l self, resume: Resume<'l>, waited: bool) -> Step<'l> {
        let Resume {
            key,
            cost,
            protection: p,
            stage,
        } = resume;
        let now = p.clock.now_nanos();
        let (lease, look) = match stage {
            Stage::Lease => {
                let mut lease = None;
                if let (true, true, Some(table)) = (waited, cost > 0, &p.lease) {
                    match table.take(key, cost, now) {
                        Take::Spent(decision, lease) => {
                            let spend = Spend {
                                protection: p,
                                key,
                                cost,
                                lease,
                                kept: false,
                            };
                            return Step::Spent(self.conclude(decision, key, cost), spend);
                        }
                        Take::Ask(call) => lease = Some(Box::new(call)),
                        Take::Wait(notified) => return Step::wait(notified, key, cost, p, Stage::Lease),
                    }
                }
                (lease, true)
            }
            Stage::Deny(lease) => (lease, waited),
        };
        let mut claim = None;
        if let (true, true, Some(cache)) = (look, cost > 0, &p.deny) {
            match self.look_up(cache, key, now) {
                Looked::Denied(decision) => return Step::Done(Ok(self.conclude(decision, key, cost))),
                Looked::Ask(claimed) => claim = claimed,
                Looked::Wait(notified) => return Step::wait(notified, key, cost, p, Stage::Deny(lease)),
            }
        }
        match self.pass_breaker(p, now, claim, (key, cost, false)) {
            Ok(passage) => Step::Ask(Pending {
                plain: self.to_store(key, cost),
                protection: p,
                passage,
                lease,
                cacheable: true,
                charged: false,
            }),
            Err(answer) => Step::Done(answer.map(|decision| self.conclude(decision, key, cost))),
        }
    }

    /// Records the store's answer to `pending` (in the leases, the circuit
    /// breaker and the deny cache), applies the fail policy to a failure,
    /// and concludes the decision.
    #[inline]
    pub(super) fn finish(&self, pending: Pending<'_>, answer: Reply) -> Result<Decision, Error> {
        let Pending {
            plain: Plain { key, cost, started },
            protection: p,
            passage,
            lease,
            cacheable,
            charged,
        } = pending;
        let result = match (answer, lease) {
            (Reply::Unreachable(err), _) => {
                return self
                    .probe_unreachable(p, passage, err, (key, cost, charged))
                    .map(|decision| self.conclude(decision, key, cost))
            }
            (Reply::Leased(result), Some(call)) => (*call).settle(result),
            (Reply::Decided(result), Some(call)) => {
                (*call).settle(result.map(|decision| Leased::new(decision, 0, None, u64::MAX)))
            }
            (Reply::Decided(result), None) => result,
            (Reply::Leased(result), None) => result.map(|leased| leased.decision),
        };
        self.record_store(p, passage, result, (started, cacheable), (key, cost, charged))
            .map(|decision| self.conclude(decision, key, cost))
    }

    /// Applies the fail policy to the store's answer to a `plain` request
    /// (`charged` whether admitted or not when it is a [`Step::Charge`]),
    /// and concludes the decision.
    #[inline]
    pub(super) fn finish_plain(
        &self,
        plain: Plain<'_>,
        result: Result<Decision, BackendError>,
        charged: bool,
    ) -> Result<Decision, Error> {
        let Plain { key, cost, started } = plain;
        self.record(result, started, (key, cost, charged))
            .map(|decision| self.conclude(decision, key, cost))
    }

    /// [`Self::finish_plain`] for a store that cannot fail.
    #[inline]
    pub(super) fn finish_infallible(&self, plain: Plain<'_>, decision: Decision) -> Decision {
        self.metrics.finish_sample(plain.started);
        self.conclude(decision, plain.key, plain.cost)
    }

    /// Takes a reservation of `cost` units for `key` as far as it goes
    /// without the store: the lists. The deny cache, the leases and the
    /// circuit breaker are not consulted (a reservation asks for a slot
    /// later, which they know nothing of).
    pub(super) fn begin_reservation<'l>(&'l self, key: &'l [u8], cost: u64) -> Reserving<'l> {
        match self.decided_first(key) {
            Some(decision) => Reserving::Listed(self.conclude(decision, key, cost)),
            None => Reserving::Ask(self.to_store(key, cost)),
        }
    }

    /// Records the store's answer to a reservation: the fail policy on a
    /// failure (whose decision reserves nothing later), then shadow mode
    /// (a reservation enforcement would have wait proceeds now) and the
    /// conclusion.
    pub(super) fn finish_reservation(
        &self,
        plain: Plain<'_>,
        result: Result<Reserved, BackendError>,
    ) -> Result<(Decision, Duration, Option<Receipt>, bool), Error> {
        let Plain {
            key, cost, started, ..
        } = plain;
        self.metrics.finish_sample(started);
        let Reserved {
            mut decision,
            mut delay,
            receipt,
            beyond_max_delay,
            ..
        } = match result {
            Ok(reserved) => reserved,
            Err(err) => {
                self.metrics.backend_error();
                Reserved::new(self.on_failure(err, (key, cost, false))?, Duration::ZERO, None)
            }
        };
        if !delay.is_zero() {
            self.metrics.delayed();
        }
        if self.shadow && decision.allowed && !delay.is_zero() {
            delay = Duration::ZERO;
            decision.shadow_denied = true;
        }
        Ok((
            self.conclude(decision, key, cost),
            delay,
            receipt,
            beyond_max_delay,
        ))
    }

    /// Records the store's answer to a permit's acquisition: the fail
    /// policy on a failure (whose decision holds nothing), then shadow
    /// mode (a denied acquisition proceeds, holding nothing) and the
    /// conclusion. Returns the decision and, when the store holds a
    /// permit for it, how long the permit lives.
    pub(super) fn finish_permit(
        &self,
        plain: Plain<'_>,
        result: Result<Permitted, BackendError>,
    ) -> Result<(Decision, Option<Duration>), Error> {
        let Plain {
            key, cost, started, ..
        } = plain;
        self.metrics.finish_sample(started);
        let (decision, expires_in) = match result {
            Ok(permitted) => (permitted.decision, permitted.expires_in),
            Err(err) => {
                self.metrics.backend_error();
                (self.on_failure(err, (key, cost, false))?, None)
            }
        };
        let held = decision.allowed && cost > 0;
        Ok((self.conclude(decision, key, cost), expires_in.filter(|_| held)))
    }

    /// A per-key operation's steps before the store: validated, the key's
    /// denial forgotten in the deny cache, and this process's lease of the
    /// key ended. The lease's unspent units to give back to the store first
    /// (not before a reset, which clears them anyway), if any; record the
    /// answer with [`Self::lease_returned`]. A return that fails is not
    /// repeated: the store may have applied it.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when the operation's argument is out of range.
    pub(super) fn begin_operation(&self, key: &[u8], op: Operation) -> Result<Option<LeaseAsk>, Error> {
        op.validate()?;
        self.forget_denial(key);
        let Some(table) = self.protection.as_ref().and_then(|p| p.lease.as_ref()) else {
            return Ok(None);
        };
        Ok(table.end(key).filter(|_| op != Operation::Reset))
    }

    /// Counts the units a lease's return gave back, once the store took it.
    pub(super) fn lease_returned(&self, ask: LeaseAsk, answer: Result<Leased, BackendError>) {
        if let (Ok(_), Some(table)) = (answer, self.protection.as_ref().and_then(|p| p.lease.as_ref())) {
            table.count_returned(ask.returning);
        }
    }

    /// Forgets a denial of `key` in the deny cache, before an operation
    /// changes its state.
    pub(super) fn forget_denial(&self, key: &[u8]) {
        if let Some(cache) = self.protection.as_ref().and_then(|p| p.deny.as_ref()) {
            cache.remove(key);
        }
    }

    /// The decision taken before the store, when there is one: the exempt
    /// and deny lists', when the key is on one (the deny list wins), else a
    /// policy's that admits nothing ([`Policy::zero`](crate::Policy::zero)).
    #[inline]
    pub(super) fn decided_first(&self, key: &[u8]) -> Option<Decision> {
        if !self.decides_first {
            return None;
        }
        self.listed(key).or_else(|| self.admitting_nothing())
    }

    /// The decision of the exempt and deny lists, when the key is on one;
    /// the deny list wins.
    fn listed(&self, key: &[u8]) -> Option<Decision> {
        let lists = self.options.as_deref()?;
        if !lists.has_lists() {
            return None;
        }
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

    /// The decision of a policy that admits nothing, for a request of any
    /// cost, a peek included: denied, nothing remaining, reset at the end
    /// of the zero limit's current window on the limiter's own clock, never
    /// admitted. `None` for any other policy.
    #[cold]
    fn admitting_nothing(&self) -> Option<Decision> {
        let (bound_by, zero) = self
            .policy
            .limits()
            .iter()
            .enumerate()
            .find(|(_, l)| l.limit() == 0)?;
        let window = zero.window().as_nanos() as u64;
        let reset = window - self.local_clock().now_nanos() % window;
        let mut decision = Decision::new(false, 0, 0, std::time::Duration::from_nanos(reset), None);
        decision.bound_by = bound_by;
        Some(decision)
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

    /// Applies the fail policy to a backend's answer to `request` and
    /// counts it.
    #[inline]
    fn record(
        &self,
        result: Result<Decision, BackendError>,
        started: Option<u64>,
        request: Request<'_>,
    ) -> Result<Decision, Error> {
        self.metrics.finish_sample(started);
        match result {
            Ok(decision) => Ok(decision),
            Err(err) => {
                self.metrics.backend_error();
                self.on_failure(err, request)
            }
        }
    }

    /// What the fail policy makes of a `request` the store did not decide:
    /// the fallback charges a charged request as the store would have.
    pub(super) fn on_failure(
        &self,
        err: BackendError,
        (key, cost, charged): Request<'_>,
    ) -> Result<Decision, Error> {
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
                let Ok(mut decision) = fallback.check(key, cost, charged) else {
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
    /// the breaker is open. Inlined into each caller: as a call of its own
    /// it costs the protected decision about 30 instructions
    /// (`.ci/instruction-budget`).
    #[inline(always)]
    fn pass_breaker<'p>(
        &self,
        p: &'p Protection,
        now: u64,
        claim: Option<Claim<'p>>,
        request: Request<'_>,
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
            return Err(self.on_failure(err, request));
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
        request: Request<'_>,
    ) -> Result<Decision, Error> {
        passage.probe.disarm();
        if let Some(breaker) = &p.breaker {
            breaker.record(passage.gate, false, p.clock.now_nanos());
        }
        if let Some(claim) = passage.claim {
            claim.settle(Settled::Failed);
        }
        self.on_failure(err, request)
    }

    /// Records the store's answer to a request that went through `passage`
    /// (in the circuit breaker, and in the deny cache when it is a denial
    /// of a unit request, or a charged request's denial, which says when a
    /// unit request is admitted), then applies the fail policy to it and
    /// counts it.
    fn record_store(
        &self,
        p: &Protection,
        passage: Passage<'_>,
        result: Result<Decision, BackendError>,
        (started, cacheable): (Option<u64>, bool),
        request: Request<'_>,
    ) -> Result<Decision, Error> {
        let (key, cost, charged) = request;
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
                Ok(_) if !cacheable => Settled::Decided,
                Ok(decision) if (cost == 1 || charged) && cache.insert(key, passage.now, decision) => {
                    Settled::Cached
                }
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
        self.record(result, started, request)
    }

    /// The start time of this decision when it is one to time.
    #[inline]
    pub(super) fn start(&self) -> Option<u64> {
        self.metrics.start_sample()
    }
}

/// A request as the fail policy and the deny cache see it: its key, its
/// cost, and whether it is charged whether admitted or not.
type Request<'k> = (&'k [u8], u64, bool);

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
