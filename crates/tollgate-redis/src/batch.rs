//! Batched decisions: the decisions that arrive while calls to the same
//! Redis node are in flight (a standalone server or Sentinel's primary; in a
//! Cluster, the same hash slot) wait for one of them to return, then go out
//! together as one call ([`Decider::decide_batch`]). Each decision decides
//! only itself: they are decided in order, each against what the earlier
//! ones left, exactly as one call each would decide them in that order. No
//! timer: a decision that finds fewer than two calls in flight goes out at
//! once, alone.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use redis::cluster_routing::Slot;
use tokio::sync::oneshot;
use tollgate::backend::BackendError;
use tollgate::backend::BackendErrorKind;
use tollgate::Decision;

/// What makes the calls of a lane: a decision in a call of its own, or
/// several in one.
pub(crate) trait Decider: Clone + Send + Sync + 'static {
    /// Decides `cost` units for `key` in a call of its own.
    fn decide_alone(
        &self,
        key: &[u8],
        cost: u64,
    ) -> impl Future<Output = Result<Decision, BackendError>> + Send;

    /// Decides `parts` (each a decider of one backend, a key and a cost)
    /// in one call, in order, each deciding only itself.
    fn decide_batch(
        parts: &[(&Self, &[u8], u64)],
    ) -> impl Future<Output = Result<Vec<Decision>, BackendError>> + Send;
}

/// How many calls of one lane may be in flight before decisions wait to go
/// out together. Two: one in flight makes batches larger but saves the
/// server no measurable CPU per decision, and costs a third of the
/// throughput (`benches/batching.rs`).
const MAX_IN_FLIGHT: usize = 2;

/// The most decisions one batched call carries; more wait for the next.
const MAX_BATCH: usize = 64;

/// The lanes of one backend: one for a standalone server or Sentinel's
/// primary, one per hash slot in a Cluster.
/// (A lane is named by a hash slot: at most 16,384 of them, removed when
/// idle, so the map stays bounded whatever keys callers send.)
pub(crate) struct Batcher<D> {
    lanes: Mutex<HashMap<Slot, Lane<D>>>,
}

impl<D> Default for Batcher<D> {
    fn default() -> Self {
        Self {
            lanes: Mutex::default(),
        }
    }
}

/// The calls in flight on one lane and the decisions waiting for one.
struct Lane<D> {
    in_flight: usize,
    waiting: Vec<Waiting<D>>,
}

impl<D> Default for Lane<D> {
    fn default() -> Self {
        Self {
            in_flight: 0,
            waiting: Vec::new(),
        }
    }
}

/// A decision waiting to go out with others.
struct Waiting<D> {
    decider: D,
    key: Box<[u8]>,
    cost: u64,
    answer: oneshot::Sender<Result<Decision, BackendError>>,
}

/// What a decision entering a lane does.
pub(crate) enum Entered<D: Decider> {
    /// Goes out at once, alone; the lane counts the call until the guard
    /// is dropped.
    Alone(InFlight<D>),
    /// Waits for the answer of a batched call.
    Waits(oneshot::Receiver<Result<Decision, BackendError>>),
}

/// A call counted in flight on a lane: dropped (answered, failed or
/// abandoned), it sends the decisions that waited, or frees its place.
pub(crate) struct InFlight<D: Decider> {
    batcher: Arc<Batcher<D>>,
    lane: Slot,
}

impl<D: Decider> Drop for InFlight<D> {
    fn drop(&mut self) {
        Batcher::release(&self.batcher, self.lane);
    }
}

impl<D: Decider> Batcher<D> {
    /// Enters `lane` with a decision of `cost` units for `key` by
    /// `decider`: alone when fewer than two calls are in flight there,
    /// otherwise waiting for a batch.
    pub(crate) fn enter(this: &Arc<Self>, lane: Slot, decider: &D, key: &[u8], cost: u64) -> Entered<D> {
        let mut lanes = this.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = lanes.entry(lane).or_default();
        if entry.in_flight < MAX_IN_FLIGHT {
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
            cost,
            answer,
        });
        Entered::Waits(waits)
    }

    /// A call of `lane` ended: the decisions waiting there (up to
    /// [`MAX_BATCH`], those whose callers still wait) go out as one call
    /// in its place, or the place is freed.
    fn release(this: &Arc<Self>, lane: Slot) {
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
        let take = entry.waiting.len().min(MAX_BATCH);
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
        let answer = one.decider.decide_alone(&one.key, one.cost).await;
        let _ = one.answer.send(answer);
        return;
    }
    let asked: Vec<(&D, &[u8], u64)> = parts.iter().map(|w| (&w.decider, &*w.key, w.cost)).collect();
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
pub(crate) fn abandoned() -> BackendError {
    BackendError::new(
        BackendErrorKind::Unavailable,
        "the batched call carrying this decision was abandoned",
    )
}
