//! Permits of requests in flight, for requests to a concurrency policy
//! ([`Strategy::Concurrency`](tollgate::Strategy::Concurrency)): the
//! [`HeldPermit`] a response keeps until its body ends, and the [`Queues`]
//! of requests of this process waiting for a slot
//! ([`RateLimit::delay`](crate::RateLimit::delay)).

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{timeout_at, Instant};
use tollgate::backend::Backend;
use tollgate::{Error, Limiter, Permit};

/// A permit of a concurrency limit, held for an admitted request by its
/// response until the response body ends (or is dropped): dropping it
/// frees the request's units, at once on a store that answers at once (in
/// memory) and in a task spawned on the current Tokio runtime otherwise,
/// then wakes the requests of this process waiting for a slot of the same
/// key ([`RateLimit::delay`](crate::RateLimit::delay)).
///
/// Made by the middleware; a response body type keeps it through
/// [`ReplyBody::hold_permit`](crate::tower::ReplyBody::hold_permit).
#[cfg_attr(not(feature = "tower"), allow(unreachable_pub))]
pub struct HeldPermit {
    /// Kept for its drop, which frees the units. Unwind safe: nothing
    /// reads it, so a panic cannot leave it observed half changed (and the
    /// body types that keep it stay unwind safe, as they were).
    _held: AssertUnwindSafe<Box<dyn Held>>,
}

impl std::fmt::Debug for HeldPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldPermit").finish_non_exhaustive()
    }
}

/// Something whose drop frees units: a [`Holding`], or two at once.
trait Held: Send + Sync {}

impl<B: Backend> Held for Holding<B> {}

/// Two permits held by one body (two middlewares on concurrency policies).
struct Both(#[allow(dead_code)] HeldPermit, #[allow(dead_code)] HeldPermit);

impl Held for Both {}

impl HeldPermit {
    /// Holds `permit`, which the store holds (its `id()` is `Some`), until
    /// dropped; then wakes the waiters of `queues` for `resource` and the
    /// permit's key.
    pub(crate) fn new<B: Backend>(
        permit: Permit<B>,
        decides_now: bool,
        queues: Arc<Queues>,
        resource: &str,
    ) -> Self {
        let name = queue_name(resource, permit.key());
        Self {
            _held: AssertUnwindSafe(Box::new(Holding {
                permit: Some(permit),
                decides_now,
                queues,
                name,
            })),
        }
    }

    /// This permit and `other`, released together.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) fn join(self, other: HeldPermit) -> HeldPermit {
        HeldPermit {
            _held: AssertUnwindSafe(Box::new(Both(self, other))),
        }
    }
}

/// A permit, released when this is dropped, after which the waiters for its
/// queue are woken.
struct Holding<B: Backend> {
    permit: Option<Permit<B>>,
    /// Whether the store answers at once: dropping the permit releases it.
    decides_now: bool,
    queues: Arc<Queues>,
    /// The queue of the permit's resource and key ([`queue_name`]).
    name: Box<[u8]>,
}

impl<B: Backend> Drop for Holding<B> {
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        if self.decides_now {
            // Released by its drop, before the waiters look again.
            drop(permit);
            self.queues.released(&self.name);
            return;
        }
        // Without a runtime, the permit's own drop leaves it to expire.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let queues = Arc::clone(&self.queues);
        let name = std::mem::take(&mut self.name);
        runtime.spawn(async move {
            // A release that failed leaves the permit to expire: the
            // waiters look again when their `retry_after` passes.
            let _ = permit.release().await;
            queues.released(&name);
        });
    }
}

/// The name of the queue of `key` under `resource`: the resource's bytes,
/// 0xFF (never part of UTF-8 text), then the key's, so that no two pairs
/// share a name.
fn queue_name(resource: &str, key: &[u8]) -> Box<[u8]> {
    let mut name = Vec::with_capacity(resource.len() + 1 + key.len());
    name.extend_from_slice(resource.as_bytes());
    name.push(0xFF);
    name.extend_from_slice(key);
    name.into_boxed_slice()
}

/// The requests of this process waiting for a slot of a concurrency limit,
/// one queue per resource and key that has waiters. A queue is removed with
/// its last waiter, so keys nobody waits for take no memory.
#[derive(Default)]
pub(crate) struct Queues {
    queues: Mutex<HashMap<Box<[u8]>, Queue>>,
}

/// A queue and how many requests are in it.
struct Queue {
    waiters: usize,
    turns: Arc<Turns>,
}

/// Whose turn it is to try for a slot (a fair lock: first come, first
/// served), and the signal that a permit of the key was released.
#[derive(Default)]
struct Turns {
    turn: tokio::sync::Mutex<()>,
    released: Notify,
}

