//! Batched decisions, for stores a network away: the decisions that arrive
//! while enough calls of the same lane are in flight (a lane is what a
//! store names: a Redis node or hash slot, a PostgreSQL policy) wait for
//! one of them to return, then go out together as one call
//! ([`Decider::decide_batch`]). Each decision decides only itself: they
//! are decided in order, each against what the earlier ones left, exactly
//! as one call each would decide them in that order. No timer: a decision
//! that finds fewer than the lane's calls in flight goes out at once,
//! alone ([`Batcher::decide`]). What a call asks and answers is the
//! store's ([`Decider::Ask`], [`Decider::Answer`]): a decision's cost and
//! its [`Decision`](crate::Decision), or more (the Redis backend's operations on permits go
//! through the same lanes).

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::error::{BackendError, BackendErrorKind};

/// What makes the calls of a lane: a decision in a call of its own, or
/// several in one.
pub trait Decider: Clone + Send + Sync + 'static {
    /// What a call asks of its key: the cost of a decision, for a store
    /// that batches only decisions.
    type Ask: Copy + Send + Sync + 'static;
    /// What a call answers: a decision's
    /// [`Decision`](crate::Decision), for a store that batches only
    /// decisions.
    type Answer: Send + 'static;

    /// Answers `ask` for `key` in a call of its own.
    fn decide_alone(
        &self,
        key: &[u8],
        ask: Self::Ask,
    ) -> impl Future<Output = Result<Self::Answer, BackendError>> + Send;

    /// Answers `parts` (each a decider of one backend, a key and what it
    /// asks) in one call, in order, each answered exactly as in a call of
    /// its own after the parts before it.
    fn decide_batch(
        parts: &[(&Self, &[u8], Self::Ask)],
    ) -> impl Future<Output = Result<Vec<Self::Answer>, BackendError>> + Send;
}

/// The lanes of one backend, each named by an `L` the store chooses: a
/// small value, copied and hashed (a lane is removed when idle, so the map
/// stays bounded by the names the store can give, whatever keys callers
/// send).
pub struct Batcher<D: Decider, L> {
    lanes: Mutex<HashMap<L, Lane<D>>>,
    /// How many calls of one lane may be in flight before decisions wait
    /// to go out together.
    max_in_flight: usize,
    /// The most decisions one batched call carries; more wait for the next.
    max_batch: usize,
}

impl<D: Decider, L> Batcher<D, L> {
    /// A batcher whose lanes each carry up to `max_in_flight` calls (at
    /// least 1) before decisions wait, and up to `max_batch` decisions (at
    /// least 1) per batched call.
    pub fn new(max_in_flight: usize, max_batch: usize) -> Self {
        Self {
            lanes: Mutex::default(),
            max_in_flight: max_in_flight.max(1),
            max_batch: max_batch.max(1),
        }
    }
}

/// The calls in flight on one lane and the decisions waiting for one.
struct Lane<D: Decider> {
    in_flight: usize,
    waiting: Vec<Waiting<D>>,
}

impl<D: Decider> Default for Lane<D> {
    fn default() -> Self {
        Self {
            in_flight: 0,
            waiting: Vec::new(),
        }
    }
}

/// A call waiting to go out with others.
struct Waiting<D: Decider> {
    decider: D,
    key: Box<[u8]>,
    ask: D::Ask,
    answer: oneshot::Sender<Result<D::Answer, BackendError>>,
}

/// What a decision entering a lane does.
enum Entered<D: Decider, L: Copy + Eq + Hash + Send + Sync + 'static> {
    /// Goes out at once, alone; the lane counts the call until the guard
    /// is dropped.
    Alone(InFlight<D, L>),
    /// Waits for the answer of a batched call.
    Waits(oneshot::Receiver<Result<D::Answer, BackendError>>),
}

/// A call counted in flight on a lane: dropped (answered, failed or
/// abandoned), it sends the decisions that waited, or frees its place.
struct InFlight<D: Decider, L: Copy + Eq + Hash + Send + Sync + 'static> {
    batcher: Arc<Batcher<D, L>>,
    lane: L,
}

impl<D: Decider, L: Copy + Eq + Hash + Send + Sync + 'static> Drop for InFlight<D, L> {
    fn drop(&mut self) {
        Batcher::release(&self.batcher, self.lane);
    }
}

