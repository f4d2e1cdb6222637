//! Estimates settled by usage over JSON: `POST /v1/settle` `{"hold",
//! "used"}` settles once, with the usage, a hold that `POST /v1/decide`
//! with `"settle": true` answered ([`decide::hold`](crate::http::decide))
//! (SEMANTICS.md, "Estimates settled").

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use tollgate::strategy::holds::HoldId;

use crate::http::decide::{ceil_millis, object, policies, read_body, whole_number};
use crate::http::error::{json_response, ApiError};
use crate::permit_token::{Issued, Kind};
use crate::shared::Shared;

/// The answer of `/v1/settle`.
#[derive(Serialize)]
struct SettledBody<'a> {
    /// Whether the hold was settled now: `false` when it was settled
    /// before, its window has passed, or it holds nothing (nothing changed).
    settled: bool,
    /// The usage charged in place of the estimate; `null` when not settled.
    charged: Option<u64>,
    limit: u64,
    remaining: u64,
    reset_ms: u64,
    retry_after_ms: Option<u64>,
    /// The resource whose policy holds it, or `default`.
    policy: &'a str,
}

/// `POST /v1/settle`.
pub(crate) async fn settle(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Body) -> Response {
    run_settle(&shared, &headers, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn run_settle(shared: &Shared, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let bytes = read_body(headers, body).await?;
    let fields = object(&bytes, &["hold", "used"], r#"{"hold": "0148…", "used": 1200}"#)?;
    let token = match fields.get("hold") {
        Some(Value::String(token)) => token,
        None | Some(Value::Null) => {
            return Err(ApiError::field(
                "hold",
                "is required: the `hold` string a decision with \"settle\": true answered",
            ))
        }
        Some(_) => return Err(ApiError::field("hold", "must be a string")),
    };
    let used = whole_number(&fields, "used", "a usage", tollgate::Policy::MAX_LIMIT, |n| {
        if n > tollgate::Policy::MAX_LIMIT {
            Err(format!("{n} is above 2^62, the largest usage"))
        } else {
            Ok(n)
        }
    })?
    .ok_or_else(|| ApiError::field("used", "is required: the units the request used"))?;
    let Issued { resource, key, id } = shared
        .permit_key
        .read(Kind::Hold, token)
        .map_err(|reason| ApiError::field("hold", reason))?;
    let config = shared.config.load();
    let policies = policies(&config)?;
    let limiter = policies.limiter(&resource);
    let (name, _) = policies.named_policy(&resource);
    let settled = limiter
        .settle(&key, HoldId(id), used)
        .await
        .map_err(|err| ApiError::backend(&err))?;
    let d = settled.decision;
    let answer = SettledBody {
        settled: settled.settled,
        charged: settled.settled.then_some(used),
        limit: d.limit,
        remaining: d.remaining,
        reset_ms: ceil_millis(d.reset),
        retry_after_ms: d.retry_after.map(ceil_millis),
        policy: name,
    };
    Ok(json_response(StatusCode::OK, &answer))
}