/// A request in a queue; leaving it (dropped) removes the queue when it
/// was the last.
struct Waiter<'q> {
    queues: &'q Queues,
    name: Box<[u8]>,
    turns: Arc<Turns>,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        let mut queues = self.queues.lock();
        if let Some(queue) = queues.get_mut(&self.name) {
            queue.waiters -= 1;
            if queue.waiters == 0 {
                queues.remove(&self.name);
            }
        }
    }
}

impl Queues {
    /// The map, whether or not a thread panicked holding it (every change
    /// to it is a single step).
    fn lock(&self) -> MutexGuard<'_, HashMap<Box<[u8]>, Queue>> {
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The number of queues: resources and keys with waiters.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }

    /// Enters the queue named `name`, made when it has no waiters yet.
    fn enter(&self, name: Box<[u8]>) -> Waiter<'_> {
        let mut queues = self.lock();
        let queue = queues.entry(name.clone()).or_insert_with(|| Queue {
            waiters: 0,
            turns: Arc::default(),
        });
        queue.waiters += 1;
        let turns = Arc::clone(&queue.turns);
        drop(queues);
        Waiter {
            queues: self,
            name,
            turns,
        }
    }

    /// Wakes the request whose turn it is in queue `name`, if any: a
    /// permit of its resource and key was released.
    fn released(&self, name: &[u8]) {
        let queues = self.lock();
        if let Some(queue) = queues.get(name) {
            queue.turns.released.notify_waiters();
        }
    }

    /// Acquires a permit of `cost` units of `key` from `limiter` (the
    /// policy of `resource`), waiting up to `max` for a slot, first come
    /// first served among the requests of this process: the request whose
    /// turn it is tries again when a permit of the key held by this
    /// process is released, or when the denial's `retry_after` passes,
    /// whichever comes first. Answers the last denial once `max` has
    /// passed, and at once a denial that no wait can admit (no
    /// `retry_after`: the cost exceeds the limit).
    pub(crate) async fn acquire_within<B: Backend>(
        &self,
        limiter: &Arc<Limiter<B>>,
        resource: &str,
        key: &[u8],
        cost: u64,
        max: Duration,
    ) -> Result<Permit<B>, Error> {
        let deadline = Instant::now() + max;
        let waiter = self.enter(queue_name(resource, key));
        let turns = Arc::clone(&waiter.turns);
        let Ok(_turn) = timeout_at(deadline, turns.turn.lock()).await else {
            // Still not its turn at `max`: one last try, admitted only if
            // a slot is free now.
            return limiter.acquire_permit(key, cost).await;
        };
        loop {
            // Listening before trying, so a release between the try and
            // the wait is not missed.
            let mut released = pin!(turns.released.notified());
            released.as_mut().enable();
            let permit = limiter.acquire_permit(key, cost).await?;
            let decision = permit.decision();
            let now = Instant::now();
            let Some(retry_after) = decision
                .retry_after
                .filter(|_| !decision.allowed && now < deadline)
            else {
                return Ok(permit);
            };
            // At least a millisecond, so that a store whose clock lags
            // this one is not asked in a loop.
            let wake = deadline.min(now + retry_after.max(Duration::from_millis(1)));
            let _ = timeout_at(wake, released).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tollgate::{Limiter, Policy, Strategy};

    use super::*;

    fn limiter() -> Arc<Limiter> {
        let policy = Policy::new(Strategy::Concurrency, 1, Duration::from_secs(30)).unwrap();
        Arc::new(Limiter::builder().policy(policy).build().unwrap())
    }

    #[tokio::test]
    async fn a_waiter_is_admitted_when_the_held_permit_is_dropped_and_its_queue_goes_away() {
        let limiter = limiter();
        let queues = Arc::new(Queues::default());
        let first = limiter.acquire_permit("k", 1).await.unwrap();
        assert!(first.id().is_some());
        let held = HeldPermit::new(first, limiter.decides_now(), Arc::clone(&queues), "r");
        let waiting = {
            let (limiter, queues) = (Arc::clone(&limiter), Arc::clone(&queues));
            tokio::spawn(async move {
                let permit = queues
                    .acquire_within(&limiter, "r", b"k", 1, Duration::from_secs(20))
                    .await
                    .unwrap();
                permit.decision().allowed
            })
        };
        // The waiter is in its queue once it has entered it.
        while queues.len() == 0 {
            tokio::task::yield_now().await;
        }
        drop(held);
        assert!(
            waiting.await.unwrap(),
            "admitted on the release, long before 20 s"
        );
        assert_eq!(queues.len(), 0);
    }

    #[tokio::test]
    async fn a_cost_above_the_limit_is_denied_at_once() {
        let limiter = limiter();
        let queues = Queues::default();
        let permit = queues
            .acquire_within(&limiter, "r", b"k", 2, Duration::from_secs(20))
            .await
            .unwrap();
        assert!(!permit.decision().allowed);
        assert_eq!(permit.decision().retry_after, None);
        assert_eq!(queues.len(), 0);
    }
}
