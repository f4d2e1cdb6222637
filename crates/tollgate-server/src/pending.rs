//! Reservations made through `POST /v1/decide` with `max_delay_ms`, kept
//! until their time comes so that `POST /v1/cancel` can give them back.
//!
//! Each is named by 128 random bits from the operating system, so a client
//! can cancel only a reservation it was given. The table is bounded: when
//! it holds [`MAX_PENDING`] reservations that have not proceeded, a new one
//! is made without a name (it cannot be cancelled), never refused.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio::time::Instant;
use tollgate::Reservation;

/// The most reservations kept for `/v1/cancel` at once.
pub(crate) const MAX_PENDING: usize = 100_000;

/// A reservation kept for `/v1/cancel`.
pub(crate) struct Pending {
    /// The resource it was made under (`None`: the default policy).
    pub(crate) resource: Option<String>,
    /// The reservation, for the limiter of that resource to give back.
    pub(crate) reservation: Reservation,
    /// When it proceeds: it cannot be given back from then on.
    proceeds: Instant,
}

/// The reservations that can still be given back, by name.
#[derive(Default)]
pub(crate) struct Reservations {
    pending: Mutex<HashMap<String, Pending>>,
}

impl Reservations {
    /// Keeps `reservation`, made under `resource` and proceeding at
    /// `proceeds`; its name, or `None` when the table is full.
    pub(crate) fn keep(
        &self,
        resource: Option<String>,
        reservation: Reservation,
        proceeds: Instant,
    ) -> Option<String> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).ok()?;
        let name: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if pending.len() >= MAX_PENDING {
            let now = Instant::now();
            pending.retain(|_, p| p.proceeds > now);
            if pending.len() >= MAX_PENDING {
                return None;
            }
        }
        pending.insert(
            name.clone(),
            Pending {
                resource,
                reservation,
                proceeds,
            },
        );
        Some(name)
    }

    /// Takes the reservation called `name` if it has not proceeded.
    pub(crate) fn take(&self, name: &str) -> Option<Pending> {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let found = pending.remove(name)?;
        (found.proceeds > Instant::now()).then_some(found)
    }
}
