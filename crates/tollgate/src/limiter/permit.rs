//! Permits of requests in flight: a concurrency limit's slots, held from
//! their acquisition until released or expired ([requests in
//! flight](crate::_documentation::semantics#requests-in-flight)).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::machine::Reserving;
use super::Limiter;
use crate::backend::{Answer, Backend, Binding, Call, Permitted};
use crate::decision::Decision;
use crate::error::{ConfigError, Error};
use crate::strategy::permits::{PermitId, PermitOp};
use crate::strategy::Strategy;

/// A fresh permit identifier: this process's random number in the high
/// half, a count in the low half, so that no two processes sharing a store
/// make the same one and no process makes one twice.
pub(super) fn next_id() -> PermitId {
    static PROCESS: OnceLock<u64> = OnceLock::new();
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let process = *PROCESS.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        hasher.finish()
    });
    let count = COUNT.fetch_add(1, Ordering::Relaxed);
    PermitId(u128::from(process) << 64 | u128::from(count))
}

/// The answer to [`Limiter::acquire_permit`]: admitted or not
/// ([`decision`](Self::decision)), and when the store holds a permit for
/// it, that permit, released when this value is dropped.
///
/// Dropped, a held permit is released at once on a store that answers at
/// once (in memory), and in a task spawned on the current Tokio runtime
/// otherwise; with no runtime it is left to expire. Release it with
/// [`release`](Self::release) to learn the store's answer, keep it past
/// its `ttl` with [`extend`](Self::extend), or hand it to someone else
/// by identifier with [`detach`](Self::detach).
#[must_use = "a permit is released when dropped"]
pub struct Permit<B: Backend> {
    limiter: Arc<Limiter<B>>,
    key: Box<[u8]>,
    decision: Decision,
    /// The permit the store holds, until it is released or detached.
    held: Option<PermitId>,
    expires_in: Option<Duration>,
}

impl<B: Backend> std::fmt::Debug for Permit<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("decision", &self.decision)
            .field("held", &self.held)
            .field("expires_in", &self.expires_in)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Permit<B> {
    /// The acquisition's decision: `allowed` when the request may run,
    /// `remaining` the units left free (`limit − in_flight`), and when
    /// denied, `retry_after` an upper bound on the wait (the time until
    /// enough permits expire; a release comes sooner).
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The permit the store holds for this request: `None` when denied, for
    /// a peek (cost 0), and for an admission that holds nothing (an exempt
    /// key, shadow mode's admission of a denial, the fail policy's), or
    /// once released or detached.
    pub fn id(&self) -> Option<PermitId> {
        self.held
    }

    /// The key the permit was asked for.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// How long the held permit lived at its acquisition or last
    /// extension: the policy's `ttl`.
    pub fn expires_in(&self) -> Option<Duration> {
        self.expires_in.filter(|_| self.held.is_some())
    }

    /// Releases the permit now: `true` when the store freed its units,
    /// `false` when it held none any more (expired, or never held).
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] when the store failed: the permit then expires
    /// by itself.
    pub async fn release(mut self) -> Result<bool, Error> {
        let Some(id) = self.held.take() else {
            return Ok(false);
        };
        let released = self.limiter.release_permit(&self.key, id).await?;
        Ok(released.decision.allowed)
    }

    /// Extends the permit by the policy's `ttl` from now: `true` when it
    /// lives on, `false` when it had expired (its holder has lost it, and
    /// it is no longer held by this value).
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] when the store failed; the permit is still
    /// held until its expiry.
    pub async fn extend(&mut self) -> Result<bool, Error> {
        let Some(id) = self.held else {
            return Ok(false);
        };
        let extended = self.limiter.extend_permit(&self.key, id).await?;
        if extended.decision.allowed {
            self.expires_in = extended.expires_in;
        } else {
            self.held = None;
        }
        Ok(extended.decision.allowed)
    }

    /// Keeps the permit held after this value is dropped, and returns its
    /// identifier: released later with [`Limiter::release_permit`] (by
    /// another request, another process), or expiring by itself.
    pub fn detach(mut self) -> Option<PermitId> {
        self.held.take()
    }
}

