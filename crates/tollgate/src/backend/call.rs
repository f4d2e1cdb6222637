//! The store's one question: a limiter asks its binding a [`Call`] and the
//! binding gives the matching [`Answer`] ([`Binding::call`], or
//! [`Binding::call_now`] where it can answer at once). What a store can
//! answer at all it says once, in [`Capabilities`]
//! ([`Backend::capabilities`](super::Backend::capabilities)); the limiter
//! asks nothing else of it.

use std::future::Future;
use std::time::Duration;

use super::leasing::{LeaseAsk, Leased};
use super::permitting::Permitted;
use super::reserving::{Receipt, Reserved};
use super::settling::Settled;
use crate::decision::Decision;
use crate::error::{BackendError, BackendErrorKind};
use crate::operation::Operation;
use crate::strategy::holds::HoldId;
use crate::strategy::permits::PermitOp;

/// What a store can answer besides a [`Call::Decide`], which every store
/// answers. A limiter reads it once, when it binds a policy, and never asks
/// a call its store cannot answer: it refuses the caller instead (a report
/// or an operation, with [`BackendErrorKind::Unsupported`]) or does without
/// (a reservation reserves what a decision admits now, leases and one-step
/// requests of several parts are decided call by call).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Every binding answers every call at once through
    /// [`Binding::call_now`], so that a limiter on it decides without
    /// waiting ([`Limiter::decide_now`](crate::Limiter::decide_now)): the
    /// in-memory backend, and a backend chosen at run time whose choice is
    /// in memory.
    pub decides_now: bool,
    /// Answers [`Call::Charge`]: usage reported after the fact.
    pub charges: bool,
    /// Answers [`Call::Operate`]: per-key operations.
    pub operates: bool,
    /// Answers [`Call::Lease`], so that a limiter set to
    /// [lease](crate::LimiterBuilder::lease) keeps leases on it.
    pub leases: bool,
    /// Answers [`Call::Reserve`] and [`Call::Cancel`].
    pub reserves: bool,
    /// Answers [`Call::Together`] (with [`Answer::Apart`] where one call
    /// cannot carry the parts).
    pub together: bool,
    /// Answers [`Call::Permit`] on a policy of
    /// [`Strategy::Concurrency`](crate::Strategy::Concurrency): keeps
    /// permits of requests in flight.
    pub permits: bool,
    /// Answers [`Call::Hold`] and [`Call::Settle`]: estimates charged up
    /// front and settled by the usage.
    pub settles: bool,
}

impl Capabilities {
    /// A store that answers every call (at once when `decides_now`).
    pub const fn all(decides_now: bool) -> Self {
        Self {
            decides_now,
            charges: true,
            operates: true,
            leases: true,
            reserves: true,
            together: true,
            permits: true,
            settles: true,
        }
    }
}

/// [`Capabilities`] in one byte, as a limiter keeps them: a service may
/// hold tens of thousands of limiters, and six flags of their own would
/// grow each by eight bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Answers(u8);

impl Answers {
    const DECIDES_NOW: u8 = 1;
    const CHARGES: u8 = 1 << 1;
    const OPERATES: u8 = 1 << 2;
    const LEASES: u8 = 1 << 3;
    const RESERVES: u8 = 1 << 4;
    const TOGETHER: u8 = 1 << 5;
    const PERMITS: u8 = 1 << 6;
    const SETTLES: u8 = 1 << 7;

    /// The flags of `capabilities`.
    pub(crate) fn of(capabilities: Capabilities) -> Self {
        let flag = |on: bool, bit: u8| if on { bit } else { 0 };
        Self(
            flag(capabilities.decides_now, Self::DECIDES_NOW)
                | flag(capabilities.charges, Self::CHARGES)
                | flag(capabilities.operates, Self::OPERATES)
                | flag(capabilities.leases, Self::LEASES)
                | flag(capabilities.reserves, Self::RESERVES)
                | flag(capabilities.together, Self::TOGETHER)
                | flag(capabilities.permits, Self::PERMITS)
                | flag(capabilities.settles, Self::SETTLES),
        )
    }

