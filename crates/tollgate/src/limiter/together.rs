//! Deciding together: the parts of one request, each a limiter's decision
//! on its own key, made as one step.
//!
//! Envoy's rate-limit API sends several descriptors in one request (a
//! per-client limit, a per-route limit, a global one) and wants one answer:
//! over the limit when any is. Deciding them one by one and giving back
//! the charges of a denied request keeps the limits, but between a charge
//! and its refund another request (in this process or another sharing the
//! store) can see the charge and be denied although it fits. [`allow_in_one_step`]
//! makes the whole request one step where the backend can
//! ([`Call::Together`]: Redis, standalone or through Sentinel, and
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
//! state, reporting its state uncharged when that decision admits.
//!
//! **Roles.** A part's [`Role`] says what its decision does to the request.
//! A part that is not decisive (a quota, a part in shadow mode, or a part
//! whose limiter is in shadow mode) is decided, reported and charged like
//! the others, but its denial denies nothing by itself. A request whose
//! every quota part is denied (Envoy's `quota_mode`) is denied after all,
//! and what it charged is given back. A part in shadow mode reports a
//! denial as an admission marked
//! [`shadow_denied`](crate::Decision::shadow_denied). A decisive part
//! whose limiter admits nothing ([`Policy::zero`](crate::Policy::zero))
//! denies the request before anything is charged, and every part is
//! reported as the parts of a denied request are. [`allow_all`] decides
//! every role, and says in [`Decided::denied`] whether the request is
//! denied; a caller translates, and decides nothing itself.
//!
//! Each part goes through its limiter's decision machine as a request of
//! that part alone does, so each limiter's options apply to its part: its
//! shadow mode and metrics; its lease (a part admitted from it asks the
//! store nothing and is charged nothing there; its units go back to the
//! lease when another part denies the request); its deny cache (a denial
//! it holds denies the part without a charge, and the store's denial of a
//! unit part, or an admission that left nothing, is cached as by
//! [`Limiter::allow`], unless the request names the key twice); and its
//! fail policy when the store fails (each part that asked it then decided
//! by its own limiter's fallback or fail policy, which cannot be one step).
//! Where a part alone would wait for another request's answer on its key
//! (the deny cache's or the lease's single flight), the part waits too
//! while its request holds no single flight of its own; once it holds one
//! it asks the store in the request's one step instead, so two requests
//! never wait on each other.
//!
//! A request decided in one step that a decisive part's cached denial
//! denies asks the store nothing, as that part alone would not: the part
//! reports the cached denial, a part its own cache or lease decided reports
//! that (a lease's units put back and reported unspent), and every other
//! part is reported [not asked](crate::Decision::not_asked), nothing read or
//! charged for it. So a flooded key costs a request of several parts no
//! more store calls than it costs a request of it alone.
//!
//! **Parts charged whether admitted or not.** A part whose limiter
//! [charges always](crate::Charge::Always) (and whose cost is not 0) is
//! usage reported after the fact: [`allow_all`] charges it first, on its
//! own, whatever the other parts decide, and it is never given back. When
//! such a decisive part denies, the request is denied and every other part
//! is reported as a denied request's parts are; otherwise the other parts
//! are decided as above. Such a part is charged when its request is
//! reported too.
//!
//! [`allow_all`] decides any request on any backend: in one step where
//! the store can, and otherwise one part at a time, charging in order and
//! giving back at the first decisive denial, under the same contract (a
//! charge that another request may see before it is given back is the
//! only difference). [`allow_in_one_step`] is the one-step path alone: it answers
//! `None` when the backend cannot decide the parts in one step, when a
//! limiter has exempt or deny lists, while a limiter's circuit breaker is
//! not closed (the one-by-one path probes and falls back as each limiter's
//! breaker says), and when a part would take a new lease or give a lease's
//! units back (a call one step cannot carry); it leaves the roles but
//! decisive and not decisive to [`allow_all`].

