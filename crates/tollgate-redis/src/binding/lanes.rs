//! A binding's calls in its backend's lanes ([`Batcher`]): decisions and
//! operations on permits that arrive while enough calls to the same node
//! (in a Cluster, the same hash slot) are in flight wait for one to return
//! and go out together. Decisions go out in one call of their batch entry
//! point (or of `together`), operations on permits in one call of the
//! permits entry point; a batch that holds both sends the two calls at
//! once. Each call is answered exactly as in a call of its own.

use redis::cluster_routing::Slot;
use tollgate::backend::{Answer, BackendError, BackendErrorKind, Batcher, Decider, Permitted};
use tollgate::strategy::permits::PermitOp;
use tollgate::Decision;

use super::{RedisBinding, STANDALONE_LANE};

/// A binding as its backend's lanes call it.
#[derive(Clone)]
pub(crate) struct Batched(RedisBinding);

/// What a call in a lane asks.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ask {
    /// A decision of this many units on rate limits (a concurrency
    /// limit's is a peek: [`PermitOp::Peek`]).
    Decide(u64),
    /// An operation on the key's permits under a concurrency limit.
    Permit(PermitOp),
}

impl RedisBinding {
    /// Decides `cost` units for `key`: alone, or together with the calls
    /// waiting for those in flight to the same node.
    pub(super) async fn run(&self, key: &[u8], cost: u64) -> Result<Decision, BackendError> {
        let Some(batcher) = &self.shared.batcher else {
            return self.decide_one(key, cost).await;
        };
        match self.in_lane(batcher, key, Ask::Decide(cost)).await? {
            Answer::Decided(decision) => Ok(decision),
            other => Err(wrong(&other, "decision")),
        }
    }

    /// Applies `op` to `key`'s permits: alone, or together with the calls
    /// waiting for those in flight to the same node.
    pub(super) async fn permit(&self, key: &[u8], op: PermitOp) -> Result<Permitted, BackendError> {
        let Some(batcher) = &self.shared.batcher else {
            return self.permit_one(key, op).await;
        };
        match self.in_lane(batcher, key, Ask::Permit(op)).await? {
            Answer::Permitted(permitted) => Ok(permitted),
            other => Err(wrong(&other, "permit operation")),
        }
    }

    /// Answers `ask` for `key` through `batcher`'s lane of its state keys'
    /// node (in a Cluster, their hash slot).
    async fn in_lane(
        &self,
        batcher: &std::sync::Arc<Batcher<Batched, Slot>>,
        key: &[u8],
        ask: Ask,
    ) -> Result<Answer, BackendError> {
        let shared = &*self.shared;
        let lane = if shared.conn.is_cluster() {
            Slot::for_key(&self.state_keys(key)[0])
        } else {
            STANDALONE_LANE
        };
        let batched = Batched(self.clone());
        Batcher::decide(batcher, lane, &batched, key, ask, shared.timeout).await?
    }
}

/// The error for a lane's answer of the wrong kind (never given: each
/// kind of call is answered by its own kind).
#[cold]
fn wrong(answer: &Answer, asked: &str) -> BackendError {
    BackendError::new(
        BackendErrorKind::Protocol,
        format!("a batched {asked} was answered {answer:?}"),
    )
}

impl Decider for Batched {
    type Ask = Ask;
    /// Each call's own answer, or its own error: a batch of decisions and
    /// operations on permits is two script calls, and one failing fails
    /// only its own parts.
    type Answer = Result<Answer, BackendError>;

    /// One script call.
    async fn decide_alone(&self, key: &[u8], ask: Ask) -> Result<Self::Answer, BackendError> {
        Ok(match ask {
            Ask::Decide(cost) => self.0.decide_one(key, cost).await.map(Answer::Decided),
            Ask::Permit(op) => self.0.permit_one(key, op).await.map(Answer::Permitted),
        })
    }

    /// One script call for the decisions and one for the operations on
    /// permits, sent at once when the batch holds both.
    async fn decide_batch(parts: &[(&Self, &[u8], Ask)]) -> Result<Vec<Self::Answer>, BackendError> {
        let mut decisions = Vec::new();
        let mut permits = Vec::new();
        for &(batched, key, ask) in parts {
            match ask {
                Ask::Decide(cost) => decisions.push((&batched.0, key, cost)),
                Ask::Permit(op) => permits.push((&batched.0, key, op)),
            }
        }
        let (decided, permitted) = tokio::join!(
            RedisBinding::decide_many(&decisions),
            RedisBinding::permit_many(&permits)
        );
        let decided: Vec<Result<Decision, BackendError>> = match decided {
            Ok(decided) => decided.into_iter().map(Ok).collect(),
            // The decisions' call failed: each decision fails alike.
            Err(err) => decisions
                .iter()
                .map(|_| Err(BackendError::new(err.kind(), err.to_string())))
                .collect(),
        };
        let mut decided = decided.into_iter();
        let mut permitted = permitted.into_iter();
        let unanswered = || {
            Err(BackendError::new(
                BackendErrorKind::Protocol,
                "a batched call was left without an answer",
            ))
        };
        Ok(parts
            .iter()
            .map(|part| match part.2 {
                Ask::Decide(_) => decided.next().map_or_else(unanswered, |d| d.map(Answer::Decided)),
                Ask::Permit(_) => permitted
                    .next()
                    .map_or_else(unanswered, |p| p.map(Answer::Permitted)),
            })
            .collect())
    }
}
