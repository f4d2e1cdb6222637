//! Where state lives: the backend traits, the in-memory backend and the
//! adapter for custom stores.

mod batch;
mod blocks;
mod call;
mod cell;
mod codec;
mod holds_table;
mod janitor;
mod key_locks;
mod key_sets;
mod keys;
mod lazy;
mod leasing;
#[cfg(all(test, tollgate_loom))]
mod loom_models;
pub mod memory;
mod permit_table;
mod permitting;
mod reclaim;
mod reserving;
mod settling;
mod slots;
mod snapshot;
mod state_write;
pub mod store;
mod stored_key;
mod sync;
mod table;
mod trim;

pub use crate::error::{BackendError, BackendErrorKind};
pub use crate::strategy::tick::Tick;
pub use batch::{Batcher, Decider};
pub(crate) use call::Answers;
pub use call::{Answer, Binding, BindingPart, Call, Capabilities};
pub use codec::{decode_record, Record};
pub(crate) use key_locks::KeyLocks;
pub use keys::{namespace, CompoundKeys};
pub use leasing::{LeaseAsk, Leased};
pub(crate) use permit_table::PermitEntry;
pub use permitting::Permitted;
pub use reserving::{Receipt, Reserved};
pub use settling::Settled;
pub use snapshot::{StateFileError, StateSnapshot};

use crate::error::Error;
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

    /// What this backend's stores answer besides a decision: read once
    /// per policy, when a limiter binds it. The default is nothing but
    /// [`Call::Decide`], awaited: a custom store names what it adds.
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }
}