    /// Whether every call is answered at once ([`Capabilities::decides_now`]).
    #[inline]
    pub(crate) fn decides_now(self) -> bool {
        self.0 & Self::DECIDES_NOW != 0
    }

    /// Whether the store answers `call`.
    #[inline]
    pub(crate) fn call<B: ?Sized>(self, call: &Call<'_, B>) -> bool {
        let bit = match call {
            Call::Decide { .. } | Call::Reconnect => return true,
            Call::Charge { .. } => Self::CHARGES,
            Call::Operate { .. } => Self::OPERATES,
            Call::Lease { .. } => Self::LEASES,
            Call::Reserve { .. } | Call::Cancel { .. } => Self::RESERVES,
            Call::Together(_) => Self::TOGETHER,
            Call::Permit { .. } => Self::PERMITS,
            Call::Hold { .. } | Call::Settle { .. } => Self::SETTLES,
        };
        self.0 & bit != 0
    }
}

/// One part of a request that a store decides with the request's other
/// parts as one step ([`Call::Together`]).
#[derive(Debug)]
pub struct BindingPart<'a, B: ?Sized> {
    /// The binding of the part's policy.
    pub binding: &'a B,
    /// The caller's key.
    pub key: &'a [u8],
    /// The units the part asks for.
    pub cost: u64,
    /// Whether the part's denial denies the request. A part that is not
    /// decisive (in shadow mode) is decided and reported like the others,
    /// and charged when it admits, but its denial denies nothing.
    pub decisive: bool,
}

impl<B: ?Sized> Clone for BindingPart<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: ?Sized> Copy for BindingPart<'_, B> {}

