//! What both example servers share: the policies, the key and the
//! environment variables.

use std::net::SocketAddr;
use std::time::Duration;

use tollgate::{Policy, ResourceLimiter, Strategy};
use tollgate_http::{ClientIp, HeaderMode, KeyExtractor};

/// One policy per route template: `GET /` allows 5 requests per 10
/// seconds per client; every other route 60 per minute.
pub fn limiter() -> Result<ResourceLimiter, tollgate::Error> {
    ResourceLimiter::builder()
        .default_policy(Policy::new(Strategy::SlidingWindow, 60, Duration::from_secs(60))?)
        .resource(
            "/",
            Policy::new(Strategy::FixedWindow, 5, Duration::from_secs(10))?,
        )
        .build()
}

/// `TOLLGATE_ADDR`, or 127.0.0.1:3000.
pub fn addr() -> SocketAddr {
    std::env::var("TOLLGATE_ADDR")
        .ok()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 3000)))
}

/// `TOLLGATE_HEADERS`: `ratelimit` (the default), `ietf`, `legacy` or `off`.
pub fn header_mode() -> HeaderMode {
    match std::env::var("TOLLGATE_HEADERS").as_deref() {
        Ok("ietf") => HeaderMode::IetfDraft,
        Ok("legacy") => HeaderMode::Legacy,
        Ok("off") => HeaderMode::Off,
        _ => HeaderMode::RateLimit,
    }
}

/// The client address: the peer's, or, with `TOLLGATE_TRUSTED_PROXIES`
/// (comma-separated networks such as `127.0.0.1/32`), the one those proxies
/// pass on in `X-Forwarded-For`.
pub fn key() -> Result<KeyExtractor, Box<dyn std::error::Error>> {
    let client_ip = match std::env::var("TOLLGATE_TRUSTED_PROXIES") {
        Ok(nets) => ClientIp::new().trust_all(nets.split(','))?,
        Err(_) => ClientIp::new(),
    };
    Ok(KeyExtractor::client_ip(client_ip))
}
