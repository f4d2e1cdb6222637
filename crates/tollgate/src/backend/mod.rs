//! Where state lives: the backend traits, the in-memory backend and the
//! adapter for custom stores.

mod blocks;
mod cell;
mod codec;
mod janitor;
mod key_locks;
mod keys;
mod leasing;
#[cfg(all(test, tollgate_loom))]
mod loom_models;
pub mod memory;
mod reclaim;
mod reserving;
mod slots;
mod snapshot;
mod state_write;
pub mod store;
mod stored_key;
mod sync;
mod table;
mod trim;

use std::future::Future;

pub use crate::error::{BackendError, BackendErrorKind};
pub use crate::strategy::tick::Tick;
pub use codec::{decode_record, Record};
pub(crate) use key_locks::KeyLocks;
pub use keys::{namespace, CompoundKeys};
pub use leasing::{LeaseAsk, Leased};
pub use reserving::{Receipt, Reserved};
pub use snapshot::{StateFileError, StateSnapshot};

use crate::decision::Decision;
use crate::error::Error;
use crate::operation::Operation;
use crate::policy::Policy;

/// What a limiter asks a backend to serve: one policy under one namespace.
#[derive(Clone, Copy, Debug)]
pub struct Scope<'a> {
    /// The key prefix shared by every limiter of an application.
    pub prefix: &'a str,
    /// The resource name; empty for a limiter's default policy.
    pub resource: &'a str,
    /// The policy to enforce.
    pub policy: &'a Policy,
}

/// A place to keep rate-limit state.
///
/// A backend is bound once per policy (per resource) when a limiter is built;
/// the resulting [`Binding`] makes the decisions. Binding lets a backend
/// prepare per-policy data once (a typed table, a key prefix, a script)
/// instead of on every call.
pub trait Backend: Send + Sync + 'static {
    /// The per-policy handle that makes decisions.
    type Binding: Binding;

    /// Prepares the backend to serve `scope`.
    ///
    /// # Errors
    ///
    /// A [`Error::Config`] when the backend cannot serve the policy.
    fn bind(&self, scope: &Scope<'_>) -> Result<Self::Binding, Error>;

    /// Prepares the backend to serve `scope` in place of `previous`, which
    /// served `previous_policy` for the same prefix and resource (a policy
    /// changed at run time). A limit whose strategy and window stay keeps
    /// its keys' state, whatever its `L`; any other limit starts fresh.
    ///
    /// The default binds afresh, which is right for backends that keep
    /// state in a shared store under keys named by strategy (and, for
    /// compound policies, window): the new binding reads the same keys.
    /// A backend holding state in the binding itself overrides it.
    ///
    /// # Errors
    ///
    /// As for [`Backend::bind`].
    fn rebind(
        &self,
        scope: &Scope<'_>,
        previous: &Self::Binding,
        previous_policy: &Policy,
    ) -> Result<Self::Binding, Error> {
        let _ = (previous, previous_policy);
        self.bind(scope)
    }

    /// Whether every binding this backend makes answers at once: its
    /// [`Binding::apply_now`] and [`Binding::operate_now`] give an answer
    /// (`Some`) for every call, so that a limiter on it can decide without
    /// waiting ([`Limiter::decide_now`](crate::Limiter::decide_now)). A limiter
    /// reads it once, when it binds a policy.
    ///
    /// `true` for the [`MemoryBackend`](memory::MemoryBackend), and for a
    /// backend chosen at run time whose choice is in memory (such as
    /// `tollgate_config::AnyBackend::Memory`); the default is `false`: every
    /// decision is awaited through [`Binding::apply`].
    fn decides_now(&self) -> bool {
        false
    }

    /// Whether this backend's bindings lease ([`Binding::lease`] answers
    /// `Some`), so that a limiter set to
    /// [lease](crate::LimiterBuilder::lease) keeps leases on it. A
    /// limiter reads it once, when it binds a policy. The default is
    /// `false`: every request is decided by the store, as without leases.
    fn leases(&self) -> bool {
        false
    }
}

/// One part of a request that a backend decides with the request's other
/// parts as one step ([`Binding::apply_together`]).
#[derive(Debug)]
pub struct BindingPart<'a, B> {
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

