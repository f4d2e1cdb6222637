//! An actix-web server limited per client address, with a policy per route.
//!
//! ```sh
//! cargo run -p tollgate-http --example actix_server
//! curl -i http://127.0.0.1:3000/
//! ```
//!
//! The same application, policies and environment variables as the
//! `axum_server` example: `GET /` allows 5 requests per 10 seconds per
//! client; `/users/{id}` and `/report` bursts of 10 per second and 60 per
//! minute, and a report costs 5. A variable set to a value that
//! cannot be used ends the program with status 2 and a message naming it.

#[path = "support/mod.rs"]
mod support;

use actix_web::{web, App, HttpServer};
use tollgate_http::RateLimit;

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let settings = support::Settings::from_env_or_exit();
    let middleware = RateLimit::new(support::limiters()?)
        .key(settings.key)
        .headers(settings.headers)
        .cost_fn(support::cost)
        .actix();
    let server = HttpServer::new(move || {
        App::new()
            .wrap(middleware.clone())
            .route("/", web::get().to(|| async { "hello\n" }))
            .route(
                "/users/{id}",
                web::get().to(|id: web::Path<u64>| async move { format!("user {id}\n") }),
            )
            .route("/report", web::get().to(|| async { "a report\n" }))
    })
    .bind(settings.addr)
    .map_err(|e| format!("cannot listen on {}: {e}", settings.addr))?;
    for addr in server.addrs() {
        println!("listening on http://{addr}");
    }
    server.run().await?;
    Ok(())
}
