//! What keeps web pages away from the routes that change or reveal state:
//! the admin routes, `/v1/decide` and the operators' page `/ui`.
//!
//! A listener on loopback is reachable from every browser on the host, and
//! a page can send requests to it in two ways that the browser does not
//! stop:
//!
//! - **Cross-site requests.** A `POST` with a "simple" content type such
//!   as `text/plain` goes out without a CORS preflight; the page cannot
//!   read the answer, but the request has done its work. So these routes
//!   read only `application/json` bodies (`415` otherwise), which a page
//!   can send cross-site only after a preflight that this service never
//!   answers, and they refuse a request whose `Origin` is not the
//!   service's own (or, without `Origin`, whose `Sec-Fetch-Site` says it
//!   came from another site): `403`.
//! - **DNS rebinding.** A page on `evil.example` whose name then resolves
//!   to 127.0.0.1 is, to the browser, same-origin with the service, and
//!   can read its answers. Its requests carry `Host: evil.example`, so a
//!   token-less loopback listener answers these routes only for a `Host`
//!   that is a loopback address or `localhost`: `421` otherwise. With an
//!   admin token the page cannot authenticate, and any `Host` is accepted
//!   (a service behind a proxy is reached under its public name).
//!
//! `/v1/auth` has none of these checks: proxies forward whatever `Host`
//! they were asked for, and browsers reach it only through the proxy.
//! The admin token, when configured, is checked after them
//! ([`bearer_token`]).

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use crate::http::error::ApiError;
use crate::shared::{AdminAccess, Shared};

/// Which check a route gets beyond the browser checks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Route {
    /// `/v1/decide`: open to any client that is not a web page.
    Decide,
    /// An admin route: the token too, when one is configured.
    Admin,
    /// The operators' page (`/ui`): it holds no data (its data comes from
    /// admin routes, with the token), so it gets the browser checks only.
    Page,
}

/// The middleware of the routes of `route`'s kind.
pub(crate) async fn check(
    State((shared, route)): State<(Arc<Shared>, Route)>,
    request: Request,
    next: Next,
) -> Response {
    match refusal(&shared.admin, route, &request) {
        Some(refused) => refused,
        None => next.run(request).await,
    }
}

/// Why `request` is refused, as the answer; `None` when it may go on.
fn refusal(admin: &AdminAccess, route: Route, request: &Request) -> Option<Response> {
    let headers = request.headers();
    let host = authority(request);
    if route == Route::Admin && matches!(admin, AdminAccess::Off) {
        return Some(
            ApiError::new(
                StatusCode::NOT_FOUND,
                "the admin routes are turned off on this service (--no-admin); give it an \
                 --admin-token-file to serve them",
            )
            .into_response(),
        );
    }
    if matches!(admin, AdminAccess::Loopback) && !host.is_some_and(is_loopback_host) {
        return Some(
            ApiError::new(
                StatusCode::MISDIRECTED_REQUEST,
                format!(
                    "this listener answers this route only for a Host that is a loopback address or \
                     localhost, not {}: a web page whose name resolves to this machine must not reach \
                     it (give the service an --admin-token-file to serve it under other names)",
                    host.map_or_else(|| "a request without one".to_owned(), |h| format!("{h:?}"))
                ),
            )
            .into_response(),
        );
    }
    if let Some(message) = cross_site(headers, host) {
        return Some(ApiError::new(StatusCode::FORBIDDEN, message).into_response());
    }
    if route == Route::Admin {
        if let AdminAccess::Token(token) = admin {
            if !bearer_token(headers).is_some_and(|given| bool::from(given.ct_eq(token))) {
                let mut response = ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "admin routes need `Authorization: Bearer <token>` with the token of --admin-token-file",
                )
                .into_response();
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return Some(response);
            }
        }
    }
    if request.method() == Method::POST && !is_json(headers) {
        return Some(
            ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "the body must be sent as `Content-Type: application/json`, not {}",
                    headers
                        .get(header::CONTENT_TYPE)
                        .map_or_else(|| "without a content type".to_owned(), |v| format!("{v:?}"))
                ),
            )
            .into_response(),
        );
    }
    None
}

/// The request's `host[:port]`: the `Host` header, or the URI's authority
/// (HTTP/2 carries it as `:authority`).
fn authority(request: &Request) -> Option<&str> {
    match request.headers().get(header::HOST) {
        Some(host) => host.to_str().ok(),
        None => request.uri().authority().map(|a| a.as_str()),
    }
}

/// Whether `host` (with or without a port) names this machine in a way no
/// other site's name can: `localhost` or a loopback address.
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let name = strip_port(host);
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let bare = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name);
    bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// `host` without a trailing `:port` (an IPv6 literal keeps its brackets).
