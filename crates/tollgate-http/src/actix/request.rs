//! What an actix-web request tells the middleware.

use std::borrow::Cow;
use std::net::SocketAddr;

use actix_web::dev::ServiceRequest;
use actix_web::HttpMessage;

use crate::request::{ExtensionMap, HeaderValues, RequestInfo, RequestSource};

impl<'a> RequestInfo<'a> {
    /// A view of an actix-web request.
    pub fn from_actix(req: &'a ServiceRequest) -> Self {
        Self::new(req)
    }
}

impl RequestSource for ServiceRequest {
    fn method(&self) -> &str {
        ServiceRequest::method(self).as_str()
    }

    fn path(&self) -> &str {
        ServiceRequest::path(self)
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers().get(name).map(|v| v.as_bytes())
    }

    fn content_type(&self) -> Option<&[u8]> {
        self.headers()
            .get(actix_web::http::header::CONTENT_TYPE)
            .map(|v| v.as_bytes())
    }

    fn header_values<'s>(&'s self, name: &str) -> HeaderValues<'s> {
        HeaderValues::new(self.headers().get_all(name).map(|v| v.as_bytes()))
    }

    /// actix-web records the peer of every connection.
    fn peer_addr(&self) -> Option<SocketAddr> {
        ServiceRequest::peer_addr(self)
    }

    /// Resolved by actix-web even in an `App`-wide middleware.
    fn route(&self) -> Option<Cow<'_, str>> {
        self.match_pattern().map(Cow::Owned)
    }

    fn extensions(&self) -> ExtensionMap<'_> {
        ExtensionMap::Actix(HttpMessage::extensions(self))
    }
}
