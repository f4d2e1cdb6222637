//! The per-key operations, admin routes: `POST /v1/reset`
//! `{"resource", "key"}`, `POST /v1/block` `{"resource", "key",
//! "duration_ms"}`, `POST /v1/refund` and (an extension) `POST /v1/penalty`
//! `{"resource", "key", "cost"}`, applied with [`tollgate::Limiter::operate`]
//! to the policy of `resource` (the default policy when absent or not
//! named by the policy file), on every limit of the policy. A resource
//! that combines its rates with a concurrency limit has a reset and a
//! block applied to both: a reset starts its rates afresh and frees the key's
//! permits, a block refuses its acquires as well as its rates until it
//! ends; a refund or a penalty, which would change nothing on a
//! concurrency limit, applies to the rates alone.
//!
//! The bodies are validated as `/v1/decide`'s (400 naming the field, 413
//! over [`MAX_BODY_BYTES`](crate::MAX_BODY_BYTES)). `duration_ms` is
//! required, from 0 (lifts a block) to [`tollgate::Policy::MAX_WINDOW`] (100
//! years); `cost` is 1 when absent, at most [`tollgate::Policy::MAX_LIMIT`]. Applied:
//! `204 No Content`. The store failed: 503 with its message (the operation
//! may not have been applied; retrying it is safe for reset and block, not
//! for refund and penalty). The store cannot apply operations: 501.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};
use tollgate::backend::BackendErrorKind;
use tollgate::{Error, Operation};

use crate::http::decide::{cost, key, object, read_body, resource, whole_number};
use crate::http::error::ApiError;
use crate::shared::Shared;

/// The routes of the operations and the kind each applies.
pub(crate) const OPERATIONS: &[(&str, Kind)] = &[
    ("/v1/reset", Kind::Reset),
    ("/v1/block", Kind::Block),
    ("/v1/refund", Kind::Refund),
    ("/v1/penalty", Kind::Penalty),
];

/// Which operation a route applies; its argument comes from the body.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Reset,
    Block,
    Refund,
    Penalty,
}

impl Kind {
    /// The body's fields and an example of a whole body.
    fn fields(self) -> (&'static [&'static str], &'static str) {
        match self {
            Kind::Reset => (&["resource", "key"], r#"{"resource": "login", "key": "user-1"}"#),
            Kind::Block => (
                &["resource", "key", "duration_ms"],
                r#"{"resource": "login", "key": "user-1", "duration_ms": 60000}"#,
            ),
            Kind::Refund | Kind::Penalty => (
                &["resource", "key", "cost"],
                r#"{"resource": "login", "key": "user-1", "cost": 1}"#,
            ),
        }
    }

    /// The operation with its argument from `fields`.
    fn operation(self, fields: &Map<String, Value>) -> Result<Operation, ApiError> {
        Ok(match self {
            Kind::Reset => Operation::Reset,
            Kind::Block => Operation::Block(duration(fields)?),
            Kind::Refund => Operation::Refund(cost(fields)?),
            Kind::Penalty => Operation::Penalty(cost(fields)?),
        })
    }
}

/// The required `duration_ms` of a block.
fn duration(fields: &Map<String, Value>) -> Result<Duration, ApiError> {
    let max = u64::try_from(tollgate::Policy::MAX_WINDOW.as_millis()).unwrap_or(u64::MAX);
    let ms = whole_number(fields, "duration_ms", "a block", max, |n| {
        if n > max {
            return Err(format!("{n} ms exceeds {max} ms (100 years), the longest block"));
        }
        Ok(n)
    })?;
    let ms = ms.ok_or_else(|| {
        ApiError::field(
            "duration_ms",
            "is required: how long the key is denied, in milliseconds (0 lifts a block)",
        )
    })?;
    Ok(Duration::from_millis(ms))
}

/// The handler of the route of `kind`.
pub(crate) async fn handler(kind: Kind, shared: Arc<Shared>, headers: HeaderMap, body: Body) -> Response {
    match run(kind, &shared, &headers, body).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(err) => err.into_response(),
    }
}

/// A route for `kind`, for the admin router.
pub(crate) fn route(kind: Kind) -> axum::routing::MethodRouter<Arc<Shared>> {
    axum::routing::post(
        move |State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body| {
            handler(kind, shared, headers, body)
        },
    )
}

async fn run(kind: Kind, shared: &Shared, headers: &HeaderMap, body: Body) -> Result<(), ApiError> {
    let bytes = read_body(headers, body).await?;
    let (allowed, example) = kind.fields();
    let fields = object(&bytes, allowed, example)?;
    let resource = resource(&fields)?;
    let key = key(&fields)?;
    let op = kind.operation(&fields)?;
    let config = shared.config.load();
    let policies = crate::http::decide::policies(&config)?;
    let resource = resource.as_deref().unwrap_or("");
    let (name, _) = policies.named_policy(resource);
    let (rates, in_flight) = policies.limiters_of(resource);
    let mut applied = rates.operate(&key, op).await;
    // A refund or a penalty changes nothing on a concurrency limit.
    let slots = in_flight.filter(|_| matches!(op, Operation::Reset | Operation::Block(_)));
    if let (Ok(()), Some(slots)) = (&applied, slots) {
        applied = slots.operate(&key, op).await;
    }
    match applied {
        Ok(()) => {
            tracing::info!(
                operation = op.name(),
                policy = name,
                "applied a per-key operation"
            );
            Ok(())
        }
        Err(err) => Err(operation_failed(op, &err)),
    }
}

/// The answer when `op` was not applied.
fn operation_failed(op: Operation, err: &Error) -> ApiError {
    match err {
        // Arguments are checked above as the core checks them; this is a
        // backstop naming the body's field.
        Error::Config(_) => {
            let field = if matches!(op, Operation::Block(_)) {
                "duration_ms"
            } else {
                "cost"
            };
            ApiError::field(field, err.to_string())
        }
        Error::Backend(backend) if backend.kind() == BackendErrorKind::Unsupported => ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            format!("the store cannot apply {}: {err}", op.name()),
        ),
        Error::Backend(_) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{} not applied (or not known to be): {err}", op.name()),
        ),
    }
}