/// What a limiter asks its store, each call atomic with respect to every
/// other call on the same keys. `B` is the binding's own type, which
/// [`Call::Together`]'s parts name.
pub enum Call<'a, B: ?Sized> {
    /// Decide a request of `cost` units for `key` (`cost = 0` is a peek):
    /// read the key's state, decide with the policy's strategy function
    /// ([`crate::strategy::decide`]) and store the state it returns.
    /// Answered with [`Answer::Decided`].
    Decide {
        /// The caller's key.
        key: &'a [u8],
        /// The units asked for.
        cost: u64,
    },
    /// Decide a request of `cost` units (at least 1) for `key` and charge
    /// it whether admitted or not, as [usage reported after the
    /// fact](crate::_documentation::semantics#usage-reported-after-the-fact-charge-always)
    /// defines it ([`charge_all`](crate::strategy::charge_all)): the
    /// decision is the admission test's, its `remaining`, `reset` and
    /// `retry_after` those of the state after the charge. A blocked key is
    /// denied and charged nothing. Answered with [`Answer::Decided`].
    Charge {
        /// The caller's key.
        key: &'a [u8],
        /// The units used.
        cost: u64,
    },
    /// Decide a request that asks for a lease, as [leased
    /// quotas](crate::_documentation::semantics#leased-quotas) define it:
    /// give back the units of an ended lease (before the store time
    /// `ask.return_before`), count `ask.lessee` among the processes
    /// leasing the key for `ask.max_age`, then decide `ask.cost` units with
    /// up to `ask.want` more as [`lease_all`](crate::strategy::lease_all)
    /// does. Answered with [`Answer::Leased`].
    Lease {
        /// The caller's key.
        key: &'a [u8],
        /// What to give back and lease.
        ask: LeaseAsk,
    },
    /// Reserve `cost` units of `key`, waiting at most `max_delay`, as
    /// [waiting and
    /// reservations](crate::_documentation::semantics#waiting-and-reservations)
    /// define it ([`reserve_all`](crate::strategy::reserve_all)). A
    /// blocked key is refused until its block ends. Answered with
    /// [`Answer::Reserved`].
    Reserve {
        /// The caller's key.
        key: &'a [u8],
        /// The units to reserve.
        cost: u64,
        /// The longest wait the caller accepts.
        max_delay: Duration,
    },
    /// Give back the reservation of `key` that `receipt` describes, when it
    /// has not proceeded and nothing was charged on the key since
    /// ([`cancel_all`](crate::strategy::cancel_all)). Answered with
    /// [`Answer::Cancelled`].
    Cancel {
        /// The caller's key.
        key: &'a [u8],
        /// What the reservation charged.
        receipt: &'a Receipt,
    },
    /// Apply a per-key operation, as [per-key
    /// operations](crate::_documentation::semantics#per-key-operations)
    /// define it; it has passed [`Operation::validate`]. Answered with
    /// [`Answer::Done`].
    Operate {
        /// The caller's key.
        key: &'a [u8],
        /// The operation.
        op: Operation,
    },
    /// Decide the parts of one request as one step, as [deciding
    /// together](crate::together) defines it: in order, each against the
    /// state the earlier parts left; the first decisive part that denies
    /// denies the request, and then nothing is charged (that part reports
    /// its denial, every other part the decision it alone would get, with
    /// its state uncharged when that admits). Answered with
    /// [`Answer::Decisions`], one per part in order, or [`Answer::Apart`]
    /// when one step cannot carry these parts (keys on different Redis
    /// Cluster nodes, say): the limiter then decides them one by one.
    /// Asked of the first part's binding.
    Together(&'a [BindingPart<'a, B>]),
    /// Apply `op` to the permits `key` holds under a policy of
    /// [`Strategy::Concurrency`](crate::Strategy::Concurrency), as
    /// [requests in
    /// flight](crate::_documentation::semantics#requests-in-flight)
    /// define it (one [`PermitOp`]): the policy's limit is `L`, its
    /// window the permits' `ttl`, and the time the store's clock. A
    /// blocked key's acquire is denied until the block ends (a release or
    /// an extend still applies). Answered with [`Answer::Permitted`].
    Permit {
        /// The caller's key.
        key: &'a [u8],
        /// The operation.
        op: PermitOp,
    },
    /// Decide a request of `estimate` units for `key` as
    /// [`Call::Decide`] does, and when it is admitted with an estimate of
    /// at least 1, record it as the hold `id`, as [estimates
    /// settled](crate::_documentation::semantics#estimates-settled)
    /// define it: its estimate and the store's time, settleable for the
    /// policy's longest window. Answered with [`Answer::Decided`].
    Hold {
        /// The caller's key.
        key: &'a [u8],
        /// The hold's identifier.
        id: HoldId,
        /// The units charged up front, `E`.
        estimate: u64,
    },
    /// Settle the hold `id` of `key` with the usage `used`, once
    /// ([estimates settled](crate::_documentation::semantics#estimates-settled)): a hold
    /// settled before, past its time or never made changes nothing.
    /// Answered with [`Answer::Settled`].
    Settle {
        /// The caller's key.
        key: &'a [u8],
        /// The hold's identifier.
        id: HoldId,
        /// The units the request used, `U`.
        used: u64,
    },
    /// Make sure the store can be reached, re-establishing a lost
    /// connection: asked before a [circuit
    /// breaker](crate::protection::CircuitBreaker)'s probe, so that the
    /// probe's decision meets a live connection instead of failing on the
    /// one the outage broke. It should take no longer than a decision's
    /// timeout (a longer reconnection goes on in the background for the
    /// next probe to meet). Answered with [`Answer::Done`] (at once by a
    /// store with nothing to re-establish), or an error when the store
    /// still cannot be reached: the probe then counts as failed.
    Reconnect,
}

impl<B: ?Sized> Clone for Call<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: ?Sized> Copy for Call<'_, B> {}

impl<B: ?Sized> std::fmt::Debug for Call<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Call::Together(parts) => write!(f, "Together({} parts)", parts.len()),
            _ => f.write_str(self.name()),
        }
    }
}

