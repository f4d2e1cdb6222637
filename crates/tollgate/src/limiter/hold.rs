//! Estimates settled by actual usage: a request charged an estimate up
//! front and settled once its usage is known ([estimates
//! settled](crate::_documentation::semantics#estimates-settled)).

use super::machine::Reserving;
use super::Limiter;
use crate::backend::{Answer, Backend, Binding, Call, Settled};
use crate::decision::Decision;
use crate::error::{ConfigError, Error};
use crate::strategy::holds::HoldId;

/// The answer to [`Limiter::hold`]: the decision of a request of the
/// estimate's cost and, when the store charged it, the hold to settle.
///
/// A hold is plain data: dropping it settles nothing, and a hold never
/// settled stays charged at its estimate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    key: Box<[u8]>,
    estimate: u64,
    decision: Decision,
    id: Option<HoldId>,
}

impl Hold {
    /// The decision, as for a request of cost [`estimate`](Self::estimate).
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The hold the store keeps for settling: `None` when denied, for an
    /// estimate of 0, and for an admission that charged nothing (an exempt
    /// key, shadow mode's admission of a denial, the fail policy's).
    pub fn id(&self) -> Option<HoldId> {
        self.id
    }

    /// The units charged up front.
    pub fn estimate(&self) -> u64 {
        self.estimate
    }

    /// The key the hold was asked for.
    pub fn key(&self) -> &[u8] {
        &self.key
    }
}

impl<B: Backend> Limiter<B> {
    /// Charges `estimate` units of `key` up front, as a request of that
    /// cost is decided (lists, shadow mode, the fail policy and metrics
    /// included), and when admitted keeps a hold that
    /// [`settle`](Self::settle) settles with the usage once known, within
    /// the policy's longest window.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming `strategy` on a concurrency limit (it holds
    /// permits, not charges); [`Error::Backend`] when the store keeps no
    /// holds, or failed and the limiter fails closed.
    pub async fn hold(&self, key: impl AsRef<[u8]>, estimate: u64) -> Result<Hold, Error> {
        let key = key.as_ref();
        self.check_holds()?;
        let id = HoldId(super::permit::next_id().0);
        let (decision, held) = match self.begin_reservation(key, estimate) {
            Reserving::Listed(decision) => (decision, false),
            Reserving::Ask(pending) => {
                let call = Call::Hold { key, id, estimate };
                let result = Answer::decided(self.binding.call(call).await);
                let answered = result.is_ok();
                let decision = self.finish_plain(pending, result, false)?;
                let held = answered && decision.allowed && !decision.shadow_denied && estimate > 0;
                (decision, held)
            }
        };
        Ok(Hold {
            key: key.into(),
            estimate,
            decision,
            id: held.then_some(id),
        })
    }

    /// Settles the hold `id` of `key` with the usage `used`, once: below
    /// the estimate, what is left of it is given back (within the window
    /// it was charged in); above it, the difference is charged whatever is
    /// left, as a report is. A hold settled before, past the policy's
    /// longest window, or never made changes nothing (`settled` is then
    /// `false`). A settle is a report: it always reaches the store, and
    /// the key's cached denial is forgotten.
    ///
    /// # Errors
    ///
    /// As for [`Limiter::hold`]; the fail policy does not apply (the
    /// estimate stays charged).
    pub async fn settle(&self, key: impl AsRef<[u8]>, id: HoldId, used: u64) -> Result<Settled, Error> {
        let key = key.as_ref();
        self.check_holds()?;
        self.forget_denial(key);
        let settled = Answer::settled(self.binding.call(Call::Settle { key, id, used }).await);
        settled.map_err(Error::Backend)
    }

    /// Refuses a hold on a concurrency limit, or on a store that keeps no
    /// holds.
    fn check_holds(&self) -> Result<(), Error> {
        if self.policy.limits()[0].strategy().is_concurrency() {
            let message = "holds charge a rate limit; a concurrency limit holds permits (acquire_permit)";
            return Err(ConfigError::new("strategy", message).into());
        }
        let call = Call::Settle {
            key: &[],
            id: HoldId(0),
            used: 0,
        };
        if !self.answers(&call) {
            return Err(Error::Backend(call.unsupported()));
        }
        Ok(())
    }
}