impl<B> Clone for BindingPart<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B> Copy for BindingPart<'_, B> {}

/// Makes decisions for one policy.
pub trait Binding: Send + Sync + 'static {
    /// Applies one request of `cost` units for `key` to the stored state:
    /// reads the key's state, decides with the policy's strategy function
    /// ([`crate::strategy::decide`]) and stores the state it returns,
    /// atomically with respect to every other request on the same key.
    ///
    /// # Errors
    ///
    /// A [`BackendError`] when the state could not be read or written.
    fn apply(&self, key: &[u8], cost: u64) -> impl Future<Output = Result<Decision, BackendError>> + Send;

    /// [`Binding::apply`] without waiting, when this binding can answer at
    /// once: `Some` with exactly the result `apply` would give (and the
    /// state stored as `apply` stores it), or `None`, having done nothing,
    /// when the answer must be awaited.
    ///
    /// A limiter asks it only when its backend
    /// [decides now](Backend::decides_now), and such a backend's bindings
    /// must answer every call. The in-memory binding always answers; the
    /// default answers `None`, which is right for any store behind a
    /// connection.
    fn apply_now(&self, key: &[u8], cost: u64) -> Option<Result<Decision, BackendError>> {
        let _ = (key, cost);
        None
    }

    /// Decides one request of `cost` units for `key` and charges it
    /// whether admitted or not, as [usage reported after the
    /// fact](crate::_documentation::semantics#usage-reported-after-the-fact-charge-always)
    /// defines it ([`charge_all`](crate::strategy::charge_all)),
    /// atomically with respect to every other request on the key: the
    /// decision is the admission test's, its `remaining`, `reset` and
    /// `retry_after` those of the state after the charge. A blocked key is
    /// denied and charged nothing. `cost` is at least 1.
    ///
    /// The default refuses with [`BackendErrorKind::Unsupported`]: a
    /// custom binding supports reports by overriding it.
    ///
    /// # Errors
    ///
    /// A [`BackendError`] when the state could not be read or written;
    /// nothing was then charged (unless a reply was lost after the store
    /// charged).
    fn charge(&self, key: &[u8], cost: u64) -> impl Future<Output = Result<Decision, BackendError>> + Send {
        let _ = (key, cost);
        std::future::ready(Err(BackendError::new(
            BackendErrorKind::Unsupported,
            "this backend does not charge usage reported after the fact (charge: always)",
        )))
    }

    /// [`Binding::charge`] without waiting, as [`Binding::apply_now`] is
    /// to [`Binding::apply`]: a backend that [decides
    /// now](Backend::decides_now) answers every call; the default answers
    /// `None`.
    fn charge_now(&self, key: &[u8], cost: u64) -> Option<Result<Decision, BackendError>> {
        let _ = (key, cost);
        None
    }

    /// Decides a request that asks for a lease, as [leased
    /// quotas](crate::_documentation::semantics#leased-quotas) define it,
    /// atomically with respect to every other request on the key: gives
    /// back the units of an ended lease (before the store time
    /// `ask.return_before`, as the store gives back a lease),
    /// counts `ask.lessee` among the processes leasing the key for
    /// `ask.max_age`, then decides `ask.cost` units with up to `ask.want`
    /// more as [`lease_all`](crate::strategy::lease_all) does.
    ///
    /// `None` when this binding does not lease (the default): the limiter
    /// then decides every request with [`Binding::apply`], as without
    /// leases.
    ///
    /// # Errors
    ///
    /// A [`BackendError`] when the state could not be read or written.
    fn lease(
        &self,
        key: &[u8],
        ask: LeaseAsk,
    ) -> impl Future<Output = Option<Result<Leased, BackendError>>> + Send {
        let _ = (key, ask);
        std::future::ready(None)
    }

    /// Applies a per-key operation to `key`'s state, atomically with
    /// respect to every decision on the same key, as [per-key
    /// operations](crate::_documentation::semantics#per-key-operations)
    /// defines it. The argument has passed [`Operation::validate`].
    ///
    /// The default refuses with [`BackendErrorKind::Unsupported`]: a custom
    /// backend supports operations by overriding it.
    ///
    /// # Errors
    ///
    /// A [`BackendError`] when the state could not be read or written.
    fn operate(&self, key: &[u8], op: Operation) -> impl Future<Output = Result<(), BackendError>> + Send {
        let _ = key;
        std::future::ready(Err(BackendError::new(
            BackendErrorKind::Unsupported,
            format!("this backend has no per-key operations ({} was asked)", op.name()),
        )))
    }

    /// [`Binding::operate`] without waiting, when this binding can apply it
    /// at once: `Some` with exactly the result `operate` would give, or
    /// `None`, having done nothing, when it must be awaited. The argument
    /// has passed [`Operation::validate`].
    ///
    /// As for [`Binding::apply_now`]: a backend that [decides
    /// now](Backend::decides_now) answers every call; the default answers
    /// `None`.
    fn operate_now(&self, key: &[u8], op: Operation) -> Option<Result<(), BackendError>> {
        let _ = (key, op);
        None
    }

    /// Reserves `cost` units of `key`, waiting at most `max_delay`, as
    /// [waiting and
    /// reservations](crate::_documentation::semantics#waiting-and-reservations)
    /// define it ([`reserve_all`](crate::strategy::reserve_all)),
    /// atomically with respect to every other request on the key. A
    /// blocked key is refused until its block ends.
    ///
    /// `None` when this binding does not reserve (the default): the
    /// limiter then reserves only what a decision admits now.
    ///
    /// # Errors
    ///
    /// A [`BackendError`] when the state could not be read or written.
    fn reserve(
        &self,
        key: &[u8],
        cost: u64,
        max_delay: std::time::Duration,
    ) -> impl Future<Output = Option<Result<Reserved, BackendError>>> + Send {
        let _ = (key, cost, max_delay);
        std::future::ready(None)
    }

    /// Gives back the reservation of `key` that `receipt` describes, when
    /// it has not proceeded and nothing was charged on the key since
    /// ([`cancel_all`](crate::strategy::cancel_all)); `Some(Ok(false))`
    /// when it cannot be given back. `None` when this binding does not
    /// reserve.
    ///
    /// # Errors
    ///
    /// A [`BackendError`] when the state could not be read or written.
    fn cancel(
        &self,
        key: &[u8],
        receipt: &Receipt,
    ) -> impl Future<Output = Option<Result<bool, BackendError>>> + Send {
        let _ = (key, receipt);
        std::future::ready(None)
    }

    /// Makes sure the store can be reached, re-establishing a lost
    /// connection; a limiter calls it before a [circuit
    /// breaker](crate::protection::CircuitBreaker)'s probe, so that the probe's decision
    /// meets a live connection instead of failing on the one the outage
    /// broke (which would keep the store out for another cool-down although
    /// it is back). It should take no longer than a decision's timeout: a
    /// reconnection that takes longer goes on in the background, for the
    /// next probe to meet, so that no caller waits for it.
    ///
    /// The default does nothing: a backend whose every call connects anew,
    /// or whose client reconnects before failing a call, needs nothing here.
    ///
    /// # Errors
    ///
    /// A [`BackendError`] when the store still cannot be reached: the probe
    /// is then counted as failed without a decision being sent.
    fn reconnect(&self) -> impl Future<Output = Result<(), BackendError>> + Send {
        std::future::ready(Ok(()))
    }

    /// Decides the parts of one request as one step, atomically with
    /// respect to every other request on their keys, as
    /// [deciding together](crate::together) defines it: in order, each
    /// against the state the earlier parts left; the first decisive part
    /// that denies denies the request, and then nothing is charged (that
    /// part reports its denial, every other part the decision it alone
    /// would get, with its state uncharged when that admits). One decision
    /// per part, in order.
    ///
    /// `None` when this backend cannot decide these parts in one step (the
    /// default, and for instance keys on different Redis Cluster nodes):
    /// the caller then decides them one by one.
    ///
    /// # Errors
    ///
    /// A [`BackendError`] when the states could not be read or written;
    /// nothing was then charged.
    fn apply_together(
        parts: &[BindingPart<'_, Self>],
    ) -> impl Future<Output = Option<Result<Vec<Decision>, BackendError>>> + Send
    where
        Self: Sized,
    {
        let _ = parts;
        std::future::ready(None)
    }
}
