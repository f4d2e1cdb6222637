//! Permits of requests in flight: a concurrency limit's slots, held from
//! their acquisition until released or expired ([requests in
//! flight](crate::_documentation::semantics#requests-in-flight)).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::machine::Reserving;
use super::Limiter;
use crate::backend::memory::MemoryBinding;
use crate::backend::{Answer, Backend, Binding, Call, PermitEntry, Permitted};
use crate::decision::Decision;
use crate::error::{BackendError, ConfigError, Error};
use crate::strategy::permits::{PermitId, PermitOp};
use crate::strategy::{Strategy, Tick};

/// A fresh permit identifier: this process's random number in the high
/// half, a count in the low half, so that no two processes sharing a store
/// make the same one and no process makes one twice. Each thread counts
/// through a block of [`ID_BLOCK`] numbers of its own, taken from the
/// process's count, so that making one is no atomic operation on a count
/// every thread shares.
pub(super) fn next_id() -> PermitId {
    static PROCESS: OnceLock<u64> = OnceLock::new();
    static BLOCKS: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        /// The thread's next count and the end of its block.
        static NEXT: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
    }
    let count = NEXT.with(|next| {
        let (mut count, mut end) = next.get();
        if count == end {
            count = BLOCKS.fetch_add(ID_BLOCK, Ordering::Relaxed);
            end = count + ID_BLOCK;
        }
        next.set((count + 1, end));
        count
    });
    let process = *PROCESS.get_or_init(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        hasher.finish()
    });
    PermitId(u128::from(process) << 64 | u128::from(count))
}

/// How many permit identifiers a thread takes at a time (see [`next_id`]):
/// `2^64 / ID_BLOCK` threads' blocks before the count would wrap.
const ID_BLOCK: u64 = 1 << 20;

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
    holder: Holder<B>,
    decision: Decision,
    /// The permit the store holds, until it is released or detached.
    held: Option<PermitId>,
    expires_in: Option<Duration>,
}

/// Where a permit is released and extended.
enum Holder<B: Backend> {
    /// By key, through the limiter's store.
    Store {
        limiter: Arc<Limiter<B>>,
        key: Box<[u8]>,
    },
    /// In memory, a held permit's key entry itself: no second lookup of
    /// the key, no copy of it, no reference to the limiter.
    Entry(Arc<PermitEntry>),
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
        match &self.holder {
            Holder::Store { key, .. } => key,
            Holder::Entry(entry) => entry.key(),
        }
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
        let released = match &self.holder {
            Holder::Store { limiter, key } => limiter.release_permit(key, id).await?,
            Holder::Entry(entry) => entry_op(entry, PermitOp::Release { id }),
        };
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
        let extended = match &self.holder {
            Holder::Store { limiter, key } => limiter.extend_permit(key, id).await?,
            Holder::Entry(entry) => entry_op(entry, PermitOp::Extend { id }),
        };
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

/// `op` on the permits of `entry`, answered as the store answers it.
fn entry_op(entry: &PermitEntry, op: PermitOp) -> Permitted {
    Permitted::from_outcome(entry.apply(op), entry.limit(), Tick::Nanos)
}

impl<B: Backend> Drop for Permit<B> {
    fn drop(&mut self) {
        let Some(id) = self.held.take() else {
            return;
        };
        let op = PermitOp::Release { id };
        let (limiter, key) = match &mut self.holder {
            Holder::Entry(entry) => {
                entry.apply(op);
                return;
            }
            Holder::Store { limiter, key } => (limiter, key),
        };
        if limiter.decides_now() {
            let _ = limiter.binding.call_now(Call::Permit { key, op });
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let limiter = Arc::clone(limiter);
            let key = std::mem::take(key);
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
        let (decision, expires_in, entry) = match self.begin_reservation(key, cost) {
            Reserving::Listed(decision) => (decision, None, None),
            Reserving::Ask(pending) => {
                let (result, entry) = self.ask_permit(key, PermitOp::Acquire { id, cost }).await;
                let (decision, expires_in) = self.finish_permit(pending, result)?;
                (decision, expires_in, entry)
            }
        };
        let held = expires_in.map(|_| id);
        let holder = match entry.filter(|_| held.is_some()) {
            Some(entry) => Holder::Entry(entry),
            None => Holder::Store {
                limiter: Arc::clone(self),
                key: key.into(),
            },
        };
        Ok(Permit {
            holder,
            decision,
            held,
            expires_in,
        })
    }

    /// Asks the store for `op` on `key`'s permits; in memory, answered at
    /// once, with the key's entry when `op` made a permit.
    async fn ask_permit(
        &self,
        key: &[u8],
        op: PermitOp,
    ) -> (Result<Permitted, BackendError>, Option<Arc<PermitEntry>>) {
        if let Some((permitted, entry)) = self.memory_binding().and_then(|m| m.acquire_keeping(key, op)) {
            return (Ok(permitted), entry);
        }
        (
            Answer::permitted(self.binding.call(Call::Permit { key, op }).await),
            None,
        )
    }

    /// The in-memory binding, when this limiter's store is memory: a
    /// permit acquired there keeps its key's entry.
    fn memory_binding(&self) -> Option<&MemoryBinding> {
        (&self.binding as &dyn std::any::Any).downcast_ref()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads that each make more identifiers than a block holds never
    /// make the same one, and all share this process's high half.
    #[test]
    fn identifiers_are_unique_across_threads_and_blocks() {
        let per_thread = if cfg!(miri) { 100 } else { ID_BLOCK as usize + 10 };
        let made: Vec<Vec<PermitId>> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..3)
                .map(|_| s.spawn(|| (0..per_thread).map(|_| next_id()).collect()))
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let mut all: Vec<PermitId> = made.into_iter().flatten().collect();
        let process = all[0].0 >> 64;
        assert!(all.iter().all(|id| id.0 >> 64 == process));
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 3 * per_thread, "an identifier was made twice");
    }
}
