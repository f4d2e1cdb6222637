//! The HTTP API on one listener (HTTP/1.1 and h2c): decisions, the auth
//! endpoint for proxies, health, metrics and the admin routes.

pub(crate) mod admin;
pub(crate) mod auth;
pub(crate) mod decide;
pub(crate) mod error;
pub(crate) mod guard;
pub(crate) mod health;
pub(crate) mod holds;
pub(crate) mod operations;
pub(crate) mod permit_counts;
pub(crate) mod permits;
pub(crate) mod request_calendars;
pub(crate) mod reservations;
pub(crate) mod top;
pub(crate) mod ui;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;

use crate::shared::Shared;

/// Every route of the HTTP listener.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(
            "/v1/decide",
            post(decide::handler).route_layer(middleware::from_fn_with_state(
                (shared.clone(), guard::Route::Decide),
                guard::check,
            )),
        )
        .route(
            "/v1/cancel",
            post(reservations::cancel).route_layer(middleware::from_fn_with_state(
                (shared.clone(), guard::Route::Decide),
                guard::check,
            )),
        )
        .route(
            "/v1/settle",
            post(holds::settle).route_layer(middleware::from_fn_with_state(
                (shared.clone(), guard::Route::Decide),
                guard::check,
            )),
        )
        .route(
            "/v1/acquire",
            post(permits::acquire).route_layer(middleware::from_fn_with_state(
                (shared.clone(), guard::Route::Decide),
                guard::check,
            )),
        )
        .route(
            "/v1/release",
            post(permits::release).route_layer(middleware::from_fn_with_state(
                (shared.clone(), guard::Route::Decide),
                guard::check,
            )),
        )
        .route(
            "/v1/extend",
            post(permits::extend).route_layer(middleware::from_fn_with_state(
                (shared.clone(), guard::Route::Decide),
                guard::check,
            )),
        )
        .route(
            "/ui",
            get(ui::page).route_layer(middleware::from_fn_with_state(
                (shared.clone(), guard::Route::Page),
                guard::check,
            )),
        )
        .route("/v1/auth", get(auth::handler))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .merge(admin::router(shared.clone()))
        .layer(middleware::from_fn(count))
        .with_state(shared)
}

/// Counts each request and times it, per route and status:
/// `tollgate_server_requests_total` and
/// `tollgate_server_request_duration_seconds`, labelled `endpoint` (the
/// route, `other` for unknown paths) and `status`.
async fn count(request: Request, next: Next) -> Response {
    let endpoint = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "other".to_owned(), |p| p.as_str().to_owned());
    let started = Instant::now();
    let response = next.run(request).await;
    crate::metrics::request_done("http", endpoint, response.status().as_u16(), started);
    response
}
