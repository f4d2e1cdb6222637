//! Responses sent instead of calling the service, and the defaults for a
//! denial, a backend failure and a missing key.

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, StatusCode};

use crate::headers::ceil_secs;
use crate::key_error::KeyErrorKind;
use crate::reply_context::{CostRejected, Denied, Failure, KeyRejected, ReplyFormat};

/// When a request is answered the gRPC way (HTTP 200 with a `grpc-status`
/// header) instead of with an HTTP status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GrpcMode {
    /// When its content type is `application/grpc` or `application/grpc+...`
    /// (the default).
    #[default]
    Detect,
    /// Always (a service that only serves gRPC).
    Always,
    /// Never.
    Never,
}

/// gRPC status codes used by the default replies.
mod grpc_code {
    pub(crate) const INVALID_ARGUMENT: u32 = 3;
    pub(crate) const RESOURCE_EXHAUSTED: u32 = 8;
    pub(crate) const INTERNAL: u32 = 13;
    pub(crate) const UNAVAILABLE: u32 = 14;
}

/// A header name or value that HTTP does not allow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidHeader(pub String);

impl std::fmt::Display for InvalidHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid header: {}", self.0)
    }
}

impl std::error::Error for InvalidHeader {}

/// A complete response: status, headers and a body. Framework-neutral, so
/// one handler serves tower and actix-web alike.
#[derive(Clone, Debug)]
pub struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    /// An empty response with `status`.
    pub fn new(status: StatusCode) -> Self {
        Self {
            status,
            headers: HeaderMap::new(),
            body: Bytes::new(),
        }
    }

    /// A `text/plain; charset=utf-8` response.
    pub fn text(status: StatusCode, body: impl Into<Bytes>) -> Self {
        Self::new(status)
            .with_header(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            )
            .with_body(body)
    }

    /// An RFC 9457 `application/problem+json` response:
    /// `{"type":"about:blank","title":...,"status":...,"detail":...}`.
    pub fn problem_json(status: StatusCode, detail: &str) -> Self {
        let title = status.canonical_reason().unwrap_or("Error");
        let mut body = String::with_capacity(96 + detail.len());
        body.push_str(r#"{"type":"about:blank","title":"#);
        json_string(&mut body, title);
        body.push_str(r#","status":"#);
        body.push_str(status.as_str());
        body.push_str(r#","detail":"#);
        json_string(&mut body, detail);
        body.push('}');
        Self::new(status)
            .with_header(CONTENT_TYPE, HeaderValue::from_static("application/problem+json"))
            .with_body(body)
    }

    /// A gRPC "trailers-only" response: HTTP 200, `content-type:
    /// application/grpc`, `grpc-status: code` and a percent-encoded
    /// `grpc-message`, with no body.
    pub fn grpc(code: u32, message: &str) -> Self {
        let mut reply = Self::new(StatusCode::OK)
            .with_header(CONTENT_TYPE, HeaderValue::from_static("application/grpc"))
            .with_header(HeaderName::from_static("grpc-status"), HeaderValue::from(code));
        if let Ok(value) = HeaderValue::try_from(percent_encode(message)) {
            reply = reply.with_header(HeaderName::from_static("grpc-message"), value);
        }
        reply
    }

    /// Sets header `name` to `value`, replacing earlier values.
    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.insert(name, value);
        self
    }

    /// Sets header `name` to `value` given as text.
    ///
    /// # Errors
    ///
    /// [`InvalidHeader`] when either is not allowed in HTTP.
    pub fn try_with_header(self, name: &str, value: &str) -> Result<Self, InvalidHeader> {
        let name =
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| InvalidHeader(format!("name {name:?}")))?;
        let value = HeaderValue::from_str(value).map_err(|_| InvalidHeader(format!("value {value:?}")))?;
        Ok(self.with_header(name, value))
    }

    /// Replaces the body.
    pub fn with_body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The headers, to change.
    pub fn headers_mut(&mut self) -> &mut HeaderMap {
        &mut self.headers
    }

    /// The body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The parts: status, headers, body.
    pub fn into_parts(self) -> (StatusCode, HeaderMap, Bytes) {
        (self.status, self.headers, self.body)
    }

    /// The default reply to a denied request: 429 with a short text or
    /// problem+json body, or gRPC `RESOURCE_EXHAUSTED`. The middleware adds
    /// the rate-limit headers and `Retry-After` to whatever the denial
    /// handler returns; `Retry-After` only when there is a delay after which
    /// the request would be admitted (none when its cost exceeds a limit of
    /// the policy: waiting does not help).
    pub fn for_denied(denied: &Denied<'_>) -> Self {
        let detail = match denied.why.retry_after {
            Some(retry) => format!("rate limit exceeded; retry after {} s", ceil_secs(retry)),
            None => {
                "rate limit exceeded; the request costs more than the limit allows and can never be admitted"
                    .to_owned()
            }
        };
        Self::default_reply(
            denied.grpc,
            denied.format,
            StatusCode::TOO_MANY_REQUESTS,
            grpc_code::RESOURCE_EXHAUSTED,
            &detail,
        )
    }

    /// The default reply when the limiter's backend failed under
    /// fail-closed: 503 (or gRPC `UNAVAILABLE`), without rate-limit headers.
    pub fn for_failure(failure: &Failure<'_>) -> Self {
        Self::default_reply(
            failure.grpc,
            failure.format,
            StatusCode::SERVICE_UNAVAILABLE,
            grpc_code::UNAVAILABLE,
            "rate limiter unavailable",
        )
    }

    /// The default reply when a request has no key and
    /// [`MissingKey::Reject`](crate::MissingKey::Reject) applies: 400 (gRPC
    /// `INVALID_ARGUMENT`) naming what is missing, or 500 (gRPC `INTERNAL`)
    /// when the server did not record the peer address.
    pub fn for_key_error(rejected: &KeyRejected<'_>) -> Self {
        let (status, code) = match rejected.why.kind() {
            KeyErrorKind::NoPeerAddress => (StatusCode::INTERNAL_SERVER_ERROR, grpc_code::INTERNAL),
            _ => (StatusCode::BAD_REQUEST, grpc_code::INVALID_ARGUMENT),
        };
        Self::default_reply(
            rejected.grpc,
            rejected.format,
            status,
            code,
            rejected.why.message(),
        )
    }

    /// The default reply when a request's cost cannot be taken from it (see
    /// [`CostError`](crate::CostError)): 400 (gRPC `INVALID_ARGUMENT`) with
    /// the error's message.
    pub fn for_cost_error(rejected: &CostRejected<'_>) -> Self {
        Self::default_reply(
            rejected.grpc,
            rejected.format,
            StatusCode::BAD_REQUEST,
            grpc_code::INVALID_ARGUMENT,
            rejected.why.message(),
        )
    }

    fn default_reply(grpc: bool, format: ReplyFormat, status: StatusCode, code: u32, detail: &str) -> Self {
        if grpc {
            return Self::grpc(code, detail);
        }
        match format {
            ReplyFormat::PlainText => Self::text(status, format!("{detail}\n")),
            ReplyFormat::ProblemJson => Self::problem_json(status, detail),
        }
    }
}