impl<B: Backend> Drop for Permit<B> {
    fn drop(&mut self) {
        let Some(id) = self.held.take() else {
            return;
        };
        let call = Call::Permit {
            key: &self.key,
            op: PermitOp::Release { id },
        };
        if self.limiter.decides_now() {
            let _ = self.limiter.binding.call_now(call);
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let limiter = Arc::clone(&self.limiter);
            let key = std::mem::take(&mut self.key);
            runtime.spawn(async move { limiter.release_permit(&key, id).await });
        }
    }
}

impl<B: Backend> Limiter<B> {
    /// Acquires a permit of `cost` units of `key`'s concurrency limit
    /// ([`Strategy::Concurrency`]), as [requests in
    /// flight](crate::_documentation::semantics#requests-in-flight)
    /// define it: admitted when the units the key's unexpired permits hold
    /// plus `cost` fit in `L`, and then held until released (the
    /// [`Permit`] is dropped or [released](Permit::release)) or the
    /// policy's `ttl` passes without an [extension](Permit::extend). A
    /// `cost` of zero asks whether one unit fits, holding nothing.
    ///
    /// The exempt and deny lists decide first (an exempt key is admitted
    /// holding nothing, a denied one refused); in shadow mode a denial is
    /// admitted, marked [`shadow_denied`](Decision::shadow_denied), holding
    /// nothing. A failure of the store meets the fail policy (its
    /// admissions hold nothing). The deny cache, leases and the circuit
    /// breaker are not consulted.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming `strategy` when the policy is not a
    /// concurrency limit; [`Error::Backend`] when the store keeps no
    /// permits, or failed and the limiter fails closed.
    pub async fn acquire_permit(
        self: &Arc<Self>,
        key: impl AsRef<[u8]>,
        cost: u64,
    ) -> Result<Permit<B>, Error> {
        let key = key.as_ref();
        self.check_permits()?;
        let id = next_id();
        let (decision, expires_in) = match self.begin_reservation(key, cost) {
            Reserving::Listed(decision) => (decision, None),
            Reserving::Ask(pending) => {
                let call = Call::Permit {
                    key,
                    op: PermitOp::Acquire { id, cost },
                };
                let result = Answer::permitted(self.binding.call(call).await);
                self.finish_permit(pending, result)?
            }
        };
        Ok(Permit {
            limiter: Arc::clone(self),
            key: key.into(),
            decision,
            held: expires_in.map(|_| id),
            expires_in,
        })
    }

    /// Releases the permit `id` of `key`: the answer's decision is
    /// `allowed` when its units were freed (`false`: released before,
    /// expired, or never made; nothing changes), `remaining` the units free
    /// after. A release sent twice frees the units once.
    ///
    /// # Errors
    ///
    /// As for [`Limiter::extend_permit`].
    pub async fn release_permit(&self, key: impl AsRef<[u8]>, id: PermitId) -> Result<Permitted, Error> {
        self.permit_op(key.as_ref(), PermitOp::Release { id }).await
    }

    /// Extends the permit `id` of `key` by the policy's `ttl` from now:
    /// `allowed` when it lives on (with its new `expires_in`), `false` when
    /// it had expired, was released or never made (it is not brought back).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming `strategy` when the policy is not a
    /// concurrency limit; [`Error::Backend`] when the store keeps no
    /// permits or failed (the fail policy does not apply: nothing is
    /// decided).
    pub async fn extend_permit(&self, key: impl AsRef<[u8]>, id: PermitId) -> Result<Permitted, Error> {
        self.permit_op(key.as_ref(), PermitOp::Extend { id }).await
    }

    async fn permit_op(&self, key: &[u8], op: PermitOp) -> Result<Permitted, Error> {
        self.check_permits()?;
        Answer::permitted(self.binding.call(Call::Permit { key, op }).await).map_err(Error::Backend)
    }

    /// Refuses a permit's operation on a policy that is not a concurrency
    /// limit, or on a store that keeps no permits.
    fn check_permits(&self) -> Result<(), Error> {
        let strategy = self.policy.limits()[0].strategy();
        if strategy != Strategy::Concurrency {
            let message = format!("permits need a concurrency limit; this policy's is {strategy}");
            return Err(ConfigError::new("strategy", message).into());
        }
        let call = Call::Permit {
            key: &[],
            op: PermitOp::Peek { cost: 0 },
        };
        if !self.answers(&call) {
            return Err(Error::Backend(call.unsupported()));
        }
        Ok(())
    }
}
