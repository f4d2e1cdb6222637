//! Permits of requests in flight over JSON: `POST /v1/acquire`
//! `{"resource", "key", "cost"?}` holds units of a concurrency limit
//! (`strategy: concurrency`) and answers a `permit` token, which
//! `POST /v1/release` `{"permit"}` gives back and `POST /v1/extend`
//! `{"permit"}` keeps for another `ttl`. Envoy's rate-limit API has no
//! release, so permits are this API's alone.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use tollgate::backend::Permitted;
use tollgate::{Limiter, Strategy};
use tollgate_config::AnyBackend;

use crate::http::decide::{ceil_millis, cost, key, object, policies, read_body, resource};
use crate::http::error::{json_response, ApiError};
use crate::http::permit_counts;
use crate::permit_token::{Issued, Kind};
use crate::shared::Shared;

/// The answer of `/v1/acquire`.
#[derive(Serialize)]
struct Acquired<'a> {
    allowed: bool,
    /// The token to release or extend the permit with; `null` when denied,
    /// for a peek (cost 0), and when the admission holds nothing (an
    /// exempt key, shadow mode, the fail policy).
    permit: Option<String>,
    in_flight: u64,
    limit: u64,
    /// How long the permit lasts unless extended.
    expires_ms: Option<u64>,
    /// When denied: an upper bound on the wait (the time until enough
    /// permits expire; a release comes sooner).
    retry_after_ms: Option<u64>,
    /// The resource whose policy decided, or `default`.
    policy: &'a str,
    fail_open: bool,
    fallback: bool,
    shadow_denied: bool,
    listed: Option<&'static str>,
}

/// The answer of `/v1/release`.
#[derive(Serialize)]
struct Released {
    /// Whether the permit's units were freed: `false` when it was released
    /// before or had expired.
    released: bool,
    in_flight: u64,
}

/// The answer of `/v1/extend`.
#[derive(Serialize)]
struct Extended {
    /// Whether the permit lives on: `false` when it had expired or was
    /// released (its holder has lost it).
    extended: bool,
    expires_ms: Option<u64>,
}

/// `POST /v1/acquire`.
pub(crate) async fn acquire(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    answer(run_acquire(&shared, &headers, body).await)
}

/// `POST /v1/release`.
pub(crate) async fn release(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    answer(run_permit_op(&shared, &headers, body, Op::Release).await)
}

/// `POST /v1/extend`.
pub(crate) async fn extend(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    answer(run_permit_op(&shared, &headers, body, Op::Extend).await)
}

fn answer(result: Result<Response, ApiError>) -> Response {
    result.unwrap_or_else(IntoResponse::into_response)
}

async fn run_acquire(shared: &Shared, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let bytes = read_body(headers, body).await?;
    let fields = object(
        &bytes,
        &["resource", "key", "cost"],
        r#"{"resource": "exports", "key": "tenant-1", "cost": 1}"#,
    )?;
    let (resource, key, cost) = (resource(&fields)?, key(&fields)?, cost(&fields)?);
    let resource = resource.unwrap_or_default();
    let config = shared.config.load();
    let policies = policies(&config)?;
    let limiter = policies.limiter(&resource);
    let (name, _) = policies.named_policy(&resource);
    concurrency(&limiter, name, "resource", "POST /v1/decide")?;
    let permit = limiter
        .acquire_permit(&key, cost)
        .await
        .map_err(|err| ApiError::backend(&err))?;
    let d = *permit.decision();
    let expires_in = permit.expires_in();
    let expires_ms = expires_in.map(ceil_millis);
    let id = permit.detach();
    let named = (resource.as_str(), key.as_slice(), id);
    permit_counts::acquired(shared, (&limiter, name), named, cost, (&d, expires_in));
    let token = id.map(|id| shared.permit_key.issue(Kind::Permit, &resource, &key, id.0));
    let answer = Acquired {
        allowed: d.allowed,
        permit: token,
        in_flight: d.limit - d.remaining,
        limit: d.limit,
        expires_ms,
        retry_after_ms: d.retry_after.map(ceil_millis),
        policy: name,
        fail_open: d.fail_open,
        fallback: d.fallback,
        shadow_denied: d.shadow_denied,
        listed: d.listed.map(tollgate::Listed::name),
    };
    Ok(json_response(StatusCode::OK, &answer))
}

/// Refuses a limiter whose policy is not a concurrency limit: a 400 naming
/// `field` and the route to use instead.
pub(crate) fn concurrency(
    limiter: &Limiter<AnyBackend>,
    name: &str,
    field: &str,
    instead: &str,
) -> Result<(), ApiError> {
    let strategy = limiter.policy().limits()[0].strategy();
    if strategy == Strategy::Concurrency {
        return Ok(());
    }
    Err(ApiError::field(
        field,
        format!("{name:?} is a rate limit ({strategy}), which holds no permits: use {instead}"),
    ))
}

/// A release or an extend.
#[derive(Clone, Copy)]
enum Op {
    Release,
    Extend,
}

async fn run_permit_op(
    shared: &Shared,
    headers: &HeaderMap,
    body: Body,
    op: Op,
) -> Result<Response, ApiError> {
    let bytes = read_body(headers, body).await?;
    let fields = object(&bytes, &["permit"], r#"{"permit": "01000765…"}"#)?;
    let token = match fields.get("permit") {
        Some(Value::String(token)) => token,
        None | Some(Value::Null) => {
            return Err(ApiError::field(
                "permit",
                "is required: the `permit` string POST /v1/acquire answered",
            ))
        }
        Some(_) => return Err(ApiError::field("permit", "must be a string")),
    };
    let Issued { resource, key, id } = shared
        .permit_key
        .read(Kind::Permit, token)
        .map_err(|reason| ApiError::field("permit", reason))?;
    let id = tollgate::strategy::permits::PermitId(id);
    let config = shared.config.load();
    let policies = policies(&config)?;
    let limiter = policies.limiter(&resource);
    let (name, _) = policies.named_policy(&resource);
    concurrency(&limiter, name, "permit", "a permit of a concurrency resource")?;
    let answered = match op {
        Op::Release => limiter.release_permit(&key, id).await,
        Op::Extend => limiter.extend_permit(&key, id).await,
    };
    let permitted: Permitted = answered.map_err(|err| ApiError::backend(&err))?;
    let named = (resource.as_str(), key.as_slice(), Some(id));
    let released = matches!(op, Op::Release);
    permit_counts::ended(shared, (&limiter, name), named, released, &permitted);
    let done = permitted.decision.allowed;
    Ok(match op {
        Op::Release => json_response(
            StatusCode::OK,
            &Released {
                released: done,
                in_flight: permitted.in_flight(),
            },
        ),
        Op::Extend => json_response(
            StatusCode::OK,
            &Extended {
                extended: done,
                expires_ms: permitted.expires_in.map(ceil_millis),
            },
        ),
    })
}
