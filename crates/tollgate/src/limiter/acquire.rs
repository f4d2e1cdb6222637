//! Awaiting admission: the waiters of one process on one key ask the store
//! one at a time, first come first served; a waiter leaves the head of the
//! queue once it holds its turn (a reservation) or is admitted, and waits
//! out its reservation beside the others
//! ([awaiting admission](crate::_documentation::semantics#awaiting-admission)).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::reserve::Reservation;
use super::Limiter;
use crate::backend::Backend;
use crate::decision::Decision;
use crate::error::Error;

/// One key's queue: its lock is held by the waiter asking the store
/// (tokio's mutex is fair: first come, first served).
type Queue = Arc<tokio::sync::Mutex<()>>;

/// The queues of every limiter of the process, by limiter and key. An entry
/// lives while someone waits on it, so memory follows the waiters.
type Queues = Mutex<HashMap<(usize, Box<[u8]>), Queue, ahash::RandomState>>;

fn queues() -> &'static Queues {
    static QUEUES: OnceLock<Queues> = OnceLock::new();
    QUEUES.get_or_init(|| Mutex::new(HashMap::with_hasher(ahash::RandomState::new())))
}

/// How many acquisitions are waiting in this process: while none is, an
/// acquisition that is admitted at once never touches a queue.
static WAITING: AtomicUsize = AtomicUsize::new(0);

/// Counts an acquisition among the waiting while it lives.
struct Waiting;

impl Waiting {
    fn enter() -> Self {
        WAITING.fetch_add(1, Ordering::AcqRel);
        Waiting
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        WAITING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A place in the queue of (limiter, key): dropped, it leaves the queue
/// and removes it when nobody else holds it.
struct Place {
    id: (usize, Box<[u8]>),
    queue: Queue,
}

impl Place {
    fn join(limiter: usize, key: &[u8]) -> Self {
        let id = (limiter, Box::<[u8]>::from(key));
        let mut all = queues().lock().unwrap_or_else(PoisonError::into_inner);
        let queue = all.entry(id.clone()).or_default().clone();
        Place { id, queue }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut all = queues().lock().unwrap_or_else(PoisonError::into_inner);
        // The map's and this place's: nobody else waits.
        if Arc::strong_count(&self.queue) == 2 {
            all.remove(&self.id);
        }
    }
}

/// Polls `future` once: its output when that is ready (as a call to a
/// store that decides at once always is); otherwise `None`, the future
/// dropped.
fn poll_once<T>(future: impl Future<Output = T>) -> Option<T> {
    match std::pin::pin!(future).poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
        std::task::Poll::Ready(output) => Some(output),
        std::task::Poll::Pending => None,
    }
}

/// A reservation a waiter waits out: if its future is dropped first, the
/// reservation is cancelled, and given back when nothing was charged after
/// it. The cancel is polled once: a store that decides at once (memory)
/// or whose call is ready at once answers it there; on one that must be
/// awaited, what the first poll sent is all that is sent (never a second
/// cancel of the same reservation, which could give back another's units).
struct Held<'a, B: Backend> {
    limiter: &'a Limiter<B>,
    reservation: Option<Reservation>,
}

impl<B: Backend> Drop for Held<'_, B> {
    fn drop(&mut self) {
        let Some(reservation) = self.reservation.take() else {
            return;
        };
        let _ = poll_once(self.limiter.cancel(reservation));
    }
}

