//! A read-only view of a request that looks the same in every framework.
//!
//! Each framework module implements [`RequestSource`] for its own request
//! type; nothing here knows a framework.

use std::borrow::Cow;
use std::net::SocketAddr;

/// What a framework's request type tells the middleware. Implemented by
/// each framework module for its own request type.
pub(crate) trait RequestSource {
    /// The method, e.g. `GET`.
    fn method(&self) -> &str;
    /// The path, without the query.
    fn path(&self) -> &str;
    /// The first value of header `name` (case-insensitive).
    fn header(&self, name: &str) -> Option<&[u8]>;
    /// The first `Content-Type` value (asked of every request, so each
    /// framework looks it up by its own constant rather than by text).
    fn content_type(&self) -> Option<&[u8]>;
    /// Every value of header `name`, in the order the lines were received.
    fn header_values<'s>(&'s self, name: &str) -> HeaderValues<'s>;
    /// The address of the connection's other end, when the server recorded
    /// it.
    fn peer_addr(&self) -> Option<SocketAddr>;
    /// The route template that matched, when routing has run.
    fn route(&self) -> Option<Cow<'_, str>>;
    /// The request's extensions.
    fn extensions(&self) -> ExtensionMap<'_>;
}

/// The extensions of a request. A lookup by type cannot pass through a
/// trait object, so the maps are named here: `http`'s, which every
/// framework on `http` 1 shares, and actix-web's own.
pub(crate) enum ExtensionMap<'a> {
    #[cfg(feature = "tower")]
    Http(&'a http::Extensions),
    #[cfg(feature = "actix")]
    Actix(std::cell::Ref<'a, actix_web::dev::Extensions>),
}

/// The parts of a request that key and resource extractors read: method,
/// path, headers, peer address, matched route template and extensions.
///
/// The middleware builds one per request from the framework's own request
/// type, so one extractor (including your closures) serves tower and
/// actix-web alike. Everything borrowed from it lives as long as the request.
#[derive(Clone, Copy)]
pub struct RequestInfo<'a> {
    source: &'a dyn RequestSource,
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
    /// A view of `source`.
    pub(crate) fn new(source: &'a dyn RequestSource) -> Self {
        Self { source }
    }

    /// The method, e.g. `GET`.
    pub fn method(&self) -> &'a str {
        self.source.method()
    }

    /// The path, without the query.
    pub fn path(&self) -> &'a str {
        self.source.path()
    }

    /// The first value of header `name` (case-insensitive), as bytes.
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.source.header(name)
    }

    /// The first value of header `name` when it is visible ASCII (tabs
    /// allowed).
    pub fn header_str(&self, name: &str) -> Option<&'a str> {
        let value = self.header(name)?;
        if value.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b)) {
            std::str::from_utf8(value).ok()
        } else {
            None
        }
    }

    /// Every value of header `name`, in the order the lines were received.
    pub fn header_values(&self, name: &str) -> HeaderValues<'a> {
        self.source.header_values(name)
    }

    /// The address of the connection's other end, when the server recorded
    /// it: actix-web always does; for tower, axum's `ConnectInfo<SocketAddr>`
    /// (feature `axum`), a `PeerAddr` extension, or tonic's `TcpConnectInfo`
    /// (feature `tonic`).
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.source.peer_addr()
    }

    /// The route template that matched, such as `/users/{id}`: axum's
    /// `MatchedPath` (feature `axum`; the layer must be added with
    /// `Router::layer` or `route_layer` so that routing has run) or
    /// actix-web's `match_pattern()`. `None` when no route matched.
    pub fn route(&self) -> Option<Cow<'a, str>> {
        self.source.route()
    }

    /// A clone of the request extension of type `T`, if any (for example an
    /// authenticated user inserted by an earlier middleware).
    pub fn extension<T: Clone + Send + Sync + 'static>(&self) -> Option<T> {
        match self.source.extensions() {
            #[cfg(feature = "tower")]
            ExtensionMap::Http(map) => map.get::<T>().cloned(),
            #[cfg(feature = "actix")]
            ExtensionMap::Actix(map) => map.get::<T>().cloned(),
        }
    }

    /// Whether the request is gRPC: its content type is `application/grpc`
    /// or `application/grpc+...`.
    pub fn is_grpc(&self) -> bool {
        self.source.content_type().is_some_and(|ct| {
            ct.strip_prefix(b"application/grpc")
                .is_some_and(|rest| rest.is_empty() || rest[0] == b'+' || rest[0] == b';')
        })
    }
}

/// Panics unless `name` is a valid header name: a mistake in the
/// configuration, found when the middleware is configured.
pub(crate) fn assert_header_name(name: &str) {
    const TCHAR: &[u8] = b"!#$%&'*+-.^_`|~";
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || TCHAR.contains(&b));
    assert!(valid, "{name:?} is not a valid header name");
}

/// The values of one header, from [`RequestInfo::header_values`].
pub struct HeaderValues<'a> {
    inner: Box<dyn DoubleEndedIterator<Item = &'a [u8]> + 'a>,
}

impl<'a> HeaderValues<'a> {
    /// The values `iter` yields.
    pub(crate) fn new(iter: impl DoubleEndedIterator<Item = &'a [u8]> + 'a) -> Self {
        Self {
            inner: Box::new(iter),
        }
    }
}

impl std::fmt::Debug for HeaderValues<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeaderValues").finish_non_exhaustive()
    }
}

impl<'a> Iterator for HeaderValues<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        self.inner.next()
    }
}

impl DoubleEndedIterator for HeaderValues<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.inner.next_back()
    }
}
