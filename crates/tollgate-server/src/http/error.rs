//! Error answers of the HTTP API: a status and a JSON body
//! `{"error": "...", "field": "cost"}` (`field` is `null` when the problem
//! is not about one field).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// An error answer.
#[derive(Debug, Serialize)]
pub(crate) struct ApiError {
    #[serde(skip)]
    pub(crate) status: StatusCode,
    /// What is wrong, in words.
    pub(crate) error: String,
    /// The request field (or header) at fault.
    pub(crate) field: Option<String>,
}

impl ApiError {
    /// A 400 about `field`.
    pub(crate) fn field(field: &str, error: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            error: error.into(),
            field: Some(field.to_owned()),
        }
    }

    /// An error about the request or the service as a whole.
    pub(crate) fn new(status: StatusCode, error: impl Into<String>) -> Self {
        Self {
            status,
            error: error.into(),
            field: None,
        }
    }

    /// The answer when a limiter's store failed and it fails closed.
    pub(crate) fn backend(err: &tollgate::Error) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no decision: {err}; treat the request as denied"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        json_response(self.status, &self)
    }
}

/// `value` as a JSON response with `status`.
pub(crate) fn json_response(status: StatusCode, value: &impl Serialize) -> Response {
    // Serializing these plain structs cannot fail.
    let body = serde_json::to_vec(value).unwrap_or_default();
    let mut response = (status, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