impl<B: Backend> Limiter<B> {
    /// Waits until a request of cost 1 for `key` is admitted, and returns
    /// the decision (see [`acquire_n_within`](Self::acquire_n_within)).
    ///
    /// # Errors
    ///
    /// As for [`Limiter::allow`].
    pub fn acquire<'a>(
        &'a self,
        key: impl AsRef<[u8]> + 'a,
    ) -> impl Future<Output = Result<Decision, Error>> + 'a {
        // The acquisition's own future, not one around it.
        self.acquire_n_within(key, 1, None)
    }

    /// Waits until a request of `cost` units for `key` is admitted, and
    /// returns the decision (see [`acquire_n_within`](Self::acquire_n_within)).
    ///
    /// # Errors
    ///
    /// As for [`Limiter::allow`].
    pub fn acquire_n<'a>(
        &'a self,
        key: impl AsRef<[u8]> + 'a,
        cost: u64,
    ) -> impl Future<Output = Result<Decision, Error>> + 'a {
        self.acquire_n_within(key, cost, None)
    }

    /// Waits until a request of `cost` units for `key` is admitted, for at
    /// most `within` (unbounded with `None`), and returns the decision:
    /// admitted, or refused with nothing charged when the wait would pass
    /// `within` (or can never end: the cost exceeds the limit, the key is
    /// deny-listed).
    ///
    /// On the token and leaky bucket and the sliding window this is one
    /// reservation ([`reserve_n`](Self::reserve_n)) and a wait of its
    /// delay: one store call per admission (a sliding window whose current
    /// window is spoken for waits until it turns and reserves again). On a
    /// fixed window it decides, waits the decision's `retry_after` when
    /// denied, and decides again. The waiters of one process on one key
    /// form a queue, served first come, first served: only the head asks
    /// the store, and the next becomes the head once the head holds its
    /// reservation or is admitted, so each learns its turn (or its refusal)
    /// without waiting out the turns ahead of it. Dropping the future
    /// charges nothing, except that a waiter dropped while it waits out a
    /// reservation cancels it ([`cancel`](Self::cancel)), which gives the
    /// units back only when nothing was charged after the reservation. The
    /// cancel is made as the future is dropped, without waiting: in memory
    /// it is answered there; on a store whose calls are awaited it is sent
    /// without waiting for the answer, and if it does not arrive the units
    /// stay charged.
    ///
    /// A waiter that a window refused waits its `retry_after`, plus up to
    /// the limiter's [`acquire_jitter`](crate::LimiterBuilder::acquire_jitter)
    /// when one is set, and never past `within`.
    ///
    /// While nobody waits in this process, a request admitted at once is
    /// one decision ([`allow_n`](Self::allow_n)); one that must wait is
    /// counted in the metrics as that first denial and then as what it
    /// waited for.
    ///
    /// Waiting uses tokio's timer, so the future must run on a tokio
    /// runtime with time enabled, whose clock the limiter's backend
    /// follows (in tests with tokio's paused time,
    /// `tollgate::testing::TokioClock`, under the `testing` feature).
    ///
    /// # Errors
    ///
    /// As for [`Limiter::allow`]: a failure of the store meets the fail
    /// policy, and is not repeated.
    pub async fn acquire_n_within(
        &self,
        key: impl AsRef<[u8]>,
        cost: u64,
        within: Option<Duration>,
    ) -> Result<Decision, Error> {
        let key = key.as_ref();
        if WAITING.load(Ordering::Acquire) == 0 {
            // Nobody waits in this process: a request admitted now needs
            // no queue (and no reservation).
            let decision = match self.decide_now(key, cost) {
                Some(result) => result?,
                // Out of line: a decision that must be awaited is a future
                // of about 2 KB, which would otherwise make every
                // acquisition's future as large.
                None => Box::pin(self.allow_n(key, cost)).await?,
            };
            if decision.allowed || decision.retry_after.is_none() || within.is_some_and(|w| w.is_zero()) {
                return Ok(decision);
            }
        }
        // Out of line, so that an acquisition admitted at once carries no
        // waiting state.
        Box::pin(self.acquire_waiting(key, cost, within)).await
    }

    /// The answer to a waiter whose deadline passed while waiters ahead of
    /// it held the key's queue: refused, nothing charged, with the numbers
    /// of a peek of the key; `retry_after` is when the store will have a
    /// unit free (zero when it has one now, which a waiter ahead holds a
    /// turn for).
    async fn refused_in_queue(&self, key: &[u8]) -> Result<Decision, Error> {
        let peek = self.allow_n(key, 0).await?;
        Ok(Decision {
            allowed: false,
            retry_after: Some(peek.retry_after.unwrap_or(Duration::ZERO)),
            ..peek
        })
    }

    /// A random extra wait from zero to the limiter's
    /// [`acquire_jitter`](crate::LimiterBuilder::acquire_jitter).
    fn jitter(&self) -> Duration {
        let max = self.options.as_ref().map_or(Duration::ZERO, |o| o.jitter);
        if max.is_zero() {
            return Duration::ZERO;
        }
        // Each `RandomState` is seeded afresh: a random number, not a
        // secret.
        let random = ahash::RandomState::new().hash_one(WAITING.load(Ordering::Relaxed));
        let span = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(random % span.saturating_add(1))
    }

    /// [`Self::acquire_n_within`] through the key's queue.
    async fn acquire_waiting(
        &self,
        key: &[u8],
        cost: u64,
        within: Option<Duration>,
    ) -> Result<Decision, Error> {
        let deadline = within.map(|w| Instant::now() + w);
        let _waiting = Waiting::enter();
        let place = Place::join(std::ptr::from_ref(self) as usize, key);
        let head = match deadline {
            None => place.queue.lock().await,
            Some(deadline) => match tokio::time::timeout_at(deadline, place.queue.lock()).await {
                Ok(head) => head,
                // The deadline passed while waiters ahead held the queue.
                Err(_) => return self.refused_in_queue(key).await,
            },
        };
        loop {
            let now = Instant::now();
            let max_delay = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now));
            let reservation = self.reserve_n(key, cost, max_delay).await?;
            let decision = *reservation.decision();
            if reservation.is_reserved() {
                // The turn is held: the next waiter may ask while this one
                // waits it out.
                drop(head);
                let delay = reservation.delay();
                if !delay.is_zero() {
                    let mut held = Held {
                        limiter: self,
                        reservation: Some(reservation),
                    };
                    tokio::time::sleep(delay).await;
                    held.reservation = None;
                }
                return Ok(decision);
            }
            // Refused. Because the earliest slot passes the deadline:
            // final. Otherwise (a fixed window's denial, a slot past the
            // end of a sliding window's current window): wait and try
            // again, unless that passes the deadline.
            let Some(wait) = decision.retry_after.filter(|_| !reservation.beyond_max_delay) else {
                return Ok(decision);
            };
            if deadline.is_some_and(|d| now + wait > d) || within.is_some_and(|w| w.is_zero()) {
                return Ok(decision);
            }
            // Plus the jitter, short of the deadline.
            let until = now + wait + self.jitter();
            tokio::time::sleep_until(deadline.map_or(until, |d| until.min(d))).await;
        }
    }
}
