//! `GET /ui`: one self-contained page for operators (no external scripts,
//! fonts or styles: the service may run without internet). It shows, per
//! policy, decisions per second admitted, denied and shadow-denied over the
//! last minutes, the most denied keys with what they have left, the
//! effective policies and the store's state, and refreshes itself every two
//! seconds.
//!
//! The page itself holds no data: it reads `/metrics` and `/readyz` and the
//! admin routes `/v1/policies` and `/v1/top` from the browser, sending the
//! admin token when the service has one (the page asks for it and keeps it
//! in the tab's session storage). So the page gets the browser checks of
//! the admin routes (Host, Origin, `Sec-Fetch-Site`: a page of another site
//! can neither frame nor fetch it) but not the token, which a browser
//! cannot send when it follows a link; the data stays behind the token.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// The page, built into the binary.
const PAGE: &str = include_str!("ui.html");

/// What the page may load and run: its own inline script and style, and
/// requests to the service itself; nothing may frame it.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// `GET /ui`.
pub(crate) async fn page() -> Response {
    let mut response = (StatusCode::OK, PAGE).into_response();
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_nothing_from_elsewhere() {
        // The SVG namespace is a name, not a place the page loads from.
        let page = PAGE.replace("\"http://www.w3.org/2000/svg\"", "");
        for outside in ["http://", "https://", "//cdn", "@import", "<link", "src="] {
            assert!(!page.contains(outside), "the page names {outside:?}");
        }
        // Keys are untrusted: the page never writes markup from data.
        assert!(!PAGE.contains("innerHTML") && !PAGE.contains("insertAdjacentHTML"));
    }
}