impl<D: Decider, L: Copy + Eq + Hash + Send + Sync + 'static> Batcher<D, L> {
    /// Answers `ask` (a decision's cost, or what else the store's calls
    /// ask) for `key` by `decider` on `lane`: in a call of its own when
    /// fewer than the lane's calls are in flight, otherwise with the calls
    /// that wait beside it, in the call that goes out when one in flight
    /// returns. A call that has not gone out within `timeout` from now is
    /// dropped from its batch, never applied, and fails as timed out.
    ///
    /// # Errors
    ///
    /// The decider's, a timeout, or [`BackendErrorKind::Unavailable`] when
    /// the runtime shut down before the batch went out.
    pub async fn decide(
        this: &Arc<Self>,
        lane: L,
        decider: &D,
        key: &[u8],
        ask: D::Ask,
        timeout: Duration,
    ) -> Result<D::Answer, BackendError> {
        match Self::enter(this, lane, decider, key, ask) {
            Entered::Alone(in_flight) => {
                let decided = decider.decide_alone(key, ask).await;
                drop(in_flight);
                decided
            }
            Entered::Waits(answer) => tokio::time::timeout(timeout, answer)
                .await
                .map_err(|_| BackendError::timeout(timeout))?
                .unwrap_or_else(|_| Err(abandoned())),
        }
    }

    /// Enters `lane` with `ask` for `key` by `decider`: alone when fewer
    /// than the lane's calls are in flight there, otherwise waiting for a
    /// batch.
    fn enter(this: &Arc<Self>, lane: L, decider: &D, key: &[u8], ask: D::Ask) -> Entered<D, L> {
        let mut lanes = this.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = lanes.entry(lane).or_default();
        if entry.in_flight < this.max_in_flight {
            entry.in_flight += 1;
            return Entered::Alone(InFlight {
                batcher: Arc::clone(this),
                lane,
            });
        }
        let (answer, waits) = oneshot::channel();
        entry.waiting.push(Waiting {
            decider: decider.clone(),
            key: key.into(),
            ask,
            answer,
        });
        Entered::Waits(waits)
    }

    /// A call of `lane` ended: the decisions waiting there (up to the
    /// batch's most, those whose callers still wait) go out as one call in
    /// its place, or the place is freed.
    fn release(this: &Arc<Self>, lane: L) {
        let mut lanes = this.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(entry) = lanes.get_mut(&lane) else {
            return;
        };
        entry.waiting.retain(|w| !w.answer.is_closed());
        // Without a runtime (it is shutting down) nothing more is sent: the
        // waiting decisions' answers are dropped, which fails them.
        let runtime = tokio::runtime::Handle::try_current()
            .ok()
            .filter(|_| !entry.waiting.is_empty());
        let Some(runtime) = runtime else {
            entry.waiting.clear();
            entry.in_flight -= 1;
            if entry.in_flight == 0 {
                lanes.remove(&lane);
            }
            return;
        };
        let take = entry.waiting.len().min(this.max_batch);
        let parts: Vec<Waiting<D>> = entry.waiting.drain(..take).collect();
        drop(lanes);
        let guard = InFlight {
            batcher: Arc::clone(this),
            lane,
        };
        // Its own task, so that no caller's cancellation abandons the
        // others' decisions.
        runtime.spawn(async move {
            send(parts).await;
            drop(guard);
        });
    }
}

/// Sends `parts` as one call and hands each its answer.
async fn send<D: Decider>(mut parts: Vec<Waiting<D>>) {
    if parts.len() == 1 {
        let one = parts.pop().expect("one part");
        let answer = one.decider.decide_alone(&one.key, one.ask).await;
        let _ = one.answer.send(answer);
        return;
    }
    let asked: Vec<(&D, &[u8], D::Ask)> = parts.iter().map(|w| (&w.decider, &*w.key, w.ask)).collect();
    match D::decide_batch(&asked).await {
        Ok(decisions) => {
            for (waiting, decision) in parts.into_iter().zip(decisions) {
                let _ = waiting.answer.send(Ok(decision));
            }
        }
        Err(err) => {
            for waiting in parts {
                let _ = waiting
                    .answer
                    .send(Err(BackendError::new(err.kind(), err.to_string())));
            }
        }
    }
}

/// The error of a decision whose batched call was abandoned (the runtime
/// shutting down).
fn abandoned() -> BackendError {
    BackendError::new(
        BackendErrorKind::Unavailable,
        "the batched call carrying this decision was abandoned",
    )
}
