//! `GET /v1/auth`: a decision for proxies' subrequests (nginx
//! `auth_request`, Traefik `forwardAuth`, Envoy `ext_authz` over HTTP),
//! taken from headers the proxy sets: `X-Tollgate-Key` (required),
//! `X-Tollgate-Resource` and `X-Tollgate-Cost`.
//!
//! Allowed: `204 No Content` with the `RateLimit-*` headers. Denied: the
//! configured status (429 by default; nginx only treats 401 and 403 as a
//! denial, so give it 403) with the same headers and `Retry-After`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tollgate_http::{write_decision_headers, HeaderMode};

use crate::http::decide::{check_cost, decide};
use crate::http::error::ApiError;
use crate::shared::Shared;

/// The header naming whom the limit applies to.
pub const KEY_HEADER: &str = "x-tollgate-key";
/// The header naming the resource whose policy applies (default policy
/// when absent).
pub const RESOURCE_HEADER: &str = "x-tollgate-resource";
/// The header with the request's cost (1 when absent).
pub const COST_HEADER: &str = "x-tollgate-cost";

/// The handler.
pub(crate) async fn handler(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    match run(&shared, &headers).await {
        Ok(response) => response,
        Err(err) => err.into_response(),
    }
}

/// The value of header `name`, refusing one given more than once (`shown`
/// is the header's name in errors): proxies and caches may keep the first
/// or the last, so a duplicate could be decided as one key and logged as
/// another.
fn single<'h>(headers: &'h HeaderMap, name: &str, shown: &str) -> Result<Option<&'h HeaderValue>, ApiError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(ApiError::field(
            shown,
            "the header is given more than once; the proxy must send it once",
        ));
    }
    Ok(first)
}

async fn run(shared: &Shared, headers: &HeaderMap) -> Result<Response, ApiError> {
    let key = match single(headers, KEY_HEADER, "X-Tollgate-Key")? {
        None => {
            return Err(ApiError::field(
                "X-Tollgate-Key",
                "the header is required: the proxy must send whom the limit applies to, e.g. nginx's \
                 `proxy_set_header X-Tollgate-Key $remote_addr;` in the auth_request location",
            ))
        }
        Some(value) if value.is_empty() => {
            return Err(ApiError::field(
                "X-Tollgate-Key",
                "the header is empty: the proxy sent no key (is the variable it is set from empty?)",
            ))
        }
        Some(value) => value.as_bytes(),
    };
    let resource =
        match single(headers, RESOURCE_HEADER, "X-Tollgate-Resource")? {
            None => None,
            Some(value) => Some(value.to_str().map_err(|_| {
                ApiError::field("X-Tollgate-Resource", "the header is not visible ASCII text")
            })?),
        };
    let cost = match single(headers, COST_HEADER, "X-Tollgate-Cost")? {
        None => 1,
        Some(value) => {
            let n = tollgate_http::parse_cost(value.as_bytes()).map_err(|problem| {
                ApiError::field(
                    "X-Tollgate-Cost",
                    format!(
                        "must be one decimal integer from 0 to {} (digits only); {problem}",
                        tollgate::Policy::MAX_LIMIT
                    ),
                )
            })?;
            check_cost(n).map_err(|e| ApiError::field("X-Tollgate-Cost", e))?
        }
    };
    let config = shared.config.load();
    let decided = decide(&config, resource, (key, cost), (None, None)).await?;
    let status = if decided.decision.allowed {
        StatusCode::NO_CONTENT
    } else {
        shared.auth_deny_status
    };
    let mut response = status.into_response();
    write_decision_headers(
        HeaderMode::RateLimit,
        &decided.decision,
        decided.name,
        &decided.policy,
        response.headers_mut(),
    );
    Ok(response)
}