use std::sync::OnceLock;

use crate::backend::{Answer, Backend, Binding, BindingPart, Call, KeyLocks};
use crate::decision::Decision;
use crate::error::{BackendError, Error};
use crate::limiter::machine::{Begun, Question, Reply, Spend, Waiting};
use crate::limiter::Charge;
use crate::limiter::Limiter;
use crate::operation::Operation;
use crate::protection::Gate;

/// One part of a request for [`allow_all`]: a limiter's decision on a key.
#[derive(Debug)]
pub struct Part<'a, B: Backend> {
    /// The limiter whose policy decides the part.
    pub limiter: &'a Limiter<B>,
    /// The caller's key.
    pub key: &'a [u8],
    /// The units the part asks for.
    pub cost: u64,
    /// What the part's decision does to its request: see [`Role`].
    pub role: Role,
}

/// What a part's decision does to its request of several parts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Role {
    /// Its denial denies the request (the default). A decisive part whose
    /// limiter admits nothing ([`Policy::zero`](crate::Policy::zero))
    /// denies the request before anything is charged: every part is then
    /// reported as the parts of a denied request are.
    #[default]
    Decisive,
    /// A quota (Envoy's `quota_mode`): decided, and charged when it
    /// admits, but its denial alone denies nothing. When every quota part
    /// of the request is denied, the request is denied after all, and
    /// every charge the request made is given back (each part then
    /// reports its units unspent), but a part [charged
    /// always](self#parts-charged-whether-admitted-or-not)'s.
    Quota,
    /// Shadow mode (Envoy's `shadow_mode`): decided, and charged when it
    /// admits; a denial denies nothing and is reported admitted, marked
    /// [`shadow_denied`](Decision::shadow_denied).
    Shadow,
    /// A quota in shadow mode: as [`Role::Shadow`], and a request with
    /// such a part never has every quota spent.
    ShadowQuota,
}

impl Role {
    /// Whether the part's denial denies its request by itself.
    pub(crate) fn is_decisive(self) -> bool {
        self == Role::Decisive
    }

    /// Whether the part is one of its request's quotas.
    pub(crate) fn is_quota(self) -> bool {
        matches!(self, Role::Quota | Role::ShadowQuota)
    }

    /// Whether a denial of the part is reported as an admission.
    pub fn is_shadow(self) -> bool {
        matches!(self, Role::Shadow | Role::ShadowQuota)
    }
}

impl<B: Backend> Clone for Part<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for Part<'_, B> {}

