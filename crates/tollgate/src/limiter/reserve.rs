//! Reservations: waiting for a slot instead of being refused ([waiting and
//! reservations](crate::_documentation::semantics#waiting-and-reservations)).

use std::time::Duration;

use super::machine::Reserving;
use super::Limiter;
use crate::backend::{Answer, Backend, Binding, Call, Receipt, Reserved};
use crate::decision::Decision;
use crate::error::Error;

/// A reservation made by [`Limiter::reserve_n`]: either made (the caller
/// proceeds after [`delay`](Self::delay)) or refused (nothing was charged;
/// the decision's `retry_after` says when the same reservation would be
/// made).
///
/// A reservation that will not be used can be given back with
/// [`Limiter::cancel`] before its time comes, as long as nothing was
/// charged on its key since. It is given back at most once: `cancel` takes
/// it, and it cannot be copied (two reservations of the same cost can leave
/// the same state, so a second cancel of one could give back the other).
#[derive(Debug, PartialEq, Eq)]
pub struct Reservation {
    key: Box<[u8]>,
    decision: Decision,
    delay: Duration,
    receipt: Option<Receipt>,
    /// Refused because the earliest slot lies beyond `max_delay`
    /// ([`Reserved::beyond_max_delay`]): waiting does not bring it nearer.
    pub(super) beyond_max_delay: bool,
}

impl Reservation {
    /// Whether the reservation was made: the caller may proceed after
    /// [`delay`](Self::delay).
    pub fn is_reserved(&self) -> bool {
        self.decision.allowed
    }

    /// How long to wait before proceeding: zero when the request may
    /// proceed at once, and when refused.
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// The decision: `remaining` and `reset` after the charge when
    /// reserved; when refused, `retry_after` is the wait after which the
    /// same reservation would be made (`None`: never, the cost exceeds the
    /// limit).
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// Whether a refusal came from `max_delay`: the earliest slot lies
    /// beyond it, so waiting `retry_after` and asking again with the same
    /// deadline is refused again (only units given back can bring the slot
    /// nearer). `false` when reserved, and for a refusal that waiting ends:
    /// a fixed window's denial, or a slot past the end of a sliding
    /// window's current window (`retry_after` is then the time until that
    /// window ends).
    pub fn exceeds_max_delay(&self) -> bool {
        self.beyond_max_delay
    }

    /// The key reserved.
    pub fn key(&self) -> &[u8] {
        &self.key
    }
}

impl<B: Backend> Limiter<B> {
    /// Reserves `cost` units of `key`, waiting at most `max_delay`: on the
    /// token and leaky bucket, the next slots the rate allows, and on a
    /// sliding window the next slots within its current window, charged
    /// now (the caller proceeds after [`Reservation::delay`]); on a policy
    /// with a fixed window, only what it admits now. Beyond `max_delay`
    /// the reservation is refused and nothing is charged
    /// ([`Reservation::exceeds_max_delay`]); a sliding window's slot past
    /// its current window is refused until the window turns (`retry_after`).
    /// `max_delay` zero is exactly [`allow_n`](Self::allow_n).
    ///
    /// The exempt and deny lists decide first (an exempt key proceeds at
    /// once, a denied one is refused); in shadow mode a reservation that
    /// would wait or be refused proceeds at once, marked
    /// [`shadow_denied`](Decision::shadow_denied), charged as enforcement
    /// would charge it. On a backend that does not reserve
    /// ([`Capabilities::reserves`](crate::backend::Capabilities::reserves))
    /// a reservation is only what a decision admits now.
    /// The deny cache and the circuit breaker are not consulted; a failure
    /// of the store meets the fail policy.
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] when the backend failed and the limiter fails
    /// closed.
    pub async fn reserve_n(
        &self,
        key: impl AsRef<[u8]>,
        cost: u64,
        max_delay: Duration,
    ) -> Result<Reservation, Error> {
        let key = key.as_ref();
        let reservation =
            |decision: Decision, delay: Duration, receipt: Option<Receipt>, beyond_max_delay: bool| {
                Reservation {
                    key: key.into(),
                    decision,
                    delay,
                    receipt,
                    beyond_max_delay,
                }
            };
        let pending = match self.begin_reservation(key, cost) {
            Reserving::Listed(decision) => return Ok(reservation(decision, Duration::ZERO, None, false)),
            Reserving::Ask(pending) => pending,
        };
        let call = Call::Reserve { key, cost, max_delay };
        let result = if self.answers(&call) {
            Answer::reserved(self.binding.call(call).await)
        } else {
            // A store that does not reserve: what a decision admits now.
            Answer::decided(self.binding.call(Call::Decide { key, cost }).await)
                .map(|decision| Reserved::new(decision, Duration::ZERO, None))
        };
        let (decision, delay, receipt, beyond_max_delay) = self.finish_reservation(pending, result)?;
        Ok(reservation(decision, delay, receipt, beyond_max_delay))
    }

    /// Gives `reservation` back, when it was made, has not proceeded and
    /// nothing was charged on its key since: the key's state is then what
    /// it would be had the reservation never been made. Returns whether it
    /// was given back; a reservation refused, or past its time, or followed
    /// by another charge, gives nothing back (its units stay charged: at
    /// most its cost of under-admission, once).
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] when the backend failed (the fail policy does
    /// not apply: nothing is decided).
    pub async fn cancel(&self, reservation: Reservation) -> Result<bool, Error> {
        let Some(receipt) = &reservation.receipt else {
            return Ok(false);
        };
        let call = Call::Cancel {
            key: &reservation.key,
            receipt,
        };
        if !self.answers(&call) {
            return Ok(false);
        }
        Answer::cancelled(self.binding.call(call).await).map_err(Error::Backend)
    }
}
