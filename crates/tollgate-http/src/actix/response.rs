//! Headers and replies in actix-web's own `http` types.

use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::HttpResponse;

use crate::headers::{FieldValue, RateHeaders};
use crate::reply::Reply;

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
