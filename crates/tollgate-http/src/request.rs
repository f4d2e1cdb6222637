//! A read-only view of a request that looks the same in every framework.

use std::borrow::Cow;
use std::net::SocketAddr;

/// The parts of a request that key and resource extractors read: method,
/// path, headers, peer address, matched route template and extensions.
///
/// The middleware builds one per request from the framework's own request
/// type, so one extractor (including your closures) serves tower and
/// actix-web alike. Everything borrowed from it lives as long as the request.
#[derive(Clone, Copy)]
pub struct RequestInfo<'a> {
    source: Source<'a>,
}

#[derive(Clone, Copy)]
enum Source<'a> {
    #[cfg(feature = "tower")]
    Http(&'a http::request::Parts),
    #[cfg(feature = "actix")]
    Actix(&'a actix_web::dev::ServiceRequest),
}

impl std::fmt::Debug for RequestInfo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestInfo")
            .field("method", &self.method())
            .field("path", &self.path())
            .field("peer_addr", &self.peer_addr())
            .finish_non_exhaustive()
    }
}

impl<'a> RequestInfo<'a> {
    /// A view of an `http` request's head (tower, hyper, axum, tonic).
    #[cfg(feature = "tower")]
    pub fn from_http(parts: &'a http::request::Parts) -> Self {
        Self {
            source: Source::Http(parts),
        }
    }

    /// A view of an actix-web request.
    #[cfg(feature = "actix")]
    pub fn from_actix(req: &'a actix_web::dev::ServiceRequest) -> Self {
        Self {
            source: Source::Actix(req),
        }
    }

    /// The method, e.g. `GET`.
    pub fn method(&self) -> &'a str {
        match self.source {
            #[cfg(feature = "tower")]
            Source::Http(parts) => parts.method.as_str(),
            #[cfg(feature = "actix")]
            Source::Actix(req) => req.method().as_str(),
        }
    }

    /// The path, without the query.
    pub fn path(&self) -> &'a str {
        match self.source {
            #[cfg(feature = "tower")]
            Source::Http(parts) => parts.uri.path(),
            #[cfg(feature = "actix")]
            Source::Actix(req) => req.path(),
        }
    }

    /// The first value of header `name` (case-insensitive), as bytes.
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.header_values(name).next()
    }

    /// The first value of header `name` when it is visible ASCII.
    pub fn header_str(&self, name: &str) -> Option<&'a str> {
        match self.source {
            #[cfg(feature = "tower")]
            Source::Http(parts) => parts.headers.get(name)?.to_str().ok(),
            #[cfg(feature = "actix")]
            Source::Actix(req) => req.headers().get(name)?.to_str().ok(),
        }
    }

    /// Every value of header `name`, in the order the lines were received.
    pub fn header_values(&self, name: &str) -> HeaderValues<'a> {
        match self.source {
            #[cfg(feature = "tower")]
            Source::Http(parts) => HeaderValues {
                inner: HeaderValuesInner::Http(parts.headers.get_all(name).iter()),
            },
            #[cfg(feature = "actix")]
            Source::Actix(req) => HeaderValues {
                inner: HeaderValuesInner::Actix(req.headers().get_all(name)),
            },
        }
    }

    /// The address of the connection's other end, when the server recorded
    /// it: actix-web always does; for tower, a `PeerAddr`
    /// extension, axum's `ConnectInfo<SocketAddr>` (feature `axum`) or
    /// tonic's `TcpConnectInfo` (feature `tonic`).
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        match self.source {
            #[cfg(feature = "tower")]
            Source::Http(parts) => crate::tower::peer_addr(&parts.extensions),
            #[cfg(feature = "actix")]
            Source::Actix(req) => req.peer_addr(),
        }
    }

    /// The route template that matched, such as `/users/{id}`: axum's
    /// `MatchedPath` (feature `axum`; the layer must be added with
    /// `Router::layer` or `route_layer` so that routing has run) or
    /// actix-web's `match_pattern()`. `None` when no route matched.
    pub fn route(&self) -> Option<Cow<'a, str>> {
        match self.source {
            #[cfg(feature = "tower")]
            Source::Http(parts) => crate::tower::matched_path(&parts.extensions).map(Cow::Borrowed),
            #[cfg(feature = "actix")]
            Source::Actix(req) => req.match_pattern().map(Cow::Owned),
        }
    }

    /// A clone of the request extension of type `T`, if any (for example an
    /// authenticated user inserted by an earlier middleware).
    pub fn extension<T: Clone + Send + Sync + 'static>(&self) -> Option<T> {
        match self.source {
            #[cfg(feature = "tower")]
            Source::Http(parts) => parts.extensions.get::<T>().cloned(),
            #[cfg(feature = "actix")]
            Source::Actix(req) => actix_web::HttpMessage::extensions(req).get::<T>().cloned(),
        }
    }

    /// Whether the request is gRPC: its content type is `application/grpc`
    /// or `application/grpc+...`.
    pub fn is_grpc(&self) -> bool {
        let content_type = match self.source {
            #[cfg(feature = "tower")]
            Source::Http(parts) => parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .map(|v| v.as_bytes()),
            #[cfg(feature = "actix")]
            Source::Actix(req) => req
                .headers()
                .get(actix_web::http::header::CONTENT_TYPE)
                .map(|v| v.as_bytes()),
        };
        content_type.is_some_and(|ct| {
            ct.strip_prefix(b"application/grpc")
                .is_some_and(|rest| rest.is_empty() || rest[0] == b'+' || rest[0] == b';')
        })
    }
}

/// The values of one header, from [`RequestInfo::header_values`].
pub struct HeaderValues<'a> {
    inner: HeaderValuesInner<'a>,
}

enum HeaderValuesInner<'a> {
    #[cfg(feature = "tower")]
    Http(http::header::ValueIter<'a, http::HeaderValue>),
    #[cfg(feature = "actix")]
    Actix(std::slice::Iter<'a, actix_web::http::header::HeaderValue>),
}

impl std::fmt::Debug for HeaderValues<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeaderValues").finish_non_exhaustive()
    }
}

impl<'a> Iterator for HeaderValues<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        match &mut self.inner {
            #[cfg(feature = "tower")]
            HeaderValuesInner::Http(iter) => iter.next().map(http::HeaderValue::as_bytes),
            #[cfg(feature = "actix")]
            HeaderValuesInner::Actix(iter) => iter.next().map(|v| v.as_bytes()),
        }
    }
}

impl DoubleEndedIterator for HeaderValues<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            #[cfg(feature = "tower")]
            HeaderValuesInner::Http(iter) => iter.next_back().map(http::HeaderValue::as_bytes),
            #[cfg(feature = "actix")]
            HeaderValuesInner::Actix(iter) => iter.next_back().map(|v| v.as_bytes()),
        }
    }
}