impl<'a, B: ?Sized> Call<'a, B> {
    /// The call's name, as errors give it.
    fn name(&self) -> &'static str {
        match self {
            Call::Decide { .. } => "decide",
            Call::Charge { .. } => "charge",
            Call::Lease { .. } => "lease",
            Call::Reserve { .. } => "reserve",
            Call::Cancel { .. } => "cancel",
            Call::Operate { .. } => "operate",
            Call::Together(_) => "together",
            Call::Permit { .. } => "permit",
            Call::Hold { .. } => "hold",
            Call::Settle { .. } => "settle",
            Call::Reconnect => "reconnect",
        }
    }

    /// The refusal of a call the store's [`Capabilities`] leave out, for
    /// the limiter to give its caller: what was asked, and that this store
    /// does not answer it.
    pub fn unsupported(&self) -> BackendError {
        let message = match self {
            Call::Charge { .. } => {
                "this backend does not charge usage reported after the fact (charge: always)".to_owned()
            }
            Call::Operate { op, .. } => {
                format!("this backend has no per-key operations ({} was asked)", op.name())
            }
            other => format!("this backend does not answer the {} call", other.name()),
        };
        BackendError::new(BackendErrorKind::Unsupported, message)
    }

    /// The same call for a binding of another type `C`, for a binding that
    /// wraps another (a backend chosen at run time, a test double): every
    /// call but [`Call::Together`], whose parts name bindings of type `B`
    /// and come back as `Err` for the wrapper to carry over (or to answer
    /// [`Answer::Apart`]).
    pub fn for_binding<C: ?Sized>(self) -> Result<Call<'a, C>, &'a [BindingPart<'a, B>]> {
        Ok(match self {
            Call::Decide { key, cost } => Call::Decide { key, cost },
            Call::Charge { key, cost } => Call::Charge { key, cost },
            Call::Lease { key, ask } => Call::Lease { key, ask },
            Call::Reserve { key, cost, max_delay } => Call::Reserve { key, cost, max_delay },
            Call::Cancel { key, receipt } => Call::Cancel { key, receipt },
            Call::Operate { key, op } => Call::Operate { key, op },
            Call::Permit { key, op } => Call::Permit { key, op },
            Call::Hold { key, id, estimate } => Call::Hold { key, id, estimate },
            Call::Settle { key, id, used } => Call::Settle { key, id, used },
            Call::Reconnect => Call::Reconnect,
            Call::Together(parts) => return Err(parts),
        })
    }
}

/// A store's answer to a [`Call`]: each call has one kind of answer, which
/// the call's documentation names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The decision of a [`Call::Decide`] or a [`Call::Charge`].
    Decided(Decision),
    /// The answer to a [`Call::Lease`].
    Leased(Leased),
    /// The answer to a [`Call::Reserve`] (boxed: a reservation's receipt
    /// holds every limit's state, four times the size of any other
    /// answer, which a decision's answer would carry too).
    Reserved(Box<Reserved>),
    /// The answer to a [`Call::Cancel`]: whether the reservation was given
    /// back.
    Cancelled(bool),
    /// The decisions of a [`Call::Together`], one per part in order.
    Decisions(Vec<Decision>),
    /// A [`Call::Together`] that one step cannot carry: nothing was read
    /// or charged.
    Apart,
    /// The answer to a [`Call::Permit`].
    Permitted(Permitted),
    /// The answer to a [`Call::Settle`].
    Settled(Settled),
    /// A [`Call::Operate`] applied, or a [`Call::Reconnect`] that found
    /// the store.
    Done,
}

