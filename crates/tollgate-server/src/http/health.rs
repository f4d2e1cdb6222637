//! `/healthz` (the process answers), `/readyz` (the store answers) and
//! `/metrics` (Prometheus text).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::http::error::json_response;
use crate::shared::Shared;

/// How long `/readyz` waits for the store.
pub const READY_TIMEOUT: Duration = Duration::from_secs(1);

/// `GET /healthz`: 200 while the process serves requests.
pub(crate) async fn healthz() -> Response {
    json_response(StatusCode::OK, &serde_json::json!({ "status": "ok" }))
}

#[derive(Serialize)]
struct Ready {
    ready: bool,
    storage: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// `GET /readyz`: 200 when decisions can be made. In memory, always; on
/// Redis, when a decision that charges nothing (a peek, one script call
/// through the backend) answers within [`READY_TIMEOUT`] and was made by
/// the store, not by a fail-open or fallback path.
pub(crate) async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    let config = shared.config.current();
    let storage = config.storage().to_string();
    let error = if shared.draining.load(std::sync::atomic::Ordering::SeqCst) {
        Some("the service is stopping".to_owned())
    } else if config.in_memory() {
        None
    } else {
        match config.probe() {
            None => None,
            Some(limiter) => {
                match tokio::time::timeout(READY_TIMEOUT, limiter.allow_n("tollgate-server:readyz", 0)).await
                {
                    Err(_) => Some(format!("the store did not answer within {READY_TIMEOUT:?}")),
                    Ok(Err(err)) => Some(err.to_string()),
                    Ok(Ok(d)) if d.fail_open || d.fallback => {
                        Some("the store failed; decisions are made without it".to_owned())
                    }
                    Ok(Ok(_)) => None,
                }
            }
        }
    };
    let status = if error.is_none() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let ready = Ready {
        ready: error.is_none(),
        storage,
        error,
    };
    json_response(status, &ready)
}

/// `GET /metrics`: every metric recorded in this process, in Prometheus'
/// text format.
pub(crate) async fn metrics(State(shared): State<Arc<Shared>>) -> Response {
    match &shared.metrics {
        Some(handle) => {
            in_flight_now(&shared);
            let mut response = handle.render().into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            response
        }
        None => json_response(
            StatusCode::NOT_FOUND,
            &serde_json::json!({
                "error": "another metrics recorder was installed in this process; it exports the metrics",
                "field": null,
            }),
        ),
    }
}

/// Brings the in-flight gauge up to now: the permits expired since are
/// dropped, and every concurrency policy of the configuration is exported
/// (at 0 before its first permit).
fn in_flight_now(shared: &Shared) {
    shared.in_flight.sweep();
    let config = shared.config.load();
    let Some(policies) = config.policies() else {
        return;
    };
    let concurrency = |limiter: &tollgate::Limiter<_>| {
        limiter
            .policy()
            .limits()
            .iter()
            .any(|l| l.strategy() == tollgate::Strategy::Concurrency)
    };
    if concurrency(&policies.limiter("")) {
        shared.in_flight.register(tollgate::Limiters::DEFAULT_POLICY_NAME);
    }
    for (name, limiter) in policies.resources() {
        if concurrency(&limiter) {
            shared.in_flight.register(&name);
        }
    }
}
