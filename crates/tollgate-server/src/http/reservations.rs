//! Reservations made through `POST /v1/decide` with `max_delay_ms`, kept
//! until their time comes so that `POST /v1/cancel` can give them back.
//!
//! Each is named by 128 random bits from the operating system, so a client
//! can cancel only a reservation it was given. The table is bounded: when
//! it holds [`MAX_PENDING`] reservations that have not proceeded, a new one
//! is made without a name (it cannot be cancelled), never refused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;
use tollgate::Reservation;

use crate::http::decide::{object, policies, read_body};
use crate::http::error::{json_response, ApiError};
use crate::shared::Shared;

/// The most reservations kept for `/v1/cancel` at once.
pub const MAX_PENDING: usize = 100_000;

/// A reservation kept for `/v1/cancel`.
struct Pending {
    /// The resource it was made under (`None`: the default policy).
    resource: Option<String>,
    reservation: Reservation,
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
    fn take(&self, name: &str) -> Option<Pending> {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let found = pending.remove(name)?;
        (found.proceeds > Instant::now()).then_some(found)
    }
}

/// The answer of `/v1/cancel`.
#[derive(Serialize)]
struct Cancelled {
    /// Whether the units were given back: `false` when something was
    /// charged on the key since (the slots after it are taken).
    cancelled: bool,
}

/// `POST /v1/cancel` with `{"reservation": "<name>"}`: gives the
/// reservation back.
pub(crate) async fn cancel(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    match run(&shared, &headers, body).await {
        Ok(response) => response,
        Err(err) => axum::response::IntoResponse::into_response(err),
    }
}

async fn run(shared: &Shared, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let bytes = read_body(headers, body).await?;
    let fields = object(&bytes, &["reservation"], r#"{"reservation": "0f3c…"}"#)?;
    let name = match fields.get("reservation") {
        Some(Value::String(name)) if !name.is_empty() => name,
        _ => {
            return Err(ApiError::field(
                "reservation",
                "is required: the `reservation` a decision with `max_delay_ms` answered",
            ))
        }
    };
    let Some(pending) = shared.reservations.take(name) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no such reservation waiting: it has proceeded, was cancelled, or was never made",
        ));
    };
    let config = shared.config.load();
    let policies = policies(&config)?;
    let limiter = policies.limiter(pending.resource.as_deref().unwrap_or(""));
    let cancelled = limiter
        .cancel(pending.reservation)
        .await
        .map_err(|err| ApiError::backend(&err))?;
    Ok(json_response(StatusCode::OK, &Cancelled { cancelled }))
}