impl Answer {
    /// The kind of answer, as an error that names a wrong one gives it.
    fn name(&self) -> &'static str {
        match self {
            Answer::Decided(_) => "a decision",
            Answer::Leased(_) => "a lease",
            Answer::Reserved(_) => "a reservation",
            Answer::Cancelled(_) => "a cancellation",
            Answer::Decisions(_) => "several decisions",
            Answer::Apart => "apart",
            Answer::Permitted(_) => "a permit's answer",
            Answer::Settled(_) => "a settle's answer",
            Answer::Done => "done",
        }
    }

    /// The error for an answer that does not fit the call `asked`.
    #[cold]
    fn wrong(&self, asked: &str) -> BackendError {
        BackendError::new(
            BackendErrorKind::Protocol,
            format!("the store answered {} to the {asked} call", self.name()),
        )
    }

    /// The decision of a [`Call::Decide`] or [`Call::Charge`].
    #[inline]
    pub(crate) fn decided(result: Result<Answer, BackendError>) -> Result<Decision, BackendError> {
        match result? {
            Answer::Decided(decision) => Ok(decision),
            other => Err(other.wrong("decide")),
        }
    }

    /// The answer to a [`Call::Lease`].
    pub(crate) fn leased(result: Result<Answer, BackendError>) -> Result<Leased, BackendError> {
        match result? {
            Answer::Leased(leased) => Ok(leased),
            other => Err(other.wrong("lease")),
        }
    }

    /// The answer to a [`Call::Reserve`].
    pub(crate) fn reserved(result: Result<Answer, BackendError>) -> Result<Reserved, BackendError> {
        match result? {
            Answer::Reserved(reserved) => Ok(*reserved),
            other => Err(other.wrong("reserve")),
        }
    }

    /// The answer to a [`Call::Cancel`].
    pub(crate) fn cancelled(result: Result<Answer, BackendError>) -> Result<bool, BackendError> {
        match result? {
            Answer::Cancelled(given_back) => Ok(given_back),
            other => Err(other.wrong("cancel")),
        }
    }

    /// The answer to a [`Call::Permit`].
    pub(crate) fn permitted(result: Result<Answer, BackendError>) -> Result<Permitted, BackendError> {
        match result? {
            Answer::Permitted(permitted) => Ok(permitted),
            other => Err(other.wrong("permit")),
        }
    }

    /// The answer to a [`Call::Settle`].
    pub(crate) fn settled(result: Result<Answer, BackendError>) -> Result<Settled, BackendError> {
        match result? {
            Answer::Settled(settled) => Ok(settled),
            other => Err(other.wrong("settle")),
        }
    }

    /// The answer to a [`Call::Operate`] or [`Call::Reconnect`].
    pub(crate) fn done(result: Result<Answer, BackendError>) -> Result<(), BackendError> {
        match result? {
            Answer::Done => Ok(()),
            other => Err(other.wrong("operate or reconnect")),
        }
    }

    /// The answer to a [`Call::Together`]: the decisions, or `None` when
    /// the store answered [`Answer::Apart`].
    pub(crate) fn decisions(
        result: Result<Answer, BackendError>,
    ) -> Option<Result<Vec<Decision>, BackendError>> {
        match result {
            Ok(Answer::Apart) => None,
            Ok(Answer::Decisions(decisions)) => Some(Ok(decisions)),
            Ok(other) => Some(Err(other.wrong("together"))),
            Err(err) => Some(Err(err)),
        }
    }
}

/// Keeps the state of one policy and answers a limiter's [`Call`]s on it.
///
/// A store answers [`Binding::call`]; one that can answer without waiting
/// (in memory) answers [`Binding::call_now`] too and says so in its
/// backend's [`Capabilities::decides_now`]. The
/// [`Store`](super::store::Store) adapter implements this for any key-value
/// store of three methods.
pub trait Binding: Send + Sync + 'static {
    /// Answers `call` with the [`Answer`] its documentation names,
    /// atomically with respect to every other call on the same keys. A
    /// limiter only asks what its backend's
    /// [`Capabilities`] say the store answers.
    ///
    /// # Errors
    ///
    /// A [`BackendError`] when the state could not be read or written;
    /// nothing was then charged (unless a reply was lost after the store
    /// charged).
    fn call(&self, call: Call<'_, Self>) -> impl Future<Output = Result<Answer, BackendError>> + Send;

    /// [`Binding::call`] without waiting, when this binding can answer at
    /// once: `Some` with exactly the result `call` would give (and the
    /// state stored as `call` stores it), or `None`, having done nothing,
    /// when the answer must be awaited.
    ///
    /// A limiter asks it only when its backend [decides
    /// now](Capabilities::decides_now), and such a backend's bindings must
    /// answer every call but [`Call::Together`] and [`Call::Reconnect`].
    /// The default answers `None`, which is right for any store behind a
    /// connection.
    fn call_now(&self, call: Call<'_, Self>) -> Option<Result<Answer, BackendError>> {
        let _ = call;
        None
    }
}
