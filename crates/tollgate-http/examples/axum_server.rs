//! An axum server limited per client address, with a policy per route.
//!
//! ```sh
//! cargo run -p tollgate-http --example axum_server
//! curl -i http://127.0.0.1:3000/
//! ```
//!
//! `GET /` allows 5 requests per 10 seconds per client; `/users/{id}` and
//! `/report` bursts of 10 per second and 60 per minute (the route
//! template, not the path, selects the policy: `/users/1` and `/users/2`
//! share a budget), and a report costs 5 of them. Environment: `TOLLGATE_ADDR` (default
//! 127.0.0.1:3000), `TOLLGATE_HEADERS` (`ratelimit`, `ietf`, `legacy`,
//! `off`), `TOLLGATE_TRUSTED_PROXIES` (e.g. `127.0.0.1/32`). A variable set
//! to a value that cannot be used ends the program with status 2 and a
//! message naming it.

#[path = "support/mod.rs"]
mod support;

use std::net::SocketAddr;

use axum::extract::Path;
use axum::routing::get;
use axum::Router;
use tollgate_http::RateLimit;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let settings = support::Settings::from_env_or_exit();
    let rate_limit = RateLimit::new(support::limiters()?)
        .key(settings.key)
        .headers(settings.headers)
        .cost_fn(support::cost);
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .route(
            "/users/{id}",
            get(|Path(id): Path<u64>| async move { format!("user {id}\n") }),
        )
        .route("/report", get(|| async { "a report\n" }))
        // `Router::layer` runs after routing: the limiter sees `/users/{id}`.
        .layer(rate_limit.layer());

    let listener = tokio::net::TcpListener::bind(settings.addr)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", settings.addr))?;
    println!("listening on http://{}", listener.local_addr()?);
    // Record each connection's peer address for the key.
    axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
    Ok(())
}