/// Decides `parts` as one step (see the [module docs](self)): one decision
/// per part, in order, each through its limiter's decision machine as a
/// request of that part alone would be (its lease, deny cache, circuit
/// breaker, fail policy, shadow mode and metrics).
///
/// `None` when they cannot be decided in one step: decide them one by one.
///
/// # Errors
///
/// [`Error::Backend`] when the store failed and a part's limiter fails
/// closed.
pub async fn allow_in_one_step<B: Backend>(parts: &[Part<'_, B>]) -> Option<Result<Vec<Decision>, Error>> {
    let first = parts.first()?.limiter;
    if !first.answers(&Call::Together(&[])) {
        return None;
    }
    if parts.iter().any(|p| p.limiter.decides_first || charged_always(p)) || !breakers_closed(parts) {
        return None;
    }
    let mut begun = begin_all(parts).await;
    // A decisive part denied before the store (a denial its deny cache
    // holds) denies the request, which then asks the store nothing.
    let denied_here = parts
        .iter()
        .zip(&begun)
        .any(|(part, step)| matches!(step, Begun::Done(Ok(d)) if denies(part, d)));
    if denied_here {
        return Some(Ok(not_asked(parts, begun)));
    }
    // What one step cannot carry: a lease to take or give back, a probe of
    // the store, a fail policy's error. Dropping what was begun gives back
    // its claims and lease units.
    let carried = begun.iter().all(|step| match step {
        Begun::Ask(pending) => !pending.reconnects_first() && pending.question() == Question::Decide,
        Begun::Done(result) => result.is_ok(),
        Begun::Spent(..) | Begun::Plain(_) => true,
    });
    if !carried {
        return None;
    }
    not_cached_when_named_twice(parts, &mut begun);
    let sent = binding_parts(parts, &begun);
    let result = Answer::decisions(first.binding.call(Call::Together(&sent)).await)?;
    Some(match result {
        Ok(decisions) if decisions.len() == parts.len() => {
            settle(parts, begun, decisions.into_iter().map(Ok))
        }
        Ok(decisions) => {
            let err = BackendError::new(
                crate::error::BackendErrorKind::Protocol,
                format!(
                    "the store answered {} decisions for a request of {} parts",
                    decisions.len(),
                    parts.len()
                ),
            );
            fail(parts, begun, &err)
        }
        Err(err) => fail(parts, begun, &err),
    })
}

/// Each part as far as it goes without the store. A part waits for
/// another request's answer on its key (a single flight) only while the
/// request holds no flight itself: two requests never wait on each other.
async fn begin_all<'p, B: Backend>(parts: &[Part<'p, B>]) -> Vec<Begun<'p>> {
    let mut begun: Vec<Begun<'_>> = Vec::with_capacity(parts.len());
    let mut holding = false;
    for part in parts {
        let mut step = part.limiter.begin(part.key, part.cost, false);
        let part_begun = loop {
            match step.begun() {
                Ok(part_begun) => break part_begun,
                Err(Waiting { notified, resume }) => {
                    if !holding {
                        notified.await;
                    }
                    step = part.limiter.resume(resume, !holding);
                }
            }
        };
        holding |= part_begun.holds_flight();
        begun.push(part_begun);
    }
    begun
}

/// A key named twice may be denied by the request's own charge: the
/// store's answer for it is not the key's denial to cache.
fn not_cached_when_named_twice<B: Backend>(parts: &[Part<'_, B>], begun: &mut [Begun<'_>]) {
    for (i, step) in begun.iter_mut().enumerate() {
        if let Begun::Ask(pending) = step {
            let part = &parts[i];
            let named = parts
                .iter()
                .filter(|p| std::ptr::eq(p.limiter, part.limiter) && p.key == part.key)
                .count();
            if named > 1 {
                pending.not_cacheable();
            }
        }
    }
}

