//! Headers and replies in actix-web's own `http` types.

use actix_web::dev::ServiceResponse;
use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::HttpResponse;

use crate::engine::Engine;
use crate::headers::{FieldValue, RateHeaders};
use crate::reply::Reply;
use crate::response_cost::Charge;
use tollgate::backend::Backend;

/// Sets the rate-limit headers on an actix-web header map.
pub(super) fn write_headers(headers: RateHeaders, map: &mut HeaderMap) {
    if headers == RateHeaders::None {
        return;
    }
    for (field, value) in headers.into_fields() {
        let value = match value {
            FieldValue::Int(n) => HeaderValue::from(n),
            FieldValue::Text(text) => match HeaderValue::from_bytes(&text) {
                Ok(value) => value,
                Err(_) => continue,
            },
        };
        map.insert(HeaderName::from_static(field.name()), value);
    }
}

/// An actix-web response for a reply (actix-web uses its own `http` types).
pub(super) fn to_response(reply: Reply) -> HttpResponse {
    let (status, headers, body) = reply.into_parts();
    let status = StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::with_body(status, body);
    let map = response.headers_mut();
    for (name, value) in &headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_str().as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) {
            map.append(name, value);
        }
    }
    response.map_into_boxed_body()
}

/// Settles the charge of an admitted request from its response, and removes
/// the cost header when configured.
pub(super) async fn settle<B: Backend, Body>(
    engine: &Engine<B>,
    charge: Option<&Charge>,
    response: &mut ServiceResponse<Body>,
) {
    let status = response.status().as_u16();
    let headers = response.headers_mut();
    let (op, remove) = engine.settlement(charge, status, |name| {
        headers.get_all(name).map(HeaderValue::as_bytes)
    });
    if let Some(name) = remove {
        headers.remove(name);
    }
    if let (Some(charge), Some(op)) = (charge, op) {
        engine.settle(charge, op).await;
    }
}
