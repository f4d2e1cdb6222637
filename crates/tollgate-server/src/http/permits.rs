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
    /// For a resource that combines rates with its concurrency limit, the
    /// rates' decision (`null` when the permit was denied: the rates were
    /// not asked, and charged nothing; and for a concurrency limit alone).
    rate: Option<RateFigures>,
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
    let (limiter, in_flight) = policies.limiters_of(&resource);
    let (name, _) = policies.named_policy(&resource);
    // A resource that combines rates with a concurrency limit holds a
    // permit of the latter; the former is its own limiter's.
    let (slots, rates) = match in_flight {
        Some(slots) => (slots, Some(limiter)),
        None => (limiter, None),
    };
    concurrency(&slots, name, "resource", "POST /v1/decide")?;
    let permit = slots
        .acquire_permit(&key, cost)
        .await
        .map_err(|err| ApiError::backend(&err))?;
    let d = *permit.decision();
    let expires_in = permit.expires_in();
    let expires_ms = expires_in.map(ceil_millis);
    let mut held = permit.detach();
    let mut in_flight = d.limit - d.remaining;
    let (mut allowed, mut retry_after) = (d.allowed, d.retry_after);
    let mut rate = None;
    if let (Some(rates), true) = (rates, d.allowed) {
        let decided = decide_rates(&slots, &rates, &key, cost, &mut held).await?;
        (allowed, retry_after) = (decided.decision.allowed, decided.decision.retry_after);
        in_flight = decided.in_flight.unwrap_or(in_flight);
        rate = Some(decided.decision);
    }
    let named = (resource.as_str(), key.as_slice(), held);
    permit_counts::acquired(shared, (&slots, name), named, cost, (&d, expires_in));
    let token = held.map(|id| shared.permit_key.issue(Kind::Permit, &resource, &key, id.0));
    let either = |f: fn(&tollgate::Decision) -> bool| f(&d) || rate.as_ref().is_some_and(f);
    let answer = Acquired {
        allowed,
        expires_ms: expires_ms.filter(|_| token.is_some()),
        permit: token,
        in_flight,
        limit: d.limit,
        retry_after_ms: retry_after.map(ceil_millis),
        policy: name,
        fail_open: either(|d| d.fail_open),
        fallback: either(|d| d.fallback),
        shadow_denied: either(|d| d.shadow_denied),
        listed: d.listed.map(tollgate::Listed::name),
        rate: rate.as_ref().map(RateFigures::of),
    };
    Ok(json_response(StatusCode::OK, &answer))
}

/// The rates' decision of a request whose permit was admitted, and the
/// units in flight once a denied request's permit is released.
struct RatesDecided {
    decision: tollgate::Decision,
    /// After the release of a denied request's permit.
    in_flight: Option<u64>,
}

/// Decides the rates of a resource that combines them with the
/// concurrency limit of `slots`, for a request admitted a permit (`held`,
/// `None` when its admission holds nothing): a request needs both, so a
/// denial by the rates, or their failure, releases the permit at once
/// (by its identifier: a release is idempotent) and takes it from `held`.
async fn decide_rates(
    slots: &Limiter<AnyBackend>,
    rates: &Limiter<AnyBackend>,
    key: &[u8],
    cost: u64,
    held: &mut Option<tollgate::strategy::permits::PermitId>,
) -> Result<RatesDecided, ApiError> {
    let decided = rates.allow_n(key, cost).await;
    if decided.as_ref().is_ok_and(|d| d.allowed) {
        return Ok(RatesDecided {
            decision: decided.map_err(|err| ApiError::backend(&err))?,
            in_flight: None,
        });
    }
    let in_flight = match held.take() {
        // A release that fails leaves the permit to expire at its ttl.
        Some(id) => slots.release_permit(key, id).await.ok().map(|r| r.in_flight()),
        None => None,
    };
    Ok(RatesDecided {
        decision: decided.map_err(|err| ApiError::backend(&err))?,
        in_flight,
    })
}

/// The rates' figures in `/v1/acquire`'s answer, for a resource that
/// combines them with its concurrency limit (the decision of its rate
/// limits, as `/v1/decide` answers them).
#[derive(Serialize)]
struct RateFigures {
    allowed: bool,
    limit: u64,
    remaining: u64,
    reset_ms: u64,
    retry_after_ms: Option<u64>,
    /// The index of the rate limit that bound the decision.
    bound_by: usize,
}

impl RateFigures {
    fn of(d: &tollgate::Decision) -> Self {
        Self {
            allowed: d.allowed,
            limit: d.limit,
            remaining: d.remaining,
            reset_ms: ceil_millis(d.reset),
            retry_after_ms: d.retry_after.map(ceil_millis),
            bound_by: d.bound_by,
        }
    }
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
    let (rates, in_flight) = policies.limiters_of(&resource);
    let limiter = in_flight.unwrap_or(rates);
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
