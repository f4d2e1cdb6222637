//! `POST /v1/cancel`: gives back a reservation that `POST /v1/decide` with
//! `max_delay_ms` made (kept in [`Reservations`](crate::pending::Reservations)
//! until its time comes).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Serialize;
use serde_json::Value;

use crate::http::decide::{object, policies, read_body};
use crate::http::error::{json_response, ApiError};
use crate::shared::Shared;

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
