//! Batched decisions: the decisions that arrive while calls to the same
//! Redis node are in flight (a standalone server or Sentinel's primary; in a
//! Cluster, the same hash slot) wait for one of them to return, then go out
//! together as one call of the `together` entry point. Each decision is a
//! part of its own that does not decide the others: the parts are decided
//! in order, each against what the earlier ones left, exactly as one call
//! each would decide them in that order. No timer: a decision that finds
//! fewer than two calls in flight goes out at once, alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use redis::cluster_routing::Slot;
use tokio::sync::oneshot;
use tollgate::{BackendError, BackendErrorKind, Decision};

use crate::binding::RedisBinding;

/// How many calls of one lane may be in flight before decisions wait to go
/// out together. Two: one in flight makes batches larger but saves the
/// server no measurable CPU per decision, and costs a third of the
/// throughput (`benches/batching.rs`).
const MAX_IN_FLIGHT: usize = 2;

/// The most decisions one batched call carries; more wait for the next.
pub(crate) const MAX_BATCH: usize = 64;

/// The lanes of one backend: one for a standalone server or Sentinel's
/// primary, one per hash slot in a Cluster.
/// (A lane is named by a hash slot: at most 16,384 of them, removed when
/// idle, so the map stays bounded whatever keys callers send.)
#[derive(Default)]
pub(crate) struct Batcher {
    lanes: Mutex<HashMap<Slot, Lane>>,
}

/// The calls in flight on one lane and the decisions waiting for one.
#[derive(Default)]
struct Lane {
    in_flight: usize,
    waiting: Vec<Waiting>,
}

/// A decision waiting to go out with others.
pub(crate) struct Waiting {
    binding: RedisBinding,
    key: Box<[u8]>,
    cost: u64,
    answer: oneshot::Sender<Result<Decision, BackendError>>,
}

/// What a decision entering a lane does.
pub(crate) enum Entered {
    /// Goes out at once, alone; the lane counts the call until the guard
    /// is dropped.
    Alone(InFlight),
    /// Waits for the answer of a batched call.
    Waits(oneshot::Receiver<Result<Decision, BackendError>>),
}

/// A call counted in flight on a lane: dropped (answered, failed or
/// abandoned), it sends the decisions that waited, or frees its place.
pub(crate) struct InFlight {
    batcher: Arc<Batcher>,
    lane: Slot,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        Batcher::release(&self.batcher, self.lane);
    }
}

impl Batcher {
    /// Enters `lane` with a decision of `cost` units for `key` on
    /// `binding`: alone when fewer than two calls are in flight there,
    /// otherwise waiting for a batch.
    pub(crate) fn enter(
        this: &Arc<Self>,
        lane: Slot,
        binding: &RedisBinding,
        key: &[u8],
        cost: u64,
    ) -> Entered {
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
            binding: binding.clone(),
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
        let runtime = tokio::runtime::Handle::try_current();
        if entry.waiting.is_empty() || runtime.is_err() {
            // Without a runtime (it is shutting down) nothing more is sent:
            // the waiting decisions' answers are dropped, which fails them.
            entry.waiting.clear();
            entry.in_flight -= 1;
            if entry.in_flight == 0 {
                lanes.remove(&lane);
            }
            return;
        }
        let take = entry.waiting.len().min(MAX_BATCH);
        let parts: Vec<Waiting> = entry.waiting.drain(..take).collect();
        drop(lanes);
        let guard = InFlight {
            batcher: Arc::clone(this),
            lane,
        };
        if let Ok(runtime) = runtime {
            // Its own task, so that no caller's cancellation abandons the
            // others' decisions.
            runtime.spawn(async move {
                send(parts).await;
                drop(guard);
            });
        }
    }
}

/// Sends `parts` as one call and hands each its answer.
async fn send(mut parts: Vec<Waiting>) {
    if parts.len() == 1 {
        let one = parts.pop().expect("one part");
        let answer = one.binding.decide_alone(&one.key, one.cost).await;
        let _ = one.answer.send(answer);
        return;
    }
    let asked: Vec<(&RedisBinding, &[u8], u64)> =
        parts.iter().map(|w| (&w.binding, &*w.key, w.cost)).collect();
    match RedisBinding::decide_batch(&asked).await {
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
