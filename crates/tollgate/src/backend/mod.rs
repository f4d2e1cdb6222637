//! Where state lives: the backend traits, the in-memory backend and the
//! adapter for custom stores.

mod cell;
mod codec;
mod janitor;
mod keys;
pub mod memory;
mod reclaim;
mod slots;
pub mod store;
mod stored_key;
mod table;
mod trim;

use std::future::Future;

pub use codec::{decode_state, encode_state};
pub use keys::{namespace, CompoundKeys};

use crate::decision::Decision;
use crate::error::{BackendError, Error};
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
}

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
}