/// Appends `s` as a JSON string literal.
fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// gRPC's percent-encoding of `grpc-message`: bytes outside printable ASCII,
/// and `%`, as `%XX`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_json_escapes_its_strings() {
        let reply = Reply::problem_json(StatusCode::TOO_MANY_REQUESTS, "say \"hi\"\\\n");
        assert_eq!(
            reply.body(),
            r#"{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"say \"hi\"\\\u000a"}"#
        );
        assert_eq!(reply.headers()[CONTENT_TYPE], "application/problem+json");
    }

    #[test]
    fn grpc_replies_are_trailers_only() {
        let reply = Reply::grpc(8, "too many: 100%, ü");
        assert_eq!(reply.status(), StatusCode::OK);
        assert_eq!(reply.headers()["grpc-status"], "8");
        assert_eq!(reply.headers()["grpc-message"], "too many: 100%25, %C3%BC");
        assert!(reply.body().is_empty());
    }

    #[test]
    fn text_headers_are_validated() {
        assert!(Reply::new(StatusCode::OK).try_with_header("x-ok", "fine").is_ok());
        assert!(Reply::new(StatusCode::OK)
            .try_with_header("bad name", "v")
            .is_err());
        assert!(Reply::new(StatusCode::OK)
            .try_with_header("x", "line\nbreak")
            .is_err());
    }
}
