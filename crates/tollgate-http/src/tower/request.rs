//! What an `http` request head tells the middleware: headers, the peer
//! address and the matched route from the extensions that hyper, axum and
//! tonic servers record.

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

impl RequestSource for http::request::Parts {
    fn method(&self) -> &str {
        self.method.as_str()
    }

    fn path(&self) -> &str {
        self.uri.path()
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.get(name).map(http::HeaderValue::as_bytes)
    }

    fn content_type(&self) -> Option<&[u8]> {
        self.headers
            .get(http::header::CONTENT_TYPE)
            .map(http::HeaderValue::as_bytes)
    }

    fn header_values<'s>(&'s self, name: &str) -> HeaderValues<'s> {
        HeaderValues::new(self.headers.get_all(name).iter().map(http::HeaderValue::as_bytes))
    }

    /// axum's `ConnectInfo` first, the most common, then a [`PeerAddr`],
    /// then tonic's `TcpConnectInfo`.
    fn peer_addr(&self) -> Option<SocketAddr> {
        #[cfg(feature = "axum")]
        if let Some(info) = self.extensions.get::<axum::extract::ConnectInfo<SocketAddr>>() {
            return Some(info.0);
        }
        if let Some(PeerAddr(addr)) = self.extensions.get::<PeerAddr>() {
            return Some(*addr);
        }
        #[cfg(feature = "tonic")]
        if let Some(info) = self.extensions.get::<tonic::transport::server::TcpConnectInfo>() {
            return info.remote_addr();
        }
        None
    }

    fn route(&self) -> Option<Cow<'_, str>> {
        #[cfg(feature = "axum")]
        if let Some(path) = self.extensions.get::<axum::extract::MatchedPath>() {
            return Some(Cow::Borrowed(path.as_str()));
        }
        None
    }

    fn extensions(&self) -> ExtensionMap<'_> {
        ExtensionMap::Http(&self.extensions)
    }
}