fn strip_port(host: &str) -> &str {
    match host.rfind(':') {
        Some(colon)
            if !host[colon..].contains(']') && host[colon + 1..].bytes().all(|b| b.is_ascii_digit()) =>
        {
            // A bare IPv6 address (`::1`) has colons but no brackets: it is
            // not followed by a port.
            if host[..colon].contains(':') && !host.starts_with('[') {
                host
            } else {
                &host[..colon]
            }
        }
        _ => host,
    }
}

/// Why the request comes from another site, if it does: an `Origin` that
/// is not the request's own host, or without `Origin` a `Sec-Fetch-Site`
/// other than `same-origin` or `none` (typed by the user).
fn cross_site(headers: &HeaderMap, host: Option<&str>) -> Option<String> {
    if let Some(origin) = headers.get(header::ORIGIN) {
        let own = origin
            .to_str()
            .ok()
            .and_then(origin_authority)
            .zip(host)
            .is_some_and(|(theirs, ours)| theirs.eq_ignore_ascii_case(ours));
        return (!own).then(|| {
            format!(
                "the request comes from the web page of another origin ({origin:?}); this route \
                 answers only its own origin and clients that are not browsers"
            )
        });
    }
    match headers.get("sec-fetch-site").map(HeaderValue::as_bytes) {
        None | Some(b"same-origin" | b"none") => None,
        Some(site) => Some(format!(
            "the request comes from a web page of another origin (Sec-Fetch-Site: {}); this route \
             answers only its own origin and clients that are not browsers",
            String::from_utf8_lossy(site)
        )),
    }
}

/// The `host[:port]` of an origin `scheme://host[:port]`; `None` for
/// `null` and anything else that is not an origin.
fn origin_authority(origin: &str) -> Option<&str> {
    let (scheme, rest) = origin.split_once("://")?;
    let scheme_ok = scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https");
    (scheme_ok && !rest.is_empty() && !rest.contains('/')).then_some(rest)
}

/// Whether the body is declared `application/json` (parameters such as
/// `charset` allowed).
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let media_type = value.split(';').next().unwrap_or("").trim();
    media_type.eq_ignore_ascii_case("application/json")
}

/// The credentials of `Authorization: Bearer <token>`; the scheme is
/// matched without regard to case (RFC 9110, section 11.1), and one or more
/// spaces may follow it.
pub(crate) fn bearer_token(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") || rest.first() != Some(&b' ') {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_localhost_and_loopback_addresses() {
        for host in [
            "localhost",
            "LOCALHOST:8080",
            "127.0.0.1",
            "127.0.0.1:8080",
            "127.1.2.3:1",
            "[::1]",
            "[::1]:8080",
            "::1",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "10.0.0.1:8080",
            "[::2]:8080",
            "0.0.0.0:8080",
            "",
            ":8080",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }

    #[test]
    fn an_origin_is_own_only_when_its_authority_is_the_host() {
        let check = |origin: Option<&str>, site: Option<&str>| {
            let mut headers = HeaderMap::new();
            if let Some(origin) = origin {
                headers.insert(header::ORIGIN, origin.parse().unwrap());
            }
            if let Some(site) = site {
                headers.insert("sec-fetch-site", site.parse().unwrap());
            }
            cross_site(&headers, Some("127.0.0.1:8080")).is_none()
        };
        assert!(check(None, None));
        assert!(check(Some("http://127.0.0.1:8080"), None));
        assert!(check(None, Some("same-origin")));
        assert!(check(None, Some("none")));
        assert!(!check(Some("http://evil.example"), None));
        assert!(!check(Some("http://127.0.0.1:9090"), None));
        assert!(!check(Some("null"), None));
        assert!(!check(None, Some("cross-site")));
        assert!(!check(None, Some("same-site")));
        // Origin decides when both are sent.
        assert!(!check(Some("http://evil.example"), Some("same-origin")));
    }

    #[test]
    fn only_json_bodies_are_read() {
        let is = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, value.parse().unwrap());
            is_json(&headers)
        };
        assert!(is("application/json"));
        assert!(is("Application/JSON; charset=utf-8"));
        assert!(!is("text/plain"));
        assert!(!is("application/x-www-form-urlencoded"));
        assert!(!is("multipart/form-data; boundary=x"));
        assert!(!is("application/jsonp"));
        assert!(!is_json(&HeaderMap::new()));
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        let token = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, value.parse().unwrap());
            bearer_token(&headers).map(<[u8]>::to_vec)
        };
        for value in [
            "Bearer s3cret",
            "bearer s3cret",
            "BEARER s3cret",
            "bEaReR   s3cret",
        ] {
            assert_eq!(token(value).as_deref(), Some(&b"s3cret"[..]), "{value}");
        }
        for value in [
            "Basic s3cret",
            "Bearers3cret",
            "Bearer",
            "Bearer ",
            "Token s3cret",
        ] {
            assert_eq!(token(value), None, "{value}");
        }
    }
}
