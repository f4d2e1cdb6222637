//! The framework-neutral part of the middleware: from a request to either
//! "call the service, then add these headers" or "send this reply".

use std::borrow::Cow;
use std::sync::Arc;

use tollgate::backend::Backend;
use tollgate::{Limiter, Limiters, Operation, Permit};

use crate::cost::Cost;
use crate::cost_error::CostError;
use crate::headers::{write_denial, HeaderMode, RateHeaders};
use crate::in_flight::{HeldPermit, Queues};
use crate::ip::IpGrouping;
use crate::key::{peer_key, Key, KeyExtractor, MissingKey};
use crate::key_error::KeyError;
use crate::reply::{GrpcMode, Reply};
use crate::reply_context::{CostRejected, Denied, Failure, KeyRejected, ReplyContext, ReplyFormat};
use crate::request::RequestInfo;
use crate::resource::ResourceExtractor;
use crate::response_cost::{Charge, ResponseCost};
use crate::skip::Skip;

pub(crate) type DeniedFn = dyn Fn(&Denied<'_>) -> Reply + Send + Sync;
pub(crate) type FailureFn = dyn Fn(&Failure<'_>) -> Reply + Send + Sync;
pub(crate) type KeyErrorFn = dyn Fn(&KeyRejected<'_>) -> Reply + Send + Sync;
pub(crate) type CostErrorFn = dyn Fn(&CostRejected<'_>) -> Reply + Send + Sync;

/// The framework-neutral part of the middleware, shared by every request:
/// the configuration, and from a request to a [`Verdict`].
pub(crate) struct Engine<B: Backend> {
    pub(crate) limiters: Arc<Limiters<B>>,
    pub(crate) key: KeyExtractor,
    pub(crate) missing: MissingKey,
    pub(crate) resource: ResourceExtractor,
    pub(crate) cost: Cost,
    pub(crate) grouping: IpGrouping,
    pub(crate) headers: HeaderMode,
    pub(crate) format: ReplyFormat,
    pub(crate) grpc: GrpcMode,
    pub(crate) on_denied: Option<Arc<DeniedFn>>,
    pub(crate) on_failure: Option<Arc<FailureFn>>,
    pub(crate) on_key_error: Option<Arc<KeyErrorFn>>,
    pub(crate) on_cost_error: Option<Arc<CostErrorFn>>,
    /// Requests let through untouched (any rule).
    pub(crate) skip: Vec<Skip>,
    /// What responses change in their request's charge.
    pub(crate) response_cost: ResponseCost,
    /// How long a request over the rate may be held for its turn
    /// ([`RateLimit::delay`](crate::RateLimit::delay)); `None`: refused at
    /// once.
    pub(crate) delay: Option<std::time::Duration>,
    /// The requests waiting for a slot of a concurrency policy, shared by
    /// the clones of this configuration.
    pub(crate) queues: Arc<Queues>,
}

impl<B: Backend> Clone for Engine<B> {
    fn clone(&self) -> Self {
        Self {
            limiters: self.limiters.clone(),
            key: self.key.clone(),
            missing: self.missing,
            resource: self.resource.clone(),
            cost: self.cost.clone(),
            grouping: self.grouping,
            headers: self.headers,
            format: self.format,
            grpc: self.grpc,
            on_denied: self.on_denied.clone(),
            on_failure: self.on_failure.clone(),
            on_key_error: self.on_key_error.clone(),
            on_cost_error: self.on_cost_error.clone(),
            skip: self.skip.clone(),
            response_cost: self.response_cost.clone(),
            delay: self.delay,
            queues: self.queues.clone(),
        }
    }
}

impl<B: Backend> std::fmt::Debug for Engine<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("key", &self.key)
            .field("missing_key", &self.missing)
            .field("resource", &self.resource)
            .field("cost", &self.cost)
            .field("ip_grouping", &self.grouping)
            .field("headers", &self.headers)
            .field("format", &self.format)
            .field("grpc", &self.grpc)
            .field("skip", &self.skip)
            .field("response_cost", &self.response_cost)
            .field("delay", &self.delay)
            .finish_non_exhaustive()
    }
}

/// A request's key, resource and cost, borrowed from the request where
/// possible.
pub(crate) struct Prepared<'a> {
    key: Key<'a>,
    resource: Cow<'a, str>,
    cost: u64,
    /// Whether replies are gRPC's; `None` when that depends on the
    /// request's content type, looked up only for a reply.
    grpc: Option<bool>,
}

/// What to do with a request.
pub(crate) enum Verdict {
    /// Call the service and add these headers to its response; then settle
    /// the charge, when there is one to settle ([`Engine::settle`]), and
    /// hold the permit of a concurrency policy, when one is held, until the
    /// response body ends.
    Allow(RateHeaders, Option<Box<Charge>>, Option<HeldPermit>),
    /// Answer with this reply instead.
    Reply(Reply),
}

impl<B: Backend> Engine<B> {
    pub(crate) fn new(limiters: Arc<Limiters<B>>) -> Self {
        Self {
            limiters,
            key: KeyExtractor::default(),
            missing: MissingKey::default(),
            resource: ResourceExtractor::default(),
            cost: Cost::default(),
            grouping: IpGrouping::default(),
            headers: HeaderMode::default(),
            format: ReplyFormat::default(),
            grpc: GrpcMode::default(),
            on_denied: None,
            on_failure: None,
            on_key_error: None,
            on_cost_error: None,
            skip: Vec::new(),
            response_cost: ResponseCost::default(),
            delay: None,
            queues: Arc::default(),
        }
    }
}

impl<B: Backend> Engine<B> {
    /// Whether `req` bypasses the limiter: no decision, no charge, no
    /// headers.
    #[inline]
    pub(crate) fn skips(&self, req: &RequestInfo<'_>) -> bool {
        !self.skip.is_empty() && self.skip.iter().any(|rule| rule.holds(req))
    }

    /// Takes key, resource and cost from `req` (no I/O); a reply when there
    /// is no key or no valid cost. Kept apart from [`Engine::verdict`] so
    /// that the request view, which need not be `Sync`, is not held across
    /// an await.
    pub(crate) fn prepare<'a>(&self, req: &RequestInfo<'a>) -> Result<Prepared<'a>, Box<Reply>> {
        let grpc = match self.grpc {
            GrpcMode::Detect => None,
            GrpcMode::Always => Some(true),
            GrpcMode::Never => Some(false),
        };
        let is_grpc = || grpc.unwrap_or_else(|| req.is_grpc());
        // Without a policy of its own for any resource, every request is
        // the default's: the resource is not taken (no route lookup).
        let resource = if self.limiters.has_resources() {
            self.resource.extract(req)
        } else {
            Cow::Borrowed("")
        };
        let key = match self.key.extract(req, &self.grouping) {
            Ok(key) => key,
            Err(error) => match self.missing {
                MissingKey::PeerIp => peer_key(req, &self.grouping)
                    .map_err(|e| Box::new(self.key_error(&e, &resource, is_grpc())))?,
                MissingKey::Reject => return Err(Box::new(self.key_error(&error, &resource, is_grpc()))),
            },
        };
        let cost = match self.cost.of(req) {
            Ok(cost) => cost,
            Err(error) => return Err(Box::new(self.cost_error(&error, &key, &resource, is_grpc()))),
        };
        Ok(Prepared {
            key,
            resource,
            cost,
            grpc,
        })
    }

    /// Whether [`Engine::verdict_now`] decides (the backend answers without
    /// waiting, as in memory). Used by the tower service, which calls the
    /// inner service from `call` when it can.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) fn can_check(&self) -> bool {
        // A request that may be held waits, which only the awaited path can.
        self.delay.is_none() && self.limiters.decides_now()
    }

    /// The verdict for `p`, taken from `req`, without waiting, when the
    /// limiter can give one. A backend that decides now but failed gives
    /// `None`: the awaited path, which decides again, reports the error; so
    /// does a concurrency policy, whose permit is acquired on that path.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    #[inline]
    pub(crate) fn verdict_now(&self, p: &Prepared<'_>, req: &RequestInfo<'_>) -> Option<Verdict> {
        if self.limiters.in_flight(&p.resource).is_some() {
            return None;
        }
        let decision = self
            .limiters
            .with_limiter(&p.resource, |limiter| {
                if is_concurrency(limiter) {
                    return None;
                }
                limiter.decide_now(p.key.as_bytes(), p.cost)
            })?
            .ok()?;
        Some(self.decided(&decision, p, || req.is_grpc()))
    }

    /// Asks the limiter and maps its answer to a verdict; `is_grpc` tells
    /// whether the request is gRPC, asked only for a reply (the request
    /// view itself is not held across the wait).
    pub(crate) async fn verdict(&self, p: &Prepared<'_>, is_grpc: impl FnOnce() -> bool) -> Verdict {
        let (limiter, in_flight) = self.limiters.limiters_of(&p.resource);
        if let Some(slots) = in_flight {
            return self.verdict_combined(&slots, &limiter, p, is_grpc).await;
        }
        if is_concurrency(&limiter) {
            return self.verdict_permit(&limiter, p, is_grpc).await;
        }
        if let Some(max_delay) = self.delay {
            return self.verdict_held(&limiter, p, max_delay, is_grpc).await;
        }
        match limiter.allow_n(p.key.as_bytes(), p.cost).await {
            Ok(decision) => self.decided(&decision, p, is_grpc),
            Err(error) => self.failed(&error, p, is_grpc),
        }
    }

    /// [`Self::verdict`] for a request that may be held up to `max_delay`
    /// for its turn: it waits through the limiter
    /// ([`Limiter::acquire_n_within`](tollgate::Limiter::acquire_n_within):
    /// a reservation when the strategy takes one, the next window's
    /// decision otherwise) and is passed on with the headers of the
    /// decision that admitted it; refused as any denial when its turn is
    /// further away. A client that leaves while held cancels its turn.
    async fn verdict_held(
        &self,
        limiter: &Limiter<B>,
        p: &Prepared<'_>,
        max_delay: std::time::Duration,
        is_grpc: impl FnOnce() -> bool,
    ) -> Verdict {
        match limiter
            .acquire_n_within(p.key.as_bytes(), p.cost, Some(max_delay))
            .await
        {
            Ok(decision) => self.decided(&decision, p, is_grpc),
            Err(error) => self.failed(&error, p, is_grpc),
        }
    }

    /// [`Self::verdict`] for a concurrency policy: acquires a permit of the
    /// request's cost, waiting for a slot up to the longest hold when
    /// [`RateLimit::delay`](crate::RateLimit::delay) sets one
    /// ([`Queues::acquire_within`]).
    async fn verdict_permit(
        &self,
        limiter: &Arc<Limiter<B>>,
        p: &Prepared<'_>,
        is_grpc: impl FnOnce() -> bool,
    ) -> Verdict {
        let key = p.key.as_bytes();
        let acquired = match self.delay {
            Some(max) => {
                self.queues
                    .acquire_within(limiter, &p.resource, key, p.cost, max)
                    .await
            }
            None => limiter.acquire_permit(key, p.cost).await,
        };
        match acquired {
            Ok(permit) => self.permitted(limiter, permit, p, is_grpc),
            Err(error) => self.failed(&error, p, is_grpc),
        }
    }

    /// [`Self::verdict`] for a resource that combines rates (`rates`) with
    /// a concurrency limit (`slots`): a request needs both. Its permit is
    /// acquired first (waiting for a slot as [`Self::verdict_permit`]
    /// does), so a denied one charges the rates nothing; admitted, the
    /// rates decide at once, and their denial (or failure) releases the
    /// permit before the reply, so a denied request holds nothing. An
    /// admitted request holds its permit until its response body ends,
    /// with the rates' headers.
    async fn verdict_combined(
        &self,
        slots: &Arc<Limiter<B>>,
        rates: &Limiter<B>,
        p: &Prepared<'_>,
        is_grpc: impl FnOnce() -> bool,
    ) -> Verdict {
        let key = p.key.as_bytes();
        let acquired = match self.delay {
            Some(max) => {
                self.queues
                    .acquire_within(slots, &p.resource, key, p.cost, max)
                    .await
            }
            None => slots.acquire_permit(key, p.cost).await,
        };
        let permit = match acquired {
            Ok(permit) if permit.decision().allowed => permit,
            Ok(denied) => return self.permitted(slots, denied, p, is_grpc),
            Err(error) => return self.failed(&error, p, is_grpc),
        };
        let held = permit
            .id()
            .is_some()
            .then(|| HeldPermit::new(permit, slots.decides_now(), Arc::clone(&self.queues), &p.resource));
        match rates.allow_n(key, p.cost).await {
            Ok(decision) => match self.decided(&decision, p, is_grpc) {
                Verdict::Allow(headers, charge, None) => Verdict::Allow(headers, charge, held),
                // Denied by the rates: `held` is dropped here, releasing
                // the permit and waking this key's waiters.
                reply => reply,
            },
            Err(error) => self.failed(&error, p, is_grpc),
        }
    }

    /// Maps the answer to a permit's acquisition to a verdict: admitted, it
    /// holds the permit when the store holds one (not for an exempt key,
    /// shadow mode's or the fail policy's admissions); nothing is charged,
    /// so nothing is settled.
    fn permitted(
        &self,
        limiter: &Limiter<B>,
        permit: Permit<B>,
        p: &Prepared<'_>,
        is_grpc: impl FnOnce() -> bool,
    ) -> Verdict {
        let decision = *permit.decision();
        let headers = if decision.fail_open {
            RateHeaders::default()
        } else {
            RateHeaders::for_decision(self.headers, &decision, || {
                self.limiters.named_policy(&p.resource)
            })
        };
        if !decision.allowed {
            return self.denied(headers, &decision, p, is_grpc);
        }
        let held = permit.id().is_some().then(|| {
            HeldPermit::new(
                permit,
                limiter.decides_now(),
                Arc::clone(&self.queues),
                &p.resource,
            )
        });
        Verdict::Allow(headers, None, held)
    }

    /// Maps the limiter's decision to a verdict.
    #[inline]
    fn decided(
        &self,
        decision: &tollgate::Decision,
        p: &Prepared<'_>,
        is_grpc: impl FnOnce() -> bool,
    ) -> Verdict {
        // Admitted only because the backend failed under fail-open: the
        // limiter knows nothing of the key's state, so no rate-limit
        // headers are sent rather than figures it never computed.
        if decision.fail_open {
            return Verdict::Allow(RateHeaders::default(), None, None);
        }
        let headers =
            RateHeaders::for_decision(self.headers, decision, || self.limiters.named_policy(&p.resource));
        if decision.allowed {
            let charge = self
                .response_cost
                .charge(decision, &p.resource, p.key.as_bytes(), p.cost);
            return Verdict::Allow(headers, charge, None);
        }
        self.denied(headers, decision, p, is_grpc)
    }

    /// The reply to a denied request. Not marked cold (under a flood,
    /// denials are the common case), but kept out of the admitted path's
    /// code.
    #[inline(never)]
    fn denied(
        &self,
        headers: RateHeaders,
        decision: &tollgate::Decision,
        p: &Prepared<'_>,
        is_grpc: impl FnOnce() -> bool,
    ) -> Verdict {
        let grpc = p.grpc.unwrap_or_else(is_grpc);
        let denied: Denied<'_> = self.context(decision, p.key.as_bytes(), &p.resource, grpc);
        let mut reply = match &self.on_denied {
            Some(handler) => handler(&denied),
            None => Reply::for_denied(&denied),
        };
        write_denial(headers, decision, reply.headers_mut());
        Verdict::Reply(reply)
    }

    /// The reply to a request the limiter could not decide.
    #[cold]
    fn failed(&self, error: &tollgate::Error, p: &Prepared<'_>, is_grpc: impl FnOnce() -> bool) -> Verdict {
        let grpc = p.grpc.unwrap_or_else(is_grpc);
        let failure: Failure<'_> = self.context(error, p.key.as_bytes(), &p.resource, grpc);
        Verdict::Reply(match &self.on_failure {
            Some(handler) => handler(&failure),
            None => Reply::for_failure(&failure),
        })
    }

    /// Whether the response to a request admitted with `charge` is to be
    /// looked at: a charge to settle, or a cost header to remove.
    #[inline]
    pub(crate) fn reads_response(&self, charge: Option<&Charge>) -> bool {
        charge.is_some() || self.response_cost.header_to_remove().is_some()
    }

    /// The refund or penalty that settles `charge` for a response with
    /// `status` (`cost_values` gives the values of a response header), and
    /// the name of a header to remove from the response.
    pub(crate) fn settlement<'v, I>(
        &self,
        charge: Option<&Charge>,
        status: u16,
        cost_values: impl FnOnce(&str) -> I,
    ) -> (Option<Operation>, Option<&str>)
    where
        I: Iterator<Item = &'v [u8]>,
    {
        let op = charge.and_then(|charge| self.response_cost.settlement(charge, status, cost_values));
        (op, self.response_cost.header_to_remove())
    }

    /// Applies `op` to `charge`'s key at once, when the limiter can (in
    /// memory); `false` when it must be awaited ([`Engine::settle`]). A
    /// failure is counted, never returned: the response stands.
    pub(crate) fn settle_now(&self, charge: &Charge, op: Operation) -> bool {
        let applied = self
            .limiters
            .with_limiter(&charge.resource, |limiter| limiter.operate_now(&charge.key, op));
        match applied {
            Some(result) => {
                self.response_cost.count(op, result.is_ok());
                true
            }
            None => false,
        }
    }

    /// [`Engine::settle_now`], counting `op` as failed when the limiter
    /// cannot apply it at once.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) fn settle_or_count(&self, charge: &Charge, op: Operation) {
        if !self.settle_now(charge, op) {
            self.response_cost.count(op, false);
        }
    }

    /// Applies `op` to `charge`'s key. A failure is counted, never
    /// returned: the response stands.
    pub(crate) async fn settle(&self, charge: &Charge, op: Operation) {
        if self.settle_now(charge, op) {
            return;
        }
        let limiter = self.limiters.limiter(&charge.resource);
        let result = limiter.operate(&charge.key, op).await;
        self.response_cost.count(op, result.is_ok());
    }

    #[cold]
    fn key_error(&self, error: &KeyError, resource: &str, grpc: bool) -> Reply {
        let rejected: KeyRejected<'_> = self.context(error, b"", resource, grpc);
        match &self.on_key_error {
            Some(handler) => handler(&rejected),
            None => Reply::for_key_error(&rejected),
        }
    }

    #[cold]
    fn cost_error(&self, error: &CostError, key: &Key<'_>, resource: &str, grpc: bool) -> Reply {
        let rejected: CostRejected<'_> = self.context(error, key.as_bytes(), resource, grpc);
        match &self.on_cost_error {
            Some(handler) => handler(&rejected),
            None => Reply::for_cost_error(&rejected),
        }
    }

    fn context<'a, W: Copy>(
        &self,
        why: W,
        key: &'a [u8],
        resource: &'a str,
        grpc: bool,
    ) -> ReplyContext<'a, W> {
        ReplyContext::new(why, key, resource, self.format, grpc)
    }
}

/// Whether `limiter`'s policy is a concurrency limit, whose requests hold
/// a permit while they run instead of being decided.
fn is_concurrency<B: Backend>(limiter: &Limiter<B>) -> bool {
    limiter.policy().limits()[0].strategy().is_concurrency()
}
