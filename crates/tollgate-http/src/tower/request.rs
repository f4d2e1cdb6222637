//! What an `http` request head tells the middleware: headers, the peer
//! address and the matched route from the extensions that hyper, axum and
//! tonic servers record. Read from a whole request as from its parts, so
//! that an admitted request is decided without being taken apart.

use std::borrow::Cow;
use std::net::SocketAddr;

use crate::request::{ExtensionMap, HeaderValues, RequestInfo, RequestSource};

/// The address of a request's peer, as a request extension, for servers
/// that do not record one themselves (such as a hand-written hyper accept
/// loop).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerAddr(pub SocketAddr);

impl<'a> RequestInfo<'a> {
    /// A view of an `http` request's head (tower, hyper, axum, tonic).
    pub fn from_http(parts: &'a http::request::Parts) -> Self {
        Self::new(parts)
    }
}

/// The head of an `http` request, whole or in parts.
pub(crate) trait HttpHead {
    fn method(&self) -> &http::Method;
    fn uri(&self) -> &http::Uri;
    fn headers(&self) -> &http::HeaderMap;
    fn extensions(&self) -> &http::Extensions;
}

impl HttpHead for http::request::Parts {
    fn method(&self) -> &http::Method {
        &self.method
    }

    fn uri(&self) -> &http::Uri {
        &self.uri
    }

    fn headers(&self) -> &http::HeaderMap {
        &self.headers
    }

    fn extensions(&self) -> &http::Extensions {
        &self.extensions
    }
}

impl<B> HttpHead for http::Request<B> {
    fn method(&self) -> &http::Method {
        self.method()
    }

    fn uri(&self) -> &http::Uri {
        self.uri()
    }

    fn headers(&self) -> &http::HeaderMap {
        self.headers()
    }

    fn extensions(&self) -> &http::Extensions {
        self.extensions()
    }
}

impl<T: HttpHead> RequestSource for T {
    fn method(&self) -> &str {
        HttpHead::method(self).as_str()
    }

    fn path(&self) -> &str {
        HttpHead::uri(self).path()
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        HttpHead::headers(self).get(name).map(http::HeaderValue::as_bytes)
    }

    fn content_type(&self) -> Option<&[u8]> {
        HttpHead::headers(self)
            .get(http::header::CONTENT_TYPE)
            .map(http::HeaderValue::as_bytes)
    }

    fn header_values<'s>(&'s self, name: &str) -> HeaderValues<'s> {
        HeaderValues::new(
            HttpHead::headers(self)
                .get_all(name)
                .iter()
                .map(http::HeaderValue::as_bytes),
        )
    }

    /// axum's `ConnectInfo` first, the most common, then a [`PeerAddr`],
    /// then tonic's `TcpConnectInfo`.
    fn peer_addr(&self) -> Option<SocketAddr> {
        #[cfg(feature = "axum")]
        if let Some(info) = HttpHead::extensions(self).get::<axum::extract::ConnectInfo<SocketAddr>>() {
            return Some(info.0);
        }
        if let Some(PeerAddr(addr)) = HttpHead::extensions(self).get::<PeerAddr>() {
            return Some(*addr);
        }
        #[cfg(feature = "tonic")]
        if let Some(info) = HttpHead::extensions(self).get::<tonic::transport::server::TcpConnectInfo>() {
            return info.remote_addr();
        }
        None
    }

    fn route(&self) -> Option<Cow<'_, str>> {
        #[cfg(feature = "axum")]
        if let Some(path) = HttpHead::extensions(self).get::<axum::extract::MatchedPath>() {
            return Some(Cow::Borrowed(path.as_str()));
        }
        None
    }

    fn extensions(&self) -> ExtensionMap<'_> {
        ExtensionMap::Http(HttpHead::extensions(self))
    }
}