/// The parts as the store's one call carries them: a part decided here
/// (a denial that decides nothing, an admission from the lease) is
/// reported by the store, uncharged; a part is decisive when its role is
/// and its limiter is not in shadow mode.
fn binding_parts<'a, B: Backend>(
    parts: &[Part<'a, B>],
    begun: &[Begun<'_>],
) -> Vec<BindingPart<'a, B::Binding>> {
    parts
        .iter()
        .zip(begun)
        .map(|(part, step)| BindingPart {
            binding: &part.limiter.binding,
            key: part.key,
            cost: match step {
                Begun::Plain(_) | Begun::Ask(_) => part.cost,
                Begun::Done(_) | Begun::Spent(..) => 0,
            },
            decisive: part.role.is_decisive() && !part.limiter.shadow,
        })
        .collect()
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

/// Every part's answer through its limiter's machine: the store's answer
/// for the parts that asked it, the part's own decision for the others.
/// The units of a part admitted from its lease stay spent when the request
/// is admitted, and go back to the lease when it is denied (the part then
/// reports them unspent).
fn settle<B: Backend>(
    parts: &[Part<'_, B>],
    begun: Vec<Begun<'_>>,
    answers: impl Iterator<Item = Result<Decision, BackendError>>,
) -> Result<Vec<Decision>, Error> {
    let mut decisions = Vec::with_capacity(parts.len());
    let mut spends = Vec::new();
    for ((part, step), answer) in parts.iter().zip(begun).zip(answers) {
        let limiter = part.limiter;
        decisions.push(match step {
            Begun::Ask(pending) => limiter.finish(pending, Reply::Decided(answer))?,
            Begun::Plain(plain) => limiter.finish_plain(plain, answer, false)?,
            Begun::Done(result) => result?,
            Begun::Spent(decision, spend) => {
                spends.push((decisions.len(), spend));
                decision
            }
        });
    }
    let denied = parts.iter().zip(&decisions).any(|(p, d)| denies(p, d));
    for (i, spend) in spends {
        if denied {
            decisions[i] = put_back(decisions[i], spend, parts[i].cost);
        } else {
            spend.keep();
        }
    }
    Ok(decisions)
}

/// Whether `part`'s concluded `decision` denies its request: a decisive
/// part's denial (a limiter in shadow mode concludes every decision as an
/// admission, so its part never denies).
fn denies<B: Backend>(part: &Part<'_, B>, decision: &Decision) -> bool {
    part.role.is_decisive() && !decision.allowed
}

/// A part admitted from its lease in a request that was denied: the units
/// go back to the lease, and the part reports them unspent.
fn put_back(decision: Decision, spend: Spend<'_>, cost: u64) -> Decision {
    drop(spend);
    Decision {
        remaining: decision.remaining.saturating_add(cost),
        ..decision
    }
}

/// The parts of a request that a decisive part denied before the store:
/// each part decided here as it was (a cached denial, an admission from the
/// lease, whose units go back to it and are reported unspent), every other
/// part [not asked](Decision::not_asked), what it began given back.
fn not_asked<B: Backend>(parts: &[Part<'_, B>], begun: Vec<Begun<'_>>) -> Vec<Decision> {
    parts
        .iter()
        .zip(begun)
        .map(|(part, step)| match step {
            Begun::Done(Ok(decision)) => decision,
            Begun::Spent(decision, spend) => put_back(decision, spend, part.cost),
            Begun::Done(Err(_)) | Begun::Plain(_) | Begun::Ask(_) => {
                Decision::unasked(part.limiter.policy().limits()[0].limit())
            }
        })
        .collect()
}

/// Every part that asked the store through its limiter's fail policy after
/// the store failed; the others as decided without it.
fn fail<B: Backend>(
    parts: &[Part<'_, B>],
    begun: Vec<Begun<'_>>,
    err: &BackendError,
) -> Result<Vec<Decision>, Error> {
    let answers = std::iter::repeat_with(|| Err(BackendError::new(err.kind(), err.to_string())));
    settle(parts, begun, answers)
}

/// What [`allow_all`] answers: one decision per part, in order, and the
/// charges of a denied request that stayed in place.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decided {
    /// One decision per part, in order, each as its [`Role`] reports it.
    pub decisions: Vec<Decision>,
    /// Whether the request is denied: a decisive part denied it (a part
    /// whose limiter is in shadow mode never does), a decisive part's
    /// limiter admits nothing, or every quota of the request is spent.
    pub denied: bool,
    /// Charges of a denied request left in place: made by a limiter's
    /// in-memory fallback while its store failed (a refund does not reach
    /// it), or whose refund failed because the store failed in between.
    /// 0 whenever the request was admitted or decided in one step by the
    /// store.
    pub partial_charges: u64,
}

/// The locks that serialize requests of several parts decided one part at
/// a time in this process, by key: enough that unrelated keys rarely share
/// one, and memory bounded whatever keys clients send.
const ONE_BY_ONE_LOCKS: usize = 1024;

/// The locks of [`allow_all`]'s one-by-one path, made at its first use.
fn one_by_one_locks() -> &'static KeyLocks {
    static LOCKS: OnceLock<KeyLocks> = OnceLock::new();
    LOCKS.get_or_init(|| KeyLocks::new(ONE_BY_ONE_LOCKS))
}

/// Decides `parts` as one request, on any backend, under the [contract of
/// this module](self): in one step where the store can ([`allow_in_one_step`]), and
/// otherwise one part at a time.
///
/// One part is one decision ([`Limiter::allow_n`]). Several parts that the
/// store cannot decide in one step (in memory, across Redis Cluster slots,
/// a custom store, while a circuit breaker is not closed, a limiter
/// with exempt or deny lists, or a part taking a new lease) are charged in order, each against the
/// charges of the earlier ones; at the first decisive denial the parts
/// already charged are given back exactly what they were charged (a refund
/// right after a charge undoes it) and report their state as it then
/// stands, and the parts after it are reported uncharged.
/// Between a charge and its refund another request may see the charge and
/// be denied where it would have fitted: conservative, never admitting
/// more than the limits. Requests of several parts decided so in this
/// process are serialized by their keys for the whole step, so in memory
/// every answer is the one a sequential replay gives; a request of one
/// part waits for no other.
///
/// # Errors
///
/// [`Error::Backend`] when the store failed and a part's limiter fails
/// closed; the parts charged before it are given back first.
pub async fn allow_all<B: Backend>(parts: &[Part<'_, B>]) -> Result<Decided, Error> {
    if parts
        .iter()
        .any(|p| p.role.is_decisive() && p.limiter.policy().admits_nothing())
    {
        // Denied before anything is charged: every part reported.
        let decisions = report(parts).await?;
        return Ok(conclude(parts, (decisions, 0), true));
    }
    let (mut decisions, mut partial_charges) = if parts.len() > 1 && parts.iter().any(charged_always) {
        charged_first(parts).await?
    } else {
        decide_charged_if_admitted(parts).await?
    };
    // A decisive denial charged nothing: the quotas have nothing to give
    // back.
    if parts.iter().zip(&decisions).any(|(p, d)| denies(p, d)) {
        return Ok(conclude(parts, (decisions, partial_charges), true));
    }
    let spent = quotas_spent(parts, &decisions);
    if spent {
        partial_charges += give_back(parts, &mut decisions).await;
    }
    Ok(conclude(parts, (decisions, partial_charges), spent))
}

/// One decision per part, in order, and the charges of a denied request
/// left in place ([`Decided::partial_charges`]).
type Decisions = (Vec<Decision>, u64);

/// Whether every quota of the request is spent: it has quota parts, none in
/// shadow mode, and each was denied.
fn quotas_spent<B: Backend>(parts: &[Part<'_, B>], decisions: &[Decision]) -> bool {
    let mut quotas = parts
        .iter()
        .zip(decisions)
        .filter(|(p, _)| p.role.is_quota())
        .peekable();
    quotas.peek().is_some() && quotas.all(|(p, d)| p.role == Role::Quota && !d.allowed)
}

/// The request's answer, each part's decision as its role reports it: a
/// part in shadow mode that was denied reports an admission, marked
/// [`shadow_denied`](Decision::shadow_denied).
fn conclude<B: Backend>(
    parts: &[Part<'_, B>],
    (mut decisions, partial_charges): Decisions,
    denied: bool,
) -> Decided {
    for (part, decision) in parts.iter().zip(&mut decisions) {
        if part.role.is_shadow() && !decision.allowed {
            decision.allowed = true;
            decision.shadow_denied = true;
        }
    }
    Decided {
        decisions,
        denied,
        partial_charges,
    }
}

/// Whether `part` is charged whether admitted or not.
fn charged_always<B: Backend>(part: &Part<'_, B>) -> bool {
    part.cost > 0 && part.limiter.charges() == Charge::Always
}

/// [`allow_all`] for a request with parts [charged
/// always](self#parts-charged-whether-admitted-or-not): those first, one by
/// one, then the others, decided together unless a charged part denied the
/// request, and then reported.
async fn charged_first<B: Backend>(parts: &[Part<'_, B>]) -> Result<Decisions, Error> {
    let mut decisions: Vec<Option<Decision>> = vec![None; parts.len()];
    let mut denied = false;
    for (i, part) in parts.iter().enumerate().filter(|(_, p)| charged_always(p)) {
        let decision = part.limiter.allow_n(part.key, part.cost).await?;
        denied |= denies(part, &decision);
        decisions[i] = Some(decision);
    }
    let (others, rest): (Vec<usize>, Vec<Part<'_, B>>) = parts
        .iter()
        .enumerate()
        .filter(|(_, p)| !charged_always(p))
        .map(|(i, p)| (i, *p))
        .unzip();
    let (decided, partial_charges) = if rest.is_empty() {
        (Vec::new(), 0)
    } else if denied {
        (report(&rest).await?, 0)
    } else {
        decide_charged_if_admitted(&rest).await?
    };
    for (i, decision) in others.into_iter().zip(decided) {
        decisions[i] = Some(decision);
    }
    Ok((decisions.into_iter().flatten().collect(), partial_charges))
}

/// [`allow_all`] for parts that are each charged only when the request
/// is admitted.
async fn decide_charged_if_admitted<B: Backend>(parts: &[Part<'_, B>]) -> Result<Decisions, Error> {
    if let [part] = parts {
        let decision = part.limiter.allow_n(part.key, part.cost).await?;
        return Ok((vec![decision], 0));
    }
    if let Some(result) = allow_in_one_step(parts).await {
        let decisions = result?;
        let denied = parts.iter().zip(&decisions).any(|(p, d)| denies(p, d));
        // A fallback's charge in a denied request stays where it is.
        let partial_charges = if denied {
            decisions.iter().filter(|d| d.allowed && d.fallback).count() as u64
        } else {
            0
        };
        return Ok((decisions, partial_charges));
    }
    let locks = one_by_one_locks();
    let _guards = locks
        .lock_all(parts.iter().map(|p| locks.index(p.key)).collect())
        .await;
    one_by_one(parts).await
}

/// [`allow_all`]'s path when the store cannot decide the parts in one
/// step: charge in order; at the first decisive denial, give back what was
/// charged and report every other part as it then stands.
async fn one_by_one<B: Backend>(parts: &[Part<'_, B>]) -> Result<Decisions, Error> {
    let mut decisions = Vec::with_capacity(parts.len());
    // The parts charged in the store, by index.
    let mut charged: Vec<usize> = Vec::new();
    // Charges the in-memory fallback made: no refund reaches them.
    let mut unrefundable = 0;
    let mut denial = None;
    for (i, part) in parts.iter().enumerate() {
        let decision = match part.limiter.allow_n(part.key, part.cost).await {
            Ok(decision) => decision,
            Err(err) => {
                refund_parts(parts, &charged).await;
                return Err(err);
            }
        };
        if denies(part, &decision) {
            denial = Some(i);
        } else if charges(&decision) {
            charged.push(i);
        } else if decision.allowed && decision.fallback {
            unrefundable += 1;
        }
        decisions.push(decision);
        if denial.is_some() {
            break;
        }
    }
    let Some(denial) = denial else {
        return Ok((decisions, 0));
    };
    let failed = refund_parts(parts, &charged).await;
    // Every part but the denial reports what a request of it alone would
    // get against the state as it now stands: as it stood before the
    // request, since a refund right after a charge undoes it.
    let denied = decisions[denial];
    let mut reports = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        reports.push(if i == denial {
            denied
        } else {
            reported(part).await?
        });
    }
    Ok((reports, unrefundable + failed))
}

/// Gives back the charges of the parts at `charged`, each exactly its cost;
/// how many could not be given back (the store failed).
async fn refund_parts<B: Backend>(parts: &[Part<'_, B>], charged: &[usize]) -> u64 {
    let mut failed = 0;
    for &i in charged {
        if !refund(&parts[i]).await {
            failed += 1;
        }
    }
    failed
}

/// Gives `part` back exactly its cost; whether the store took it.
async fn refund<B: Backend>(part: &Part<'_, B>) -> bool {
    part.limiter
        .operate(part.key, Operation::Refund(part.cost))
        .await
        .is_ok()
}

/// Gives back what a request's parts were charged when the request, once
/// `decisions` were made (one per part, in order), is denied after all by
/// every quota of the request spent: each part whose decision charged its
/// store is given back exactly its cost and reports it unspent, as the
/// parts of a denied request do. A part [charged
/// always](self#parts-charged-whether-admitted-or-not) keeps its charge.
/// Returns how many could not be given back (the store failed), partial
/// charges as [`Decided::partial_charges`] counts them.
async fn give_back<B: Backend>(parts: &[Part<'_, B>], decisions: &mut [Decision]) -> u64 {
    let mut failed = 0;
    for (part, decision) in parts.iter().zip(decisions.iter_mut()) {
        if !charges(decision) || part.cost == 0 || charged_always(part) {
            continue;
        }
        if refund(part).await {
            decision.remaining = decision.remaining.saturating_add(part.cost);
        } else {
            failed += 1;
        }
    }
    failed
}

/// Whether an admission charged the store: not when the limiter failed
/// open, decided on its in-memory fallback (that charge stays in the
/// fallback's memory), admitted in shadow mode what it would deny, or the
/// key's list decided.
fn charges(decision: &Decision) -> bool {
    decision.allowed
        && !decision.fail_open
        && !decision.fallback
        && !decision.shadow_denied
        && decision.listed.is_none()
}

/// Reports `parts` of a request that a decisive part whose limiter admits
/// nothing denies: each part as [`allow_all`] reports
/// the parts of a denied request, nothing charged but the parts [charged
/// always](self#parts-charged-whether-admitted-or-not).
///
/// A part reports the decision a request of that part alone would get
/// against the state as it stands: when that decision admits, a
/// charge-free decision of the key (its state uncharged); otherwise the
/// denial itself, which charges nothing.
///
/// # Errors
///
/// [`Error::Backend`] when the store failed and a part's limiter fails
/// closed.
async fn report<B: Backend>(parts: &[Part<'_, B>]) -> Result<Vec<Decision>, Error> {
    let mut decisions = Vec::with_capacity(parts.len());
    for part in parts {
        decisions.push(reported(part).await?);
    }
    Ok(decisions)
}

/// One part's report (see [`report`]). A request of cost `c` is admitted
/// exactly when a charge-free decision leaves at least `c` (every
/// strategy's `remaining` counts the unit requests it would admit), so the
/// request itself is made only when it would be denied, and charges
/// nothing.
async fn reported<B: Backend>(part: &Part<'_, B>) -> Result<Decision, Error> {
    if charged_always(part) {
        return part.limiter.allow_n(part.key, part.cost).await;
    }
    let peek = part.limiter.allow_n(part.key, 0).await?;
    if peek.fail_open || peek.listed.is_some() || peek.remaining >= part.cost {
        return Ok(peek);
    }
    let decision = part.limiter.allow_n(part.key, part.cost).await?;
    if charges(&decision) {
        // Units came free in between (another process sharing the store):
        // the request fits after all, and its charge is given back.
        part.limiter
            .operate(part.key, Operation::Refund(part.cost))
            .await?;
        return part.limiter.allow_n(part.key, 0).await;
    }
    Ok(decision)
}

/// Ends the leases of every limiter of `limiters`, one after the other
/// ([`Limiter::end_leases`]), as a service does before it exits: the units
/// given back, or the first error once every limiter was tried.
///
/// # Errors
///
/// The first limiter's [`Error`], after every limiter was tried.
pub async fn end_all_leases<'a, B: Backend>(
    limiters: impl IntoIterator<Item = &'a Limiter<B>>,
) -> Result<u64, Error> {
    let mut given = 0;
    let mut first_error = None;
    for limiter in limiters {
        match limiter.end_leases().await {
            Ok(units) => given += units,
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    first_error.map_or(Ok(given), Err)
}
