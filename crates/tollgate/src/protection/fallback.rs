//! The in-memory limiter of [`FailPolicy::Fallback`](crate::FailPolicy::Fallback),
//! bound when the store first fails: its table is a few kilobytes, a
//! service may hold tens of thousands of limiters, and most never see an
//! outage.

use std::sync::OnceLock;

use crate::backend::memory::{MemoryBackend, MemoryBinding};
use crate::backend::{Backend, Scope};
use crate::decision::Decision;
use crate::error::Error;
use crate::policy::Policy;

/// A fallback policy and, once it has decided, its state.
pub(crate) struct Fallback {
    backend: MemoryBackend,
    policy: Policy,
    binding: OnceLock<MemoryBinding>,
}

impl Fallback {
    /// The fallback `policy` on `backend`, checked by binding it once (the
    /// binding is dropped: the first decision binds again).
    ///
    /// # Errors
    ///
    /// As for [`MemoryBackend::bind`].
    pub(crate) fn new(backend: MemoryBackend, policy: Policy) -> Result<Self, Error> {
        let fallback = Self {
            backend,
            policy,
            binding: OnceLock::new(),
        };
        fallback.bind()?;
        Ok(fallback)
    }

    fn bind(&self) -> Result<MemoryBinding, Error> {
        self.backend.bind(&Scope {
            prefix: "",
            resource: "",
            policy: &self.policy,
        })
    }

    /// Decides `cost` units for `key` in this process's memory, `charged`
    /// whether admitted or not when the request is.
    ///
    /// # Errors
    ///
    /// As for [`MemoryBackend::bind`], which [`Fallback::new`] has already
    /// passed with the same backend and policy.
    pub(crate) fn check(&self, key: &[u8], cost: u64, charged: bool) -> Result<Decision, Error> {
        let binding = match self.binding.get() {
            Some(binding) => binding,
            None => {
                let bound = self.bind()?;
                self.binding.get_or_init(|| bound)
            }
        };
        Ok(if charged {
            binding.check_charged(key, cost)
        } else {
            binding.check(key, cost)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Strategy;

    #[test]
    fn the_table_is_bound_by_the_first_decision_and_kept() {
        let policy = Policy::new(Strategy::FixedWindow, 2, Duration::from_secs(60)).unwrap();
        let fallback = Fallback::new(MemoryBackend::new(), policy).unwrap();
        assert!(fallback.binding.get().is_none(), "nothing bound before an outage");
        assert!(fallback.check(b"k", 1, false).unwrap().allowed);
        assert!(fallback.binding.get().is_some());
        // The state is kept between decisions.
        assert!(fallback.check(b"k", 1, false).unwrap().allowed);
        assert!(!fallback.check(b"k", 1, false).unwrap().allowed);
    }
}
